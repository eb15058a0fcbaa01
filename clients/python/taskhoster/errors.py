"""The errors of the client: what the server refused, and what a handler raises
to give its task back or fail it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Failure", "Release", "TaskhosterError", "Violation"]


@dataclass(frozen=True, slots=True)
class Violation:
    """One way a JSON value breaks a queue's schema."""

    path: str  # a JSON pointer into the value; "" for the whole value
    message: str


class TaskhosterError(Exception):
    """A request the server refused, with the status and the body
    ``{"error": code, "message", "details"}`` of the SPEC (§3).

    ``code`` is the stable word to branch on: ``"invalid_item"``,
    ``"unauthorized"``, ``"idempotency_conflict"``, ... An answer that is not
    the server's error object (a proxy's page, say) gets the status text as
    its code (``"bad_gateway"``) and the first line of the body as its message.

    Connection trouble is not a TaskhosterError: it is the ``OSError``
    (``ConnectionError``, ``TimeoutError``, ...) the socket raised.
    """

    status: int
    code: str
    message: str
    details: list[Violation]

    def __init__(self, status: int, code: str, message: str = "", details: list[Violation] | None = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.details = list(details or [])
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"{self.code} ({self.status})"
        if self.message:
            text += ": " + self.message
        for v in self.details:
            text += f"; {v.path or '(the whole value)'}: {v.message}"
        return text

    def __repr__(self) -> str:
        return f"TaskhosterError(status={self.status!r}, code={self.code!r}, message={self.message!r})"


@dataclass
class Release(Exception):
    """Raised by a worker's handler to give its task back (SPEC §11): the task
    is pending again, claimable after the larger of ``delay`` (seconds) and
    the queue's retry backoff, or failed with error ``"attempts"`` after its
    last allowed attempt. ``reason`` (any JSON value; None for none) is kept
    in the task's ``failure`` field.

        raise Release(delay=60, reason={"why": "rate limited"})
    """

    delay: float = 0
    reason: Any = None

    def __str__(self) -> str:
        return f"give the task back for {self.delay:g}s" if self.delay else "give the task back"


@dataclass
class Failure(Exception):
    """Raised by a worker's handler to fail its task for good: it ends failed
    with error ``"failed"`` and ``reason`` (any JSON value) as its failure.

        raise Failure(reason={"why": "no such image"})
    """

    reason: Any = None

    def __str__(self) -> str:
        return "fail the task"


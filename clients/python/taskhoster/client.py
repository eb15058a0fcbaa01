"""The HTTP calls of the SPEC (§3, §11, §12) for producers and workers."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import TaskhosterError, Violation

__all__ = ["Ack", "Client", "Lease", "Posted", "Task", "View"]

# How much of an error answer is read: enough for any list of violations the
# server sends, not a runaway proxy page.
_MAX_ERROR_BODY = 1 << 20

# The body of a request that sends none: not None, which is JSON's null, an
# item like any other.
_NO_BODY: Any = object()

# Slack on top of a claim's wait before the socket gives up, so that the
# server's own 204 at the end of the wait arrives first.
_WAIT_SLACK = 30.0


@dataclass(frozen=True, slots=True)
class Lease:
    """Which worker holds a processing task, and until when (Unix ms)."""

    worker: str
    until: int


@dataclass(frozen=True, slots=True)
class Ack:
    """The server's answer to progress, a heartbeat, a result, a release or a
    failure.

    ``accepted`` is False when the call came too late: the task is finished
    or failed (a result, a failure), or no longer processing under this worker
    (progress, a heartbeat, a release); ``status`` then says where it is. For
    an accepted release ``status`` is where the task went: ``"pending"``, or
    ``"failed"`` after its last allowed attempt. ``lease`` is the extended
    lease after accepted progress or a heartbeat.
    """

    accepted: bool
    status: str | None = None
    lease: Lease | None = None


@dataclass(frozen=True, slots=True)
class Posted:
    """The server's answer to a post: the task's id and status, and whether
    this post made it (201) or an earlier post with the same idempotency key
    did (200; this one made nothing)."""

    id: str
    status: str
    created: bool


@dataclass(frozen=True, slots=True)
class View:
    """What a producer sees of a task (SPEC §3, "the status view"). Times are
    Unix milliseconds."""

    id: str
    queue: str
    status: str  # pending, processing, finished or failed
    attempts: int
    progress: Any  # the last accepted progress, or None
    result: Any  # the result once finished, or None
    # The code a failed task ended with: "timeout", "attempts", "failed",
    # "cancelled" or "corrupt"; None otherwise.
    error: str | None
    posted_at: int
    updated_at: int
    finished_at: int | None
    not_before: int | None = None  # when a delayed or backed-off task becomes claimable
    priority: int = 0
    failure: Any = None  # the reason of the last give-back or failure

    @property
    def terminal(self) -> bool:
        """Whether the task is finished or failed: nothing changes it any more."""
        return self.status in ("finished", "failed")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> View:
        return cls(
            id=d["id"],
            queue=d["queue"],
            status=d["status"],
            attempts=d["attempts"],
            progress=d.get("progress"),
            result=d.get("result"),
            error=d.get("error"),
            posted_at=d["postedAt"],
            updated_at=d["updatedAt"],
            finished_at=d.get("finishedAt"),
            not_before=d.get("notBefore"),
            priority=d.get("priority", 0),
            failure=d.get("failure"),
        )


@dataclass(slots=True)
class Task:
    """A task leased to a worker: what it has to do and the lease it holds.

    Its methods report on it as the worker that claimed it. ``lease`` is
    updated by accepted progress and heartbeats. ``lost`` is set once a
    progress report or heartbeat is refused: the lease is gone (it lapsed, or
    the task was cancelled or finished by someone else), so a long handler
    may check it and stop early; its result will probably not count.
    """

    id: str
    queue: str
    item: Any
    attempts: int  # how many times it was claimed, this claim included
    lease: Lease
    client: Client = field(repr=False, compare=False)
    lost: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    # Progress, heartbeats and give-backs name this claim's attempt: should
    # the same worker name have claimed the task again since (this lease
    # lapsed, or it was given back), the server refuses them rather than
    # touch the newer claim.

    def progress(self, value: Any) -> Ack:
        """Report progress; an accepted report also extends the lease."""
        return self._keep(self.client.progress(self.queue, self.id, value, worker=self.lease.worker, attempt=self.attempts))

    def heartbeat(self) -> Ack:
        """Extend the lease to now + the queue's leaseSeconds."""
        return self._keep(self.client.heartbeat(self.queue, self.id, worker=self.lease.worker, attempt=self.attempts))

    def result(self, value: Any) -> Ack:
        """Hand in the result; the task is finished (the first result wins)."""
        return self.client.result(self.queue, self.id, value, worker=self.lease.worker)

    def release(self, delay: float = 0, reason: Any = None) -> Ack:
        """Give the task back to the queue (see Client.release)."""
        return self.client.release(self.queue, self.id, worker=self.lease.worker, attempt=self.attempts, delay=delay, reason=reason)

    def fail(self, reason: Any = None) -> Ack:
        """Fail the task for good (see Client.fail)."""
        return self.client.fail(self.queue, self.id, worker=self.lease.worker, reason=reason)

    def _keep(self, ack: Ack) -> Ack:
        if not ack.accepted:
            self.lost.set()
        elif ack.lease is not None:
            self.lease = ack.lease
        return ack


# A callback told of each connection a request opens, before it sends: the
# worker keeps its long-polling claims' connections so that stopping can
# close them.
ConnectionHook = Callable[[http.client.HTTPConnection], None]


class Client:
    """One server, and one host on it, seen with one token.

        client = Client("http://127.0.0.1:8080", host="task.example.com", token="a11ce...")

    ``host`` is the Host header to send, which picks the host folder on the
    server; by default the URL's host is sent. Every call opens its own
    connection, so one Client may be used from many threads. ``timeout`` is
    the socket timeout in seconds of every call but a claim, which waits
    ``wait`` seconds more.
    """

    def __init__(
        self,
        server: str,
        *,
        host: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        u = urllib.parse.urlsplit(server.rstrip("/"))
        if u.scheme not in ("http", "https"):
            raise ValueError(f"server URL {server!r}: the scheme must be http or https")
        if not u.hostname:
            raise ValueError(f"server URL {server!r} has no host")
        self._scheme = u.scheme
        self._netloc = u.netloc
        self._prefix = u.path  # a reverse proxy's path prefix, or ""
        self._host = host
        self._token = token
        self._timeout = timeout
        self._ssl = ssl_context

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Client:
        """A client configured as the command line is (SPEC §10):
        TASKHOSTER_SERVER (default http://127.0.0.1:8080), TASKHOSTER_HOST
        and TASKHOSTER_TOKEN."""
        env = os.environ if environ is None else environ
        return cls(
            env.get("TASKHOSTER_SERVER") or "http://127.0.0.1:8080",
            host=env.get("TASKHOSTER_HOST") or None,
            token=env.get("TASKHOSTER_TOKEN") or None,
        )

    # --- Producers -------------------------------------------------------

    def post(
        self,
        queue: str,
        item: Any,
        *,
        delay: float | None = None,
        not_before: int | None = None,
        priority: int | None = None,
        key: str | None = None,
    ) -> str:
        """Post item (any JSON value) to queue and return the new task's id,
        once the server stored it durably. See submit for the options."""
        return self.submit(queue, item, delay=delay, not_before=not_before, priority=priority, key=key).id

    def submit(
        self,
        queue: str,
        item: Any,
        *,
        delay: float | None = None,
        not_before: int | None = None,
        priority: int | None = None,
        key: str | None = None,
    ) -> Posted:
        """post with the whole answer.

        ``delay`` (seconds, 0 to a year) or ``not_before`` (Unix ms) make the
        task claimable only later; ``priority`` (-1000 to 1000, default 0)
        puts it ahead of (or behind) others. ``key`` makes the post idempotent
        (SPEC §12, the Idempotency-Key header): a later post with the same key
        makes nothing and answers with the first task (``created`` False); one
        with a different item raises ``idempotency_conflict``.
        """
        headers = {"Idempotency-Key": key} if key is not None else {}
        path = _with_query(_path(queue), _post_params(delay, not_before, priority))
        status, body = self._call("POST", path, item, headers=headers)
        return Posted(id=body["id"], status=body["status"], created=status == 201)

    def post_batch(
        self,
        queue: str,
        items: Sequence[Any],
        *,
        delay: float | None = None,
        not_before: int | None = None,
        priority: int | None = None,
    ) -> list[str]:
        """Post 1 to 1000 items at once, all or nothing, and return their ids
        in order. The options apply to every item; a batch takes no key."""
        path = _with_query(_path(queue, "batch"), _post_params(delay, not_before, priority))
        _, body = self._call("POST", path, {"items": list(items)})
        return list(body["ids"])

    def status(self, queue: str, id: str) -> View:
        """The status view of a task. Reading a finished or failed task for the
        first time marks it fetched, which may start its retention."""
        _, body = self._call("GET", _path(queue, id))
        return View.from_json(body)

    # --- Workers ---------------------------------------------------------

    def claim(
        self,
        queue: str,
        *,
        worker: str | None = None,
        query: Any = None,
        wait: float = 0,
    ) -> Task | None:
        """Lease the oldest pending task of queue whose item matches query (a
        JSON Schema; None: any), waiting up to wait seconds (0 to 60) for one
        to arrive; None when none did. ``worker`` names the lease holder
        (default: the user's name, or "anonymous")."""
        tasks = self._claim(queue, worker=worker, query=query, wait=wait, max=None)
        return tasks[0] if tasks else None

    def claim_many(
        self,
        queue: str,
        max: int,
        *,
        worker: str | None = None,
        query: Any = None,
        wait: float = 0,
    ) -> list[Task]:
        """claim up to max (1 to 100) tasks at once; [] when none arrived."""
        return self._claim(queue, worker=worker, query=query, wait=wait, max=max)

    def _claim(
        self,
        queue: str,
        *,
        worker: str | None,
        query: Any,
        wait: float,
        max: int | None,
        hook: ConnectionHook | None = None,
    ) -> list[Task]:
        body: dict[str, Any] = {"wait": wait}
        if worker is not None:
            body["worker"] = worker
        if query is not None:
            body["query"] = query
        if max is not None:
            body["max"] = max
        status, reply = self._call("POST", _path(queue, "claim"), body, timeout=self._timeout + wait + _WAIT_SLACK, hook=hook)
        if status == 204:
            return []
        try:
            claims = reply["tasks"] if max is not None else [reply]
            return [self._task(queue, c) for c in claims]
        except (KeyError, TypeError) as e:  # not a claim's shape: a broken answer, as one not JSON
            raise TaskhosterError(status, "invalid_answer", f"POST {_path(queue, 'claim')}: the answer is not a claim: {e!r}") from None

    def _task(self, queue: str, c: Mapping[str, Any]) -> Task:
        return Task(id=c["id"], queue=queue, item=c["item"], attempts=c["attempts"], lease=_lease(c["lease"]), client=self)

    def progress(self, queue: str, id: str, progress: Any, *, worker: str | None = None, attempt: int | None = None) -> Ack:
        """Report progress on a task worker holds; an accepted report extends
        the lease. Raises ``invalid_progress`` when it breaks the schema.
        attempt, the claim's ``attempts``, has the report refused when the
        task was claimed again since, by the same worker name."""
        return self._report(queue, id, "progress", worker, {"progress": progress}, attempt)

    def heartbeat(self, queue: str, id: str, *, worker: str | None = None, attempt: int | None = None) -> Ack:
        """Extend the lease worker holds on a task to now + leaseSeconds
        (attempt as for progress)."""
        return self._report(queue, id, "heartbeat", worker, {}, attempt)

    def result(self, queue: str, id: str, result: Any, *, worker: str | None = None) -> Ack:
        """Hand in a task's result. Accepted whenever the task is not yet
        finished or failed, whoever holds the lease: the first result wins.
        Raises ``invalid_result`` when it breaks the schema."""
        return self._report(queue, id, "result", worker, {"result": result})

    def release(
        self, queue: str, id: str, *, worker: str | None = None, attempt: int | None = None, delay: float = 0, reason: Any = None
    ) -> Ack:
        """Give a task worker holds back: it is pending again, claimable after
        the larger of delay (seconds) and the queue's retry backoff, or failed
        with error "attempts" after its last allowed attempt (Ack.status says
        which). reason (any JSON value; checked against the queue's failure
        schema) is kept in the task's failure field (attempt as for
        progress)."""
        body: dict[str, Any] = {}
        if delay:
            body["delay"] = delay
        if reason is not None:
            body["reason"] = reason
        return self._report(queue, id, "release", worker, body, attempt)

    def fail(self, queue: str, id: str, *, worker: str | None = None, reason: Any = None) -> Ack:
        """End a task for good: failed with error "failed" and reason as its
        failure. Like a result, accepted whenever it is not yet terminal."""
        return self._report(queue, id, "fail", worker, {} if reason is None else {"reason": reason})

    def _report(self, queue: str, id: str, kind: str, worker: str | None, body: dict[str, Any], attempt: int | None = None) -> Ack:
        if worker is not None:
            body["worker"] = worker
        if attempt is not None:
            body["attempt"] = attempt
        _, reply = self._call("POST", _path(queue, id, kind), body)
        lease = reply.get("lease")
        return Ack(accepted=bool(reply["accepted"]), status=reply.get("status"), lease=_lease(lease) if lease else None)

    # --- The wire --------------------------------------------------------

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._netloc, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._netloc, timeout=timeout)

    def _call(
        self,
        method: str,
        path: str,
        body: Any = _NO_BODY,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        hook: ConnectionHook | None = None,
    ) -> tuple[int, Any]:
        """Send one request (a JSON body unless body is _NO_BODY) and return the
        2xx status with the decoded answer (None for a 204); any other answer
        raises TaskhosterError."""
        h = {"Accept": "application/json", **(headers or {})}
        data = None
        if body is not _NO_BODY:
            # allow_nan=False: NaN and Infinity are not JSON; say so here.
            data = json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
            h["Content-Type"] = "application/json"
        if self._token:
            h["Authorization"] = "Bearer " + self._token
        if self._host:
            h["Host"] = self._host
        conn = self._connection(self._timeout if timeout is None else timeout)
        try:
            if hook is not None:
                hook(conn)
            try:
                conn.request(method, self._prefix + path, body=data, headers=h)
            except (BrokenPipeError, ConnectionResetError) as e:
                # The server may have answered before it read the whole
                # body, and closed: 413 too_large for a body over its
                # limit, which is still being sent when it is big. That
                # answer is there to read; taken for connection trouble,
                # the body would be sent again (a Worker's hand_in) in vain.
                try:
                    resp = conn.getresponse()
                except (OSError, http.client.HTTPException):
                    raise e from None
            else:
                resp = conn.getresponse()
            if resp.status == 204:
                return 204, None
            if not 200 <= resp.status <= 299:
                raise _error(resp.status, resp.reason, resp.read(_MAX_ERROR_BODY))
            raw = resp.read()
        except http.client.HTTPException as e:
            # A garbled or cut answer (BadStatusLine, IncompleteRead) is
            # connection trouble like a reset, which callers retry; only
            # some of http.client's are OSErrors already.
            if isinstance(e, OSError):
                raise
            raise ConnectionError(f"{method} {path}: broken answer: {e!r}") from e
        finally:
            conn.close()
        try:
            return resp.status, json.loads(raw)
        except ValueError as e:
            raise TaskhosterError(resp.status, "invalid_answer", f"{method} {path}: the answer is not JSON: {e}") from None


def _path(*segments: str) -> str:
    return "".join("/" + urllib.parse.quote(s, safe="") for s in segments)


def _with_query(path: str, params: Mapping[str, str]) -> str:
    return path + "?" + urllib.parse.urlencode(params) if params else path


def _post_params(delay: float | None, not_before: int | None, priority: int | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if delay is not None:
        # The server takes a decimal of up to 9 places, no exponent.
        params["delay"] = f"{delay:.3f}".rstrip("0").rstrip(".")
    if not_before is not None:
        params["notBefore"] = str(not_before)
    if priority is not None:
        params["priority"] = str(priority)
    return params


def _lease(d: Mapping[str, Any]) -> Lease:
    return Lease(worker=d["worker"], until=d["until"])


def _error(status: int, reason: str, data: bytes) -> TaskhosterError:
    """The server's error object as a TaskhosterError; a body that is not one
    keeps its first line as the message and the status text as the code."""
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"]:
        details = [Violation(path=v.get("path", ""), message=v.get("message", "")) for v in body.get("details") or [] if isinstance(v, dict)]
        return TaskhosterError(status, body["error"], str(body.get("message", "")), details)
    line = data.decode(errors="replace").strip().split("\n", 1)[0][:200]
    return TaskhosterError(status, reason.lower().replace(" ", "_") or "http_error", line)


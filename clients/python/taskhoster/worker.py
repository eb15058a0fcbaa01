"""A worker loop over HTTP long-poll claims: threads, heartbeats, give-back."""

from __future__ import annotations

import functools
import http.client
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .client import Ack, Client, Task
from .errors import Failure, Release, TaskhosterError

__all__ = ["Handler", "Outcome", "Worker"]

Handler = Callable[[Task], Any]
"""Does one task and returns its result (any JSON value), which the worker
hands in. Raise Release to give the task back, Failure to fail it for good;
any other exception gives it back too, with the exception as the reason."""

# The server's limit on a claim's wait, in seconds.
_MAX_WAIT = 60
# Heartbeats never go out more often than this, whatever the lease says.
_MIN_BEAT = 0.1


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one task ended for a Worker."""

    task: Task
    # What the worker handed in: "result", "release" or "fail"; None when it
    # could hand in nothing (error says why).
    sent: str | None
    # The server's answer; accepted False when the task was already finished
    # or failed, or (a release) no longer leased to this worker.
    ack: Ack | None
    # The handler's exception (other than Release and Failure), or why its
    # result could never be handed in (not JSON, too_large,
    # invalid_result), which the worker gave the task back for; or the
    # error that kept it from handing in (a TaskhosterError such as
    # invalid_failure, or connection trouble that outlasted hand_in_for,
    # or any for a release, which is sent once).
    error: BaseException | None
    took: float  # seconds the handler ran


class Worker:
    """Works one queue: keeps ``concurrency`` threads each claiming a task
    (an HTTP long-poll of ``wait`` seconds), runs ``handler`` for it while
    heartbeats keep its lease alive (one every third of the lease), hands in
    what it returned, and claims again.

        Worker(client, "resize", handler, concurrency=4).run()

    Connection trouble and 5xx answers are retried with capped, jittered
    exponential backoff (``min_backoff`` to ``max_backoff`` seconds). A 4xx
    refusal of the very first claim (bad token, no access, no such queue, an
    invalid query) ends run with that TaskhosterError; once a claim has
    worked, later refusals (the queue file being edited, say) are logged and
    retried.

    run returns after ``limit`` tasks (when given), or once stop was called
    and the running handlers have handed in. Ctrl-C (KeyboardInterrupt) in
    run is a stop. An exception from ``on_outcome`` stops the worker too,
    and run raises it once the running handlers are done.
    """

    def __init__(
        self,
        client: Client,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 1,
        name: str | None = None,
        query: Any = None,
        wait: float = 20,
        limit: int | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
        logger: logging.Logger | None = None,
        min_backoff: float = 0.25,
        max_backoff: float = 30,
        hand_in_for: float = 300,
    ) -> None:
        if not 1 <= concurrency <= 1000:
            raise ValueError(f"concurrency must be 1 to 1000, not {concurrency}")
        if not 0 <= wait <= _MAX_WAIT:
            raise ValueError(f"wait must be 0 to {_MAX_WAIT} seconds, not {wait}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be positive, not {limit}")
        self.client = client
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.name = name  # the lease holder's name; None: the user's
        self.query = query  # a JSON Schema an item must match; None: any
        self.wait = wait
        self.limit = limit
        self.on_outcome = on_outcome
        self.log = logger or logging.getLogger("taskhoster.worker")
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self.hand_in_for = hand_in_for  # how long handing in retries connection trouble

        self._lock = threading.Lock()
        self._stop = threading.Event()  # set by stop; claims and backoffs end
        self._claims: dict[int, http.client.HTTPConnection] = {}  # open claims by thread id
        self._budget = limit  # tasks left to claim when limit is set
        self._worked = False  # a claim got an answer: later 4xx are retried
        self._fatal: Exception | None = None

    # --- Running and stopping --------------------------------------------

    def run(self) -> None:
        """Work the queue until stopped, limit tasks are done, or a fatal
        refusal (raised)."""
        threads = [threading.Thread(target=self._slot, name=f"taskhoster-{self.queue}-{i}", daemon=True) for i in range(self._slots())]
        try:
            # Starting is inside the try: a Ctrl-C while the later slots
            # start (the first may be handling a task already) stops too.
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        except KeyboardInterrupt:
            self.log.info("interrupted: letting the running tasks finish")
            self.stop()
            for t in threads:
                if t.ident is not None:  # started (a join before would raise)
                    t.join()
        if self._fatal is not None:
            raise self._fatal

    def stop(self) -> None:
        """Stop claiming, and let run return once the running handlers have
        handed in. Claims waiting on the server are cut off; in the rare case
        that the server handed one a task just then, that task goes back to
        pending when its lease lapses. Safe from any thread, also before run."""
        with self._lock:
            self._stop.set()
            waiting = list(self._claims.values())
        for conn in waiting:
            if conn.sock is not None:
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # closed already: that claim has its answer

    def _slots(self) -> int:
        return self.concurrency if self.limit is None else min(self.concurrency, self.limit)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _slot(self) -> None:
        """One unit of concurrency: claim, handle, hand in, again."""
        backoff = Backoff(self.min_backoff, self.max_backoff)
        try:
            while self._take():
                task = self._claim(backoff)
                if task is None:
                    return
                self._handle(task)
        except Exception as e:
            # Only a callback of the caller's raises this far (on_outcome,
            # the logger): it stops the whole worker and run raises it,
            # rather than the slot's thread dying alone while run goes on.
            self._fail(e)

    def _take(self) -> bool:
        """Reserve one task of the limit, if any is left."""
        with self._lock:
            if self._stop.is_set():
                return False
            if self._budget is None:
                return True
            if self._budget == 0:
                return False
            self._budget -= 1
            return True

    # --- Claiming ----------------------------------------------------------

    def _claim(self, backoff: Backoff) -> Task | None:
        """Claim until a task arrives; None once the worker stops."""
        me = threading.get_ident()
        while not self.stopping:
            try:
                tasks = self.client._claim(self.queue, worker=self.name, query=self.query, wait=self.wait, max=None, hook=self._open)
            except _Stopped:
                return None
            except TaskhosterError as e:
                if self.stopping:
                    return None
                if _permanent(e.status) and not self._worked:
                    self._fail(e)
                    return None
                self._pause(backoff, "claim refused; retrying", e)
                continue
            except OSError as e:  # the connection: refused, reset, cut by stop
                if self.stopping:
                    return None
                self._pause(backoff, "cannot reach the server; retrying", e)
                continue
            finally:
                with self._lock:
                    self._claims.pop(me, None)
            self._worked = True
            backoff.reset()
            if tasks:
                return tasks[0]
        return None

    def _open(self, conn: http.client.HTTPConnection) -> None:
        """Connect a claim's connection and keep it where stop finds it. Under
        the lock, so that either stop sees it or it sees stop."""
        conn.connect()
        with self._lock:
            if self._stop.is_set():
                conn.close()
                raise _Stopped()
            self._claims[threading.get_ident()] = conn

    def _pause(self, backoff: Backoff, what: str, err: BaseException) -> None:
        wait = backoff.next()
        self.log.warning("%s: %s (in %.2fs)", what, err, wait, extra={"queue": self.queue})
        self._stop.wait(wait)  # but not past a stop

    def _fail(self, err: Exception) -> None:
        with self._lock:
            if self._fatal is None:
                self._fatal = err
        self.stop()

    # --- Handling ----------------------------------------------------------

    def _handle(self, task: Task) -> None:
        done = threading.Event()
        beat = threading.Thread(target=self._beat, args=(task, done), name=f"taskhoster-beat-{task.id}", daemon=True)
        beat.start()
        started = time.monotonic()
        error: BaseException | None = None
        sent: str | None
        try:
            result = self.handler(task)
            send: Callable[[], Ack] = functools.partial(task.result, result)
            sent = "result"
        # partial, not lambda: the names an except clause binds are unbound
        # at its end.
        except Release as r:
            send, sent = functools.partial(task.release, r.delay, r.reason), "release"
        except Failure as f:
            send, sent = functools.partial(task.fail, f.reason), "fail"
        except Exception as e:  # the handler's trouble: give the task back with it
            error = e
            send, sent = self._give_back(task, e), "release"
        finally:
            done.set()
            beat.join()
        took = time.monotonic() - started
        try:
            ack: Ack | None = self._hand_in(send, again=sent != "release")
        except Exception as e:
            if isinstance(e, (TypeError, ValueError)) or (sent == "result" and isinstance(e, TaskhosterError) and e.code in ("too_large", "invalid_result")):
                # A result that is not JSON, over the queue's maxItemBytes
                # (413) or refused by its result schema (422): it can never
                # be handed in. Give the task back with why rather than
                # leave it to its lease.
                error, sent = e, "release"
                try:
                    ack = self._hand_in(self._give_back(task, e), again=False)
                except Exception as again:
                    error, sent, ack = again, None, None
            else:
                error, sent, ack = e, None, None
        self._done(Outcome(task=task, sent=sent, ack=ack, error=error, took=took))

    def _give_back(self, task: Task, err: BaseException) -> Callable[[], Ack]:
        """Release the task with err as the reason; without a reason if the
        queue's failure schema refuses that one."""
        reason = {"error": type(err).__name__, "message": str(err)}

        def send() -> Ack:
            try:
                return task.release(reason=reason)
            except TaskhosterError as e:
                if e.code != "invalid_failure":
                    raise
                return task.release()

        return send

    def _hand_in(self, send: Callable[[], Ack], *, again: bool) -> Ack:
        """send, retrying connection trouble and 5xx for up to hand_in_for
        seconds if again: a result (or failure) counts whenever the task is
        not yet finished. A release is sent once (again False), as the Go
        client's Worker does: it may have reached the server before the
        trouble, and the task, given back, may since be claimed again by
        another thread of this worker, whose lease a release sent again
        would pass for (the lease holder is this worker's name) and give
        back. Unsent, the task goes back when its lease lapses."""
        backoff = Backoff(self.min_backoff, self.max_backoff)
        deadline = time.monotonic() + self.hand_in_for
        while True:
            try:
                return send()
            except TaskhosterError as e:
                if e.status < 500 or not again or time.monotonic() >= deadline:
                    raise
                err: Exception = e
            except OSError as e:
                if not again or time.monotonic() >= deadline:
                    raise
                err = e
            wait = min(backoff.next(), max(deadline - time.monotonic(), 0))
            self.log.warning("cannot hand in: %s (retrying in %.2fs)", err, wait, extra={"queue": self.queue})
            time.sleep(wait)

    def _beat(self, task: Task, done: threading.Event) -> None:
        """Heartbeats every third of the lease until done is set. A refused
        one (the lease is gone) or a 4xx ends them; connection trouble is
        tried again at the next beat."""
        while not done.wait(_beat_every(task.lease.until, time.time())):
            try:
                ack = task.heartbeat()
            except TaskhosterError as e:
                if e.status < 500:
                    self.log.warning("heartbeat refused; no more for task %s: %s", task.id, e, extra={"queue": self.queue})
                    return
                continue
            except OSError as e:
                self.log.warning("heartbeat of task %s failed: %s", task.id, e, extra={"queue": self.queue})
                continue
            if not ack.accepted:
                self.log.info("heartbeat not accepted: task %s is %s", task.id, ack.status, extra={"queue": self.queue})
                return

    def _done(self, o: Outcome) -> None:
        if self.on_outcome is not None:
            self.on_outcome(o)
            return
        t = o.task
        if o.sent is None:
            self.log.error("task %s: nothing handed in; it goes back when its lease lapses: %s", t.id, o.error)
        elif o.error is not None:
            self.log.error("task %s given back after the handler raised: %r", t.id, o.error)
        elif o.ack is not None and not o.ack.accepted:
            self.log.info("task %s: %s not accepted (%s)", t.id, o.sent, o.ack.status)


class _Stopped(Exception):
    """A claim not sent because the worker is stopping."""


def _permanent(status: int) -> bool:
    """Whether a refusal will be refused again: any 4xx but a timeout or a
    rate limit."""
    return 400 <= status < 500 and status not in (408, 429)


def _beat_every(until_ms: int, now: float) -> float:
    """A third of the lease left (the other two for a slow network and clocks
    that differ); a second when it seems over already."""
    left = until_ms / 1000 - now
    if left <= 0:
        return 1.0
    return max(left / 3, _MIN_BEAT)


class Backoff:
    """Waits between retries: doubling from lo up to hi, each drawn at random
    from its upper half ("equal jitter"), so that workers dropped at once by a
    restarting server do not all knock again at the same moment."""

    def __init__(self, lo: float, hi: float, rand: Callable[[], float] = random.random) -> None:
        self.lo, self.hi, self.rand = lo, hi, rand
        self.attempt = 0

    def next(self) -> float:
        """The wait before the next try; counts the try."""
        d = min(self.lo * 2.0 ** min(self.attempt, 32), self.hi)
        self.attempt += 1
        return d / 2 + self.rand() * d / 2

    def reset(self) -> None:
        """Start over from lo, after a call that worked."""
        self.attempt = 0

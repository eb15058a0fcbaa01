"""The Worker loop against the real server: it finishes tasks, keeps a short
lease alive with heartbeats, gives tasks back, stops, and rides out a server
that is not there yet."""

from __future__ import annotations

import http.client
import logging
import shutil
import tempfile
import threading
import time
import unittest
from pathlib import Path
from unittest import mock
from typing import Any

from taskhoster import Client, Failure, Outcome, Release, Task, TaskhosterError, Worker
from taskhoster.worker import Backoff

from .server import ALICE, BOX, EVE, HOST, Server, ServerTest, free_port


class Recorder:
    """Collects a worker's outcomes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.outcomes: list[Outcome] = []

    def __call__(self, o: Outcome) -> None:
        with self.lock:
            self.outcomes.append(o)


class WorkerTest(ServerTest):
    def work(self, queue: str, handler: Any, *, limit: int, client: Client | None = None, **kw: Any) -> list[Outcome]:
        """Runs a worker until it handled limit tasks; its outcomes."""
        rec = Recorder()
        w = Worker(client or self.anyone, queue, handler, limit=limit, wait=5, on_outcome=rec, **kw)
        runner = threading.Thread(target=w.run)
        runner.start()
        runner.join(60)
        if runner.is_alive():
            w.stop()
            runner.join(60)
            self.fail("the worker did not finish its tasks within 60s")
        return rec.outcomes

    def test_finishes_tasks_concurrently(self) -> None:
        ids = self.alice.post_batch("resize", [{"url": f"u{n}", "width": n + 1} for n in range(6)])
        both = threading.Barrier(2, timeout=30)
        seen: set[str] = set()

        def handler(task: Task) -> Any:
            if task.item["width"] <= 2:
                both.wait()  # the first two tasks run at the same time, or this breaks
            seen.add(threading.current_thread().name)
            task.progress({"percent": 50})
            return {"thumb": task.item["url"] + ".jpg"}

        outcomes = self.work("resize", handler, limit=6, client=self.box, concurrency=3, name="py-1")
        self.assertEqual(sorted(o.task.id for o in outcomes), sorted(ids))
        self.assertTrue(all(o.sent == "result" and o.ack and o.ack.accepted and o.error is None for o in outcomes))
        self.assertGreaterEqual(len(seen), 2)
        for n, task_id in enumerate(ids):
            view = self.alice.status("resize", task_id)
            self.assertEqual((view.status, view.result, view.progress), ("finished", {"thumb": f"u{n}.jpg"}, {"percent": 50}))
            self.assertEqual(self.server.events(task_id)[1]["worker"], "py-1")

    def test_ctrl_c_while_the_slots_start_stops_the_worker(self) -> None:
        """A Ctrl-C can come while run is still starting its slots (the
        first may be handling a task by then): run stops the worker and
        returns, as after one that comes later, not with a traceback."""
        w = Worker(self.box, "resize", lambda t: {"thumb": "t"}, concurrency=3, wait=5)
        start = threading.Thread.start
        calls = 0

        def interrupted_start(t: threading.Thread) -> None:
            nonlocal calls
            calls += 1
            start(t)
            if calls == 2:
                raise KeyboardInterrupt

        with mock.patch.object(threading.Thread, "start", interrupted_start):
            w.run()  # returns, having stopped
        self.assertTrue(w.stopping)
        self.assertEqual(calls, 2, "a slot started after the Ctrl-C")

    def test_heartbeats_outlive_a_short_lease(self) -> None:
        # The queue's lease is one second and the sweep runs every 100 ms: a
        # handler that takes three seconds keeps its task only by heartbeats.
        task_id = self.anyone.post("public", {"long": True})
        stolen: list[Task | None] = []
        until: list[int] = []

        def handler(task: Task) -> Any:
            until.append(task.lease.until)
            time.sleep(3)  # the work itself: three leases long
            stolen.append(self.anyone.claim("public", worker="thief"))
            until.append(task.lease.until)
            return {"done": True}

        outcomes = self.work("public", handler, limit=1)
        self.assertEqual(stolen, [None])  # still leased: nobody else could claim it
        self.assertGreater(until[1], until[0] + 2000)
        view = self.anyone.status("public", task_id)
        self.assertEqual((view.status, view.attempts, view.result), ("finished", 1, {"done": True}))
        self.assertNotIn("requeue", [e["event"] for e in self.server.events(task_id)])
        self.assertTrue(outcomes[0].ack and outcomes[0].ack.accepted)

    def test_an_exception_gives_the_task_back(self) -> None:
        task_id = self.anyone.post("public", {})

        def handler(task: Task) -> Any:
            raise ValueError("no disc space")

        [o] = self.work("public", handler, limit=1)
        self.assertEqual(o.sent, "release")
        self.assertIsInstance(o.error, ValueError)
        assert o.ack is not None
        self.assertEqual((o.ack.accepted, o.ack.status), (True, "pending"))
        view = self.anyone.status("public", task_id)
        self.assertEqual((view.status, view.attempts), ("pending", 1))
        self.assertEqual(view.failure, {"error": "ValueError", "message": "no disc space"})
        self.assertEqual(self.server.events(task_id)[-1]["event"], "released")

    def test_a_reason_the_schema_refuses_is_left_out(self) -> None:
        task_id = self.anyone.post("strict", {})

        def handler(task: Task) -> Any:
            raise RuntimeError("boom")

        [o] = self.work("strict", handler, limit=1)
        self.assertEqual((o.sent, o.ack and o.ack.accepted), ("release", True))
        view = self.anyone.status("strict", task_id)
        self.assertEqual((view.status, view.failure), ("pending", None))

    def test_a_result_that_is_not_json_gives_the_task_back(self) -> None:
        task_id = self.anyone.post("public", {})
        [o] = self.work("public", lambda task: object(), limit=1)
        self.assertEqual(o.sent, "release")
        self.assertIsInstance(o.error, TypeError)
        self.assertEqual(self.anyone.status("public", task_id).status, "pending")

    def test_a_result_the_schema_refuses_gives_the_task_back(self) -> None:
        # resize's results are objects: a list is answered 422
        # invalid_result. It can never be handed in, as one that is not
        # JSON: the task is given back with why, not left held until its
        # lease lapses.
        task_id = self.alice.post("resize", {"url": "u"})
        [o] = self.work("resize", lambda task: [1, 2], limit=1, client=self.box)
        self.assertEqual(o.task.id, task_id)
        self.assertIsInstance(o.error, TaskhosterError, o.error)
        assert isinstance(o.error, TaskhosterError)
        self.assertEqual((o.error.status, o.error.code), (422, "invalid_result"))
        self.assertEqual(o.sent, "release")
        assert o.ack is not None
        self.assertEqual((o.ack.accepted, o.ack.status), (True, "pending"))
        view = self.alice.status("resize", task_id)
        self.assertEqual((view.status, view.attempts), ("pending", 1))
        self.assertEqual(view.failure and view.failure["error"], "TaskhosterError")
        self.assertEqual(self.server.events(task_id)[-1]["event"], "released")

    def test_a_result_over_the_limit_gives_the_task_back(self) -> None:
        # resize's maxItemBytes is 4096: the server answers 413 too_large,
        # before the body is all sent when it is big. As for a result that
        # is not JSON, the task is given back with why, not sent again (and
        # again, until hand_in_for) nor left to its lease.
        posted = set()
        for big in (200 << 10, 16 << 20):
            # The round before gave its task back: this round may take either.
            posted.add(self.alice.post("resize", {"url": "u"}))
            [o] = self.work("resize", lambda task: {"blob": "x" * big}, limit=1, client=self.box, hand_in_for=5)
            self.assertIn(o.task.id, posted)
            self.assertIsInstance(o.error, TaskhosterError, o.error)
            assert isinstance(o.error, TaskhosterError)
            self.assertEqual((o.error.status, o.error.code), (413, "too_large"))
            self.assertEqual(o.sent, "release")
            assert o.ack is not None
            self.assertEqual((o.ack.accepted, o.ack.status), (True, "pending"))
            view = self.alice.status("resize", o.task.id)
            self.assertEqual((view.status, view.failure and view.failure["error"]), ("pending", "TaskhosterError"))

    def test_release_and_failure(self) -> None:
        later = self.anyone.post("public", {"do": "release"})
        never = self.anyone.post("public", {"do": "fail"})

        def handler(task: Task) -> Any:
            if task.item["do"] == "release":
                raise Release(delay=60, reason={"why": "rate limited"})
            raise Failure(reason={"why": "no such image"})

        outcomes = self.work("public", handler, limit=2)
        self.assertEqual(sorted(o.sent or "" for o in outcomes), ["fail", "release"])
        self.assertTrue(all(o.error is None and o.ack and o.ack.accepted for o in outcomes))
        view = self.anyone.status("public", later)
        self.assertEqual((view.status, view.failure), ("pending", {"why": "rate limited"}))
        assert view.not_before is not None
        self.assertGreater(view.not_before, int(time.time() * 1000) + 30_000)
        view = self.anyone.status("public", never)
        self.assertEqual((view.status, view.error, view.failure), ("failed", "failed", {"why": "no such image"}))

    def test_a_release_whose_answer_was_lost_is_not_sent_again(self) -> None:
        # The first release reaches the server, which gives the task back;
        # its answer is lost (the connection drops), and by then another
        # thread of the same worker has claimed the task again. Sent again,
        # the release would pass for that newer claim's and give it back.
        task_id = self.alice.post("resize", {"url": "u"})
        reclaimed = threading.Event()  # the second claim's handler runs
        told = threading.Event()  # the first claim's outcome is told

        class LosesAnswer(Client):
            lost = False

            def release(self, queue: str, id: str, **kw: Any) -> Any:
                ack = super().release(queue, id, **kw)
                if not LosesAnswer.lost:
                    LosesAnswer.lost = True
                    reclaimed.wait(30)
                    raise ConnectionResetError("the connection dropped before the answer")
                return ack

        def handler(task: Task) -> Any:
            if task.attempts == 1:
                raise Release()
            reclaimed.set()
            told.wait(30)
            return {"attempt": task.attempts}

        def on_outcome(o: Outcome) -> None:
            rec(o)
            if o.task.attempts == 1:
                told.set()

        rec = Recorder()
        client = LosesAnswer(self.server.url, host=HOST, token=BOX)
        w = Worker(client, "resize", handler, limit=2, wait=5, concurrency=2, name="py-1",
                   on_outcome=on_outcome, min_backoff=0.01, max_backoff=0.05)
        runner = threading.Thread(target=w.run)
        runner.start()
        runner.join(60)
        if runner.is_alive():
            w.stop()
            runner.join(60)
            self.fail("the worker did not finish within 60s")
        events = [e["event"] for e in self.server.events(task_id)]
        self.assertEqual(events.count("released"), 1, events)
        first = next(o for o in rec.outcomes if o.task.attempts == 1)
        self.assertIsNone(first.sent)  # not known to be handed in
        self.assertIsInstance(first.error, ConnectionResetError)
        view = self.alice.status("resize", task_id)
        self.assertEqual((view.status, view.attempts, view.result), ("finished", 2, {"attempt": 2}))

    def test_a_broken_answer_to_a_claim_is_claimed_again(self) -> None:
        # A claim whose answer comes garbled (http.client raises BadStatusLine,
        # no OSError) is connection trouble: the slot claims again, rather
        # than end and leave the worker a slot short, here without any. The
        # task is posted once the garbled claim's connection is closed: a
        # task that claim took, still waiting on the server, would stay
        # with this worker until its lease lapsed.
        garbled = threading.Event()

        class Garbled(http.client.HTTPConnection):
            def getresponse(self) -> http.client.HTTPResponse:
                raise http.client.BadStatusLine("HTTX/9 ???")

            def close(self) -> None:
                super().close()
                garbled.set()

        class GarblesFirstClaim(Client):
            garbled = False

            def _connection(self, timeout: float) -> http.client.HTTPConnection:
                if not GarblesFirstClaim.garbled:
                    GarblesFirstClaim.garbled = True
                    return Garbled(self._netloc, timeout=timeout)
                return super()._connection(timeout)

        client = GarblesFirstClaim(self.server.url, host=HOST, token=BOX)
        posted: list[str] = []

        def post_once_garbled() -> None:
            if garbled.wait(30):
                posted.append(self.alice.post("resize", {"url": "u"}))

        poster = threading.Thread(target=post_once_garbled)
        poster.start()
        outcomes = self.work("resize", lambda t: {"thumb": "t"}, limit=1, client=client, min_backoff=0.01, max_backoff=0.05)
        poster.join(30)
        self.assertTrue(garbled.is_set())
        task_id = posted[0]
        self.assertEqual([(o.task.id, o.sent) for o in outcomes], [(task_id, "result")])
        self.assertEqual(self.alice.status("resize", task_id).status, "finished")

    def test_an_answer_of_the_wrong_shape_to_a_claim_is_claimed_again(self) -> None:
        # A 200 that is JSON but no claim (a proxy's page, a broken server)
        # is a broken answer: the slot claims again, rather than end.
        class MisshapesFirstClaim(Client):
            misshaped = False

            def _call(self, method: str, path: str, *args: Any, **kw: Any) -> tuple[int, Any]:
                if path.endswith("/claim") and not MisshapesFirstClaim.misshaped:
                    MisshapesFirstClaim.misshaped = True
                    return 200, {"id": "0123456789abcdef"}
                return super()._call(method, path, *args, **kw)

        task_id = self.alice.post("resize", {"url": "u"})
        client = MisshapesFirstClaim(self.server.url, host=HOST, token=BOX)
        outcomes = self.work("resize", lambda t: {"thumb": "t"}, limit=1, client=client, min_backoff=0.01, max_backoff=0.05)
        self.assertTrue(MisshapesFirstClaim.misshaped)
        self.assertEqual([(o.task.id, o.sent) for o in outcomes], [(task_id, "result")])

    def test_an_on_outcome_that_raises_stops_the_worker(self) -> None:
        # Its error ends run, once the other slots have stopped too; before,
        # the slot's thread died with it, run went on with one slot fewer
        # (and returned as if stopped once none was left).
        self.anyone.post("public", {"n": 1})

        def broken(o: Outcome) -> None:
            raise RuntimeError("on_outcome broke")

        w = Worker(self.anyone, "public", lambda t: {"ok": True}, concurrency=2, wait=1, on_outcome=broken)
        raised: list[BaseException] = []

        def run() -> None:
            try:
                w.run()
            except RuntimeError as e:
                raised.append(e)

        runner = threading.Thread(target=run)
        with mock.patch.object(threading, "excepthook"):  # the traceback of a dying slot, before
            runner.start()
            runner.join(30)
            went_on = runner.is_alive()
            w.stop()
            runner.join(30)
        self.assertFalse(went_on, "run went on after on_outcome raised")
        self.assertEqual([str(e) for e in raised], ["on_outcome broke"])

    def test_a_refused_first_claim_ends_run(self) -> None:
        for client, queue, code in (
            (self.server.client(EVE), "resize", "forbidden"),
            (self.anyone, "nosuch", "unknown_queue"),
            (self.anyone, "public", "invalid_query"),
        ):
            with self.subTest(code=code):
                w = Worker(client, queue, lambda t: None, query={"type": 5} if code == "invalid_query" else None)
                with self.assertRaises(TaskhosterError) as caught:
                    w.run()
                self.assertEqual(caught.exception.code, code)

    def test_stop_cuts_a_waiting_claim(self) -> None:
        sent = threading.Semaphore(0)

        class Signalling(Client):
            """Tells when a claim was sent and the worker waits for its answer."""

            def _claim(self, *args: Any, hook: Any = None, **kw: Any) -> list[Task]:
                def told(conn: Any) -> None:
                    hook(conn)
                    answer = conn.getresponse

                    def waiting() -> Any:
                        sent.release()
                        return answer()

                    conn.getresponse = waiting

                return super()._claim(*args, hook=told, **kw)

        w = Worker(Signalling(self.server.url, host=HOST), "public", lambda t: None, wait=60, concurrency=2)
        runner = threading.Thread(target=w.run)
        runner.start()
        self.assertTrue(sent.acquire(timeout=30) and sent.acquire(timeout=30))
        w.stop()
        runner.join(30)  # well within the claims' 60 s wait
        self.assertFalse(runner.is_alive(), "run did not return after stop")
        # A task posted now is not lost: either the server dropped the cut
        # claims, or (if it had not yet seen them go) the one that took it
        # lets its one-second lease lapse and the task is pending again.
        task_id = self.anyone.post("public", {})
        task = self.anyone.claim("public", wait=10)
        assert task is not None
        self.assertEqual(task.id, task_id)

    def test_stop_lets_a_running_handler_hand_in(self) -> None:
        task_id = self.anyone.post("public", {})
        running = threading.Event()
        go_on = threading.Event()

        def handler(task: Task) -> Any:
            running.set()
            go_on.wait(30)
            return {"handed": "in"}

        w = Worker(self.anyone, "public", handler, wait=5)
        runner = threading.Thread(target=w.run)
        runner.start()
        self.assertTrue(running.wait(30))
        w.stop()
        go_on.set()
        runner.join(30)
        self.assertFalse(runner.is_alive())
        self.assertEqual(self.anyone.status("public", task_id).result, {"handed": "in"})


class Captured(logging.Handler):
    """Counts the worker's warnings about an unreachable server."""

    def __init__(self, want: int) -> None:
        super().__init__()
        self.want = want
        self.count = 0
        self.reached = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "cannot reach the server" in record.getMessage():
            self.count += 1
            if self.count >= self.want:
                self.reached.set()


class ReconnectTest(unittest.TestCase):
    def test_backs_off_until_the_server_comes(self) -> None:
        root = Path(tempfile.mkdtemp(prefix="taskhoster-py-"))
        self.addCleanup(shutil.rmtree, root, True)
        addr = f"127.0.0.1:{free_port()}"
        log = logging.getLogger("test.reconnect")
        log.propagate = False
        captured = Captured(want=3)
        log.addHandler(captured)
        rec = Recorder()
        w = Worker(Client("http://" + addr, host=HOST, token=BOX), "resize", lambda t: {"ok": t.item["url"]},
                   limit=1, wait=5, logger=log, on_outcome=rec, min_backoff=0.05, max_backoff=0.2)
        runner = threading.Thread(target=w.run)
        runner.start()
        self.addCleanup(w.stop)
        self.assertTrue(captured.reached.wait(30), "no retries logged")
        self.assertTrue(runner.is_alive(), "run gave up on an unreachable server")

        server = Server(root, addr=addr)
        self.addCleanup(server.stop)
        task_id = server.client(ALICE).post("resize", {"url": "later"})
        runner.join(60)
        self.assertFalse(runner.is_alive())
        self.assertEqual([o.task.id for o in rec.outcomes], [task_id])
        self.assertEqual(server.client(ALICE).status("resize", task_id).result, {"ok": "later"})


class BackoffTest(unittest.TestCase):
    def test_doubles_up_to_the_cap_with_equal_jitter(self) -> None:
        low = Backoff(0.25, 2, rand=lambda: 0.0)
        self.assertEqual([low.next() for _ in range(6)], [0.125, 0.25, 0.5, 1.0, 1.0, 1.0])
        high = Backoff(0.25, 2, rand=lambda: 0.999999)
        self.assertAlmostEqual(high.next(), 0.25, places=5)
        low.reset()
        self.assertEqual(low.next(), 0.125)

    def test_many_attempts_do_not_overflow(self) -> None:
        b = Backoff(0.25, 30, rand=lambda: 1.0)
        for _ in range(2000):
            d = b.next()
        self.assertEqual(d, 30)

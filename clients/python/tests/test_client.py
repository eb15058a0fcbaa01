"""Each call of the Client against the real server: what it answers, what it
stores, and the SPEC's error codes it raises."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from taskhoster import Client, Task, TaskhosterError, Violation

from .server import EVE, HOST, ServerTest


class PostTest(ServerTest):
    def test_post_then_status(self) -> None:
        task_id = self.alice.post("resize", {"url": "https://example.com/a.jpg", "width": 3})
        self.assertRegex(task_id, r"^[0-9a-f]{16}$")
        view = self.alice.status("resize", task_id)
        self.assertEqual((view.id, view.queue, view.status, view.attempts), (task_id, "resize", "pending", 0))
        self.assertIsNone(view.result)
        self.assertIsNone(view.finished_at)
        self.assertFalse(view.terminal)
        self.assertGreater(view.posted_at, 0)
        self.assertEqual([e["event"] for e in self.server.events(task_id)], ["posted"])

    def test_post_null(self) -> None:
        # None is JSON's null, an item like any other where the schema allows
        # it; it was taken for "no body" and refused as invalid_json.
        task_id = self.anyone.post("public", None)
        task = self.anyone.claim("public")
        assert task is not None
        self.assertEqual((task.id, task.item), (task_id, None))

    def test_delay_keeps_a_task_from_claims(self) -> None:
        before = int(time.time() * 1000)
        task_id = self.anyone.post("public", {"n": 1}, delay=30)
        view = self.anyone.status("public", task_id)
        self.assertIsNotNone(view.not_before)
        assert view.not_before is not None
        self.assertGreaterEqual(view.not_before, before + 30_000)
        self.assertIsNone(self.anyone.claim("public"))

    def test_not_before(self) -> None:
        at = int(time.time() * 1000) + 3_600_000
        task_id = self.anyone.post("public", {}, not_before=at)
        self.assertEqual(self.anyone.status("public", task_id).not_before, at)

    def test_priority_goes_first(self) -> None:
        low = self.anyone.post("public", {"n": "low"})
        high = self.anyone.post("public", {"n": "high"}, priority=5)
        self.assertEqual(self.anyone.status("public", high).priority, 5)
        self.assertEqual(self.anyone.status("public", low).priority, 0)
        first = self.anyone.claim("public")
        assert first is not None
        self.assertEqual(first.id, high)

    def test_idempotency_key(self) -> None:
        first = self.alice.submit("resize", {"url": "u"}, key="order-17")
        self.assertTrue(first.created)
        self.assertEqual(first.status, "pending")
        again = self.alice.submit("resize", {"url": "u"}, key="order-17")
        self.assertFalse(again.created)
        self.assertEqual(again.id, first.id)
        with self.assertRaises(TaskhosterError) as caught:
            self.alice.post("resize", {"url": "other"}, key="order-17")
        self.assertEqual((caught.exception.status, caught.exception.code), (409, "idempotency_conflict"))
        self.assertEqual([e["event"] for e in self.server.events()], ["posted"])

    def test_batch(self) -> None:
        ids = self.alice.post_batch("resize", [{"url": "a"}, {"url": "b"}, {"url": "c"}], priority=2)
        self.assertEqual(len(ids), 3)
        self.assertEqual(len(set(ids)), 3)
        for task_id in ids:
            view = self.alice.status("resize", task_id)
            self.assertEqual((view.status, view.priority), ("pending", 2))

    def test_batch_is_all_or_nothing(self) -> None:
        with self.assertRaises(TaskhosterError) as caught:
            self.alice.post_batch("resize", [{"url": "a"}, {"url": "b", "width": 0}])
        e = caught.exception
        self.assertEqual((e.status, e.code), (422, "invalid_item"))
        self.assertEqual([v.path for v in e.details], ["/items/1/width"])
        self.assertEqual(self.server.events(), [])
        self.assertIsNone(self.box.claim("resize"))


class ErrorTest(ServerTest):
    def assertCode(self, status: int, code: str, call: Any, *args: Any, **kwargs: Any) -> TaskhosterError:
        with self.assertRaises(TaskhosterError) as caught:
            call(*args, **kwargs)
        self.assertEqual((caught.exception.status, caught.exception.code), (status, code), caught.exception)
        return caught.exception

    def test_invalid_item_has_details(self) -> None:
        e = self.assertCode(422, "invalid_item", self.alice.post, "resize", {"url": "u", "width": 0})
        self.assertEqual(len(e.details), 1)
        self.assertIsInstance(e.details[0], Violation)
        self.assertEqual(e.details[0].path, "/width")
        self.assertIn("/width", str(e))

    def test_access(self) -> None:
        self.assertCode(401, "unauthorized", self.anyone.post, "resize", {"url": "u"})
        self.assertCode(401, "unauthorized", self.server.client("0" * 32).post, "resize", {"url": "u"})
        self.assertCode(403, "forbidden", self.server.client(EVE).post, "resize", {"url": "u"})
        self.assertCode(403, "forbidden", self.alice.claim, "resize")
        self.assertEqual(self.server.events(), [])

    def test_not_found(self) -> None:
        self.assertCode(404, "unknown_queue", self.anyone.post, "nosuch", {})
        self.assertCode(404, "not_found", self.anyone.status, "public", "0123456789abcdef")
        self.assertCode(404, "unknown_host", Client(self.server.url, host="nope.example").post, "public", {})

    def test_invalid_request(self) -> None:
        self.assertCode(400, "invalid_request", self.anyone.post, "public", {}, delay=5, not_before=1)
        self.assertCode(400, "invalid_request", self.anyone.post, "public", {}, priority=5000)
        self.assertCode(400, "invalid_request", self.anyone.post, "public", {}, delay=-1)
        self.assertEqual(self.server.events(), [])

    def test_too_large(self) -> None:
        self.assertCode(413, "too_large", self.alice.post, "resize", {"url": "x" * 5000})

    def test_too_large_while_the_body_is_still_being_sent(self) -> None:
        # resize's maxItemBytes is 4096. The server answers 413 and closes
        # the connection as soon as it has read too much: a body too big
        # for the socket's buffers is still being sent then, and the send
        # fails (connection reset). The answer is there to read all the
        # same; taken for connection trouble, a Worker would send it again.
        self.alice.post("resize", {"url": "u"})
        task = self.box.claim("resize")
        assert task is not None
        for big in (200 << 10, 16 << 20):
            self.assertCode(413, "too_large", task.result, {"blob": "x" * big})
            self.assertCode(413, "too_large", task.progress, {"percent": 1, "blob": "x" * big})
            self.assertCode(413, "too_large", self.alice.post, "resize", {"url": "x" * big})

    def test_invalid_query(self) -> None:
        self.assertCode(400, "invalid_query", self.box.claim, "resize", query={"type": 5})

    def test_invalid_reports(self) -> None:
        self.alice.post("resize", {"url": "u"})
        task = self.box.claim("resize")
        assert task is not None
        self.assertCode(422, "invalid_progress", task.progress, {"percent": "half"})
        self.assertCode(422, "invalid_result", task.result, [1, 2])
        self.assertCode(422, "invalid_failure", task.release, reason="not an object")
        self.assertCode(422, "invalid_failure", task.fail, reason=7)
        self.assertEqual(self.alice.status("resize", task.id).status, "processing")

    def test_not_json_is_refused_here(self) -> None:
        with self.assertRaises(ValueError):
            self.anyone.post("public", float("nan"))
        with self.assertRaises(TypeError):
            self.anyone.post("public", object())
        self.assertEqual(self.server.events(), [])

    def test_connection_refused_is_an_os_error(self) -> None:
        url = self.server.url
        self.server.stop()
        with self.assertRaises(OSError):
            Client(url, host=HOST).post("public", {})

    def test_bad_server_url(self) -> None:
        with self.assertRaises(ValueError):
            Client("ftp://example.com")
        with self.assertRaises(ValueError):
            Client("http://")


class ClaimTest(ServerTest):
    def test_claim_and_its_lease(self) -> None:
        task_id = self.alice.post("resize", {"url": "u", "width": 7})
        self.assertIsNone(self.box.claim("resize", query={"properties": {"width": {"const": 8}}}))
        task = self.box.claim("resize", query={"properties": {"width": {"const": 7}}})
        assert task is not None
        self.assertEqual((task.id, task.queue, task.item, task.attempts), (task_id, "resize", {"url": "u", "width": 7}, 1))
        self.assertEqual(task.lease.worker, "box")  # the user's name by default
        self.assertGreater(task.lease.until, int(time.time() * 1000) + 30_000)
        view = self.alice.status("resize", task_id)
        self.assertEqual((view.status, view.attempts), ("processing", 1))

    def test_an_older_claims_reports_leave_the_newer_claim_alone(self) -> None:
        # A worker name's older claim (its lease lapsed, or it gave the
        # task back, and the same name claimed it again) must not touch the
        # newer claim: a Task's reports name the claim's attempt, and the
        # server refuses those of an older one.
        task_id = self.alice.post("resize", {"url": "u", "width": 7})
        older = self.box.claim("resize")
        assert older is not None
        self.assertTrue(older.release().accepted)
        newer = self.box.claim("resize")
        assert newer is not None
        self.assertEqual((newer.id, newer.attempts, newer.lease.worker), (task_id, 2, older.lease.worker))
        self.assertFalse(older.heartbeat().accepted)
        self.assertFalse(older.progress({"percent": 1}).accepted)
        self.assertFalse(older.release().accepted)
        view = self.alice.status("resize", task_id)
        self.assertEqual((view.status, view.attempts, view.progress), ("processing", 2, None))
        self.assertTrue(newer.heartbeat().accepted)

    def test_named_worker(self) -> None:
        self.anyone.post("public", {})
        task = self.anyone.claim("public", worker="box-1")
        assert task is not None
        self.assertEqual(task.lease.worker, "box-1")
        self.assertEqual(self.server.events(task.id)[-1]["worker"], "box-1")

    def test_nothing_to_claim(self) -> None:
        self.assertIsNone(self.anyone.claim("public"))
        self.assertEqual(self.anyone.claim_many("public", 5), [])

    def test_long_poll_gets_a_later_post(self) -> None:
        got: list[Task | None] = []
        waiting = threading.Thread(target=lambda: got.append(self.anyone.claim("public", wait=30)))
        waiting.start()
        task_id = self.anyone.post("public", {"late": True})
        waiting.join(60)
        self.assertFalse(waiting.is_alive())
        self.assertEqual(len(got), 1)
        assert got[0] is not None
        self.assertEqual(got[0].id, task_id)

    def test_claim_many(self) -> None:
        ids = self.anyone.post_batch("public", [{"n": n} for n in range(3)])
        tasks = self.anyone.claim_many("public", 2, worker="w")
        self.assertEqual([t.id for t in tasks], ids[:2])
        self.assertTrue(all(t.lease.worker == "w" for t in tasks))


class ReportTest(ServerTest):
    def claimed(self) -> Task:
        self.alice.post("resize", {"url": "u"})
        task = self.box.claim("resize", worker="box-1")
        assert task is not None
        return task

    def test_progress(self) -> None:
        task = self.claimed()
        ack = task.progress({"percent": 40})
        self.assertTrue(ack.accepted)
        assert ack.lease is not None
        self.assertEqual(ack.lease.worker, "box-1")
        self.assertEqual(task.lease, ack.lease)
        self.assertEqual(self.alice.status("resize", task.id).progress, {"percent": 40})
        other = self.box.progress("resize", task.id, {"percent": 50}, worker="box-2")
        self.assertEqual((other.accepted, other.status), (False, "processing"))
        self.assertEqual(self.alice.status("resize", task.id).progress, {"percent": 40})

    def test_heartbeat(self) -> None:
        task = self.claimed()
        before = task.lease.until
        ack = task.heartbeat()
        self.assertTrue(ack.accepted)
        assert ack.lease is not None
        self.assertGreaterEqual(ack.lease.until, before)
        self.assertFalse(task.lost.is_set())
        other = self.box.heartbeat("resize", task.id, worker="box-2")
        self.assertEqual((other.accepted, other.status), (False, "processing"))
        # No event for a heartbeat.
        self.assertEqual([e["event"] for e in self.server.events(task.id)], ["posted", "claimed"])

    def test_result_first_wins(self) -> None:
        task = self.claimed()
        self.assertEqual(task.result({"thumb": "t.jpg"}).accepted, True)
        view = self.alice.status("resize", task.id)
        self.assertEqual((view.status, view.result), ("finished", {"thumb": "t.jpg"}))
        self.assertTrue(view.terminal)
        self.assertIsNotNone(view.finished_at)
        late = self.box.result("resize", task.id, {"thumb": "other.jpg"}, worker="box-2")
        self.assertEqual((late.accepted, late.status), (False, "finished"))
        self.assertEqual(self.alice.status("resize", task.id).result, {"thumb": "t.jpg"})
        # Progress on a finished task is refused and marks the lease lost.
        self.assertFalse(task.progress({"percent": 100}).accepted)
        self.assertTrue(task.lost.is_set())
        self.assertEqual([e["event"] for e in self.server.events(task.id)], ["posted", "claimed", "result", "fetched"])

    def test_release(self) -> None:
        task = self.claimed()
        before = int(time.time() * 1000)
        ack = task.release(delay=30, reason={"why": "busy"})
        self.assertEqual((ack.accepted, ack.status), (True, "pending"))
        view = self.alice.status("resize", task.id)
        self.assertEqual((view.status, view.failure, view.attempts), ("pending", {"why": "busy"}, 1))
        assert view.not_before is not None
        self.assertGreaterEqual(view.not_before, before + 30_000)
        self.assertIsNone(self.box.claim("resize"))
        self.assertEqual(self.server.events(task.id)[-1]["event"], "released")
        # Only the lease holder may release.
        self.assertFalse(task.release().accepted)

    def test_release_after_the_last_attempt(self) -> None:
        task_id = self.anyone.post("twice", {})
        for attempt, status in ((1, "pending"), (2, "failed")):
            task = self.anyone.claim("twice")
            assert task is not None
            self.assertEqual(task.attempts, attempt)
            self.assertEqual(task.release().status, status)
        view = self.anyone.status("twice", task_id)
        self.assertEqual((view.status, view.error), ("failed", "attempts"))

    def test_fail(self) -> None:
        task = self.claimed()
        ack = task.fail(reason={"why": "no such image"})
        self.assertTrue(ack.accepted)
        view = self.alice.status("resize", task.id)
        self.assertEqual((view.status, view.error, view.failure), ("failed", "failed", {"why": "no such image"}))
        again = self.box.fail("resize", task.id, reason={"why": "again"})
        self.assertEqual((again.accepted, again.status), (False, "failed"))
        failed = [e for e in self.server.events(task.id) if e["event"] == "failed"]
        self.assertEqual(len(failed), 1)
        self.assertEqual(failed[0]["error"], "failed")


class ErrorTextTest(ServerTest):
    def test_str_names_code_status_and_message(self) -> None:
        try:
            self.anyone.status("public", "0123456789abcdef")
        except TaskhosterError as e:
            self.assertRegex(str(e), re.compile(r"^not_found \(404\): \S"))
        else:
            self.fail("no error")

// The Worker against the real server: concurrency, heartbeats, give-back,
// cancel, and reconnection after the server restarts.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CancelledError, Client, Failure, Release, TaskhosterError, Worker } from "../dist/index.js";
import { aliceToken, boxToken, deferred, host, newDirs, proxy, start, withTimeout } from "./harness.js";

function clients(server) {
  return {
    alice: new Client(server.url, { host, token: aliceToken }),
    box: new Client(server.url, { host, token: boxToken }),
  };
}

test("a worker with concurrency 2 runs two tasks at once and finishes them all", async (t) => {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const ids = await alice.postBatch("jobs", [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]);
  let running = 0;
  let most = 0;
  const two = deferred(); // resolved once two handlers run side by side
  const worker = new Worker({
    client: box,
    queue: "jobs",
    concurrency: 2,
    limit: 4,
    handler: async (task) => {
      running++;
      most = Math.max(most, running);
      if (running === 2) two.resolve();
      // Neither of the first two returns before the other started, which a
      // worker running one at a time never gets to.
      await withTimeout(two.promise, 10_000, "a second handler to run alongside");
      running--;
      return { double: task.item.n * 2 };
    },
  });
  await worker.run();
  assert.equal(most, 2);
  for (const [i, id] of ids.entries()) {
    const view = await alice.status("jobs", id);
    assert.equal(view.status, "finished");
    assert.equal(view.attempts, 1);
    assert.deepEqual(view.result, { double: (i + 1) * 2 });
  }
});

test("heartbeats keep the lease of a handler that runs past it", async (t) => {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const { id } = await alice.post("short", { slow: true }); // leaseSeconds 2; the sweep runs every 100 ms
  const outcomes = [];
  const worker = new Worker({
    client: box,
    queue: "short",
    limit: 1,
    onOutcome: (o) => outcomes.push(o),
    // Two and a half leases long: without heartbeats the sweep re-queues it meanwhile.
    handler: () => new Promise((resolve) => setTimeout(() => resolve({ slept: 5 }), 5_000)),
  });
  await worker.run();
  assert.equal(outcomes.length, 1);
  assert.equal(outcomes[0].sent, "result");
  assert.equal(outcomes[0].ack.accepted, true);
  const view = await alice.status("short", id);
  assert.equal(view.status, "finished");
  assert.equal(view.attempts, 1);
  assert.deepEqual(server.eventsOf(id), ["posted", "claimed", "result", "fetched"]); // no requeue
});

// givenBackOnce runs a worker of limit 2 over one task of queue, whose
// first attempt does first(task) and whose second finishes it, and checks
// that the first gave the task back and the second finished it; it returns
// the outcomes and the task's final view.
async function givenBackOnce(t, first, queue = "jobs") {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const { id } = await alice.post(queue, { n: 5 });
  const outcomes = [];
  const worker = new Worker({
    client: box,
    queue,
    limit: 2,
    onOutcome: (o) => outcomes.push(o),
    handler: (task) => (task.attempts === 1 ? first(task) : { attempt: task.attempts }),
  });
  await withTimeout(worker.run(), 30_000, "the worker did not finish: a task waited for its lease");
  assert.deepEqual(
    outcomes.map((o) => [o.sent, o.ack.accepted, o.ack.status]),
    [["release", true, "pending"], ["result", true, undefined]],
  );
  const view = await alice.status(queue, id);
  assert.equal(view.status, "finished");
  assert.equal(view.attempts, 2);
  assert.deepEqual(view.result, { attempt: 2 });
  assert.deepEqual(server.eventsOf(id), ["posted", "claimed", "released", "claimed", "result", "fetched"]);
  return { outcomes, view };
}

test("a handler that throws gives its task back, and the next attempt finishes it", async (t) => {
  const { outcomes, view } = await givenBackOnce(t, () => {
    throw new Error("the disc is full");
  });
  assert.equal(outcomes[0].error.message, "the disc is full");
  assert.deepEqual(view.failure, { error: "the disc is full" }); // the give-back's reason
});

test("a handler that throws, on a queue whose failure schema refuses the reason, gives the task back without one", async (t) => {
  const { outcomes, view } = await givenBackOnce(
    t,
    () => {
      throw new Error("the disc is full");
    },
    "strict",
  );
  assert.equal(outcomes[0].error.message, "the disc is full");
  assert.equal(view.failure, undefined);
});

test("a result JSON cannot carry gives the task back, and the next attempt finishes it", async (t) => {
  const { outcomes } = await givenBackOnce(t, () => ({ big: 10n }));
  assert.ok(outcomes[0].error instanceof TypeError, String(outcomes[0].error));
});

test("a result the queue's schema refuses (invalid_result) gives the task back, and the next attempt finishes it", async (t) => {
  const { outcomes, view } = await givenBackOnce(t, () => [1, 2], "objects");
  assert.ok(outcomes[0].error instanceof TaskhosterError && outcomes[0].error.code === "invalid_result", String(outcomes[0].error));
  assert.match(view.failure.error, /result/); // the give-back's reason: the refusal's message
});

// The give-back after a refused result says why; when the queue's failure
// schema refuses that reason too, it goes without one, as after a handler
// that threw, rather than leave the task held until its lease lapses.
test("a result the schema refuses, on a queue whose failure schema refuses the reason, gives the task back without one", async (t) => {
  const { outcomes, view } = await givenBackOnce(t, () => [1, 2], "strict");
  assert.ok(outcomes[0].error instanceof TaskhosterError && outcomes[0].error.code === "invalid_result", String(outcomes[0].error));
  assert.equal(view.failure, undefined);
});

test("a Release gives back with a delay, a Failure fails for good", async (t) => {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const later = await alice.post("jobs", { n: 6 });
  const never = await alice.post("jobs", { n: 7 });
  const worker = new Worker({
    client: box,
    queue: "jobs",
    limit: 2,
    handler: (task) => {
      if (task.item.n === 6) throw new Release({ delaySeconds: 600, reason: { why: "rate limited" } });
      throw new Failure({ why: "no such image" });
    },
  });
  await worker.run();
  const released = await alice.status("jobs", later.id);
  assert.equal(released.status, "pending");
  assert.deepEqual(released.failure, { why: "rate limited" });
  assert.ok(released.notBefore - released.updatedAt >= 600_000, `notBefore ${released.notBefore}, updatedAt ${released.updatedAt}`);
  const failed = await alice.status("jobs", never.id);
  assert.equal(failed.status, "failed");
  assert.equal(failed.error, "failed");
  assert.deepEqual(failed.failure, { why: "no such image" });
});

test("a cancel aborts the running handler's signal and nothing is handed in", async (t) => {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const { id } = await alice.post("jobs", { n: 8 });
  const started = deferred();
  const outcomes = [];
  const worker = new Worker({
    client: box,
    queue: "jobs",
    limit: 1,
    onOutcome: (o) => outcomes.push(o),
    handler: (task, signal) =>
      new Promise((resolve, reject) => {
        signal.addEventListener("abort", () => reject(signal.reason));
        started.resolve();
      }),
  });
  const running = worker.run();
  await started.promise;
  assert.deepEqual(await alice.cancel("jobs", id), { accepted: true, status: "failed" });
  await running;
  assert.equal(outcomes.length, 1);
  assert.ok(outcomes[0].error instanceof CancelledError, String(outcomes[0].error));
  assert.equal(outcomes[0].sent, "");
  const view = await alice.status("jobs", id);
  assert.equal(view.error, "cancelled");
  assert.deepEqual(server.eventsOf(id), ["posted", "claimed", "cancelled", "fetched"]);
});

// An onOutcome that throws ends run with its error; before, run rejected
// at once while the other slots went on claiming and running tasks over a
// socket nobody would close: a worker running on after its run had ended.
test("an onOutcome that throws stops the whole worker before run rejects with its error", async (t) => {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const quick = await alice.post("jobs", { n: 1 });
  const slow = await alice.post("jobs", { n: 2 });
  const slowStarted = deferred();
  const letGo = deferred(); // frees the slow handler should the worker not stop it
  let slowSignal;
  const worker = new Worker({
    client: box,
    queue: "jobs",
    concurrency: 2,
    onOutcome: () => {
      throw new Error("onOutcome broke");
    },
    handler: async (task, signal) => {
      if (task.item.n === 1) {
        await withTimeout(slowStarted.promise, 10_000, "the slow handler to start");
        return { ok: true };
      }
      slowSignal = signal;
      slowStarted.resolve();
      await new Promise((resolve) => {
        signal.addEventListener("abort", resolve, { once: true });
        letGo.promise.then(resolve);
      });
      return { late: true };
    },
  });
  t.after(() => {
    worker.drain();
    letGo.resolve();
  });
  const err = await withTimeout(worker.run().catch((e) => e), 10_000, "run to end");
  const stopped = slowSignal.aborted;
  assert.equal(err.message, "onOutcome broke");
  assert.ok(stopped, "the other slot's handler still runs after run rejected");
  assert.equal((await alice.status("jobs", quick.id)).status, "finished");
  // The socket is closed, so the slow task is back to pending, not held by a worker that is gone.
  let view;
  for (let i = 0; i < 100; i++) {
    view = await alice.status("jobs", slow.id);
    if (view.status === "pending") break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.equal(view.status, "pending");
});

test("progress is accepted from the lease holder and kept", async (t) => {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const { id } = await alice.post("jobs", { n: 9 });
  const acks = [];
  const worker = new Worker({
    client: box,
    queue: "jobs",
    limit: 1,
    handler: async (task) => {
      acks.push(await task.progress({ percent: 50 }));
      return {};
    },
  });
  await worker.run();
  assert.deepEqual(acks, [true]);
  assert.deepEqual((await alice.status("jobs", id)).progress, { percent: 50 });
});

test("a worker refused the socket stops with the server's error", async (t) => {
  const server = await start(t, newDirs(t));
  const { alice } = clients(server); // alice may not work
  const worker = new Worker({ client: alice, queue: "jobs", handler: () => ({}) });
  const err = await worker.run().catch((e) => e);
  assert.ok(err.cause instanceof TaskhosterError, String(err));
  assert.equal(err.cause.status, 403);
});

test("a worker reconnects after the server restarts and hands in a result it was running", async (t) => {
  const dirs = newDirs(t);
  let server = await start(t, dirs);
  const { alice, box } = clients(server);
  const first = await alice.post("jobs", { n: 1 });
  const running = deferred(); // the handler of the first task has started
  const finish = deferred(); // let it return
  const done = new Map(); // task id → outcome
  const allDone = deferred();
  const worker = new Worker({
    client: box,
    queue: "jobs",
    concurrency: 2,
    minBackoffMs: 20,
    maxBackoffMs: 200,
    onOutcome: (o) => {
      done.set(o.task.id, o);
      if (done.size === 2) allDone.resolve();
    },
    handler: async (task) => {
      if (task.id === first.id) {
        running.resolve();
        await finish.promise;
      }
      return { n: task.item.n };
    },
  });
  const working = worker.run();
  await running.promise;

  await server.kill(); // a crash: the worker socket drops
  server = await start(t, dirs, `127.0.0.1:${server.port}`);
  finish.resolve(); // the result goes over the next socket
  const second = await alice.post("jobs", { n: 2 }); // claimed over the next socket
  await withTimeout(allDone.promise, 20_000, "both tasks to be handed in");
  worker.drain();
  await working;

  for (const [posted, n] of [[first, 1], [second, 2]]) {
    assert.equal(done.get(posted.id)?.ack.accepted, true);
    const view = await alice.status("jobs", posted.id);
    assert.equal(view.status, "finished");
    assert.deepEqual(view.result, { n });
  }
});

test("a claim refused for now (503 too_many_waiting) is claimed again later, and the worker goes on", async (t) => {
  // One waiting place on the whole server: of the worker's two claims, the
  // second is refused while the first waits for a task.
  const server = await start(t, newDirs(t), "127.0.0.1:0", ["--max-waiting", "1"]);
  const { alice, box } = clients(server);
  const refused = deferred();
  const worker = new Worker({
    client: box,
    queue: "jobs",
    concurrency: 2,
    limit: 2,
    minBackoffMs: 20,
    maxBackoffMs: 100,
    logger: {
      warn: (msg, fields) => {
        if (msg.startsWith("claim refused")) refused.resolve(fields);
      },
    },
    handler: (task) => ({ n: task.item.n }),
  });
  const working = worker.run();
  // Whichever comes first: the refusal, logged and retried, or run ending on it.
  const first = await withTimeout(
    Promise.race([refused.promise, working.then(() => new Error("run resolved"), (e) => e)]),
    10_000,
    "the second claim to be refused",
  );
  assert.ok(!(first instanceof Error), `the worker stopped on a passing refusal: ${first?.message}`);
  assert.equal(first.code, "too_many_waiting");
  const ids = await alice.postBatch("jobs", [{ n: 1 }, { n: 2 }]);
  await withTimeout(working, 20_000, "both tasks to be worked");
  for (const [i, id] of ids.entries()) {
    const view = await alice.status("jobs", id);
    assert.equal(view.status, "finished");
    assert.deepEqual(view.result, { n: i + 1 });
  }
});

test("a release is not sent again over the next socket, where another slot may hold the task again", async (t) => {
  const server = await start(t, newDirs(t));
  const net = await proxy(t, server);
  const alice = new Client(server.url, { host, token: aliceToken });
  const box = new Client(net.url, { host, token: boxToken }); // the worker's sockets go through the proxy
  const { id } = await alice.post("jobs", { n: 1 });
  const first = deferred(); // the handler of the first claim runs
  const giveBack = deferred(); // let it throw its Release
  const second = deferred(); // the handler of the second claim runs
  const released = deferred(); // the first claim's outcome is told
  const finished = deferred(); // the second claim's outcome is told
  const outcomes = new Map(); // attempts → outcome
  const worker = new Worker({
    client: box,
    queue: "jobs",
    concurrency: 2,
    minBackoffMs: 20,
    maxBackoffMs: 200,
    onOutcome: (o) => {
      outcomes.set(o.task.attempts, o);
      if (o.task.attempts === 1) released.resolve();
      if (o.task.attempts === 2) finished.resolve();
    },
    handler: async (task) => {
      if (task.attempts === 1) {
        first.resolve();
        await giveBack.promise;
        throw new Release();
      }
      if (task.attempts === 2) {
        second.resolve();
        await released.promise;
      }
      return { attempt: task.attempts };
    },
  });
  const working = worker.run();
  await withTimeout(first.promise, 10_000, "the first claim");
  net.drop(); // the worker socket drops: the server re-queues the task at once
  await withTimeout(second.promise, 20_000, "the other slot to claim the task again over the next socket");
  giveBack.resolve();
  await withTimeout(finished.promise, 20_000, "the second claim's result");
  worker.drain();
  await working;

  const gaveBack = outcomes.get(1);
  assert.equal(gaveBack.sent, "release");
  assert.equal(gaveBack.ack.accepted, false, "the first claim's release gave back the second claim");
  assert.equal(outcomes.get(2).ack.accepted, true);
  const view = await alice.status("jobs", id);
  assert.equal(view.status, "finished");
  assert.equal(view.attempts, 2);
  assert.deepEqual(view.result, { attempt: 2 });
  assert.deepEqual(server.eventsOf(id), ["posted", "claimed", "requeue", "claimed", "result", "fetched"]);
});

test("a worker whose claim query is invalid stops with invalid_query", async (t) => {
  const server = await start(t, newDirs(t));
  const { box } = clients(server);
  const worker = new Worker({ client: box, queue: "jobs", query: { type: 5 }, handler: () => ({}) });
  const err = await withTimeout(worker.run().catch((e) => e), 10_000, "run to end");
  assert.ok(err.cause instanceof TaskhosterError, String(err));
  assert.equal(err.cause.code, "invalid_query");
});

// A claim's query is written out for every claim: one JSON cannot carry (a
// BigInt, a cycle) failed each time at once, and the Worker claimed again
// in a loop of promises that never yielded to the event loop, freezing the
// process (no I/O, no timers, no signal handler to drain it).
test("a worker whose claim query JSON cannot carry is refused at once, as the Go client's", () => {
  const client = new Client("http://127.0.0.1:9", { host });
  const cyclic = {};
  cyclic.self = cyclic;
  for (const query of [{ n: 10n }, cyclic]) {
    assert.throws(() => new Worker({ client, queue: "jobs", query, handler: () => ({}) }), TypeError);
  }
});

// A query that makes the claim larger than the worker socket takes gets the
// socket closed with 1009: claimed again, it would close every next socket
// too, with whatever else was in flight on it. The worker stops instead.
test("a worker whose claim is over the worker socket's limit stops with too_large", async (t) => {
  const server = await start(t, newDirs(t));
  const { box } = clients(server);
  let drops = 0;
  const worker = new Worker({
    client: box,
    queue: "tiny",
    query: { properties: { n: { const: "x".repeat(200 << 10) } } },
    minBackoffMs: 20,
    maxBackoffMs: 100,
    logger: {
      warn: (msg) => {
        if (msg.includes("reconnecting")) drops++;
      },
    },
    handler: () => ({}),
  });
  // A worker that claims again on every socket never ends: stop it.
  const err = await worker.run(AbortSignal.timeout(10_000)).catch((e) => e);
  assert.ok(err?.cause instanceof TaskhosterError, `run: ${err} (after ${drops} reconnections)`);
  assert.equal(err.cause.code, "too_large");
  assert.equal(drops, 0);
});

// tooBigForTheSocket runs a worker of limit 1 over one task of the tiny
// queue (maxItemBytes 4096: the worker socket takes 64 KiB more) whose
// handler is handler, until it ends or 30 s passed; the outcome, the
// task's view and how often the socket dropped.
async function tooBigForTheSocket(t, handler) {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const { id } = await alice.post("tiny", { n: 1 });
  const outcomes = [];
  let drops = 0;
  const worker = new Worker({
    client: box,
    queue: "tiny",
    limit: 1,
    minBackoffMs: 20,
    maxBackoffMs: 100,
    logger: {
      warn: (msg) => {
        if (msg.includes("reconnecting")) drops++;
      },
    },
    onOutcome: (o) => outcomes.push(o),
    handler,
  });
  // A worker that sends the message again on every socket never ends: stop it.
  const stop = AbortSignal.timeout(30_000);
  const err = await worker.run(stop).catch((e) => e);
  assert.equal(err, undefined, `run: ${err} (after ${drops} reconnections)`);
  assert.equal(outcomes.length, 1);
  return { outcome: outcomes[0], view: await alice.status("tiny", id), drops };
}

function assertTooLarge(err) {
  assert.ok(err instanceof TaskhosterError && err.code === "too_large", `want a too_large TaskhosterError, got ${err}`);
}

// A message over the socket's limit makes the server close it with 1009, as
// it reads the frame's header (the small one) or while the worker still
// writes it (the big one). The worker takes that as the server's answer,
// too_large, as HTTP answers 413, rather than a dropped socket to send the
// message again over.
for (const size of [200 << 10, 16 << 20]) {
  test(`a result of ${size} bytes, over the worker socket's limit, is refused as too_large, not sent again`, async (t) => {
    const { outcome, view } = await tooBigForTheSocket(t, () => ({ blob: "x".repeat(size) }));
    assertTooLarge(outcome.error);
    // As for a result JSON cannot carry: the task is given back, which
    // the socket's close did already.
    assert.equal(outcome.sent, "release");
    assert.equal(outcome.ack.accepted, false);
    assert.equal(view.status, "pending");
  });
}

test("a failure whose reason is over the worker socket's limit is refused as too_large, not sent again", async (t) => {
  const { outcome, view } = await tooBigForTheSocket(t, () => {
    throw new Failure({ blob: "x".repeat(200 << 10) });
  });
  assertTooLarge(outcome.error);
  assert.equal(outcome.sent, "");
  assert.equal(view.status, "pending"); // the socket's close gave it back
});

test("progress over the worker socket's limit is refused as too_large", async (t) => {
  let refused;
  const { outcome } = await tooBigForTheSocket(t, async (task) => {
    refused = await task.progress({ blob: "x".repeat(200 << 10) }).then(
      (accepted) => new Error(`progress resolved ${accepted}`),
      (e) => e,
    );
    return { n: 1 };
  });
  assertTooLarge(refused);
  // The socket's close gave the task back, still unfinished: the result counts.
  assert.equal(outcome.sent, "result");
  assert.equal(outcome.ack.accepted, true);
});

test("a big result under the limit goes out in fragments and arrives whole", async (t) => {
  const server = await start(t, newDirs(t));
  const { alice, box } = clients(server);
  const { id } = await alice.post("jobs", { n: 1 });
  // 600 KB of two-byte characters: fragments of 64 KiB split some of them.
  const blob = "é".repeat(300_000) + "end";
  const worker = new Worker({ client: box, queue: "jobs", limit: 1, handler: () => ({ blob }) });
  await withTimeout(worker.run(), 30_000, "the worker to hand in");
  const view = await alice.status("jobs", id);
  assert.equal(view.status, "finished");
  assert.equal(view.result.blob, blob);
});

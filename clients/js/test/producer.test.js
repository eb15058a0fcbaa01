// Post, batch, status, watch and cancel against the real server.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { WebSocketServer } from "ws";

import { watchTiming } from "../dist/client.js";
import { Client, TaskhosterError, Worker } from "../dist/index.js";
import { aliceToken, boxToken, host, newDirs, queues, start, withTimeout } from "./harness.js";

// One server for all: each subtest posts tasks of its own and leaves no
// claimable task behind for the next.
test("producer", async (t) => {
  const server = await start(t, newDirs(t));
  const alice = new Client(server.url, { host, token: aliceToken });
  const box = new Client(server.url, { host, token: boxToken });

  await t.test("posts an item and reads its status", async () => {
    const posted = await alice.post("jobs", { n: 1 });
    assert.equal(posted.created, true);
    assert.equal(posted.status, "pending");
    assert.match(posted.id, /^[0-9a-f]{16}$/);
    const view = await alice.status("jobs", posted.id);
    assert.equal(view.id, posted.id);
    assert.equal(view.queue, "jobs");
    assert.equal(view.status, "pending");
    assert.equal(view.attempts, 0);
    assert.equal(view.priority, undefined);
    assert.equal(view.notBefore, undefined);
    assert.deepEqual(server.eventsOf(posted.id), ["posted"]);
    await alice.cancel("jobs", posted.id); // out of the way of later tests
  });

  await t.test("refuses an item that breaks the schema with the server's code and violations", async () => {
    const err = await alice.post("jobs", { n: "one" }).catch((e) => e);
    assert.ok(err instanceof TaskhosterError, String(err));
    assert.equal(err.status, 422);
    assert.equal(err.code, "invalid_item");
    assert.equal(err.details[0]?.path, "/n");
  });

  await t.test("says who may not post", async () => {
    const anonymous = new Client(server.url, { host });
    const err = await anonymous.post("jobs", {}).catch((e) => e);
    assert.equal(err.status, 401);
    assert.equal(err.code, "unauthorized");
    const forbidden = await box.post("jobs", {}).catch((e) => e);
    assert.equal(forbidden.status, 403);
  });

  await t.test("delays a task: it carries notBefore, and a claim takes a later undelayed one first", async () => {
    const delayed = await alice.post("jobs", { n: 3 }, { delaySeconds: 30 });
    const view = await alice.status("jobs", delayed.id);
    assert.equal(view.notBefore - view.postedAt, 30_000);
    const plain = await alice.post("jobs", { n: 4 });
    const claimed = await workOne(box, { properties: { n: { enum: [3, 4] } } });
    assert.equal(claimed, plain.id);
    assert.equal((await alice.status("jobs", delayed.id)).status, "pending");
    await alice.cancel("jobs", delayed.id); // out of the way of later tests
  });

  await t.test("posts with notBefore as a Date", async () => {
    const at = new Date(Date.now() + 3_600_000);
    const posted = await alice.post("jobs", {}, { notBefore: at });
    assert.equal((await alice.status("jobs", posted.id)).notBefore, at.getTime());
    await alice.cancel("jobs", posted.id);
  });

  await t.test("hands out the highest priority first", async () => {
    const low = await alice.post("jobs", { n: 10 });
    const high = await alice.post("jobs", { n: 11 }, { priority: 5 });
    assert.equal((await alice.status("jobs", high.id)).priority, 5);
    const query = { properties: { n: { enum: [10, 11] } } };
    assert.equal(await workOne(box, query), high.id);
    assert.equal(await workOne(box, query), low.id);
  });

  await t.test("refuses an out-of-range option with invalid_request", async () => {
    const err = await alice.post("jobs", {}, { priority: 5000 }).catch((e) => e);
    assert.equal(err.status, 400);
    assert.equal(err.code, "invalid_request");
  });

  await t.test("makes one task per idempotency key", async () => {
    const first = await alice.post("jobs", { n: 7 }, { key: "order-7" });
    const again = await alice.post("jobs", { n: 7 }, { key: "order-7" });
    assert.equal(first.created, true);
    assert.equal(again.created, false);
    assert.equal(again.id, first.id);
    const err = await alice.post("jobs", { n: 8 }, { key: "order-7" }).catch((e) => e);
    assert.equal(err.status, 409);
    assert.equal(err.code, "idempotency_conflict");
    const posts = server.events().filter((e) => e.event === "posted" && e.id === first.id);
    assert.equal(posts.length, 1);
    await alice.cancel("jobs", first.id);
  });

  await t.test("posts a batch in order, with options for all", async () => {
    const ids = await alice.postBatch("jobs", [{ n: 21 }, { n: 22 }, { n: 23 }], { priority: -3 });
    assert.equal(ids.length, 3);
    assert.equal(new Set(ids).size, 3);
    for (const id of ids) {
      const view = await alice.status("jobs", id);
      assert.equal(view.status, "pending");
      assert.equal(view.priority, -3);
    }
    const query = { properties: { n: { enum: [21, 22, 23] } } };
    assert.deepEqual([await workOne(box, query), await workOne(box, query), await workOne(box, query)], ids);
  });

  await t.test("posts nothing of a batch with one bad item", async () => {
    const before = server.events().length;
    const err = await alice.postBatch("jobs", [{ n: 1 }, { n: "two" }]).catch((e) => e);
    assert.equal(err.status, 422);
    assert.equal(err.code, "invalid_item");
    assert.equal(err.details[0]?.path, "/items/1/n");
    assert.equal(server.events().length, before);
  });

  await t.test("watches a task from pending to finished", async () => {
    const { id } = await alice.post("jobs", { n: 31 });
    const views = [];
    const watching = (async () => {
      for await (const view of alice.watch("jobs", id)) views.push(view);
    })();
    // The watch sends the current view at once; work the task only after it.
    await waitFor(() => views.length > 0);
    assert.equal(views[0].status, "pending");
    await workOne(box, { properties: { n: { const: 31 } } }, () => ({ done: 31 }));
    await watching;
    const last = views.at(-1);
    assert.equal(last.status, "finished");
    assert.deepEqual(last.result, { done: 31 });
    assert.ok(views.every((v, i) => i === views.length - 1 || v.status !== "finished"));
    assert.ok(server.eventsOf(id).includes("fetched"), "the terminal view counts as a fetch");
  });

  await t.test("rejects a watch of an unknown task with not_found", async () => {
    const err = await (async () => {
      for await (const _ of alice.watch("jobs", "0123456789abcdef"));
    })().catch((e) => e);
    assert.ok(err instanceof TaskhosterError, String(err));
    assert.equal(err.status, 404);
  });

  await t.test("cancels a pending task, and only once", async () => {
    const { id } = await alice.post("jobs", { n: 41 });
    assert.deepEqual(await alice.cancel("jobs", id), { accepted: true, status: "failed" });
    const view = await alice.status("jobs", id);
    assert.equal(view.status, "failed");
    assert.equal(view.error, "cancelled");
    assert.deepEqual(await alice.cancel("jobs", id), { accepted: false, status: "failed" });
    assert.deepEqual(server.eventsOf(id), ["posted", "cancelled", "fetched"]);
  });
});

// A watch whose server vanishes without a word (lost power, a connection a
// NAT forgot) ends once the server has been silent too long, as the Go
// client's does, instead of waiting for its next view forever.
test("a watch ends when the server falls silent", async (t) => {
  // A server that sends the first view, then neither views nor pongs.
  const wss = new WebSocketServer({ host: "127.0.0.1", port: 0, autoPong: false });
  await new Promise((resolve) => wss.once("listening", resolve));
  wss.on("connection", (ws) => ws.send(JSON.stringify({ id: "0123456789abcdef", status: "pending" })));
  t.after(() => {
    for (const ws of wss.clients) ws.terminate();
    wss.close();
  });
  const saved = { ...watchTiming };
  Object.assign(watchTiming, { pingMs: 100, silenceMs: 300 });
  t.after(() => Object.assign(watchTiming, saved));
  const client = new Client(`http://127.0.0.1:${wss.address().port}`, { host });
  const views = [];
  const err = await withTimeout(
    (async () => {
      for await (const view of client.watch("jobs", "0123456789abcdef")) views.push(view);
    })().catch((e) => e),
    10_000,
    "the watch of a silent server to end",
  );
  assert.equal(views.length, 1);
  assert.match(String(err), /silent/);
});

// A live reload that takes the watcher's right away closes the watch with
// 1008, the reason being the error code: the watch's error says it.
test("a watch closed by a reload says the server's error code", async (t) => {
  const dirs = newDirs(t);
  const server = await start(t, dirs);
  const alice = new Client(server.url, { host, token: aliceToken });
  const { id } = await alice.post("jobs", { n: 51 });
  const views = [];
  const err = await withTimeout(
    (async () => {
      for await (const view of alice.watch("jobs", id)) {
        views.push(view);
        const file = path.join(dirs.hosts, host, "taskhoster-queues", "jobs.json");
        writeFileSync(file, JSON.stringify({ ...queues.jobs, access: { ...queues.jobs.access, status: ["box"] } }));
      }
    })().catch((e) => e),
    20_000,
    "the reload to close the watch",
  );
  assert.equal(views.length, 1);
  assert.match(String(err), /1008.*forbidden/);
});

/**
 * Works one task of the jobs queue matching query with a fresh worker and
 * resolves to its id.
 */
async function workOne(client, query, handler = () => ({})) {
  let id;
  const worker = new Worker({
    client,
    queue: "jobs",
    query,
    limit: 1,
    handler: (task) => {
      id = task.id;
      return handler(task);
    },
  });
  await worker.run();
  return id;
}

/** Resolves once cond holds, checking on every turn of the event loop (bounded by the test's timeout). */
async function waitFor(cond) {
  while (!cond()) await new Promise((r) => setTimeout(r, 10));
}

// Starts the real taskhoster binary (TASKHOSTER_BIN) on loopback ports,
// with a hosts folder written into a temporary folder, as the Go end-to-end
// tests do (tests/e2e/harness_test.go).
import { spawn } from "node:child_process";
import net from "node:net";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import readline from "node:readline";

export const host = "task.example.com";
export const aliceToken = "a11ce0000000000000000000000000a1"; // posts, reads, manages
export const boxToken = "b0b0000000000000000000000000b0b0"; // works

const access = { post: ["alice"], status: ["alice"], work: ["box"], manage: ["alice"] };

/** The queues of the fixture host: name → queue file. */
export const queues = {
  // Items are objects with an optional integer n: enough to refuse one.
  jobs: {
    item: { type: "object", properties: { n: { type: "integer" } } },
    settings: { leaseSeconds: 60 },
    access,
  },
  // A two-second lease: a handler running longer needs heartbeats (the
  // Worker sends one every third of the lease, leaving slack for a busy machine).
  short: { item: {}, settings: { leaseSeconds: 2 }, access },
  // Values of at most 4 KiB: a worker socket message may be 64 KiB more.
  tiny: { item: {}, settings: { maxItemBytes: 4096 }, access },
  // Results are objects: enough to refuse one.
  objects: { item: {}, result: { type: "object" }, access },
  // Results are objects, and reasons of give-backs must say why.
  strict: { item: {}, result: { type: "object" }, failure: { type: "object", required: ["why"] }, access },
};

export function binary() {
  const bin = process.env.TASKHOSTER_BIN;
  if (!bin) throw new Error("set TASKHOSTER_BIN to the taskhoster binary (make test-js builds it and does)");
  return bin;
}

/** A fresh hosts, items and logs folder; the hosts folder holds the fixture (or is hostsDir when given). */
export function newDirs(t, hostsDir) {
  const root = mkdtempSync(path.join(tmpdir(), "taskhoster-js-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const dirs = { hosts: hostsDir ?? path.join(root, "hosts"), items: path.join(root, "items"), logs: path.join(root, "logs") };
  if (!hostsDir) {
    const write = (rel, value) => {
      const file = path.join(dirs.hosts, host, rel);
      mkdirSync(path.dirname(file), { recursive: true });
      writeFileSync(file, JSON.stringify(value));
    };
    write("taskhoster-users/alice.json", { name: "alice", token: aliceToken });
    write("taskhoster-users/box.json", { name: "box", token: boxToken });
    for (const [name, q] of Object.entries(queues)) write(`taskhoster-queues/${name}.json`, q);
  }
  return dirs;
}

/**
 * Runs `taskhoster serve` on dirs and resolves once it listens; addr
 * "127.0.0.1:0" picks a free port, the listening log line says which.
 * extra are more flags for serve. The server is killed when the test ends.
 */
export async function start(t, dirs, addr = "127.0.0.1:0", extra = []) {
  const child = spawn(
    binary(),
    ["serve", "--hosts", dirs.hosts, "--items", dirs.items, "--logs", dirs.logs,
      "--addr", addr, "--admin-addr", "127.0.0.1:0", "--sweep", "100ms", "--sync", "none", ...extra],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const server = {
    url: "",
    port: 0,
    log: [],
    /** SIGKILL: no shutdown, as in a crash. */
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
    /** Every line of the event log, parsed. */
    events() {
      const dir = path.join(dirs.logs, "tasks");
      let files = [];
      try {
        files = readdirSync(dir).filter((f) => f.endsWith(".jsonl")).sort();
      } catch {
        return [];
      }
      return files.flatMap((f) =>
        readFileSync(path.join(dir, f), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)),
      );
    },
    /** The event names of one task, in order. */
    eventsOf(id) {
      return this.events().filter((e) => e.id === id).map((e) => e.event);
    },
  };
  t.after(() => server.kill());
  const listening = new Promise((resolve, reject) => {
    const seen = {};
    readline.createInterface({ input: child.stderr }).on("line", (line) => {
      server.log.push(line);
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        return;
      }
      if (entry.msg !== "listening") return;
      seen[entry.listener] = entry.addr;
      if (seen.api && seen.admin) resolve(seen.api);
    });
    exited.then((code) => reject(new Error(`server exited (${code}) before listening:\n${server.log.join("\n")}`)));
  });
  const api = await withTimeout(listening, 30_000, "the server to listen");
  server.url = `http://${api}`;
  server.port = Number(api.split(":").pop());
  return server;
}

/**
 * A loopback TCP proxy to server, whose drop() cuts every connection through
 * it as a broken network would, while the server keeps running. Closed
 * when the test ends.
 */
export async function proxy(t, server) {
  const conns = new Set();
  const listener = net.createServer((down) => {
    const up = net.connect(server.port, "127.0.0.1");
    conns.add(down).add(up);
    for (const [a, b] of [[down, up], [up, down]]) {
      a.pipe(b);
      a.on("error", () => b.destroy());
      a.on("close", () => {
        conns.delete(a);
        b.destroy();
      });
    }
  });
  await new Promise((resolve) => listener.listen(0, "127.0.0.1", resolve));
  const p = {
    url: `http://127.0.0.1:${listener.address().port}`,
    /** Cuts every connection through the proxy now. */
    drop() {
      for (const c of conns) c.destroy();
    },
  };
  t.after(() => {
    p.drop();
    return new Promise((resolve) => listener.close(resolve));
  });
  return p;
}

/** p, or a rejection naming what did not happen within ms. */
export function withTimeout(p, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

/** A promise with its resolve function outside, for handlers to wait on. */
export function deferred() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

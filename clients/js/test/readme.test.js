// Runs the README's producer and worker, as they are written there,
// against the real server serving the bundled example hosts folder.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { newDirs, start, withTimeout } from "./harness.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const pkg = path.join(here, "..");
const examples = path.join(pkg, "..", "..", "examples", "hosts");
// The bundled example's users (examples/hosts/task.example.com/taskhoster-users).
const alice = JSON.parse(readFileSync(path.join(examples, "task.example.com/taskhoster-users/alice.json"), "utf8")).token;
const box = JSON.parse(readFileSync(path.join(examples, "task.example.com/taskhoster-users/box.json"), "utf8")).token;

/** The README's js code blocks, in order. */
function codeBlocks() {
  const text = readFileSync(path.join(pkg, "README.md"), "utf8");
  return [...text.matchAll(/^```js\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
}

test("the README shows a producer and a worker in ten lines each", () => {
  const blocks = codeBlocks();
  assert.equal(blocks.length, 2);
  for (const b of blocks) assert.ok(b.trimEnd().split("\n").length <= 10, b);
  assert.match(blocks[0], /client\.post\(/);
  assert.match(blocks[1], /new Worker\(/);
});

test("the README's producer and worker work a task together", async (t) => {
  const server = await start(t, newDirs(t, examples));
  // A folder where "@taskhoster/client" resolves to this package, as it
  // would for a program that installed it.
  const dir = mkdtempSync(path.join(tmpdir(), "taskhoster-readme-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(path.join(dir, "node_modules", "@taskhoster"), { recursive: true });
  symlinkSync(pkg, path.join(dir, "node_modules", "@taskhoster", "client"));
  const [producer, worker] = codeBlocks();
  writeFileSync(path.join(dir, "producer.mjs"), producer);
  writeFileSync(path.join(dir, "worker.mjs"), worker);

  const env = (token) => ({ ...process.env, TASKHOSTER_SERVER: server.url, TASKHOSTER_TOKEN: token });
  const working = run(t, dir, "worker.mjs", env(box));
  const produced = await withTimeout(run(t, dir, "producer.mjs", env(alice)).exited, 30_000, "the producer");
  assert.equal(produced.code, 0, produced.stderr);
  const lines = produced.stdout.trim().split("\n");
  assert.equal(lines.at(-1), 'finished {"thumbnail":"https://example.com/cat.png?width=200"}');

  working.child.kill("SIGTERM"); // the example drains on SIGTERM and exits
  const worked = await withTimeout(working.exited, 30_000, "the worker to drain and exit");
  assert.equal(worked.code, 0, worked.stderr);
});

/** Runs node on file in dir; exited resolves to its exit code and output. */
function run(t, dir, file, env) {
  const child = spawn(process.execPath, [file], { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
  t.after(() => child.kill("SIGKILL"));
  return { child, exited };
}

// The reconnection backoff's bounds, with the random draw pinned.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Backoff } from "../dist/backoff.js";

test("the delay doubles up to the cap, each wait in the upper half of it", () => {
  const low = new Backoff(250, 2_000, () => 0);
  const high = new Backoff(250, 2_000, () => 0.999999);
  const delays = [250, 500, 1_000, 2_000, 2_000, 2_000];
  for (const d of delays) {
    assert.equal(low.next(), d / 2);
    const h = high.next();
    assert.ok(h < d && h > d * 0.999, `${h} for ${d}`);
  }
});

test("reset starts over from the minimum", () => {
  const b = new Backoff(100, 10_000, () => 0);
  b.next();
  b.next();
  b.next();
  b.reset();
  assert.equal(b.next(), 50);
});

test("many attempts stay at the cap", () => {
  const b = new Backoff(1, 30_000, () => 0);
  for (let i = 0; i < 100; i++) b.next();
  assert.equal(b.next(), 15_000);
});

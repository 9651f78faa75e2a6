import assert from "node:assert/strict";
import { test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";

import { DuplicateCache } from "../src/cache.js";
import { EventState, RecordSchema } from "../src/gen/idempotency/v1/claim_pb.js";

test("DuplicateCache: bounded LRU, forgets an answer at its window's end, keeps only settled and failed records", () => {
  let now = Date.UTC(2026, 11, 3, 9);
  const c = new DuplicateCache(2, () => now);
  const settled = (key: string, windowMs: number, extra: { state?: EventState; released?: boolean; lifecycle?: string } = {}) =>
    create(RecordSchema, { namespace: "ns", provider: "stripe", key, state: EventState.SETTLED, fencingToken: 1n, result: new TextEncoder().encode(key), windowExpiresAt: timestampFromMs(now + windowMs), ...extra });
  const ask = (eventId: string) => ({ namespace: "ns", provider: "stripe", eventId });

  c.rememberRecord(settled("a", 3_600_000));
  c.rememberRecord(settled("b", 7_200_000));
  assert.equal(new TextDecoder().decode(c.lookup(ask("a"))?.result), "a");
  c.rememberRecord(settled("c", 3_600_000)); // b is the least recently used
  assert.equal(c.lookup(ask("b")), undefined, "b evicted");
  assert.ok(c.lookup(ask("a")) && c.lookup(ask("c")), "a and c kept");
  assert.equal(c.length, 2);

  now += 3_600_000; // a's and c's windows end
  assert.equal(c.lookup(ask("a")), undefined);
  assert.equal(c.lookup(ask("c")), undefined);
  assert.equal(c.length, 0);

  for (const rec of [settled("p", 1000, { state: EventState.PROCESSING }), settled("r", 1000, { released: true }), settled("l", 1000, { lifecycle: "charge" })]) {
    c.rememberRecord(rec);
    assert.equal(c.lookup(ask(rec.key)), undefined, `${rec.key} kept`);
  }
  c.rememberRecord(settled("s", 1000));
  assert.equal(c.lookup({ ...ask("s"), entityId: "ch_1", eventType: "charge.succeeded" }), undefined, "entity lifecycle");
  assert.equal(c.lookup({ ...ask("s"), scope: "x" }), undefined, "another scope");
  assert.equal(c.lookup({ namespace: "ns", provider: "stripe", delivery: { body: `{"id":"s"}` } }), undefined, "a raw delivery");
  const hit = c.lookup(ask("s"));
  assert.ok(hit);
  hit.result = new Uint8Array([1]);
  assert.equal(new TextDecoder().decode(c.lookup(ask("s"))?.result), "s", "a caller's change reached the cache");
  assert.throws(() => new DuplicateCache(0), RangeError);
});

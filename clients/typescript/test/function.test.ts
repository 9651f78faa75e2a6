import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { Interceptor } from "@connectrpc/connect";

import {
  ClaimdError,
  createClient,
  EventState,
  fromLocalCache,
  guard,
  idempotent,
  jsonCodec,
  MAX_RESULT_BYTES,
  NotRunError,
  Outcome,
  payloadDigest,
  PermanentError,
  ResultNotStorableError,
  type ClaimdClient,
  type GuardLogger,
} from "../src/index.js";
import { startClaimd, type Claimd } from "../src/testing.js";
import { claimdBin, eventId, millis, NS, str } from "./helpers.js";

let server: Claimd;
let client: ClaimdClient;

before(async () => {
  server = await startClaimd({ bin: claimdBin() });
  client = createClient(server.target);
});

after(async () => {
  client?.close();
  const code = await server?.stop();
  assert.equal(code, 0, `claimd exit code = ${code}, want 0`);
});

const quiet: GuardLogger = { warn: () => {}, error: () => {} };
const stripe = { namespace: NS, provider: "stripe", logger: quiet };

class Charge {
  constructor(
    readonly id = "",
    readonly amount = 0n,
    readonly at = new Date(0),
  ) {}
  total(): string {
    return `${this.id}:${this.amount}`;
  }
}

/** chargeCodec stores a Charge (bigint and Date inside) and rebuilds the class with the decoder hooks. */
const chargeCodec = jsonCodec<Charge>({
  decoder: (key, v) => (key === "at" && typeof v === "string" ? new Date(v) : key === "amount" && typeof v === "string" ? BigInt(v) : v),
  revive: (v) => Object.assign(new Charge(), v),
});

describe("idempotent", () => {
  test("returns the typed value on the first call and on duplicates, running fn once", async () => {
    const id = eventId();
    let runs = 0;
    const charge = idempotent(client, { ...stripe, codec: chargeCodec }, async (evt: string) => {
      runs++;
      return new Charge(`ch_${evt.slice(-4)}`, 12_345_678_901_234_567_890n, new Date("2026-12-03T08:00:00Z"));
    });
    for (let i = 1; i <= 3; i++) {
      const got = await charge(id);
      assert.ok(got instanceof Charge, `call ${i}: got ${got?.constructor.name}, want a Charge`);
      assert.equal(got.total(), `ch_${id.slice(-4)}:12345678901234567890`, `call ${i}`);
      assert.ok(got.at instanceof Date && got.at.toISOString() === "2026-12-03T08:00:00.000Z", `call ${i}: at = ${got.at}`);
    }
    assert.equal(runs, 1, `fn ran ${runs} times, want 1`);
    const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
    assert.equal(rec.state, EventState.SETTLED);
    assert.equal(str(rec.result), `{"id":"ch_${id.slice(-4)}","amount":"12345678901234567890","at":"2026-12-03T08:00:00.000Z"}`);
  });

  test("an encoder hook sees the raw value (a Date, not its text)", async () => {
    const id = eventId();
    const codec = jsonCodec<{ at: Date }>({ encoder: (v) => (v instanceof Date ? v.getTime() : v) });
    const f = idempotent(client, { ...stripe, codec }, (_: string) => ({ at: new Date(1_000) }));
    await f(id);
    assert.equal(str((await client.get({ namespace: NS, provider: "stripe", key: id })).result), `{"at":1000}`);
  });

  test("what fn throws propagates and releases; a PermanentError fails the key for every duplicate", async () => {
    const id = eventId();
    let runs = 0;
    const flaky = idempotent(client, stripe, (_: string) => {
      if (++runs === 1) {
        throw new Error("ledger unavailable");
      }
      return { ok: runs };
    });
    await assert.rejects(flaky(id), /ledger unavailable/);
    assert.deepEqual(await flaky(id), { ok: 2 });

    const perm = eventId();
    const declined = idempotent(client, stripe, (_: string): number => {
      throw new PermanentError("card_declined");
    });
    for (let i = 1; i <= 2; i++) {
      const err = await declined(perm).catch((e: unknown) => e);
      assert.ok(err instanceof PermanentError && err.message === "card_declined", `call ${i}: ${err}`);
    }
  });

  for (const [what, value] of [
    ["a function inside", { f: () => 1 }],
    ["a cycle", (() => { const o: { self?: unknown } = {}; o.self = o; return o; })()],
    ["over 64 KiB", "x".repeat(MAX_RESULT_BYTES + 1)],
  ] as const) {
    test(`a value that cannot be stored (${what}) throws before settling and leaves the key to its lease`, async () => {
      const id = eventId();
      const f = idempotent(client, stripe, (_: string) => value as unknown);
      await assert.rejects(f(id), ResultNotStorableError);
      const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
      assert.equal(rec.state, EventState.PROCESSING, `state = ${EventState[rec.state]}`);
      assert.equal(rec.released, false);
      assert.equal(rec.result.length, 0, "nothing stored");
      const again = await f(id).catch((e: unknown) => e);
      assert.ok(again instanceof NotRunError && again.outcome === Outcome.IN_PROGRESS, `again: ${again}`);
    });
  }

  test("payload: another value elsewhere is a duplicate, another value of the part a PAYLOAD_MISMATCH", async () => {
    const id = eventId();
    type Evt = { id: string; amount: number; sentAt: number };
    const f = idempotent(client, { ...stripe, key: (e: Evt) => e.id, payload: (e: Evt) => ({ amount: e.amount }) }, (e: Evt) => e.amount * 2);
    assert.equal(await f({ id, amount: 10, sentAt: 1 }), 20);
    assert.equal(await f({ id, amount: 10, sentAt: 2 }), 20);
    const err = await f({ id, amount: 11, sentAt: 3 }).catch((e: unknown) => e);
    assert.ok(err instanceof NotRunError && err.outcome === Outcome.PAYLOAD_MISMATCH, `${err}`);
    assert.deepEqual(payloadDigest({ b: 1, a: [2, "é"] }), payloadDigest({ a: [2, "é"], b: 1 }), "key order changes the digest");
  });

  test("scope keeps two functions guarded by one event id apart", async () => {
    const id = eventId();
    const a = idempotent(client, { ...stripe, scope: "email" }, (_: string) => "mailed");
    const b = idempotent(client, { ...stripe, scope: "ledger" }, (_: string) => "booked");
    assert.equal(await a(id), "mailed");
    assert.equal(await b(id), "booked");
    const unscoped = idempotent(client, stripe, (_: string) => "first");
    const other = idempotent(client, stripe, (_: string) => "second");
    assert.equal(await unscoped(id), "first");
    assert.equal(await other(id), "first", "without scope the second function gets the first's value");
  });

  test("windowMs is the claim's window; one below the provider's is refused", async () => {
    const week = 7 * 24 * 3600 * 1000;
    const id = eventId();
    const claim = await client.claim({ namespace: NS, provider: "stripe", eventId: id, windowMs: week });
    assert.equal(millis(claim.windowExpiresAt) - millis(claim.firstSeenAt), week);
    const short = idempotent(client, { ...stripe, windowMs: 3600 * 1000 }, (_: string) => 1);
    const err = await short(eventId()).catch((e: unknown) => e);
    assert.ok(err instanceof ClaimdError && /ClaimRequest\.window/.test(err.message), `${err}`);
  });
});

describe("localCache", () => {
  test("answers this client's settled duplicates without a claim reaching claimd", async () => {
    let claims = 0;
    const count: Interceptor = (next) => (req) => {
      if (req.method.name === "Claim") {
        claims++;
      }
      return next(req);
    };
    const cached = createClient(server.target, { localCache: 16, interceptors: [count] });
    try {
      const id = eventId();
      const payloadSha256 = payloadDigest({ amount: 10 });
      const first = await guard(cached, { namespace: NS, provider: "stripe", eventId: id, payloadSha256 }, () => ({ ok: true }), { logger: quiet });
      assert.equal(first.status, 200);
      for (let i = 1; i <= 3; i++) {
        const r = await guard(cached, { namespace: NS, provider: "stripe", eventId: id, payloadSha256 }, () => assert.fail("ran"), { logger: quiet });
        assert.equal(r.outcome, Outcome.DUPLICATE, `duplicate ${i}`);
        assert.equal(str(r.body), `{"ok":true}`);
        assert.ok(r.claim && fromLocalCache(r.claim), `duplicate ${i} not from the cache`);
      }
      assert.equal(claims, 1, `claims sent = ${claims}, want 1`);

      const other = await guard(cached, { namespace: NS, provider: "stripe", eventId: id, payloadSha256: payloadDigest({ amount: 11 }) }, () => "1", { logger: quiet });
      assert.equal(other.outcome, Outcome.PAYLOAD_MISMATCH, "another payload asks claimd");
      assert.equal(claims, 2);

      // Settled by another client: learned from claimd once, then kept.
      const id2 = eventId();
      await guard(client, { namespace: NS, provider: "stripe", eventId: id2 }, () => "x", { logger: quiet });
      for (let i = 0; i < 2; i++) {
        assert.equal((await cached.claim({ namespace: NS, provider: "stripe", eventId: id2 })).outcome, Outcome.DUPLICATE);
      }
      assert.equal(claims, 3, `claims sent = ${claims}, want 3 (the second duplicate of ${id2} from the cache)`);
    } finally {
      cached.close();
    }
  });

  test("is off by default", async () => {
    const id = eventId();
    await guard(client, { namespace: NS, provider: "stripe", eventId: id }, () => "x", { logger: quiet });
    const dup = await client.claim({ namespace: NS, provider: "stripe", eventId: id });
    assert.equal(dup.outcome, Outcome.DUPLICATE);
    assert.equal(fromLocalCache(dup), false);
  });
});

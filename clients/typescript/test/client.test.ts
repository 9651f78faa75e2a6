import assert from "node:assert/strict";
import * as net from "node:net";
import { after, before, describe, test } from "node:test";

import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

import {
  backoffMs,
  ClaimdError,
  createClient,
  ErrorReason,
  EventState,
  InvalidArgumentError,
  InvalidTransitionError,
  KeySource,
  leaseOf,
  NotOwnerError,
  Outcome,
  ProviderNotFoundError,
  Reason,
  RecordNotFoundError,
  resolveRetryPolicy,
  ResultMismatchError,
  StaleTokenError,
  type ClaimdClient,
} from "../src/index.js";
import { decodeErrorInfo } from "../src/errors.js";
import { claimdBin, eventId, millis, NS, str } from "./helpers.js";
import { startClaimd, type Claimd } from "../src/testing.js";

let server: Claimd;
let client: ClaimdClient;

before(async () => {
  server = await startClaimd({ bin: claimdBin() });
  client = createClient(server.target);
});

after(async () => {
  client?.close();
  const code = await server?.stop();
  assert.equal(code, 0, `claimd exit code = ${code}, want 0 (SIGTERM drains and exits 0)`);
});

describe("typed calls", () => {
  test("claim, transition, renew, settle, get: one record's life", async () => {
    const id = eventId();
    const c = await client.claim({ namespace: NS, provider: "stripe", eventId: id, holder: "pod-a", leaseMs: 5000 });
    assert.equal(c.outcome, Outcome.ACQUIRED, `Claim(${id}) outcome = ${Outcome[c.outcome]}, want ACQUIRED`);
    assert.equal(c.reason, Reason.NEW);
    assert.equal(c.key, id);
    assert.equal(c.keySource, KeySource.EVENT_ID);
    assert.equal(c.fencingToken, 1n);
    assert.equal(c.state, EventState.RECEIVED);
    assert.equal(c.holder, "pod-a");
    assert.equal(c.leaseSecret.length, 16, "an ACQUIRED answer carries the 16-byte lease secret");
    const ref = leaseOf({ namespace: NS, provider: "stripe" }, c);

    const v = await client.transition({ ...ref, to: EventState.VALIDATED, extendLeaseMs: 20_000 });
    assert.equal(v.changed, true);
    assert.equal(v.record?.state, EventState.VALIDATED);
    assert.ok(millis(v.record?.leaseExpiresAt) > millis(c.leaseExpiresAt), "extend_lease did not move the lease");

    const renewed = await client.renew({ ...ref, leaseMs: 30_000 });
    assert.ok(millis(renewed.leaseExpiresAt) > millis(v.record?.leaseExpiresAt), "renew did not move the lease");

    await client.transition({ ...ref, to: EventState.PROCESSING });
    const s = await client.transition({ ...ref, to: EventState.SETTLED, result: '{"charge":"ch_1"}' });
    assert.equal(s.changed, true);
    const again = await client.transition({ ...ref, to: EventState.SETTLED, result: '{"charge":"ch_1"}' });
    assert.equal(again.changed, false, "a repeated transition must be a no-op");

    const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
    assert.equal(rec.state, EventState.SETTLED);
    assert.equal(str(rec.result), '{"charge":"ch_1"}');

    const dup = await client.claim({ namespace: NS, provider: "stripe", eventId: id });
    assert.equal(dup.outcome, Outcome.DUPLICATE, `Claim(${id}) outcome = ${Outcome[dup.outcome]}, want DUPLICATE`);
    assert.equal(str(dup.result), '{"charge":"ch_1"}');
    assert.equal(dup.leaseSecret.length, 0, "only the owner gets a lease secret");
    assert.throws(() => leaseOf({ namespace: NS, provider: "stripe" }, dup), TypeError);
  });

  test("the token read with get does not write", async () => {
    const id = eventId();
    const c = await client.claim({ namespace: NS, provider: "stripe", eventId: id });
    const before = await client.get({ namespace: NS, provider: "stripe", key: id });
    const stranger = { namespace: NS, provider: "stripe", key: id, fencingToken: before.fencingToken, leaseSecret: new Uint8Array(16) };
    for (const call of [
      () => client.transition({ ...stranger, to: EventState.PROCESSING }),
      () => client.renew({ ...stranger, leaseMs: 600_000 }),
      () => client.release(stranger),
    ]) {
      const err = await call().then(
        () => assert.fail("a write with a made-up secret succeeded"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof NotOwnerError, `error = ${err}, want NotOwnerError`);
      assert.equal(err.code, Code.PermissionDenied);
    }
    assert.deepEqual(await client.get({ namespace: NS, provider: "stripe", key: id }), before, "a refused write must change nothing");
    const moved = await client.transition({ ...leaseOf({ namespace: NS, provider: "stripe" }, c), to: EventState.PROCESSING });
    assert.equal(moved.changed, true);
  });

  test("release hands the key to the next claim with token+1", async () => {
    const id = eventId();
    const c = await client.claim({ namespace: NS, provider: "stripe", eventId: id });
    const rel = await client.release(leaseOf({ namespace: NS, provider: "stripe" }, c));
    assert.equal(rel.released, true);
    const next = await client.claim({ namespace: NS, provider: "stripe", eventId: id });
    assert.equal(next.outcome, Outcome.ACQUIRED);
    assert.equal(next.reason, Reason.RELEASED, `Claim(${id}) reason = ${Reason[next.reason]}, want RELEASED`);
    assert.equal(next.fencingToken, 2n);
  });

  test("a delivery is keyed by the provider's rule (stripe: json:id)", async () => {
    const id = eventId();
    const body = JSON.stringify({ id, type: "charge.succeeded" });
    const c = await client.claim({
      namespace: NS,
      provider: "stripe",
      delivery: { headers: { "Stripe-Signature": "t=1,v1=abc" }, body },
    });
    assert.equal(c.key, id);
    assert.equal(c.keySource, KeySource.BODY_FIELD);
  });

  test("waitMs waits for the holder and answers DUPLICATE with its result", async () => {
    const id = eventId();
    const c = await client.claim({ namespace: NS, provider: "stripe", eventId: id });
    const waiting = client.claim({ namespace: NS, provider: "stripe", eventId: id, waitMs: 10_000 });
    const ref = leaseOf({ namespace: NS, provider: "stripe" }, c);
    await client.transition({ ...ref, to: EventState.PROCESSING });
    await client.transition({ ...ref, to: EventState.SETTLED, result: "done" });
    const w = await waiting;
    assert.equal(w.outcome, Outcome.DUPLICATE, `Claim(${id}, wait) outcome = ${Outcome[w.outcome]}, want DUPLICATE`);
    assert.equal(str(w.result), "done");
  });

  test("providers: the registry as the server derived it", async () => {
    const p = await client.getProvider("stripe");
    assert.equal(p.name, "stripe");
    assert.equal(p.keyRule, "json:id");
    const all = await client.listProviders();
    assert.ok(all.some((x) => x.name === "stripe"), "listProviders lacks stripe");
  });
});

describe("errors carry code and ErrorInfo reason", () => {
  const cases: {
    desc: string;
    call: () => Promise<unknown>;
    code: Code;
    reason: string;
    cls: typeof ClaimdError;
  }[] = [
    {
      desc: "stale token",
      call: async () => {
        const c = await client.claim({ namespace: NS, provider: "stripe", eventId: eventId() });
        await client.transition({ ...leaseOf({ namespace: NS, provider: "stripe" }, c), fencingToken: 7, to: EventState.PROCESSING });
      },
      code: Code.Aborted,
      reason: ErrorReason.STALE_TOKEN,
      cls: StaleTokenError,
    },
    {
      desc: "the current token with another secret",
      call: async () => {
        const c = await client.claim({ namespace: NS, provider: "stripe", eventId: eventId() });
        await client.transition({ ...leaseOf({ namespace: NS, provider: "stripe" }, c), leaseSecret: new Uint8Array(16), to: EventState.PROCESSING });
      },
      code: Code.PermissionDenied,
      reason: "NOT_OWNER",
      cls: NotOwnerError,
    },
    {
      desc: "invalid transition",
      call: async () => {
        const c = await client.claim({ namespace: NS, provider: "stripe", eventId: eventId() });
        await client.transition({ ...leaseOf({ namespace: NS, provider: "stripe" }, c), to: EventState.SETTLED });
      },
      code: Code.FailedPrecondition,
      reason: "INVALID_TRANSITION",
      cls: InvalidTransitionError,
    },
    {
      desc: "record not found",
      call: () => client.get({ namespace: NS, provider: "stripe", key: eventId("missing") }),
      code: Code.NotFound,
      reason: "RECORD_NOT_FOUND",
      cls: RecordNotFoundError,
    },
    {
      desc: "provider not found",
      call: () => client.claim({ namespace: NS, provider: "no-such-provider", eventId: eventId() }),
      code: Code.NotFound,
      reason: "PROVIDER_NOT_FOUND",
      cls: ProviderNotFoundError,
    },
    {
      desc: "invalid argument",
      call: () => client.claim({ namespace: "Not Valid", provider: "stripe", eventId: eventId() }),
      code: Code.InvalidArgument,
      reason: "INVALID_ARGUMENT",
      cls: InvalidArgumentError,
    },
    {
      desc: "settle repeated with another result",
      call: async () => {
        const req = { namespace: NS, provider: "stripe", eventId: eventId() };
        const lease = leaseOf(req, await client.claim(req));
        await client.transition({ ...lease, to: EventState.PROCESSING });
        await client.transition({ ...lease, to: EventState.SETTLED, result: "first" });
        await client.transition({ ...lease, to: EventState.SETTLED, result: "another" });
      },
      code: Code.FailedPrecondition,
      reason: "RESULT_MISMATCH",
      cls: ResultMismatchError,
    },
  ];
  for (const tc of cases) {
    test(tc.desc, async () => {
      const err = await tc.call().then(
        () => assert.fail(`${tc.desc}: call succeeded, want ${tc.reason}`),
        (e: unknown) => e,
      );
      assert.ok(err instanceof tc.cls, `${tc.desc}: error class = ${(err as Error).name}, want ${tc.cls.name}`);
      const ce = err as ClaimdError;
      assert.equal(ce.code, tc.code, `${tc.desc}: code = ${Code[ce.code]}, want ${Code[tc.code]}`);
      assert.equal(ce.reason, tc.reason, `${tc.desc}: reason = ${ce.reason}, want ${tc.reason}`);
      assert.equal(ce.unavailable, false);
    });
  }

  test("INVALID_TRANSITION names the current state", async () => {
    const c = await client.claim({ namespace: NS, provider: "stripe", eventId: eventId() });
    const ref = leaseOf({ namespace: NS, provider: "stripe" }, c);
    await client.transition({ ...ref, to: EventState.FAILED, result: "no" });
    const err = await client.transition({ ...ref, to: EventState.PROCESSING }).catch((e: unknown) => e);
    assert.ok(err instanceof InvalidTransitionError, `error = ${err}, want InvalidTransitionError`);
    assert.equal(err.currentState, "EVENT_STATE_FAILED");
  });

  test("decodeErrorInfo reads reason, domain and metadata", () => {
    // reason "R" (1), domain "d" (2), metadata {"k": "v"} (3 → entry 1, 2)
    const b = Uint8Array.from([0x0a, 1, 0x52, 0x12, 1, 0x64, 0x1a, 6, 0x0a, 1, 0x6b, 0x12, 1, 0x76, 0x20, 5]);
    assert.deepEqual(decodeErrorInfo(b), { reason: "R", domain: "d", metadata: { k: "v" } });
  });
});

describe("retries", () => {
  test("a Claim whose answer was lost is retried with the same attempt_id and gets the same ACQUIRED", async () => {
    const seen: string[] = [];
    let drop = true;
    // Lets the call reach claimd, then loses its answer the first time, as a
    // connection cut after the server committed would.
    const loseFirstAnswer: Interceptor = (next) => async (req) => {
      const res = await next(req);
      if (req.method.name === "Claim" && !req.stream) {
        seen.push((req.message as unknown as { attemptId: string }).attemptId);
        if (drop) {
          drop = false;
          throw new ConnectError("answer lost in transit (test)", Code.Unavailable);
        }
      }
      return res;
    };
    const flaky = createClient(server.target, { interceptors: [loseFirstAnswer], retry: { initialBackoffMs: 10 } });
    try {
      const id = eventId();
      const c = await flaky.claim({ namespace: NS, provider: "stripe", eventId: id });
      assert.equal(seen.length, 2, `Claim attempts = ${seen.length}, want 2`);
      assert.ok(seen[0] && seen[0] === seen[1], `attempt_ids = ${JSON.stringify(seen)}, want one id twice`);
      assert.equal(c.outcome, Outcome.ACQUIRED, `retried Claim(${id}) outcome = ${Outcome[c.outcome]}, want ACQUIRED`);
      assert.equal(c.reason, Reason.NEW);
      assert.equal(c.fencingToken, 1n);
      assert.equal(c.attempt, 1, "the retry must not count as a second acquisition");
      // ... with the lease secret of that acquisition: the owner can write.
      const moved = await client.transition({ ...leaseOf({ namespace: NS, provider: "stripe" }, c), to: EventState.PROCESSING });
      assert.equal(moved.changed, true);

      // The control: another logical claim (a fresh attempt_id) is told the
      // key is in progress.
      const other = await client.claim({ namespace: NS, provider: "stripe", eventId: id });
      assert.equal(other.outcome, Outcome.IN_PROGRESS, `Claim(${id}) by another attempt outcome = ${Outcome[other.outcome]}, want IN_PROGRESS`);
    } finally {
      flaky.close();
    }
  });

  test("a closed port: bounded attempts, then UNAVAILABLE", async () => {
    const port = await closedPort();
    let attempts = 0;
    const count: Interceptor = (next) => (req) => {
      attempts++;
      return next(req);
    };
    const down = createClient(`127.0.0.1:${port}`, {
      interceptors: [count],
      retry: { maxAttempts: 3, initialBackoffMs: 10, totalTimeoutMs: 5000 },
    });
    try {
      const err = await down.claim({ namespace: NS, provider: "stripe", eventId: eventId() }).catch((e: unknown) => e);
      assert.ok(err instanceof ClaimdError, `error = ${err}, want ClaimdError`);
      assert.equal(err.code, Code.Unavailable, `code = ${Code[err.code]}, want Unavailable`);
      assert.equal(err.unavailable, true);
      assert.equal(attempts, 3, `attempts = ${attempts}, want 3 (maxAttempts)`);
    } finally {
      down.close();
    }
  });

  test("a server that never answers: per-attempt deadline, total time bounded", async () => {
    const silent = await silentServer();
    const c = createClient(silent.target, { timeoutMs: 200, retry: { initialBackoffMs: 10, totalTimeoutMs: 700 } });
    try {
      const start = Date.now();
      const err = await c.claim({ namespace: NS, provider: "stripe", eventId: eventId() }).catch((e: unknown) => e);
      const took = Date.now() - start;
      assert.ok(err instanceof ClaimdError, `error = ${err}, want ClaimdError`);
      assert.equal(err.code, Code.DeadlineExceeded, `code = ${Code[err.code]}, want DeadlineExceeded`);
      assert.ok(took < 2000, `gave up after ${took}ms, want < 2000 (totalTimeoutMs 700)`);
    } finally {
      c.close();
      silent.close();
    }
  });

  test("backoff grows, is capped and jittered", () => {
    const p = resolveRetryPolicy({ initialBackoffMs: 100, maxBackoffMs: 1000, multiplier: 2 });
    const cases = [
      { desc: "first, low draw (full jitter reaches zero)", attempt: 1, random: 0, want: 0 },
      { desc: "first, middle draw", attempt: 1, random: 0.5, want: 50 },
      { desc: "first, high draw", attempt: 1, random: 0.999999, want: 99 },
      { desc: "third", attempt: 3, random: 0.999999, want: 399 },
      { desc: "capped", attempt: 10, random: 0.999999, want: 999 },
    ];
    for (const tc of cases) {
      const got = backoffMs(p, tc.attempt, () => tc.random);
      assert.equal(got, tc.want, `${tc.desc}: backoffMs(attempt ${tc.attempt}) = ${got}, want ${tc.want}`);
    }
    assert.deepEqual(resolveRetryPolicy({ maxAttempts: 0 }), resolveRetryPolicy(), "zero values must mean the defaults");
  });
});

/** closedPort is a loopback port that was free a moment ago and now refuses. */
async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** silentServer accepts connections and never says a word (a hung claimd). */
async function silentServer(): Promise<{ target: string; close(): void }> {
  const sockets = new Set<net.Socket>();
  const s = net.createServer((sock) => {
    sockets.add(sock);
    sock.on("error", () => {});
  });
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return {
    target: `127.0.0.1:${(s.address() as net.AddressInfo).port}`,
    close: () => {
      for (const sock of sockets) sock.destroy();
      s.close();
    },
  };
}

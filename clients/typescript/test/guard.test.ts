import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, test } from "node:test";

import {
  ClaimdError,
  createClient,
  describeGuardResult,
  EventState,
  guard,
  leaseOf,
  MAX_RESULT_BYTES,
  Outcome,
  PermanentError,
  ProviderNotFoundError,
  Reason,
  StaleTokenError,
  type ClaimdClient,
  type ClaimResponse,
  type GuardLogger,
  type GuardResult,
} from "../src/index.js";
import { startClaimd, type Claimd } from "../src/testing.js";
import { claimdBin, deferred, eventId, millis, NS, pkgDir, str, waitFor, within } from "./helpers.js";

let server: Claimd;
let client: ClaimdClient;
let bin: string;

before(async () => {
  bin = claimdBin();
  server = await startClaimd({ bin });
  client = createClient(server.target);
});

after(async () => {
  client?.close();
  const code = await server?.stop();
  assert.equal(code, 0, `claimd exit code = ${code}, want 0`);
});

/** quiet collects the guard's warnings instead of printing them. */
function quiet(): GuardLogger & { lines: string[] } {
  const lines: string[] = [];
  return { lines, warn: (m) => void lines.push(m) };
}

function req(id: string, extra: { leaseMs?: number } = {}) {
  return { namespace: NS, provider: "stripe", eventId: id, ...extra };
}

function describeResult(r: GuardResult): string {
  return `status ${r.status}, outcome ${r.outcome === undefined ? "none" : Outcome[r.outcome]}, ran ${r.ran}, error ${r.error}`;
}

describe("guard", () => {
  test("a duplicate delivery produces one side effect and gets the stored result", async () => {
    const id = eventId();
    let effects = 0;
    const handler = async () => {
      effects++;
      return `{"charge":"ch_${effects}"}`;
    };
    const first = await guard(client, req(id), handler);
    const second = await guard(client, req(id), handler);
    assert.equal(effects, 1, `side effects = ${effects}, want 1`);
    assert.equal(first.status, 200, `first guard(${id}): ${describeResult(first)}`);
    assert.equal(first.ran, true);
    assert.equal(second.status, 200, `second guard(${id}): ${describeResult(second)}`);
    assert.equal(second.outcome, Outcome.DUPLICATE);
    assert.equal(second.ran, false);
    assert.equal(str(second.body), '{"charge":"ch_1"}', "a duplicate must answer the stored result");
  });

  test("results: bytes as they are, strings as UTF-8, other values as JSON, nothing as empty", async () => {
    const cases: { desc: string; value: unknown; want: string }[] = [
      { desc: "bytes", value: Uint8Array.from([0x68, 0x69]), want: "hi" },
      { desc: "string", value: "héllo", want: "héllo" },
      { desc: "object", value: { charge: "ch_1", amount: 42n }, want: '{"charge":"ch_1","amount":"42"}' },
      { desc: "nothing", value: undefined, want: "" },
      { desc: "null", value: null, want: "" },
      { desc: "ArrayBuffer", value: Uint8Array.from([0x68, 0x69]).buffer, want: "hi" },
      { desc: "a view of part of a buffer", value: new DataView(Uint8Array.from([0x61, 0x62, 0x63]).buffer, 1), want: "bc" },
      { desc: "list", value: [1, "x", null, true], want: '[1,"x",null,true]' },
      { desc: "nested object keeps its order", value: { b: { a: [1.5] } }, want: '{"b":{"a":[1.5]}}' },
      { desc: "number", value: 42, want: "42" },
      { desc: "boolean", value: false, want: "false" },
    ];
    for (const tc of cases) {
      const id = eventId();
      const r = await guard(client, req(id), () => tc.value as object);
      assert.equal(str(r.body), tc.want, `${tc.desc}: body = ${str(r.body)}, want ${tc.want}`);
      const dup = await guard(client, req(id), () => assert.fail("ran twice"));
      assert.equal(str(dup.body), tc.want, `${tc.desc}: stored result = ${str(dup.body)}, want ${tc.want}`);
    }
  });

  test("a handler returning an object or a string runs once across three deliveries", async () => {
    const cases: { desc: string; value: object | string; want: string }[] = [
      { desc: "object", value: { charge: "ch_1", amount: 100, note: "é" }, want: '{"charge":"ch_1","amount":100,"note":"é"}' },
      { desc: "string", value: "charged ✓", want: "charged ✓" },
    ];
    for (const tc of cases) {
      const id = eventId();
      let effects = 0;
      const handler = () => {
        effects++;
        return tc.value;
      };
      const answers = [await guard(client, req(id), handler), await guard(client, req(id), handler), await guard(client, req(id), handler)];
      assert.equal(effects, 1, `${tc.desc}: side effects = ${effects}, want 1 across three deliveries`);
      assert.deepEqual(
        answers.map((r) => [r.status, r.outcome, r.ran, str(r.body), r.error]),
        [
          [200, Outcome.ACQUIRED, true, tc.want, undefined],
          [200, Outcome.DUPLICATE, false, tc.want, undefined],
          [200, Outcome.DUPLICATE, false, tc.want, undefined],
        ],
        tc.desc,
      );
    }
  });

  test("a result that cannot be encoded is settled empty and never released", async () => {
    const cycle: { [k: string]: unknown } = {};
    cycle["self"] = cycle;
    const cases: { desc: string; value: unknown }[] = [
      { desc: "a cycle", value: cycle },
      { desc: "a toJSON that throws", value: { toJSON: () => { throw new Error("no JSON for you"); } } },
      { desc: "a function", value: () => 1 },
      { desc: "NaN", value: { amount: NaN } },
      { desc: "a lone surrogate", value: "\uD800" },
      { desc: "a lone surrogate inside an object", value: { note: "\uDC00" } },
    ];
    for (const tc of cases) {
      const id = eventId();
      const log = quiet();
      let effects = 0;
      const handler = () => {
        effects++;
        return tc.value as object;
      };
      const first = await guard(client, req(id), handler, { logger: log });
      const later = [await guard(client, req(id), handler), await guard(client, req(id), handler)];
      assert.equal(effects, 1, `${tc.desc}: side effects = ${effects}, want 1 across three deliveries`);
      assert.equal(first.status, 200, `${tc.desc}: ${describeResult(first)}`);
      assert.equal(first.body.length, 0, `${tc.desc}: body = ${str(first.body)}, want empty`);
      assert.ok(first.error instanceof Error, `${tc.desc}: error = ${first.error}, want why the result was not stored`);
      for (const r of later) {
        assert.equal(r.outcome, Outcome.DUPLICATE, `${tc.desc}: ${describeResult(r)}`);
        assert.equal(r.body.length, 0);
      }
      const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
      assert.equal(rec.state, EventState.SETTLED, `${tc.desc}: state = ${EventState[rec.state]}, want SETTLED`);
      assert.ok(log.lines.some((l) => l.includes("not stored")), `${tc.desc}: no warning about the lost result`);
    }
  });

  test("a result over 64 KiB is answered, settled without it, and never released", async () => {
    const id = eventId();
    const big = "x".repeat(MAX_RESULT_BYTES + 1);
    let effects = 0;
    const handler = () => {
      effects++;
      return big;
    };
    const first = await guard(client, req(id), handler, { logger: quiet() });
    const later = [await guard(client, req(id), handler), await guard(client, req(id), handler)];
    assert.equal(effects, 1, `side effects = ${effects}, want 1 across three deliveries`);
    assert.equal(first.status, 200, describeResult(first));
    assert.equal(str(first.body), big, "this delivery is still answered with the whole result");
    assert.ok(first.error instanceof RangeError, `error = ${first.error}, want a RangeError`);
    for (const r of later) {
      assert.deepEqual([r.status, r.outcome, r.body.length], [200, Outcome.DUPLICATE, 0], describeResult(r));
    }
  });

  test("a settle that fails leaves the claim PROCESSING, never released", async () => {
    const id = eventId();
    // claimd answers every call but the settle, which dies on the way.
    const flaky = new Proxy(client, {
      get(target, prop) {
        if (prop === "transition") {
          return (input: Parameters<ClaimdClient["transition"]>[0], opts?: Parameters<ClaimdClient["transition"]>[1]) =>
            input.to === EventState.SETTLED ? Promise.reject(new Error("socket hang up")) : target.transition(input, opts);
        }
        const v: unknown = Reflect.get(target, prop, target);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    let effects = 0;
    const handler = () => {
      effects++;
      return { charge: "ch_1" };
    };
    const first = await guard(flaky, req(id, { leaseMs: 60_000 }), handler);
    assert.equal(first.ran, true);
    assert.ok(first.status >= 500, `first: ${describeResult(first)}, want 5xx`);
    const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
    assert.deepEqual([EventState[rec.state], rec.released, rec.fencingToken], ["PROCESSING", false, 1n], "the record after a failed settle");
    const again = await guard(client, req(id), handler);
    assert.equal(again.outcome, Outcome.IN_PROGRESS, describeResult(again));
    assert.equal(effects, 1);
  });

  test("20 concurrent deliveries of one event produce one side effect", async () => {
    const id = eventId();
    const n = 20;
    let effects = 0;
    const othersDone = deferred();
    let done = 0;
    // The winner holds its claim until every other delivery has been
    // answered, so all of them really overlap with it.
    const handler = async () => {
      effects++;
      await within(othersDone.promise, 10_000, "the other deliveries");
      return "charged";
    };
    const results = await Promise.all(
      Array.from({ length: n }, () =>
        guard(client, req(id), handler).then((r) => {
          if (!r.ran && ++done === n - 1) {
            othersDone.resolve();
          }
          return r;
        }),
      ),
    );
    assert.equal(effects, 1, `side effects = ${effects}, want 1`);
    const winners = results.filter((r) => r.ran);
    assert.equal(winners.length, 1, `handlers run = ${winners.length}, want 1`);
    assert.equal(winners[0]!.status, 200, `winner: ${describeResult(winners[0]!)}`);
    for (const r of results.filter((x) => !x.ran)) {
      assert.equal(r.status, 409, `loser: ${describeResult(r)}, want 409 IN_PROGRESS`);
      assert.equal(r.outcome, Outcome.IN_PROGRESS);
      assert.ok(r.retryAfter !== undefined && r.retryAfter >= 1, `Retry-After = ${r.retryAfter}, want >= 1`);
    }
    const later = await guard(client, req(id), handler);
    assert.equal(later.outcome, Outcome.DUPLICATE, `later guard(${id}): ${describeResult(later)}`);
    assert.equal(str(later.body), "charged");
  });

  test("a handler that throws releases the claim, and the next delivery runs", async () => {
    const id = eventId();
    const boom = new Error("ledger database down");
    const log = quiet();
    const first = await guard(client, req(id), () => Promise.reject(boom), { logger: log });
    assert.equal(first.status, 500, `first: ${describeResult(first)}`);
    assert.equal(first.ran, true);
    assert.equal(first.error, boom);
    const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
    assert.equal(rec.released, true, "the claim was not released");

    let seen: ClaimResponse | undefined;
    const second = await guard(client, req(id), (c) => {
      seen = c;
      return "ok";
    });
    assert.equal(second.status, 200, `second: ${describeResult(second)}`);
    assert.equal(seen?.reason, Reason.RELEASED, `second claim reason = ${seen && Reason[seen.reason]}, want RELEASED`);
    assert.equal(seen?.fencingToken, 2n);
  });

  test("a handler's error is logged once, at error level, with the key; a PermanentError is not", async () => {
    const cases = [
      { desc: "an Error", thrown: new Error("ledger database down"), want: 1 },
      { desc: "a PermanentError", thrown: new PermanentError("card_declined"), want: 0 },
    ];
    for (const tc of cases) {
      const id = eventId();
      const errors: { message: string; fields: { [name: string]: unknown } }[] = [];
      const log: GuardLogger = { warn: () => {}, error: (message, fields) => void errors.push({ message, fields }) };
      const r = await guard(client, req(id), () => Promise.reject(tc.thrown), { logger: log });
      assert.equal(r.error, tc.thrown, `${tc.desc}: ${describeGuardResult(r)}`);
      assert.equal(errors.length, tc.want, `${tc.desc}: error lines ${JSON.stringify(errors)}, want ${tc.want}`);
      for (const e of errors) {
        assert.equal(e.fields.key, id, `${tc.desc}: logged key`);
        assert.equal(e.fields.error, tc.thrown.message, `${tc.desc}: logged error`);
        assert.match(String(e.fields.stack), /ledger database down/, `${tc.desc}: logged stack`);
      }
    }
  });

  test("a logger without error gets a handler's error as a warning", async () => {
    const log = quiet();
    await guard(client, req(eventId()), () => Promise.reject(new Error("ledger database down")), { logger: log });
    assert.deepEqual(log.lines, ["claimd: handler failed; releasing the key for a retry"]);
  });

  test("describeGuardResult names the enums", async () => {
    const id = eventId();
    await guard(client, req(id), () => "charged");
    const dup = await guard(client, req(id), () => assert.fail("ran a duplicate"));
    assert.equal(describeGuardResult(dup), "status 200, outcome DUPLICATE, state SETTLED, ran false");
    const failed = await guard(client, req(eventId()), () => Promise.reject(new Error("bank down")), { logger: quiet() });
    assert.equal(describeGuardResult(failed), "status 500, outcome ACQUIRED, reason NEW, state PROCESSING, ran true, error bank down");
    assert.equal(
      describeGuardResult({ status: 500, body: new Uint8Array(), outcome: 99 as Outcome, ran: false, error: new Error("boom") }),
      "status 500, outcome 99, ran false, error boom",
    );
    const unknown = await guard(rewriting((c) => void (c.outcome = 99 as Outcome)), req(eventId()), () => assert.fail("ran"), { logger: quiet() });
    assert.equal(String(unknown.error), "Error: claimd: unexpected outcome 99");
  });

  test("a PermanentError fails the event: 200, and duplicates get the failure", async () => {
    const id = eventId();
    let effects = 0;
    const handler = () => {
      effects++;
      throw new PermanentError("card_declined: do not retry");
    };
    const first = await guard(client, req(id), handler);
    assert.equal(first.status, 200, `first: ${describeResult(first)}`);
    assert.ok(first.error instanceof PermanentError);
    assert.equal(str(first.body), "card_declined: do not retry");
    const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
    assert.equal(rec.state, EventState.FAILED, `state = ${EventState[rec.state]}, want FAILED`);

    const dup = await guard(client, req(id), handler);
    assert.equal(dup.outcome, Outcome.DUPLICATE, `duplicate: ${describeResult(dup)}`);
    assert.equal(dup.status, 200);
    assert.equal(str(dup.body), "card_declined: do not retry");
    assert.equal(effects, 1, `handler runs = ${effects}, want 1`);
  });

  test("a handler that dies without settling is taken over after its lease", async () => {
    const id = eventId();
    const leaseMs = 1000;
    const child = spawn(process.execPath, [join(pkgDir, "dist/test/fixtures/dying-handler.js"), server.target, NS, id, String(leaseMs)], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise((r) => child.once("exit", r));
    const firstLine = new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once("line", resolve));
    const line = await within(firstLine, 10_000, "the dying handler to start");
    assert.equal(line, "running");
    child.kill("SIGKILL");
    await exited;

    let taken: ClaimResponse | undefined;
    const results: GuardResult[] = [];
    const r = await waitFor(
      "a takeover of the dead holder's claim",
      async () => {
        const g = await guard(client, req(id, { leaseMs }), (c) => {
          taken = c;
          return "finished by the second holder";
        });
        results.push(g);
        return g.ran ? g : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 100 },
    );
    for (const g of results.slice(0, -1)) {
      assert.equal(g.status, 409, `before the lease ended: ${describeResult(g)}, want 409`);
    }
    assert.equal(r.status, 200, `takeover: ${describeResult(r)}`);
    assert.equal(taken?.reason, Reason.LEASE_EXPIRED, `takeover reason = ${taken && Reason[taken.reason]}, want LEASE_EXPIRED`);
    assert.equal(taken?.state, EventState.PROCESSING, "the taker must see how far the dead holder got");
    assert.equal(taken?.fencingToken, 2n);
    const dup = await guard(client, req(id), () => assert.fail("ran after settle"));
    assert.equal(dup.outcome, Outcome.DUPLICATE);
  });

  test("the heartbeat keeps the lease alive past its first expiry", async () => {
    const id = eventId();
    const leaseMs = 1000;
    let competitor: ClaimResponse | undefined;
    const r = await guard(client, req(id, { leaseMs }), async (c) => {
      const firstEnd = millis(c.leaseExpiresAt);
      // Until the first lease would have ended, and a renewal has moved it.
      await waitFor("a renewed lease past the first one's end", async () => {
        const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
        return Date.now() > firstEnd + 200 && millis(rec.leaseExpiresAt) > Date.now() ? true : undefined;
      });
      competitor = await client.claim(req(id));
      return "slow but alive";
    });
    assert.equal(competitor?.outcome, Outcome.IN_PROGRESS, `competing Claim(${id}) outcome = ${competitor && Outcome[competitor.outcome]}, want IN_PROGRESS`);
    assert.equal(r.status, 200, describeResult(r));
  });

  test("losing ownership aborts the handler's signal and nothing is settled", async () => {
    const id = eventId();
    const log = quiet();
    let reason: unknown;
    const r = await guard(
      client,
      req(id, { leaseMs: 1000 }),
      async (c, signal) => {
        // Another actor frees the key and a new holder takes it (token 2).
        await client.release(leaseOf({ namespace: NS, provider: "stripe" }, c));
        const b = await client.claim(req(id));
        assert.equal(b.reason, Reason.RELEASED);
        await within(
          new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true })),
          5000,
          "the abort signal",
        );
        reason = signal.reason;
        return "must not be stored";
      },
      { logger: log },
    );
    assert.ok(reason instanceof StaleTokenError, `signal.reason = ${reason}, want StaleTokenError`);
    assert.equal(r.status, 409, describeResult(r));
    assert.equal(r.ran, true);
    const rec = await client.get({ namespace: NS, provider: "stripe", key: id });
    assert.equal(rec.fencingToken, 2n);
    assert.equal(rec.state, EventState.RECEIVED, `state = ${EventState[rec.state]}, want RECEIVED (untouched by the old holder)`);
    assert.equal(rec.result.length, 0);
    assert.ok(log.lines.some((l) => l.includes("ownership lost")), "no warning about the lost lease");
  });

  test("a different payload under one key answers 422 and warns", async () => {
    const id = eventId();
    const delivery = (amount: number) => ({
      namespace: NS,
      provider: "stripe",
      delivery: { headers: {}, body: JSON.stringify({ id, amount }) },
    });
    const first = await guard(client, delivery(100), () => "ok");
    assert.equal(first.status, 200, describeResult(first));
    const log = quiet();
    const second = await guard(client, delivery(999), () => assert.fail("ran on a mismatch"), { logger: log });
    assert.equal(second.status, 422, describeResult(second));
    assert.equal(second.outcome, Outcome.PAYLOAD_MISMATCH);
    assert.equal(second.ran, false);
    assert.equal(log.lines.length, 1, "want one warning for alerting");
  });

  test("claimd refusing the claim (unknown provider) answers 500 and runs nothing", async () => {
    const r = await guard(client, { namespace: NS, provider: "nobody", eventId: eventId() }, () => assert.fail("ran"));
    assert.equal(r.status, 500, describeResult(r));
    assert.equal(r.ran, false);
    assert.ok(r.error instanceof ProviderNotFoundError);
  });
});

describe("guard with claimd down", () => {
  test("a stopped claimd: 503 with Retry-After 5, handler not run", async () => {
    const gone = await startClaimd({ bin });
    const c = createClient(gone.target, { retry: { initialBackoffMs: 10, totalTimeoutMs: 2000 } });
    try {
      const warm = await guard(c, req(eventId()), () => "ok");
      assert.equal(warm.status, 200, `before the stop: ${describeResult(warm)}`);
      assert.equal(await gone.stop(), 0);
      const start = Date.now();
      const r = await guard(c, req(eventId()), () => assert.fail("ran while claimd was down"));
      assert.equal(r.status, 503, describeResult(r));
      assert.equal(r.retryAfter, 5);
      assert.equal(r.ran, false);
      assert.equal(r.outcome, undefined);
      assert.ok(r.error instanceof ClaimdError && r.error.unavailable, `error = ${r.error}, want an unavailable ClaimdError`);
      assert.ok(Date.now() - start < 5000, "the guard must give up within the retry budget");
    } finally {
      c.close();
    }
  });
});

/** rewriting is client, with each Claim's answer edited after claimd gave it. */
function rewriting(edit: (c: ClaimResponse) => void): ClaimdClient {
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === "claim") {
        return async (...args: Parameters<ClaimdClient["claim"]>) => {
          const c = await target.claim(...args);
          edit(c);
          return c;
        };
      }
      return Reflect.get(target, prop, receiver);
    },
  });
}

describe("guard and entity lifecycles (GUARD.md rows 10, 21, 22)", () => {
  const refundFirst = () => {
    const id = eventId();
    return { namespace: NS, provider: "stripe", eventId: id, entityId: `ch_${id}`, eventType: "charge.refunded" };
  };
  const cases: { desc: string; retryAfter?: { seconds: bigint; nanos: number }; keep?: boolean; want: number[] }[] = [
    { desc: "claimd's first deferral is 1-2 s", keep: true, want: [1, 2] },
    { desc: "none sent", want: [1] },
    { desc: "zero", retryAfter: { seconds: 0n, nanos: 0 }, want: [1] },
    { desc: "whole seconds stay", retryAfter: { seconds: 3n, nanos: 0 }, want: [3] },
    { desc: "a fraction rounds up", retryAfter: { seconds: 1n, nanos: 200_000_000 }, want: [2] },
  ];
  for (const tc of cases) {
    test(`DEFERRED: 409, handler not called, Retry-After rounded up (${tc.desc})`, async () => {
      const c = rewriting((r) => {
        if (!tc.keep) {
          r.retryAfter = tc.retryAfter === undefined ? undefined : { $typeName: "google.protobuf.Duration", ...tc.retryAfter };
        }
      });
      let calls = 0;
      const r = await guard(c, refundFirst(), () => void calls++, { logger: quiet() });
      assert.equal(r.status, 409, describeResult(r));
      assert.equal(r.outcome, Outcome.DEFERRED);
      assert.equal(str(r.body), "event arrived before its prerequisite; retry later\n");
      assert.equal(calls, 0);
      assert.equal(r.ran, false);
      assert.ok(r.retryAfter !== undefined && tc.want.includes(r.retryAfter), `Retry-After ${r.retryAfter}, want one of ${tc.want}`);
      assert.deepEqual(r.claim?.entity?.awaiting, ["succeeded"]);
    });
  }

  test("SUPERSEDED: 200, handler not called", async () => {
    const id = eventId();
    const pi = `pi_${id}`;
    let calls = 0;
    const handler = () => {
      calls++;
      return "applied";
    };
    const first = await guard(client, { namespace: NS, provider: "stripe", eventId: `${id}_succeeded`, entityId: pi, eventType: "payment_intent.succeeded" }, handler);
    assert.equal(first.status, 200, describeResult(first));
    const stale = await guard(client, { namespace: NS, provider: "stripe", eventId: id, entityId: pi, eventType: "payment_intent.processing" }, handler);
    assert.equal(stale.status, 200, describeResult(stale));
    assert.equal(stale.outcome, Outcome.SUPERSEDED);
    assert.equal(stale.retryAfter, undefined);
    assert.equal(str(stale.body), "event superseded by a later state of its entity\n");
    assert.equal(calls, 1);
    assert.equal(stale.claim?.entity?.state, "succeeded");
  });

  test("an outcome the guard does not know: 500, handler not called", async () => {
    let calls = 0;
    const r = await guard(rewriting((c) => void (c.outcome = 99 as Outcome)), req(eventId()), () => void calls++, { logger: quiet() });
    assert.equal(r.status, 500, describeResult(r));
    assert.equal(str(r.body), "unexpected answer from claimd\n");
    assert.equal(calls, 0);
    assert.ok(r.error instanceof Error);
  });
});

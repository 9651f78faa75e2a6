/**
 * @claimd/client/powertools: Powertools for AWS Lambda (TypeScript)
 * idempotency, run unchanged on claimd through ClaimdPersistenceLayer,
 * against a real claimd.
 *
 * Each test is one of the scenarios Powertools documents for its
 * idempotency utility (makeIdempotent on a handler and on a function with
 * dataIndexArgument, the idempotent decorator, the Middy middleware,
 * eventKeyJmesPath, payloadValidationJmesPath, throwOnNoIdempotencyKey,
 * expiresAfterSeconds, a call in progress, a handler that throws,
 * responseHook, useLocalCache), written as its docs write them, with the
 * persistence store swapped; plus what claimd adds (fencing: an update
 * after a takeover is refused; a configuration claimd refuses fails the
 * call instead of dropping the event).
 *
 * The claimd here runs the built-in registry plus two providers of its own
 * (--providers, extends: builtin): "lambda" (a 2h window, 60s lease) and
 * "lambda-short" (a 3s window, 1s lease) for expiry and takeovers.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  IdempotencyAlreadyInProgressError,
  IdempotencyConfig,
  IdempotencyKeyError,
  IdempotencyPersistenceLayerError,
  IdempotencyValidationError,
  idempotent,
  makeIdempotent,
} from "@aws-lambda-powertools/idempotency";
import { makeHandlerIdempotent } from "@aws-lambda-powertools/idempotency/middleware";
import type { IdempotencyRecord } from "@aws-lambda-powertools/idempotency/persistence";
import type { Interceptor } from "@connectrpc/connect";
import middy from "@middy/core";
import type { Context } from "aws-lambda";

import {
  createClient,
  EventState,
  InvalidArgumentError,
  leaseOf,
  Outcome,
  ProviderNotFoundError,
  StaleTokenError,
  type ClaimdClient,
  type GuardLogger,
} from "../src/index.js";
import { ClaimdPersistenceLayer, type ClaimdPersistenceLayerOptions } from "../src/powertools.js";
import { startClaimd, type Claimd } from "../src/testing.js";
import { claimdBin, deferred, millis, str, waitFor } from "./helpers.js";

const PROVIDERS = `version: 1
extends: builtin
providers:
  lambda:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    max_lease: 10m
    source: https://docs.powertools.aws.dev/lambda/typescript/latest/features/idempotency/
    reviewed_on: 2026-12-01
  lambda-short:
    retry_horizon: 2s
    margin: 1s
    lease: 1s
    max_lease: 2s
    source: https://docs.powertools.aws.dev/lambda/typescript/latest/features/idempotency/
    reviewed_on: 2026-12-01
`;

const NS = "ts-powertools";

let server: Claimd;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "claimd-powertools-"));
  writeFileSync(join(dir, "providers.yaml"), PROVIDERS);
  server = await startClaimd({ bin: claimdBin(), args: ["--providers", join(dir, "providers.yaml")] });
});

after(async () => {
  const code = await server?.stop();
  rmSync(dir, { recursive: true, force: true });
  assert.equal(code, 0, `claimd exit code = ${code}, want 0`);
});

/** Calls counts the ClaimService and ProviderService calls a client makes. */
interface Counted {
  client: ClaimdClient;
  calls: string[];
}

/** counted is a client of the test claimd that records each call's method; closed after the test. */
function counted(t: { after(fn: () => void): void }): Counted {
  const calls: string[] = [];
  const count: Interceptor = (next) => (req) => {
    calls.push(req.method.name);
    return next(req);
  };
  const client = createClient(server.target, { interceptors: [count] });
  t.after(() => client.close());
  return { client, calls };
}

const warnings: { message: string; fields: { [name: string]: unknown } }[] = [];
const quiet: GuardLogger = { warn: (message, fields) => warnings.push({ message, fields }) };

/** Probe exposes Powertools' key of an event: the claimd record's event id. */
class Probe extends ClaimdPersistenceLayer {
  keyOf(data: unknown): string {
    return this.getHashedIdempotencyKey(data as Parameters<ClaimdPersistenceLayer["getRecord"]>[0]);
  }
}

/** layer is a fresh persistence store: Powertools configures one once, from the first config it sees. */
function layer(client: ClaimdClient, opts: Partial<ClaimdPersistenceLayerOptions> = {}): Probe {
  return new Probe({ client, namespace: NS, provider: "lambda", logger: quiet, ...opts });
}

/** context is the part of Lambda's context Powertools reads. */
function context(): Context {
  return {
    functionName: "claimd-powertools-test",
    getRemainingTimeInMillis: () => 30_000,
  } as unknown as Context;
}

function record(client: ClaimdClient, store: Probe, data: unknown, provider = "lambda") {
  return client.get({ namespace: NS, provider, key: store.keyOf(data) });
}

describe("Powertools for TypeScript on claimd", () => {
  test("makeIdempotent on a handler: the first call runs, a duplicate gets the stored response", async (t) => {
    const { client } = counted(t);
    const store = layer(client);
    const runs: string[] = [];
    const handler = makeIdempotent(
      async (event: { order: string; amount: number }, _context: Context) => {
        runs.push(event.order);
        return { paymentId: `pay_${event.order}`, message: "success", statusCode: 200 };
      },
      { persistenceStore: store },
    );
    const event = { order: randomUUID(), amount: 100 };
    const first = await handler(event, context());
    const again = await handler({ ...event }, context());
    assert.deepEqual(again, first, `duplicate answered ${JSON.stringify(again)}, want the first response`);
    assert.deepEqual(runs, [event.order], `handler ran ${runs.length} times, want 1`);
    const rec = await record(client, store, event);
    assert.equal(rec.state, EventState.SETTLED, `claimd record state ${EventState[rec.state]}, want SETTLED`);
    assert.equal(rec.fencingToken, 1n);
    assert.deepEqual(JSON.parse(str(rec.result)), first, "claimd stores the response as JSON");
  });

  test("makeIdempotent on a function: dataIndexArgument and eventKeyJmesPath pick the key", async (t) => {
    const { client } = counted(t);
    const config = new IdempotencyConfig({ eventKeyJmesPath: "orderId" });
    const runs: string[] = [];
    const processOrder = makeIdempotent(
      async (customer: string, order: { orderId: string; items: string[] }) => {
        runs.push(order.orderId);
        return { processed: order.orderId, customer, items: order.items.length };
      },
      { persistenceStore: layer(client), config, dataIndexArgument: 1 },
    );
    config.registerLambdaContext(context());
    const orderId = randomUUID();
    const first = await processOrder("c1", { orderId, items: ["a", "b"] });
    // The key is orderId alone: other items (and another first argument) are the same order.
    const again = await processOrder("c2", { orderId, items: ["c"] });
    const other = await processOrder("c1", { orderId: randomUUID(), items: [] });
    assert.deepEqual(first, { processed: orderId, customer: "c1", items: 2 });
    assert.deepEqual(again, first, `duplicate answered ${JSON.stringify(again)}, want ${JSON.stringify(first)}`);
    assert.equal(other.items, 0);
    assert.equal(runs.length, 2, `processOrder ran ${runs.length} times for two orders, want 2`);
  });

  test("eventKeyJmesPath with powertools_json(body) and a multi-select", async (t) => {
    const { client } = counted(t);
    const config = new IdempotencyConfig({ eventKeyJmesPath: 'powertools_json(body).["user", "productId"]' });
    let runs = 0;
    const handler = makeIdempotent(
      async (event: { body: string }, _context: Context) => {
        runs++;
        return { statusCode: 200, body: event.body };
      },
      { persistenceStore: layer(client), config },
    );
    const user = randomUUID();
    const first = await handler({ body: JSON.stringify({ user, productId: "123456789", chargeType: "subscription" }) }, context());
    const again = await handler({ body: JSON.stringify({ user, productId: "123456789", chargeType: "one-off" }) }, context());
    assert.deepEqual(again, first, "a delivery with the same user and product is a duplicate");
    assert.equal(runs, 1);
  });

  test("payloadValidationJmesPath: the same key with another amount throws IdempotencyValidationError", async (t) => {
    const { client } = counted(t);
    const config = new IdempotencyConfig({ eventKeyJmesPath: "[userDetail, productId]", payloadValidationJmesPath: "amount" });
    let runs = 0;
    const handler = makeIdempotent(
      async (event: { userDetail: string; productId: number; amount: number }, _context: Context) => {
        runs++;
        return { message: "success", amount: event.amount };
      },
      { persistenceStore: layer(client), config },
    );
    const user = randomUUID();
    const first = await handler({ userDetail: user, productId: 1, amount: 100 }, context());
    assert.deepEqual(await handler({ userDetail: user, productId: 1, amount: 100, note: "x" } as never, context()), first);
    await assert.rejects(handler({ userDetail: user, productId: 1, amount: 101 }, context()), IdempotencyValidationError);
    assert.equal(runs, 1, "a mismatched payload must not run the handler");
  });

  test("payload validation holds for a record from the local cache and for one read from claimd", async (t) => {
    const { client } = counted(t);
    const config = new IdempotencyConfig({ eventKeyJmesPath: "id", payloadValidationJmesPath: "amount", useLocalCache: true });
    const store = layer(client);
    const handler = makeIdempotent(async (event: { id: string; amount: number }, _context: Context) => event.amount, { persistenceStore: store, config });
    const id = randomUUID();
    assert.equal(await handler({ id, amount: 5 }, context()), 5);
    assert.equal(await handler({ id, amount: 5 }, context()), 5);
    await assert.rejects(handler({ id, amount: 6 }, context()), IdempotencyValidationError);
    // A layer without the cache reads claimd's record (its SHA-256 of the payload hash).
    const fresh = layer(client);
    fresh.configure({ config: new IdempotencyConfig({ eventKeyJmesPath: "id", payloadValidationJmesPath: "amount" }) });
    const rec = await fresh.getRecord({ id, amount: 5 });
    assert.equal(rec.getResponse(), 5);
    await assert.rejects(fresh.getRecord({ id, amount: 6 }), IdempotencyValidationError);
  });

  test("throwOnNoIdempotencyKey: an event without the key fails with IdempotencyKeyError and claimd is not asked", async (t) => {
    const { client, calls } = counted(t);
    const config = new IdempotencyConfig({ eventKeyJmesPath: '["user.email", "orderId"]', throwOnNoIdempotencyKey: true });
    let runs = 0;
    const handler = makeIdempotent(
      async (_event: unknown, _context: Context) => {
        runs++;
        return { ok: true };
      },
      { persistenceStore: layer(client), config },
    );
    // Powertools for TypeScript (2.x) wraps it, whatever the store: its cause is the IdempotencyKeyError.
    const err = await handler({ user: { uid: "BB0D045C" }, orderId: null }, context()).then(
      (v) => assert.fail(`the call answered ${String(v)}`),
      (e: unknown) => e,
    );
    assert.ok(err instanceof IdempotencyPersistenceLayerError && err.cause instanceof IdempotencyKeyError, `threw ${String(err)}, want IdempotencyKeyError`);
    assert.ok(!calls.includes("Claim"), `claimd was asked: ${calls.join(", ")}`);
    assert.equal(runs, 0);
  });

  test("expiresAfterSeconds: once the record expired, the same event runs again", async (t) => {
    // claimd keeps a record for the provider's window at least
    // (lambda-short: 3s), so that window decides here.
    const { client } = counted(t);
    const store = layer(client, { provider: "lambda-short" });
    const config = new IdempotencyConfig({ eventKeyJmesPath: "id", expiresAfterSeconds: 1 });
    let runs = 0;
    const handler = makeIdempotent(async (_event: { id: string }, _context: Context) => ++runs, { persistenceStore: store, config });
    const event = { id: randomUUID() };
    assert.equal(await handler(event, context()), 1);
    assert.equal(await handler(event, context()), 1, "a duplicate within the window ran again");
    const rec = await record(client, store, event, "lambda-short");
    const windowEnd = millis(rec.windowExpiresAt);
    // The condition observed is the window's end itself (there is nothing to synchronise with).
    await waitFor("the window's end", async () => (Date.now() > windowEnd ? true : undefined), { timeoutMs: 10_000 });
    assert.equal(await handler(event, context()), 2, "an expired record must let the event run again");
    assert.equal(runs, 2);
  });

  test("an expiresAfterSeconds longer than the provider's window is sent as the claim's window", async (t) => {
    const { client } = counted(t);
    const store = layer(client, { provider: "lambda-short" });
    const config = new IdempotencyConfig({ eventKeyJmesPath: "id", expiresAfterSeconds: 3600 });
    const handler = makeIdempotent(async (_event: { id: string }, _context: Context) => "once", { persistenceStore: store, config });
    const event = { id: randomUUID() };
    assert.equal(await handler(event, context()), "once");
    const rec = await record(client, store, event, "lambda-short");
    const windowMs = millis(rec.windowExpiresAt) - millis(rec.firstSeenAt);
    assert.equal(windowMs, 3_600_000, `record window ${windowMs}ms, want expiresAfterSeconds (1h)`);
  });

  test("a call while the first is in progress throws IdempotencyAlreadyInProgressError", async (t) => {
    const { client } = counted(t);
    const started = deferred();
    const finish = deferred();
    let runs = 0;
    const handler = makeIdempotent(
      async (_event: { id: string }, _context: Context) => {
        runs++;
        started.resolve();
        await finish.promise;
        return "done";
      },
      { persistenceStore: layer(client) },
    );
    const event = { id: randomUUID() };
    const first = handler(event, context());
    await started.promise; // the first call holds the key now
    await assert.rejects(handler({ ...event }, context()), IdempotencyAlreadyInProgressError);
    finish.resolve();
    assert.equal(await first, "done");
    assert.equal(await handler({ ...event }, context()), "done", "once settled, the same event is a duplicate");
    assert.equal(runs, 1);
  });

  test("a handler that throws deletes the record, so the retry runs", async (t) => {
    const { client } = counted(t);
    const store = layer(client);
    let attempts = 0;
    const handler = makeIdempotent(
      async (_event: { id: string }, _context: Context) => {
        attempts++;
        if (attempts === 1) {
          throw new Error("payment provider timed out");
        }
        return "paid";
      },
      { persistenceStore: store },
    );
    const event = { id: randomUUID() };
    await assert.rejects(handler(event, context()), /timed out/);
    assert.ok((await record(client, store, event)).released, "the failed call must release the key");
    assert.equal(await handler(event, context()), "paid");
    assert.equal(await handler(event, context()), "paid");
    assert.equal(attempts, 2);
    assert.equal((await record(client, store, event)).fencingToken, 2n);
  });

  test("responseHook runs on a duplicate's response with the record, not on the first call", async (t) => {
    const { client } = counted(t);
    const hooked: IdempotencyRecord[] = [];
    const config = new IdempotencyConfig({
      eventKeyJmesPath: "orderId",
      responseHook: (response, rec) => {
        hooked.push(rec);
        return { ...(response as object), "x-idempotent-key": rec.idempotencyKey, "x-idempotent-expiration": rec.expiryTimestamp ?? null };
      },
    });
    const handler = makeIdempotent(async (event: { orderId: string }, _context: Context) => ({ order: event.orderId }), {
      persistenceStore: layer(client),
      config,
    });
    const event = { orderId: randomUUID() };
    assert.deepEqual(await handler(event, context()), { order: event.orderId });
    assert.equal(hooked.length, 0);
    const again = (await handler(event, context())) as { [k: string]: unknown };
    assert.equal(hooked.length, 1);
    assert.equal(again["order"], event.orderId);
    assert.equal(again["x-idempotent-key"], hooked[0]!.idempotencyKey);
    assert.ok((again["x-idempotent-expiration"] as number) > Date.now() / 1000, "the expiry is the claimd window's end");
  });

  test("useLocalCache: a duplicate in the same process is answered from memory", async (t) => {
    const { client, calls } = counted(t);
    const config = new IdempotencyConfig({ eventKeyJmesPath: "id", useLocalCache: true, maxLocalCacheSize: 16 });
    let runs = 0;
    const handler = makeIdempotent(async (_event: { id: string }, _context: Context) => ({ n: ++runs }), {
      persistenceStore: layer(client),
      config,
    });
    const event = { id: randomUUID() };
    assert.deepEqual(await handler(event, context()), { n: 1 });
    const asked = [...calls];
    assert.deepEqual(asked, ["GetProvider", "Claim", "Transition"], `first call made ${asked.join(", ")}`);
    for (let i = 0; i < 3; i++) {
      assert.deepEqual(await handler(event, context()), { n: 1 });
    }
    assert.deepEqual(calls, asked, `duplicates asked claimd: ${calls.slice(asked.length).join(", ")}`);
  });

  test("the idempotent decorator on a class method", async (t) => {
    const { client } = counted(t);
    const persistenceStore = layer(client);
    class Lambda {
      runs = 0;
      async handler(event: { id: string }, _context: Context): Promise<string> {
        this.runs++;
        return `handled ${event.id}`;
      }
    }
    // What TypeScript's experimentalDecorators emit for @idempotent({...}) on handler.
    const decorate = idempotent({ persistenceStore, config: new IdempotencyConfig({ eventKeyJmesPath: "id" }) });
    const descriptor = Object.getOwnPropertyDescriptor(Lambda.prototype, "handler")!;
    Object.defineProperty(Lambda.prototype, "handler", decorate(Lambda.prototype, "handler", descriptor) ?? descriptor);
    const lambda = new Lambda();
    const event = { id: randomUUID() };
    assert.equal(await lambda.handler(event, context()), `handled ${event.id}`);
    assert.equal(await lambda.handler(event, context()), `handled ${event.id}`);
    assert.equal(lambda.runs, 1, "the decorated method keeps its this and runs once");
  });

  test("the Middy middleware: duplicates get the stored response, an error releases the key", async (t) => {
    const { client } = counted(t);
    const store = layer(client);
    let runs = 0;
    let fail = false;
    const handler = middy(async (event: { id: string }, _context: Context) => {
      runs++;
      if (fail) {
        throw new Error("downstream failed");
      }
      return { statusCode: 200, body: event.id };
    }).use(makeHandlerIdempotent({ persistenceStore: store, config: new IdempotencyConfig({ eventKeyJmesPath: "id" }) }));
    const event = { id: randomUUID() };
    assert.deepEqual(await handler(event, context()), { statusCode: 200, body: event.id });
    assert.deepEqual(await handler(event, context()), { statusCode: 200, body: event.id });
    assert.equal(runs, 1);
    fail = true;
    const failing = { id: randomUUID() };
    await assert.rejects(handler(failing, context()), /downstream failed/);
    assert.ok((await record(client, store, failing)).released, "the middleware's onError must release the key");
    fail = false;
    assert.deepEqual(await handler(failing, context()), { statusCode: 200, body: failing.id });
    assert.equal(runs, 3);
  });

  test("fencing: a handler that outlives its lease is taken over, and its late update is refused", async (t) => {
    const { client } = counted(t);
    const store = layer(client, { provider: "lambda-short" });
    const event = { id: randomUUID() };
    let taken: { fencingToken: bigint } | undefined;
    const handler = makeIdempotent(
      async (_event: { id: string }, _context: Context) => {
        // Another holder waits for this call's lease (1s) to end, then acquires.
        const request = { namespace: NS, provider: "lambda-short", eventId: store.keyOf(event), waitMs: 10_000, leaseMs: 2_000 };
        const other = await client.claim(request);
        assert.equal(other.outcome, Outcome.ACQUIRED, `takeover claim = ${Outcome[other.outcome]}, want ACQUIRED`);
        await client.transition({ ...leaseOf(request, other), to: EventState.SETTLED, result: '"by the new holder"' });
        taken = other;
        return "by the late holder";
      },
      { persistenceStore: store, config: new IdempotencyConfig({ eventKeyJmesPath: "id" }) },
    );
    const err = await handler(event, context()).then(
      () => assert.fail("the late update succeeded"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof IdempotencyPersistenceLayerError, `late update threw ${String(err)}, want IdempotencyPersistenceLayerError`);
    assert.ok(err.cause instanceof StaleTokenError, `its cause is ${String(err.cause)}, want StaleTokenError`);
    const rec = await record(client, store, event, "lambda-short");
    assert.equal(str(rec.result), '"by the new holder"', "the new holder's record must stand");
    assert.equal(rec.fencingToken, taken?.fencingToken);
    assert.equal(rec.fencingToken, 2n);
  });

  test("a configuration claimd refuses fails the call (the event is kept), and the function does not run", async (t) => {
    const { client } = counted(t);
    const cases = [
      { desc: "an unknown provider", opts: { provider: "no-such-provider" }, cause: ProviderNotFoundError },
      { desc: "a lease over max_lease", opts: { leaseMs: 3_600_000 }, cause: InvalidArgumentError },
      { desc: "a window shorter than the provider's", opts: { windowMs: 1_000 }, cause: InvalidArgumentError },
    ];
    for (const c of cases) {
      let runs = 0;
      const handler = makeIdempotent(
        async (_event: { id: string }, _context: Context) => {
          runs++;
          return "ran";
        },
        { persistenceStore: layer(client, c.opts) },
      );
      const err = await handler({ id: randomUUID() }, context()).then(
        (v) => assert.fail(`${c.desc}: the call answered ${String(v)}`),
        (e: unknown) => e,
      );
      assert.ok(err instanceof IdempotencyPersistenceLayerError, `${c.desc}: threw ${String(err)}, want IdempotencyPersistenceLayerError`);
      assert.ok(err.cause instanceof c.cause, `${c.desc}: cause ${String(err.cause)}, want ${c.cause.name}`);
      assert.equal(runs, 0, `${c.desc}: the function ran`);
    }
  });

  test("the layer's own options: an address makes a client, bad options throw at construction", async () => {
    const store = new ClaimdPersistenceLayer({ client: server.target, clientOptions: { timeoutMs: 3_000 }, namespace: NS, provider: "lambda", logger: quiet });
    try {
      const double = makeIdempotent(async (x: number) => x * 2, { persistenceStore: store });
      assert.equal(await double(21), 42);
      assert.equal(await double(21), 42);
    } finally {
      store.client.close();
    }
    const client = createClient(server.target);
    try {
      assert.throws(() => new ClaimdPersistenceLayer({ client, clientOptions: { timeoutMs: 1 }, namespace: NS, provider: "lambda" }), TypeError);
      assert.throws(() => new ClaimdPersistenceLayer({ client, namespace: "", provider: "lambda" }), /namespace/);
      assert.throws(() => new ClaimdPersistenceLayer({ client, namespace: NS, provider: "" }), /provider/);
      assert.throws(() => new ClaimdPersistenceLayer({ client, namespace: NS, provider: "lambda", leaseMs: -1 }), RangeError);
    } finally {
      client.close();
    }
  });

  test("a call whose update names another key leaves its claim held until the bound drops it", async (t) => {
    // A function that changes the data its key is read from: Powertools
    // settles a key this layer never claimed. The claimed key stays in
    // progress until its lease ends; once over the bound, claims whose lease
    // ended abandonedAfterMs ago are dropped.
    const saved = { maxHeld: ClaimdPersistenceLayer.maxHeld, abandonedAfterMs: ClaimdPersistenceLayer.abandonedAfterMs };
    t.after(() => Object.assign(ClaimdPersistenceLayer, saved));
    ClaimdPersistenceLayer.maxHeld = 1;
    ClaimdPersistenceLayer.abandonedAfterMs = 0;
    const { client } = counted(t);
    const store = layer(client, { provider: "lambda-short" });
    const held = (store as unknown as { held: Map<string, unknown> }).held;
    const process = makeIdempotent(
      async (order: { id: string }) => {
        order.id = `${order.id}-changed`;
        return "done";
      },
      { persistenceStore: store, config: new IdempotencyConfig({ eventKeyJmesPath: "id" }) },
    );
    const id = randomUUID();
    await assert.rejects(process({ id }), IdempotencyPersistenceLayerError);
    const key = store.keyOf({ id }); // once Powertools configured the layer with eventKeyJmesPath
    assert.ok(held.has(key), "the unfinished call's claim is held");
    const rec = await client.get({ namespace: NS, provider: "lambda-short", key });
    assert.equal(rec.state, EventState.PROCESSING, "nothing was stored for the unfinished call");
    const leaseEnd = millis(rec.leaseExpiresAt);
    await waitFor("the lease's end", async () => (Date.now() > leaseEnd ? true : undefined), { timeoutMs: 10_000 });
    await assert.rejects(process({ id: randomUUID() }), IdempotencyPersistenceLayerError);
    assert.ok(!held.has(key), "the abandoned claim must be forgotten once over the bound");
    assert.equal(held.size, 1);
  });
});

// The guard contract's scenarios (clients/guardspec/scenarios.json, format in
// clients/guardspec/README.md) against a real claimd. The file is read
// strictly: a field this runner does not know fails the run, so the file
// cannot say more than the runners check.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";

import {
  createClient,
  EFFECTS_SCHEMA,
  effectKey,
  ERROR_DOMAIN,
  EventState,
  guard,
  leaseOf,
  MAX_FAILURE_BYTES,
  MAX_RESULT_BYTES,
  Outcome,
  PermanentError,
  Reason,
  resolveRetryPolicy,
  SUPERSEDED_RETRY_AFTER_S,
  UNAVAILABLE_RETRY_AFTER_S,
  type ClaimdClient,
  type ClaimInput,
  type ClaimResponse,
  type GuardContext,
  type GuardResult,
} from "../src/index.js";
import { DEFAULT_TIMEOUT_MS } from "../src/client.js";
import { heartbeatEveryMs, MIN_HEARTBEAT_MS } from "../src/guard.js";
import { backoffCeilingMs, backoffMs } from "../src/retry.js";
import { startClaimd, type Claimd } from "../src/testing.js";
import { openTestDb, type Dialect, type TestDb } from "./effectdb.js";
import { claimdBin, eventId, millis, pkgDir } from "./helpers.js";

const specPath = join(pkgDir, "..", "guardspec", "scenarios.json");

// --- reading the file strictly -------------------------------------------------

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type Obj = { [k: string]: Json };

class SpecError extends Error {}

function fields(v: Json | undefined, where: string, required: string[], optional: string[] = []): Obj {
  if (typeof v !== "object" || v === null || Array.isArray(v)) {
    throw new SpecError(`${where}: want an object`);
  }
  const unknown = Object.keys(v).filter((k) => !required.includes(k) && !optional.includes(k));
  if (unknown.length > 0) {
    throw new SpecError(`${where}: unknown field(s) ${unknown.join(", ")}`);
  }
  const missing = required.filter((k) => !(k in v));
  if (missing.length > 0) {
    throw new SpecError(`${where}: missing field(s) ${missing.join(", ")}`);
  }
  return v;
}

function text(v: Json | undefined, where: string): string {
  if (typeof v === "string") {
    return v;
  }
  const r = fields(v, where, ["repeat", "times"], ["prefix"]);
  if (typeof r["repeat"] !== "string" || r["repeat"] === "" || typeof r["times"] !== "number" || r["times"] <= 0) {
    throw new SpecError(`${where}: repeat and a positive times are required`);
  }
  return String(r["prefix"] ?? "") + r["repeat"].repeat(r["times"]);
}

const utf8 = new TextEncoder();

function body(v: Json | undefined, where: string): Uint8Array {
  const b = fields(v, where, [], ["text", "b64"]);
  if (Object.keys(b).length !== 1) {
    throw new SpecError(`${where}: want exactly one of text and b64`);
  }
  return "text" in b ? utf8.encode(text(b["text"], `${where}.text`)) : new Uint8Array(Buffer.from(String(b["b64"]), "base64"));
}

const states = ["RECEIVED", "VALIDATED", "PROCESSING", "SETTLED", "FAILED"];
const calls = ["claim", "start", "settle", "fail", "release", "renew"];
// What expect.calls may name besides: a settle that carries effect_recovered.
const loggedCalls = [...calls, "settle_recovered"];

function checkValue(v: Json | undefined, where: string): void {
  const o = fields(v, where, [], ["text", "b64", "json", "none"]);
  if (Object.keys(o).length !== 1) {
    throw new SpecError(`${where}: want exactly one of text, b64, json, none`);
  }
  if ("text" in o) {
    text(o["text"], `${where}.text`);
  }
}

function checkScenario(sc: Json, where: string, rowCount: number): void {
  const s = fields(sc, where, ["name", "row", "deliveries", "handler_runs"], ["doc", "unreachable", "arrange", "effect", "pending"]);
  if ("pending" in s) {
    const p = s["pending"];
    const languages = ["go", "python", "typescript", "java"];
    if (typeof p !== "object" || p === null || Array.isArray(p) || !Object.entries(p).every(([k, v]) => languages.includes(k) && typeof v === "string" && v !== "")) {
      throw new SpecError(`${where}.pending: want a mapping of ${languages.join(", ")} to why`);
    }
  }
  if ("effect" in s && typeof s["effect"] !== "boolean") {
    throw new SpecError(`${where}.effect: want a boolean`);
  }
  const usesDb = s["effect"] === true;
  if (typeof s["row"] !== "number" || s["row"] < 1 || s["row"] > rowCount) {
    throw new SpecError(`${where}: row ${s["row"]} is not a row of GUARD.md (1..${rowCount})`);
  }
  for (const [i, step] of ((s["arrange"] ?? []) as Json[]).entries()) {
    const w = `${where}.arrange[${i}]`;
    const op = fields(step, w, ["op"], ["lease_ms", "to", "result"])["op"];
    if (op === "claim") {
      fields(step, w, ["op", "lease_ms"]);
    } else if (op === "transition") {
      const t = fields(step, w, ["op", "to"], ["result"]);
      if (!states.includes(String(t["to"]))) {
        throw new SpecError(`${w}: unknown state ${t["to"]}`);
      }
      if ("result" in t) {
        body(t["result"], `${w}.result`);
      }
    } else if (op === "release") {
      fields(step, w, ["op"]);
    } else if (op === "fence") {
      body(fields(step, w, ["op", "result"])["result"], `${w}.result`);
      if (!usesDb) {
        throw new SpecError(`${w}: a fence needs an effect scenario`);
      }
    } else {
      throw new SpecError(`${w}: unknown op ${op}`);
    }
  }
  const deliveries = s["deliveries"] as Json[];
  if (deliveries.length === 0) {
    throw new SpecError(`${where}: at least one delivery`);
  }
  for (const [i, d] of deliveries.entries()) {
    const w = `${where}.deliveries[${i}]`;
    const dv = fields(d, w, ["expect"], ["request", "handler", "faults"]);
    if ("request" in dv) {
      const r = fields(dv["request"], `${w}.request`, [], ["provider", "body", "headers", "lease_ms", "wait_ms", "event_id", "entity_id", "event_type"]);
      if ("body" in r) {
        text(r["body"], `${w}.request.body`);
      }
      if ("body" in r && "event_id" in r) {
        throw new SpecError(`${w}.request: event_id and body exclude each other`);
      }
    }
    if ("handler" in dv) {
      const h = fields(dv["handler"], `${w}.handler`, [], ["returns", "raises", "effect", "settle_itself", "fail_itself", "taken_over", "outlive_lease"]);
      if (["returns", "raises", "effect"].filter((k) => k in h).length !== 1) {
        throw new SpecError(`${w}.handler: want exactly one of returns, raises and effect`);
      }
      if ("returns" in h) {
        checkValue(h["returns"], `${w}.handler.returns`);
      } else if ("raises" in h) {
        text(fields(h["raises"], `${w}.handler.raises`, ["message"], ["permanent"])["message"], `${w}.handler.raises.message`);
      } else {
        if (!usesDb) {
          throw new SpecError(`${w}.handler.effect: needs an effect scenario`);
        }
        const fx = fields(h["effect"], `${w}.handler.effect`, [], ["result", "raises"]);
        if ("result" in fx) {
          checkValue(fx["result"], `${w}.handler.effect.result`);
        }
        if ("raises" in fx) {
          text(fields(fx["raises"], `${w}.handler.effect.raises`, ["message"])["message"], `${w}.handler.effect.raises.message`);
        }
      }
      for (const k of ["settle_itself", "fail_itself"]) {
        if (k in h) {
          body(h[k], `${w}.handler.${k}`);
        }
      }
    }
    for (const [j, f] of ((dv["faults"] ?? []) as Json[]).entries()) {
      const fo = fields(f, `${w}.faults[${j}]`, ["call", "code"], ["reason", "retry_delay_ms"]);
      if (!calls.includes(String(fo["call"])) || codeOf(String(fo["code"])) === undefined) {
        throw new SpecError(`${w}.faults[${j}]: unknown call ${fo["call"]} or code ${fo["code"]}`);
      }
    }
    const e = fields(dv["expect"], `${w}.expect`, ["status", "body", "ran"], ["retry_after", "claim", "record", "calls", "effect"]);
    if ("effect" in e) {
      if (!usesDb) {
        throw new SpecError(`${w}.expect.effect: needs an effect scenario`);
      }
      const fx = fields(e["effect"], `${w}.expect.effect`, [], ["done", "ledger_rows", "fence"]);
      if (fx["fence"] !== undefined && fx["fence"] !== null) {
        body(fields(fx["fence"], `${w}.expect.effect.fence`, ["fencing_token", "result"])["result"], `${w}.expect.effect.fence.result`);
      }
    }
    if (((e["calls"] ?? []) as Json[]).some((c) => !loggedCalls.includes(String(c)) && c !== "handler")) {
      throw new SpecError(`${w}.expect.calls: unknown call in ${JSON.stringify(e["calls"])}`);
    }
    body(e["body"], `${w}.expect.body`);
    if (typeof e["retry_after"] === "object") {
      fields(e["retry_after"], `${w}.expect.retry_after`, ["min", "max"]);
    }
    if ("claim" in e) {
      fields(e["claim"], `${w}.expect.claim`, [], ["outcome", "reason", "state", "fencing_token"]);
    }
    if ("record" in e) {
      const rec = fields(e["record"], `${w}.expect.record`, [], ["state", "released", "fencing_token", "result"]);
      if ("result" in rec) {
        body(rec["result"], `${w}.expect.record.result`);
      }
    }
  }
}

/** codeOf maps a gRPC code name ("UNAVAILABLE") to Connect's Code. */
function codeOf(name: string): Code | undefined {
  const camel = name
    .toLowerCase()
    .split("_")
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1))
    .join("");
  const code = (Code as unknown as Record<string, Code | undefined>)[camel];
  return typeof code === "number" ? code : undefined;
}

interface EffectKeyVector {
  namespace: string;
  provider: string;
  key: string;
  step: string;
  effect_key: string;
}

interface Spec {
  constants: Obj;
  effects: { schema: { [dialect: string]: string }; ledger_schema: string; effect_keys: EffectKeyVector[] };
  row_count: number;
  uncovered_rows: { [row: string]: string };
  scenarios: Obj[];
}

function loadSpec(): Spec {
  const raw = JSON.parse(readFileSync(specPath, "utf8")) as Json;
  const top = fields(raw, specPath, ["doc", "constants", "effects", "row_count", "uncovered_rows", "scenarios"]);
  const fx = fields(top["effects"], "effects", ["schema", "ledger_schema", "effect_keys"], ["doc"]);
  fields(fx["schema"], "effects.schema", ["postgres", "sqlite", "mysql"]);
  for (const [i, v] of (fx["effect_keys"] as Json[]).entries()) {
    fields(v, `effects.effect_keys[${i}]`, ["namespace", "provider", "key", "step", "effect_key"]);
  }
  const c = fields(top["constants"], "constants", [
    "max_result_bytes",
    "max_failure_text_bytes",
    "unavailable_retry_after_s",
    "superseded_retry_after_s",
    "heartbeat_divisor",
    "heartbeat_floor_ms",
    "retry",
  ]);
  fields(c["retry"], "constants.retry", ["max_attempts", "base_backoff_ms", "max_backoff_ms", "multiplier", "total_timeout_ms", "attempt_timeout_ms"]);
  const names = new Set<string>();
  for (const [i, sc] of (top["scenarios"] as Json[]).entries()) {
    checkScenario(sc, `scenarios[${i}]`, top["row_count"] as number);
    const name = String((sc as Obj)["name"]);
    if (names.has(name)) {
      throw new SpecError(`scenarios[${i}]: name ${name} is not unique`);
    }
    names.add(name);
  }
  return top as unknown as Spec;
}

const spec = loadSpec();

describe("guardspec: the file", () => {
  test("every row of GUARD.md has a scenario or a reason why none can", () => {
    const covered = new Set(spec.scenarios.map((s) => s["row"] as number));
    for (let row = 1; row <= spec.row_count; row++) {
      const excused = String(row) in spec.uncovered_rows;
      assert.notEqual(covered.has(row), excused, `GUARD.md row ${row}: covered ${covered.has(row)}, in uncovered_rows ${excused}; want exactly one`);
    }
  });

  test("a field the runner does not know fails it", () => {
    const sc = JSON.parse(JSON.stringify(spec.scenarios[0])) as { deliveries: { expect: Obj }[] };
    sc.deliveries[0]!.expect["stauts"] = 200;
    assert.throws(() => checkScenario(sc as unknown as Json, "scenario", spec.row_count), /stauts/);
  });

  test("this client's constants are the contract's", () => {
    const c = spec.constants;
    const r = c["retry"] as Obj;
    assert.equal(MAX_RESULT_BYTES, c["max_result_bytes"]);
    assert.equal(MAX_FAILURE_BYTES, c["max_failure_text_bytes"]);
    assert.equal(UNAVAILABLE_RETRY_AFTER_S, c["unavailable_retry_after_s"]);
    assert.equal(SUPERSEDED_RETRY_AFTER_S, c["superseded_retry_after_s"]);
    assert.equal(MIN_HEARTBEAT_MS, c["heartbeat_floor_ms"]);
    const p = resolveRetryPolicy();
    assert.deepEqual(
      [p.maxAttempts, p.initialBackoffMs, p.maxBackoffMs, p.multiplier, p.totalTimeoutMs],
      [r["max_attempts"], r["base_backoff_ms"], r["max_backoff_ms"], r["multiplier"], r["total_timeout_ms"]],
    );
    // Full jitter: uniform in [0, min(cap, base * multiplier^(n-1))].
    for (let n = 1; n <= 6; n++) {
      const ceiling = Math.min(r["max_backoff_ms"] as number, (r["base_backoff_ms"] as number) * (r["multiplier"] as number) ** (n - 1));
      assert.equal(backoffCeilingMs(p, n), ceiling, `ceiling before retry ${n}`);
      assert.equal(backoffMs(p, n, () => 0), 0, `the lowest draw before retry ${n}`);
      assert.equal(backoffMs(p, n, () => 0.9999999), Math.floor(ceiling * 0.9999999), `the highest draw before retry ${n}`);
    }
    assert.equal(DEFAULT_TIMEOUT_MS, r["attempt_timeout_ms"]);
    assert.equal(heartbeatEveryMs(3000), 3000 / (c["heartbeat_divisor"] as number));
    assert.equal(heartbeatEveryMs(1), c["heartbeat_floor_ms"]);
  });

  test("this client's claimd_effects DDL is the contract's, byte for byte", () => {
    assert.deepEqual({ ...EFFECTS_SCHEMA }, spec.effects.schema);
  });

  test("effectKey matches the contract's vectors", () => {
    for (const v of spec.effects.effect_keys) {
      assert.equal(effectKey(v, v.step), v.effect_key, `effectKey(${JSON.stringify(v)})`);
    }
  });
});

// --- faults ------------------------------------------------------------------------

interface Fault {
  call: string;
  code: string;
  reason?: string;
  retry_delay_ms?: number;
}

/**
 * Faults fails the named calls of the guard's client, every attempt, without
 * sending them, and logs every attempt of a write in log (the handler logs
 * "handler" there too).
 */
class Faults {
  active: Fault[] = [];

  constructor(readonly log: string[]) {}

  readonly interceptor: Interceptor = (next) => async (req) => {
    const msg = (req as { message?: { to?: EventState; effectRecovered?: boolean } }).message;
    const call = callName(req.method.name, msg?.to, msg?.effectRecovered === true);
    if (loggedCalls.includes(call)) {
      this.log.push(call);
    }
    const f = this.active.find((x) => x.call === call);
    if (f) {
      throw injected(f);
    }
    return next(req);
  };
}

function callName(method: string, to: EventState | undefined, recovered: boolean): string {
  if (method !== "Transition") {
    return method.toLowerCase();
  }
  switch (to) {
    case EventState.PROCESSING:
      return "start";
    case EventState.SETTLED:
      return recovered ? "settle_recovered" : "settle";
    case EventState.FAILED:
      return "fail";
  }
  return "";
}

function injected(f: Fault): ConnectError {
  const err = new ConnectError("injected by guardspec", codeOf(f.code));
  if (f.reason !== undefined) {
    const info = new BinaryWriter().tag(1, WireType.LengthDelimited).string(f.reason).tag(2, WireType.LengthDelimited).string(ERROR_DOMAIN).finish();
    err.details.push({ type: "google.rpc.ErrorInfo", value: info });
  }
  if (f.retry_delay_ms !== undefined) {
    const delay = new BinaryWriter()
      .tag(1, WireType.LengthDelimited)
      .fork()
      .tag(1, WireType.Varint)
      .int64(Math.floor(f.retry_delay_ms / 1000))
      .tag(2, WireType.Varint)
      .int32((f.retry_delay_ms % 1000) * 1_000_000)
      .join()
      .finish();
    err.details.push({ type: "google.rpc.RetryInfo", value: delay });
  }
  return err;
}

// --- running the scenarios -----------------------------------------------------------

let server: Claimd;
let plain: ClaimdClient; // the other holder, and the reader of records

before(async () => {
  server = await startClaimd({ bin: claimdBin() });
  plain = createClient(server.target);
});

after(async () => {
  plain?.close();
  const code = await server?.stop();
  assert.equal(code, 0, `claimd exit code = ${code}, want 0`);
});

const NS = "ts-guardspec";

/** closedPort is a loopback address where nothing listens. */
async function closedPort(): Promise<string> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const { port } = srv.address() as net.AddressInfo;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return `127.0.0.1:${port}`;
}

interface Run {
  evt: string;
  runs: number;
  problems: string[];
  calls: string[]; // this delivery's writes and the handler's run, in order
  other?: ReturnType<typeof leaseOf>;
  db?: TestDb; // the effect scenarios' database
  effectDone?: boolean; // what this delivery's effect found
}

function claimInput(run: Run, request: Obj): ClaimInput {
  const input: ClaimInput = { namespace: NS, provider: String(request["provider"] ?? "stripe") };
  if ("body" in request) {
    const headers = (request["headers"] ?? {}) as { [k: string]: string };
    input.delivery = { headers, body: text(request["body"], "body").replaceAll("{event_id}", run.evt) };
  } else {
    input.eventId = String(request["event_id"] ?? "{event_id}").replaceAll("{event_id}", run.evt);
  }
  if ("entity_id" in request || "event_type" in request) {
    input.entityId = String(request["entity_id"] ?? "").replaceAll("{event_id}", run.evt);
    input.eventType = String(request["event_type"] ?? "");
  }
  if (typeof request["lease_ms"] === "number") {
    input.leaseMs = request["lease_ms"];
  }
  if (typeof request["wait_ms"] === "number") {
    input.waitMs = request["wait_ms"];
  }
  return input;
}

async function arrange(run: Run, step: Obj): Promise<void> {
  switch (step["op"]) {
    case "claim": {
      const input = { namespace: NS, provider: "stripe", eventId: run.evt, leaseMs: step["lease_ms"] as number, holder: "guardspec-other" };
      const c = await plain.claim(input);
      assert.equal(Outcome[c.outcome], "ACQUIRED", "arrange: claim");
      run.other = leaseOf(input, c);
      return;
    }
    case "fence":
      // The other holder commits its effect without the guard, then vanishes.
      await run.db!.commitFence(NS, run.other!, body(step["result"], "result"));
      return;
    case "transition":
      await plain.transition({
        ...run.other!,
        to: EventState[step["to"] as keyof typeof EventState],
        ...("result" in step ? { result: body(step["result"], "result") } : {}),
      });
      return;
    default:
      await plain.release(run.other!);
  }
}

/** behave is the scenario's handler. What goes wrong in it is kept in run.problems. */
async function behave(run: Run, input: ClaimInput, h: Obj | undefined, claim: ClaimResponse, signal: AbortSignal, ctx: GuardContext): Promise<unknown> {
  run.runs++;
  run.calls.push("handler");
  if (h === undefined) {
    return undefined;
  }
  const lease = leaseOf(input, claim);
  for (const [key, to] of [
    ["settle_itself", EventState.SETTLED],
    ["fail_itself", EventState.FAILED],
  ] as const) {
    if (key in h) {
      await plain.transition({ ...lease, to, result: body(h[key], key) });
    }
  }
  let effectResult: unknown;
  if ("effect" in h) {
    const e = h["effect"] as Obj;
    const db = run.db!;
    const out = await ctx.effect(db.handle, async (tx, fx) => {
      await db.insertLedger(tx, NS, claim.key, "guardspec");
      if ("result" in e) {
        fx.result = value(e["result"] as Obj);
      }
      if ("raises" in e) {
        throw new Error(text((e["raises"] as Obj)["message"], "message"));
      }
    });
    run.effectDone = out.done;
    effectResult = out.result;
  }
  if (h["taken_over"] === true) {
    await plain.release(lease);
    const { leaseMs: _l, waitMs: _w, ...rest } = input;
    const taker = await plain.claim({ ...rest, holder: "guardspec-taker" });
    if (taker.outcome !== Outcome.ACQUIRED) {
      run.problems.push(`the taker's claim: ${Outcome[taker.outcome]}, want ACQUIRED`);
    } else if (!(await aborted(signal, 10_000))) {
      run.problems.push("the handler was not cancelled within 10s of the takeover");
    }
  }
  if (h["outlive_lease"] === true) {
    await outliveLease(run, input, claim);
  }
  if ("raises" in h) {
    const r = h["raises"] as Obj;
    const message = text(r["message"], "message");
    throw r["permanent"] === true ? new PermanentError(message) : new Error(message);
  }
  if ("effect" in h) {
    return effectResult;
  }
  return value(h["returns"] as Obj);
}

/** value is what a Value of the file stands for. */
function value(v: Obj): unknown {
  if ("text" in v) {
    return text(v["text"], "text");
  }
  if ("b64" in v) {
    return new Uint8Array(Buffer.from(String(v["b64"]), "base64"));
  }
  if ("json" in v) {
    return v["json"];
  }
  return undefined;
}

function aborted(signal: AbortSignal, ms: number): Promise<boolean> {
  if (signal.aborted) {
    return Promise.resolve(true);
  }
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve(true);
    });
  });
}

/**
 * outliveLease works until claimd's record shows a renewal past the lease
 * the claim was granted, then checks that a competing claim still meets a
 * live lease. It polls claimd, an observable condition.
 */
async function outliveLease(run: Run, input: ClaimInput, claim: ClaimResponse): Promise<void> {
  const first = millis(claim.leaseExpiresAt);
  const deadline = Date.now() + 10_000;
  for (;;) {
    const rec = await plain.get({ namespace: NS, provider: input.provider, key: claim.key });
    if (millis(rec.leaseExpiresAt) > first && millis(rec.updatedAt) > first) {
      break;
    }
    if (Date.now() > deadline) {
      run.problems.push(`no renewal past the first lease within 10s`);
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const { leaseMs: _l, waitMs: _w, ...rest } = input;
  const other = await plain.claim({ ...rest, holder: "guardspec-competitor" });
  if (other.outcome !== Outcome.IN_PROGRESS) {
    run.problems.push(`a competing claim past the first lease: ${Outcome[other.outcome]}, want IN_PROGRESS`);
  }
}

const decoder = new TextDecoder();

function show(b: Uint8Array): string {
  const s = JSON.stringify(decoder.decode(b.subarray(0, 80)));
  return b.length > 80 ? `${s}… (${b.length} bytes)` : s;
}

async function check(run: Run, what: string, r: GuardResult, ran: boolean, e: Obj): Promise<void> {
  assert.deepEqual(run.problems, [], `${what}: inside the handler`);
  assert.equal(r.status, e["status"], `${what}: status ${r.status}, want ${e["status"]} (error ${String(r.error)})`);
  const ra = e["retry_after"];
  if (ra === undefined) {
    assert.equal(r.retryAfter, undefined, `${what}: Retry-After ${r.retryAfter}, want none`);
  } else {
    const [lo, hi] = typeof ra === "number" ? [ra, ra] : [(ra as Obj)["min"] as number, (ra as Obj)["max"] as number];
    assert.ok(r.retryAfter !== undefined && Number.isInteger(r.retryAfter) && lo <= r.retryAfter && r.retryAfter <= hi, `${what}: Retry-After ${r.retryAfter}, want ${lo}..${hi}`);
  }
  const want = body(e["body"], "body");
  assert.ok(Buffer.from(r.body).equals(Buffer.from(want)), `${what}: body ${show(r.body)}, want ${show(want)}`);
  assert.ok(ran === e["ran"] && r.ran === ran, `${what}: handler ran ${ran} (result.ran ${r.ran}), want ${e["ran"]}`);
  if ("calls" in e) {
    assert.deepEqual(run.calls, e["calls"], `${what}: the guard's calls`);
  }
  if ("claim" in e) {
    const c = r.claim;
    assert.ok(c, `${what}: no claim answer, want ${JSON.stringify(e["claim"])}`);
    const got: Obj = { outcome: Outcome[c.outcome]!, reason: Reason[c.reason]!, state: EventState[c.state]!, fencing_token: Number(c.fencingToken) };
    const wantClaim = e["claim"] as Obj;
    assert.deepEqual(Object.fromEntries(Object.keys(wantClaim).map((k) => [k, got[k]!])), wantClaim, `${what}: claim`);
  }
  if ("effect" in e) {
    const want = e["effect"] as Obj;
    const got: Obj = {};
    if ("done" in want) {
      got["done"] = run.effectDone ?? false;
    }
    if ("ledger_rows" in want) {
      got["ledger_rows"] = await run.db!.ledgerRows(NS, run.evt);
    }
    if ("fence" in want) {
      const f = await run.db!.fence(NS, "stripe", run.evt);
      got["fence"] = f ? { fencing_token: Number(f.fencingToken), result: f.result === null ? null : { text: decoder.decode(f.result) } } : null;
    }
    const wantFence = want["fence"] as Obj | null | undefined;
    const norm: Obj = { ...want };
    if (wantFence) {
      norm["fence"] = { fencing_token: wantFence["fencing_token"]!, result: { text: decoder.decode(body(wantFence["result"], "fence.result")) } };
    }
    assert.deepEqual(got, norm, `${what}: effect`);
  }
  if ("record" in e) {
    const rec = await plain.get({ namespace: NS, provider: "stripe", key: run.evt });
    const got: Obj = { state: EventState[rec.state]!, released: rec.released, fencing_token: Number(rec.fencingToken) };
    const { result, ...wantRec } = e["record"] as Obj;
    assert.deepEqual(Object.fromEntries(Object.keys(wantRec).map((k) => [k, got[k]!])), wantRec, `${what}: record`);
    if (result !== undefined) {
      const stored = body(result, "result");
      assert.ok(Buffer.from(rec.result).equals(Buffer.from(stored)), `${what}: stored result ${show(rec.result)}, want ${show(stored)}`);
    }
  }
}

/** runScenario sends sc's deliveries through the guard; db is the effect scenarios' database. */
async function runScenario(sc: Obj, db?: TestDb): Promise<void> {
  const run: Run = { evt: eventId("evt_spec"), runs: 0, problems: [], calls: [], ...(db ? { db } : {}) };
  const faults = new Faults(run.calls);
  const target = sc["unreachable"] === true ? await closedPort() : server.target;
  // The guard's client keeps the default retry policy: the contract's.
  const client = createClient(target, { interceptors: [faults.interceptor] });
  const quiet = { warn: () => {} };
  try {
    for (const step of (sc["arrange"] ?? []) as Obj[]) {
      await arrange(run, step);
    }
    for (const [i, d] of (sc["deliveries"] as Obj[]).entries()) {
      const request = (d["request"] ?? {}) as Obj;
      const input = claimInput(run, request);
      run.calls.length = 0;
      delete run.effectDone;
      faults.active = (d["faults"] ?? []) as unknown as Fault[];
      const before = run.runs;
      let r: GuardResult;
      try {
        r = await guard(
          client,
          input,
          (claim, signal, ctx) => behave(run, input, d["handler"] as Obj | undefined, claim, signal, ctx) as Promise<object>,
          { logger: quiet },
        );
      } finally {
        faults.active = [];
      }
      await check(run, `delivery ${i + 1}`, r, run.runs > before, d["expect"] as Obj);
    }
    assert.equal(run.runs, sc["handler_runs"], `handler runs = ${run.runs}, want ${sc["handler_runs"]}`);
  } finally {
    client.close();
  }
}

/** pendingHere is why sc is pending for TypeScript (guardspec README, pending), or false. */
function pendingHere(sc: Obj): string | false {
  const why = (sc["pending"] as { [lang: string]: string } | undefined)?.["typescript"];
  return why === undefined ? false : `pending for TypeScript: ${why}`;
}

describe("guardspec: the scenarios", () => {
  for (const sc of spec.scenarios.filter((s) => s["effect"] !== true)) {
    test(String(sc["name"]), { skip: pendingHere(sc) }, () => runScenario(sc));
  }
});

// The effect scenarios run once per dialect, each on a database of its own:
// a SQLite file, and a fresh schema of the PostgreSQL at
// $CLAIMD_TEST_POSTGRES_URL (without it, these tests fail). The guard
// creates claimd_effects itself, on first use.
for (const dialect of ["sqlite", "postgres"] as Dialect[]) {
  describe(`guardspec: the effect scenarios on ${dialect}`, () => {
    let db: TestDb | undefined;
    let opened: Promise<TestDb> | undefined;
    const dir = mkdtempSync(join(tmpdir(), "ts-guardspec-"));
    const open = (): Promise<TestDb> => (opened ??= openTestDb(dialect, dir, spec.effects.ledger_schema).then((d) => (db = d)));
    after(async () => {
      await db?.close();
      rmSync(dir, { recursive: true, force: true });
    });

    test("claimd_effects is missing before the first effect", async () => {
      assert.equal(await (await open()).hasEffectsTable(), false);
    });
    for (const sc of spec.scenarios.filter((s) => s["effect"] === true)) {
      test(String(sc["name"]), { skip: pendingHere(sc) }, async () => runScenario(sc, await open()));
    }
    test("the guard created claimd_effects on first use", async () => {
      assert.equal(await (await open()).hasEffectsTable(), true);
    });
  });
}

/**
 * Function mode: idempotent wraps a plain function so that it runs once per
 * key and returns its typed value on the first call and on every duplicate
 * (clients/GUARD.md's guard underneath), with one codec for its results.
 */
import { createHash } from "node:crypto";

import type { ClaimdClient, ClaimInput } from "./client.js";
import { EventState, Outcome, type ClaimResponse } from "./gen/idempotency/v1/claim_pb.js";
import { guard, MAX_RESULT_BYTES, PermanentError, ResultNotStorableError, type GuardLogger, type GuardResult } from "./guard.js";
import { resultBytes } from "./result.js";

/**
 * Codec turns a function's value into the bytes claimd stores with SETTLED,
 * and the stored bytes back into the value a duplicate returns. encode must
 * be deterministic; what it throws becomes a ResultNotStorableError.
 */
export interface Codec<T> {
  encode(value: T): Uint8Array | string;
  decode(stored: Uint8Array): T;
}

/** JsonCodecOptions are jsonCodec's hooks. */
export interface JsonCodecOptions<T> {
  /**
   * encoder sees every value before JSON does, as it is (a Date, not its
   * text; a bigint; a class instance), with its key ("" for the whole
   * value), and returns what to encode instead. Return the value unchanged
   * for the default: Date as ISO 8601 text, bigint as decimal text, Map as
   * an object, Set as an array, a class instance as its own enumerable
   * fields; a function or a symbol cannot be stored.
   */
  encoder?: (value: unknown, key: string) => unknown;
  /** decoder is JSON.parse's reviver: turn ISO text back into a Date, a decimal string into a bigint. */
  decoder?: (key: string, value: unknown) => unknown;
  /** revive builds T from the parsed value (a class instance: `(v) => Object.assign(new Charge(), v)`). */
  revive?: (value: unknown) => T;
}

/**
 * jsonCodec is the default Codec, the guards' result rule (GUARD.md,
 * Results): bytes as they are, a string as UTF-8, undefined and null as
 * empty, anything else as compact JSON (NaN and infinities refused). A
 * duplicate decodes empty as undefined and JSON by JSON.parse (text that is
 * not JSON as the string): a string result that is itself JSON text
 * ("123") comes back parsed, so give revive (or your own codec) when a
 * function returns such strings.
 */
export function jsonCodec<T>(opts: JsonCodecOptions<T> = {}): Codec<T> {
  const hook = opts.encoder;
  return {
    encode(value: T): Uint8Array {
      const top = hook ? hook(value, "") : value;
      if (top === undefined || top === null || typeof top === "string" || top instanceof Uint8Array || top instanceof ArrayBuffer || ArrayBuffer.isView(top)) {
        return resultBytes(top);
      }
      return resultBytes(JSON.parse(stringify(top, hook)) as object);
    },
    decode(stored: Uint8Array): T {
      let value: unknown;
      if (stored.length === 0) {
        value = undefined;
      } else {
        const text = new TextDecoder().decode(stored);
        try {
          value = opts.decoder ? JSON.parse(text, opts.decoder) : JSON.parse(text);
        } catch {
          value = text;
        }
      }
      return opts.revive ? opts.revive(value) : (value as T);
    },
  };
}

/**
 * stringify is JSON text of v with the hook and the defaults applied to
 * every value before toJSON runs. Keys keep the value's own order.
 */
function stringify(v: unknown, hook: ((value: unknown, key: string) => unknown) | undefined, sortKeys = false): string {
  const seen = new Set<unknown>();
  const walk = (value: unknown, key: string): unknown => {
    if (hook && key !== "") {
      value = hook(value, key);
    }
    if (value instanceof Date) {
      if (Number.isNaN(value.getTime())) {
        throw new TypeError(`${key || "value"}: an invalid Date cannot be stored`);
      }
      return value.toISOString();
    }
    switch (typeof value) {
      case "bigint":
        return value.toString();
      case "function":
      case "symbol":
        throw new TypeError(`${key || "value"}: a ${typeof value} cannot be stored`);
      case "number":
        if (!Number.isFinite(value)) {
          throw new TypeError(`${key || "value"}: ${value} cannot be encoded as JSON`);
        }
        return value;
    }
    if (value === null || typeof value !== "object") {
      return value;
    }
    if (seen.has(value)) {
      throw new TypeError(`${key || "value"}: a cycle cannot be stored`);
    }
    seen.add(value);
    try {
      if (value instanceof Map) {
        return Object.fromEntries([...value].map(([k, v]) => [String(k), walk(v, String(k))]));
      }
      if (value instanceof Set) {
        return [...value].map((v, i) => walk(v, String(i)));
      }
      if (Array.isArray(value)) {
        return value.map((v, i) => (v === undefined ? null : walk(v, String(i))));
      }
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === "function") {
        return walk(toJSON.call(value, key), key);
      }
      const keys = Object.keys(value);
      if (sortKeys) {
        keys.sort();
      }
      const out: { [k: string]: unknown } = {};
      for (const k of keys) {
        const field = (value as { [k: string]: unknown })[k];
        if (field !== undefined) {
          const w = walk(field, k);
          if (w !== undefined) {
            out[k] = w;
          }
        }
      }
      return out;
    } finally {
      seen.delete(value);
    }
  };
  return JSON.stringify(walk(v, ""));
}

/**
 * payloadDigest is a payloadSha256 for the part of an event a duplicate
 * must repeat (Python's payload=, Go's PayloadDigest): the SHA-256 of its
 * canonical JSON (object keys sorted, compact). A retry whose other fields
 * changed is still a DUPLICATE; one that changed this part is PAYLOAD_MISMATCH.
 */
export function payloadDigest(part: unknown): Uint8Array {
  const b = part instanceof Uint8Array ? part : Buffer.from(stringify(part, undefined, true) ?? "null", "utf8");
  return new Uint8Array(createHash("sha256").update(b).digest());
}

/**
 * NotRunError: idempotent did not run the function because claimd answered
 * something other than ACQUIRED or DUPLICATE: another holder's live lease
 * (outcome IN_PROGRESS, result.retryAfter says when to retry), another
 * payload under the key (PAYLOAD_MISMATCH), an event of an entity lifecycle
 * that came too early (DEFERRED) or too late (SUPERSEDED).
 */
export class NotRunError extends Error {
  constructor(
    readonly outcome: Outcome,
    readonly result: GuardResult,
  ) {
    super(`claimd: ${Outcome[outcome] ?? outcome}: ${new TextDecoder().decode(result.body).trim()}`);
    this.name = "NotRunError";
  }
}

/** IdempotentOptions say which key a call claims, and how its value is stored. */
export interface IdempotentOptions<A extends unknown[], T> {
  namespace: string;
  provider: string;
  /**
   * key is the call's event id, read from the function's arguments. Default:
   * the first argument, which must then be a string.
   */
  key?: (...args: A) => string;
  /** payload is the part of the call a duplicate must repeat (see payloadDigest); default: none checked. */
  payload?: (...args: A) => unknown;
  /**
   * scope becomes part of the key. claimd keys by delivery, not by function:
   * two functions guarded by one event id share its record unless each has
   * its own scope.
   */
  scope?: string;
  /** windowMs asks for a dedup window longer than the provider's (ClaimInput.windowMs). */
  windowMs?: number;
  leaseMs?: number;
  waitMs?: number;
  holder?: string;
  /** codec stores and rebuilds the value (default jsonCodec()). */
  codec?: Codec<T>;
  logger?: GuardLogger;
}

/**
 * idempotent returns fn wrapped to run once per key: the first call runs fn
 * under the guard (heartbeat, fencing, settle) and stores its value through
 * the codec; a duplicate returns the stored value decoded without running
 * fn. Errors propagate: what fn throws releases the key (a PermanentError
 * fails it, and every duplicate throws a PermanentError with its text); a
 * call fn did not run for throws NotRunError; a claimd failure its
 * ClaimdError. A value the codec cannot encode, or that encodes to more
 * than MAX_RESULT_BYTES, throws ResultNotStorableError before anything is
 * settled: the key is never settled empty and never released (fn ran), so
 * it waits for its lease.
 */
export function idempotent<A extends unknown[], T>(
  client: ClaimdClient,
  opts: IdempotentOptions<A, T>,
  fn: (...args: A) => T | Promise<T>,
): (...args: A) => Promise<T> {
  const codec = opts.codec ?? jsonCodec<T>();
  return async (...args: A): Promise<T> => {
    const eventId = opts.key ? opts.key(...args) : args[0];
    if (typeof eventId !== "string" || eventId === "") {
      throw new TypeError("idempotent: the key is not a non-empty string; pass key: (...args) => eventId");
    }
    const request: ClaimInput = {
      namespace: opts.namespace,
      provider: opts.provider,
      eventId,
      ...(opts.scope !== undefined ? { scope: opts.scope } : {}),
      ...(opts.windowMs !== undefined ? { windowMs: opts.windowMs } : {}),
      ...(opts.leaseMs !== undefined ? { leaseMs: opts.leaseMs } : {}),
      ...(opts.waitMs !== undefined ? { waitMs: opts.waitMs } : {}),
      ...(opts.holder !== undefined ? { holder: opts.holder } : {}),
      ...(opts.payload ? { payloadSha256: payloadDigest(opts.payload(...args)) } : {}),
    };
    let value: T | undefined;
    const r = await guard(
      client,
      request,
      async () => {
        const v = await fn(...args);
        value = v;
        let stored: Uint8Array | string;
        try {
          stored = codec.encode(v);
        } catch (e) {
          throw new ResultNotStorableError(`claimd: the result cannot be encoded: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
        }
        const size = typeof stored === "string" ? Buffer.byteLength(stored, "utf8") : stored.length;
        if (size > MAX_RESULT_BYTES) {
          throw new ResultNotStorableError(`claimd: the result is ${size} bytes encoded, over ${MAX_RESULT_BYTES}`);
        }
        return stored;
      },
      opts.logger ? { logger: opts.logger } : {},
    );
    return answer(client, request, r, codec, value);
  };
}

/** answer turns the guard's result into the function's value or its error. */
async function answer<T>(client: ClaimdClient, request: ClaimInput, r: GuardResult, codec: Codec<T>, value: T | undefined): Promise<T> {
  const claim: ClaimResponse | undefined = r.claim;
  if (!r.ran) {
    switch (claim?.outcome) {
      case Outcome.DUPLICATE:
        if (claim.state === EventState.FAILED) {
          throw new PermanentError(new TextDecoder().decode(r.body));
        }
        return codec.decode(r.body);
      case Outcome.IN_PROGRESS:
      case Outcome.PAYLOAD_MISMATCH:
      case Outcome.DEFERRED:
      case Outcome.SUPERSEDED:
        throw new NotRunError(claim.outcome, r);
    }
    throw r.error ?? new Error(`claimd: guard answered ${r.status}`);
  }
  if (r.status !== 200) {
    throw r.error ?? new Error(`claimd: guard answered ${r.status}`);
  }
  if (r.error instanceof PermanentError) {
    throw r.error; // fn failed the key: FAILED with its text
  }
  if (r.error !== undefined && claim !== undefined) {
    // fn ended the event itself with another outcome (GUARD.md row 18):
    // what claimd stored stands, as a duplicate would get it.
    const rec = await client.get({ namespace: request.namespace, provider: request.provider, key: claim.key });
    if (rec.state === EventState.FAILED) {
      throw new PermanentError(new TextDecoder().decode(rec.result));
    }
    return codec.decode(rec.result);
  }
  if (r.effect?.done) {
    return codec.decode(r.body); // an earlier holder's effect committed: its result stands (row 23)
  }
  return value as T;
}

import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";

import { type ClaimdClient, type ClaimInput, type Lease, leaseOf } from "./client.js";
import {
  ClaimdError,
  Code,
  InvalidArgumentError,
  InvalidTransitionError,
  NotOwnerError,
  RecordNotFoundError,
  ResourceExhaustedError,
  ResultMismatchError,
  StaleTokenError,
  toClaimdError,
} from "./errors.js";
import {
  EffectError,
  effectKey,
  runEffect,
  type EffectDatabase,
  type EffectFn,
  type EffectOutcome,
  type EffectTx,
  type FenceRef,
  type Fx,
} from "./effect.js";
import { type ClaimResponse, EventState, Outcome, Reason } from "./gen/idempotency/v1/claim_pb.js";
import { resultBytes } from "./result.js";

/**
 * PermanentError marks a failure that no retry can fix (a malformed event, a
 * closed account). The guard then records the event as FAILED and answers
 * 200, so the provider stops retrying and later duplicates get DUPLICATE.
 * Any other error is retryable: the guard releases the claim and answers 500.
 */
export class PermanentError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "PermanentError";
  }
}

/**
 * ResultNotStorableError: a guarded function returned a value that cannot
 * be stored (its codec failed, or it encodes to more than MAX_RESULT_BYTES).
 * idempotent throws it before anything is settled. A handler that throws it
 * is treated as one that returned: the key is neither released nor settled
 * empty, and waits for its lease (the side effect may have happened), so
 * the next delivery after the lease takes it over with state PROCESSING.
 */
export class ResultNotStorableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ResultNotStorableError";
  }
}

/** permanent wraps err as a PermanentError (keeping it as the cause). */
export function permanent(err: unknown): PermanentError {
  if (err instanceof PermanentError) {
    return err;
  }
  return new PermanentError(err instanceof Error ? err.message : String(err), { cause: err });
}

/** MAX_RESULT_BYTES is the most claimd stores as a result (64 KiB). */
export const MAX_RESULT_BYTES = 64 << 10;

/** MAX_FAILURE_BYTES bounds the error text stored with FAILED (1 KiB), in every claimd guard. */
export const MAX_FAILURE_BYTES = 1 << 10;

/**
 * UNAVAILABLE_RETRY_AFTER_S is the Retry-After, in seconds, of a 503 when
 * claimd could not be asked or could not record an outcome.
 */
export const UNAVAILABLE_RETRY_AFTER_S = 5;

/**
 * SUPERSEDED_RETRY_AFTER_S is the Retry-After, in seconds, of a 409 when
 * another holder took the key over: its lease is unknown here, and the
 * provider's retry meets IN_PROGRESS with the right Retry-After.
 */
export const SUPERSEDED_RETRY_AFTER_S = 1;

/** MIN_HEARTBEAT_MS is the shortest renewal interval, for very short leases. */
export const MIN_HEARTBEAT_MS = 100;

/**
 * heartbeatEveryMs is a third of the lease, at least MIN_HEARTBEAT_MS: two
 * renewals may fail before the lease runs out.
 */
export function heartbeatEveryMs(leaseMs: number): number {
  return Math.max(MIN_HEARTBEAT_MS, Math.floor(leaseMs / 3));
}

/** The bodies of the answers that are not a result, the same in every claimd guard (clients/GUARD.md). */
const answers = {
  inProgress: "delivery in progress elsewhere; retry later\n",
  payloadMismatch: "payload differs from an earlier delivery with the same key\n",
  rejected: "delivery rejected by claimd\n",
  refused: "claimd refused the delivery\n",
  rateLimited: "claimd rate limit reached; retry later\n",
  unavailable: "claimd unavailable; retry later\n",
  unexpected: "unexpected answer from claimd\n",
  takenOver: "delivery taken over by another holder; retry later\n",
  handlerFailed: "processing failed; retry later\n",
  unsettled: "could not record the outcome; retry later\n",
  deferred: "event arrived before its prerequisite; retry later\n",
  superseded: "event superseded by a later state of its entity\n",
} as const;

/**
 * GuardHandler does the side effect of an ACQUIRED delivery and returns the
 * result to store, by the rule every claimd guard (Go, Python, TypeScript)
 * follows: bytes as they are (a Uint8Array or Buffer, an ArrayBuffer or any
 * other view of one), a string as UTF-8, null or undefined as empty, any
 * other value as compact JSON in UTF-8 (JSON.stringify; a bigint becomes a
 * decimal string). Duplicates get it back. A result that cannot be encoded
 * (a cycle, a function, NaN or an infinity, a lone surrogate) or is over
 * MAX_RESULT_BYTES is not stored: the event is settled with an empty result,
 * never released, and GuardResult.error says why.
 * claim tells the key, fencing token, reason and state: after a
 * LEASE_EXPIRED takeover, state says how far the vanished holder got. signal
 * aborts when ownership is lost (another holder took over); stop then, the
 * guard will not settle. ctx opens the delivery's effect fence (ctx.effect)
 * and makes downstream idempotency keys (ctx.effectKey).
 */
export type GuardHandler = (
  claim: ClaimResponse,
  signal: AbortSignal,
  ctx: GuardContext,
) => Promise<Uint8Array | string | object | void> | Uint8Array | string | object | void;

/**
 * GuardContext is a running handler's view of its delivery: the claim, the
 * signal that aborts when ownership is lost, and the effect fence
 * (clients/GUARD.md, "Exactly-once effects").
 */
export interface GuardContext {
  /** claim is claimd's ACQUIRED answer (the handler's first argument). */
  readonly claim: ClaimResponse;
  /** signal aborts when ownership is lost (the handler's second argument). */
  readonly signal: AbortSignal;
  /**
   * effect runs fn exactly once per delivery across every holder of the
   * claim, for writes to db done through fn's tx, and returns
   * {done, result}. db is a node-postgres Pool (fn gets one PoolClient for
   * the whole transaction), Client or PoolClient, or a better-sqlite3
   * Database. In one transaction (SQLite: BEGIN IMMEDIATE) it inserts the
   * fence row for this delivery and this holder's fencing token; when that
   * row is new, fn runs, fx.result (when assigned) is stored in it, and the
   * transaction commits: done is false. When an earlier holder already
   * committed it, fn is not called, nothing is written, and done is true
   * with that holder's stored result (bytes): the guard then settles with
   * that result, whatever the handler returns, and tells claimd it was
   * recovered. An exception in fn (or a failed commit) rolls back and
   * propagates; so does a lost claim (signal aborted) before the commit.
   *
   * At most one effect per delivery, only while the handler runs
   * (EffectError otherwise). The table claimd_effects is created on first
   * use, once per database. Effects on one better-sqlite3 Database or one pg
   * Client run one at a time, in order: fn may await, and its transaction
   * stays open meanwhile, so do not write to that connection outside fn
   * while an effect runs (such writes would join its transaction).
   * better-sqlite3 waits for another process's write lock synchronously
   * (its `timeout` option): the event loop, heartbeat included, waits too.
   *
   * tx has the type of db (for a Pool, a structural PoolClient: annotate
   * the parameter, `async (tx: pg.PoolClient, fx) => …`, for pg's own).
   */
  effect<D extends EffectDatabase, T extends EffectTx<D> = EffectTx<D>>(db: D, fn: (tx: T, fx: Fx) => unknown): Promise<EffectOutcome>;
  /**
   * effectKey is a stable idempotency key for step of this delivery, for a
   * downstream API's Idempotency-Key (see the package's effectKey).
   */
  effectKey(step: string): string;
}

/** GuardResult is what to answer the provider, and what happened. */
export interface GuardResult {
  /** status is the HTTP status to answer the provider with. */
  status: number;
  /** body is the response body: the stored result on 200, a short text otherwise. */
  body: Uint8Array;
  /** retryAfter, in seconds, goes in a Retry-After header when set. */
  retryAfter?: number;
  /** outcome of the claim; undefined when claimd gave no answer. */
  outcome: Outcome | undefined;
  /** ran is true when the handler was called. */
  ran: boolean;
  /** error is the handler's or claimd's error, if any. */
  error?: unknown;
  /** claim is claimd's answer, when there was one. */
  claim?: ClaimResponse;
  /**
   * effect is what the handler's effect did, when it committed or found an
   * earlier holder's fence done (done: the event was settled with that
   * fence's result); undefined when no effect committed.
   */
  effect?: EffectOutcome;
}

/** GuardLogger receives what an operator must see (mismatches, lost leases, a handler's failure). */
export interface GuardLogger {
  warn(message: string, fields: { [name: string]: unknown }): void;
  /**
   * error receives a handler's failure, once per delivery, with its key:
   * the guard turns it into a 500 for the provider, so nothing else would
   * report it. Without error, warn receives it.
   */
  error?(message: string, fields: { [name: string]: unknown }): void;
}

/** GuardOptions tunes guard; every field is optional. */
export interface GuardOptions {
  /** renewEveryMs overrides the heartbeat period (default a third of the lease, at least 100 ms). */
  renewEveryMs?: number;
  /** logger for alerts. Default: one JSON line on stderr via console.warn. */
  logger?: GuardLogger;
}

const consoleLogger: GuardLogger = {
  warn: (message, fields) => console.warn(JSON.stringify({ level: "warn", msg: message, ...fields }, jsonSafe)),
  error: (message, fields) => console.error(JSON.stringify({ level: "error", msg: message, ...fields }, jsonSafe)),
};

/** handlerFailed logs what the handler threw, at error level where the logger has one. */
function handlerFailed(log: GuardLogger, message: string, claim: ClaimResponse, err: unknown): void {
  const fields = {
    key: claim.key,
    error: err instanceof Error ? err.message : String(err),
    ...(err instanceof Error && err.stack ? { stack: err.stack } : {}),
  };
  if (log.error) {
    log.error(message, fields);
  } else {
    log.warn(message, fields);
  }
}

/**
 * enumName is the name of a value of a generated enum (ACQUIRED, not 1), or
 * the number for a value this client does not know.
 */
function enumName(e: { [value: number]: string }, v: number): string {
  return e[v] ?? String(v);
}

/**
 * describeGuardResult is a one-line account of a guard's answer for logs,
 * with the enums by name: "status 200, outcome ACQUIRED, reason RELEASED,
 * state SETTLED, ran true", then the error when there is one.
 */
export function describeGuardResult(r: GuardResult): string {
  const parts = [`status ${r.status}`, `outcome ${r.outcome === undefined ? "none" : enumName(Outcome, r.outcome)}`];
  if (r.claim) {
    if (r.claim.reason !== Reason.UNSPECIFIED) {
      parts.push(`reason ${enumName(Reason, r.claim.reason)}`); // an ACQUIRED's why
    }
    parts.push(`state ${enumName(EventState, r.claim.state)}`);
  }
  parts.push(`ran ${r.ran}`);
  if (r.error !== undefined) {
    parts.push(`error ${r.error instanceof Error ? r.error.message : String(r.error)}`);
  }
  return parts.join(", ");
}

/**
 * guard runs handler at most once per delivery, as far as claimd can tell.
 * It follows the contract every claimd guard shares, clients/GUARD.md, whose
 * table gives the status, Retry-After and body of every outcome. In short:
 *
 *   ACQUIRED         → PROCESSING (the claim, made with start, already
 *                      recorded it unless it took over an expired lease:
 *                      then a Transition), heartbeat, handler; then SETTLED → 200 with
 *                      the result, or Release → 500 (retryable error), or
 *                      FAILED → 200 (PermanentError). Only a handler that
 *                      throws (or rejects) is released, and never on a key
 *                      taken over from PROCESSING: once it returned, the
 *                      side effect may have happened, and nothing — an
 *                      unencodable or oversized result, a failed settle —
 *                      leads to a release (a failed settle is 503).
 *   DUPLICATE        → 200 with the stored result; handler not called.
 *   IN_PROGRESS      → 409, Retry-After until the holder's lease ends.
 *   PAYLOAD_MISMATCH → 422, and a warning for alerting.
 *   DEFERRED         → 409, Retry-After from the claim's retry_after (an
 *                      event of an entity lifecycle that came too early:
 *                      the provider's retry is the replay); handler not called.
 *   SUPERSEDED       → 200 (the entity is past the event); handler not called.
 *   INVALID_ARGUMENT naming only the delivery (one claimd cannot key) → 400;
 *                      naming the receiver's settings (a lease over max_lease)
 *                      → 500 and an error log; handler not called.
 *   claimd unreachable or too slow → 503, Retry-After 5; handler not called.
 *   rate limited (RESOURCE_EXHAUSTED) → 503, Retry-After from claimd's RetryInfo.
 *   UNAUTHENTICATED, PERMISSION_DENIED → 500 and an error log; handler not called.
 *
 * guard never throws for claimd's or the handler's failures: they are in the
 * result. It throws only for a programming error (a bad ClaimInput shape).
 */
export async function guard(
  client: ClaimdClient,
  request: ClaimInput,
  handler: GuardHandler,
  opts: GuardOptions = {},
): Promise<GuardResult> {
  const log = opts.logger ?? consoleLogger;
  let claim: ClaimResponse;
  try {
    // The handler runs right away: let the claim record PROCESSING (one
    // call and one durable write fewer per first delivery), unless the
    // caller said otherwise.
    claim = await client.claim({ ...request, start: request.start ?? true });
  } catch (e) {
    if (!(e instanceof ClaimdError)) {
      throw e;
    }
    const answer = failed(e, undefined, false);
    if (answer.status === 500) {
      // Refused credentials or grants, an unknown provider, a lease or window
      // the provider does not allow: the receiver's configuration, which an
      // operator must see (GUARD.md row 25), at error level where the logger has one.
      const fields = { namespace: request.namespace, provider: request.provider, error: e.message };
      if (log.error) {
        log.error("claimd: claim refused (configuration)", fields);
      } else {
        log.warn("claimd: claim refused (configuration)", fields);
      }
    }
    return answer;
  }
  const base = { outcome: claim.outcome, claim, ran: false };
  switch (claim.outcome) {
    case Outcome.DUPLICATE:
      return { ...base, status: 200, body: claim.result };
    case Outcome.IN_PROGRESS:
      return { ...base, status: 409, body: text(answers.inProgress), retryAfter: secondsUntil(claim.leaseExpiresAt) };
    case Outcome.PAYLOAD_MISMATCH:
      log.warn("claimd: payload mismatch: same key, different payload", {
        namespace: request.namespace,
        provider: request.provider,
        key: claim.key,
      });
      return { ...base, status: 422, body: text(answers.payloadMismatch) };
    case Outcome.DEFERRED:
      // No token was issued: nothing to release. The provider's retry,
      // after Retry-After, is the replay.
      return { ...base, status: 409, body: text(answers.deferred), retryAfter: deferredRetryAfterS(claim) };
    case Outcome.SUPERSEDED:
      return { ...base, status: 200, body: text(answers.superseded) };
    case Outcome.ACQUIRED:
      return runAcquired(client, request, claim, handler, opts, log);
  }
  return { ...base, status: 500, body: text(answers.unexpected), error: new Error(`claimd: unexpected outcome ${enumName(Outcome, claim.outcome)}`) };
}

/**
 * deferredRetryAfterS is a DEFERRED claim's retry_after in whole seconds,
 * rounded up, at least 1 (1 when claimd sent none).
 */
function deferredRetryAfterS(claim: ClaimResponse): number {
  const d = claim.retryAfter;
  if (d === undefined) {
    return 1;
  }
  return Math.max(1, Math.ceil(Number(d.seconds) + d.nanos / 1e9));
}

/**
 * takenOverFromProcessing reports whether claim took the key over from a
 * holder that had started the side effect. Such a key is never released:
 * Release resets the state to RECEIVED, and the next holder would no longer
 * learn that it must check before acting.
 */
function takenOverFromProcessing(claim: ClaimResponse): boolean {
  return claim.reason === Reason.LEASE_EXPIRED && claim.state === EventState.PROCESSING;
}

/**
 * startedByClaim reports whether the claim (made with start) recorded
 * PROCESSING itself: a new, released or window-expired key. A LEASE_EXPIRED
 * takeover keeps the state its vanished holder reached, so the guard still
 * moves it to PROCESSING (a no-op from PROCESSING that checks the token).
 */
function startedByClaim(claim: ClaimResponse): boolean {
  return claim.reason !== Reason.LEASE_EXPIRED && claim.state === EventState.PROCESSING;
}

/**
 * endedAlready reports whether a settle or fail found the record SETTLED or
 * FAILED already under this guard's own token: the handler ended the event
 * itself through the typed calls. The outcome is recorded, so the provider
 * may stop retrying; the stored result stands.
 */
function endedAlready(err: ClaimdError): boolean {
  if (err instanceof ResultMismatchError) {
    return true;
  }
  const cur = err instanceof InvalidTransitionError ? err.currentState : undefined;
  return cur === "EVENT_STATE_SETTLED" || cur === "EVENT_STATE_FAILED";
}

async function runAcquired(
  client: ClaimdClient,
  request: ClaimInput,
  claim: ClaimResponse,
  handler: GuardHandler,
  opts: GuardOptions,
  log: GuardLogger,
): Promise<GuardResult> {
  const ref = leaseOf(request, claim);
  try {
    // A repeat is a no-op on the server, so a LEASE_EXPIRED takeover of a
    // record already in PROCESSING passes through.
    if (!startedByClaim(claim)) {
      await client.transition({ ...ref, to: EventState.PROCESSING });
    }
  } catch (e) {
    const err = toClaimdError(e);
    if (notOurs(err)) {
      return { ...lost(err, claim, log, request), ran: false }; // released and re-claimed under us
    }
    // The handler did not run: give the key back so that the provider's
    // retry need not wait out the lease (not after a takeover from
    // PROCESSING; if the release fails, the lease frees the key).
    if (!takenOverFromProcessing(claim)) {
      await releaseQuietly(client, ref, log);
    }
    return failed(err, claim, false);
  }

  const leaseMs = await leaseMsOf(client, request, claim);
  const hb = new Heartbeat(client, ref, request.leaseMs, opts.renewEveryMs ?? heartbeatEveryMs(leaseMs), log);
  hb.start();
  const fence = new EffectState({ ...ref, fencingToken: BigInt(ref.fencingToken) }, hb.signal);
  let returned: unknown;
  let handlerErr: unknown;
  let threw = false;
  try {
    returned = await handler(claim, hb.signal, fence.context(claim));
  } catch (e) {
    handlerErr = e;
    threw = true;
  }
  // Only what the handler threw is in handlerErr: encoding and settling
  // happen below, on paths that never release.
  await hb.stop();
  const effect = fence.close();
  const withEffect = (r: GuardResult): GuardResult => (effect ? { ...r, effect } : r);

  if (hb.lost) {
    // Someone else owns the key now: settling or releasing would fail on
    // the token anyway, and the new holder decides the outcome.
    return withEffect(lost(hb.lost, claim, log, request));
  }
  if (!threw) {
    return withEffect(await record(client, ref, claim, settlement(returned, effect, claim, log), log, request));
  }
  const failedAnswer = { outcome: claim.outcome, claim, ran: true, status: 500, body: text(answers.handlerFailed), error: handlerErr };
  if (handlerErr instanceof ResultNotStorableError) {
    // The handler returned (idempotent could not store its value): its side
    // effect may have happened, so the key is neither released nor settled
    // empty. It waits for its lease; the next holder takes over from PROCESSING.
    handlerFailed(log, "claimd: result cannot be stored; leaving the key to its lease", claim, handlerErr);
    return withEffect(failedAnswer);
  }
  if (handlerErr instanceof PermanentError) {
    const why = truncate(handlerErr.message, MAX_FAILURE_BYTES);
    return withEffect(await record(client, ref, claim, { to: EventState.FAILED, stored: why, body: why, error: handlerErr, recovered: false }, log, request));
  }
  if (takenOverFromProcessing(claim)) {
    handlerFailed(log, "claimd: handler failed on a key taken over from PROCESSING; leaving it to its lease", claim, handlerErr);
    return withEffect(failedAnswer);
  }
  handlerFailed(log, "claimd: handler failed; releasing the key for a retry", claim, handlerErr);
  const notReleased = await releaseQuietly(client, ref, log);
  return withEffect(notReleased ? { ...lost(notReleased, claim, log, request), error: handlerErr } : failedAnswer);
}

/**
 * Ending is what the guard records once the handler returned or threw a
 * PermanentError: a Transition to SETTLED or FAILED, and the answer to give
 * once claimd stored it.
 */
interface Ending {
  to: EventState.SETTLED | EventState.FAILED;
  /** stored is the Transition's result. */
  stored: Uint8Array;
  /** body is this delivery's answer (the whole result, even one too large to store). */
  body: Uint8Array;
  /** error is the handler's PermanentError, or why the result was not stored. */
  error?: unknown;
  /** recovered: stored is an earlier holder's effect result (row 23). */
  recovered: boolean;
}

/**
 * settlement is the Ending of a handler that returned. The side effect may
 * have happened, so nothing here releases: a result that cannot be encoded
 * or is too large is settled without it (200, the reason in error). When
 * the delivery's effect found an earlier holder's fence done, the event is
 * settled with that fence's stored result, whatever the handler returned,
 * and claimd is told the result was recovered.
 */
function settlement(returned: unknown, effect: EffectOutcome | undefined, claim: ClaimResponse, log: GuardLogger): Ending {
  const recovered = effect?.done === true;
  let body: Uint8Array;
  let notStored: Error | undefined;
  try {
    body = resultBytes(recovered ? effect.result : returned);
  } catch (e) {
    body = new Uint8Array();
    notStored = e instanceof Error ? e : new TypeError(String(e));
  }
  let stored = body;
  if (body.length > MAX_RESULT_BYTES) {
    stored = new Uint8Array();
    notStored = new RangeError(`result is ${body.length} bytes, over ${MAX_RESULT_BYTES}; not stored`);
  }
  if (notStored) {
    log.warn("claimd: result not stored; settling without it", { key: claim.key, error: notStored.message });
  }
  return { to: EventState.SETTLED, stored, body, recovered, ...(notStored ? { error: notStored } : {}) };
}

/**
 * record writes e's Transition: the one path by which the guard records
 * what a handler did. A record that the handler ended itself keeps its
 * stored outcome (row 18); a lost claim answers 409 (row 17); any other
 * failure leaves the key to its lease, PROCESSING, for the next holder, who
 * takes over with state PROCESSING and knows to check (row 19).
 */
async function record(client: ClaimdClient, ref: Lease, claim: ClaimResponse, e: Ending, log: GuardLogger, request: ClaimInput): Promise<GuardResult> {
  let error = e.error;
  try {
    await client.transition({ ...ref, to: e.to, result: e.stored, ...(e.recovered ? { effectRecovered: true } : {}) });
  } catch (x) {
    const err = toClaimdError(x);
    if (notOurs(err)) {
      return lost(err, claim, log, request);
    }
    if (!endedAlready(err)) {
      // The handler ran: never release (GUARD.md row 19). A PermanentError
      // outranks claimd's error in the answer.
      const answer = unsettled(err, claim, log);
      return e.to === EventState.FAILED ? { ...answer, error: e.error } : answer;
    }
    log.warn("claimd: the handler ended the event itself; its stored outcome stands", { key: claim.key, error: err.message });
    error ??= err;
  }
  return { outcome: claim.outcome, claim, ran: true, status: 200, body: e.body, ...(error !== undefined ? { error } : {}) };
}

/**
 * EffectState is a delivery's effect fence as the guard and the handler
 * share it: whether the effect opened, and what it found. The guard reads
 * it once the handler returned, and no effect may open after that.
 */
class EffectState {
  private opened = false;
  private closed = false;
  private outcome: EffectOutcome | undefined;

  constructor(
    private readonly ref: FenceRef,
    private readonly signal: AbortSignal,
  ) {}

  context(claim: ClaimResponse): GuardContext {
    return {
      claim,
      signal: this.signal,
      effect: (db, fn) => this.run(db, fn as EffectFn<typeof db>),
      effectKey: (step) => effectKey(this.ref, step),
    };
  }

  private async run<D extends EffectDatabase>(db: D, fn: EffectFn<D>): Promise<EffectOutcome> {
    if (this.closed) {
      throw new EffectError("claimd: effect after the guarded handler returned");
    }
    if (this.opened) {
      throw new EffectError("claimd: a second effect in one delivery");
    }
    this.opened = true;
    const out = await runEffect(db, this.ref, fn, this.signal);
    if (!this.closed) {
      this.outcome = out;
    }
    return out;
  }

  /** close ends the delivery's effect window and returns what its effect did. */
  close(): EffectOutcome | undefined {
    this.closed = true;
    return this.outcome;
  }
}

/**
 * unsettled answers a handler that ran but whose outcome could not be
 * recorded: 503, and the key is not released (the side effect may have
 * happened). The record stays PROCESSING until its lease ends; the next
 * holder then acquires it with LEASE_EXPIRED and state PROCESSING.
 */
function unsettled(err: ClaimdError, claim: ClaimResponse, log: GuardLogger): GuardResult {
  log.warn("claimd: recording the outcome failed after the handler ran; the next holder takes over with state PROCESSING", {
    key: claim.key,
    error: err.message,
  });
  return { outcome: claim.outcome, claim, ran: true, status: 503, body: text(answers.unsettled), retryAfter: UNAVAILABLE_RETRY_AFTER_S, error: err };
}

/**
 * notOurs reports whether err says the claim is no longer ours: a newer
 * holder took over (or the key was released), or the lease secret is not the
 * owner's. Either way the guard must not settle or release it.
 */
function notOurs(err: ClaimdError): boolean {
  return err instanceof StaleTokenError || err instanceof NotOwnerError;
}

/**
 * DELIVERY_FIELDS are the ClaimRequest fields that carry what the provider
 * sent: an INVALID_ARGUMENT naming only these rejects the delivery itself
 * (GUARD.md row 4); any other field is the receiver's own configuration (row 25).
 */
const DELIVERY_FIELDS = [
  "ClaimRequest.delivery",
  "ClaimRequest.event_id",
  "ClaimRequest.key",
  "ClaimRequest.entity_id",
  "ClaimRequest.event_type",
];

/**
 * rejectsDelivery reports whether err is an INVALID_ARGUMENT whose
 * BadRequest names only DELIVERY_FIELDS. One without a BadRequest is not:
 * only what claimd says was wrong with the delivery may tell a provider to
 * stop retrying.
 */
function rejectsDelivery(err: ClaimdError): boolean {
  return (
    err instanceof InvalidArgumentError &&
    err.fields.length > 0 &&
    err.fields.every((f) => DELIVERY_FIELDS.some((d) => f === d || f.startsWith(`${d} `) || f.startsWith(`${d}.`)))
  );
}

/**
 * failed answers a claimd error before the handler ran (GUARD.md rows 4-9,
 * 25): 400 for a delivery claimd will never accept (one it cannot key), 503
 * when claimd did not answer or this principal is over its rate limit
 * (Retry-After: claimd's RetryInfo delay), 500 when it refused (a
 * misconfiguration that must be seen: a lease over max_lease, an unknown
 * provider, UNAUTHENTICATED, PERMISSION_DENIED). A 5xx, so that the provider
 * delivers again.
 */
function failed(err: ClaimdError, claim: ClaimResponse | undefined, ran: boolean): GuardResult {
  const base = { outcome: claim?.outcome, ran, error: err, ...(claim ? { claim } : {}) };
  if (rejectsDelivery(err)) {
    return { ...base, status: 400, body: text(answers.rejected) };
  }
  if (err instanceof ResourceExhaustedError) {
    const retryAfter = err.retryAfterMs !== undefined ? Math.max(1, Math.ceil(err.retryAfterMs / 1000)) : UNAVAILABLE_RETRY_AFTER_S;
    return { ...base, status: 503, body: text(answers.rateLimited), retryAfter };
  }
  if (err.unavailable || err.code === Code.Canceled) {
    return { ...base, status: 503, body: text(answers.unavailable), retryAfter: UNAVAILABLE_RETRY_AFTER_S };
  }
  return { ...base, status: 500, body: text(answers.refused) };
}

function lost(err: ClaimdError, claim: ClaimResponse, log: GuardLogger, request: ClaimInput): GuardResult {
  log.warn("claimd: ownership lost to another holder; not settling", {
    namespace: request.namespace,
    provider: request.provider,
    key: claim.key,
    fencing_token: claim.fencingToken,
    error: err.message,
  });
  return {
    outcome: claim.outcome,
    claim,
    ran: true,
    status: 409,
    body: text(answers.takenOver),
    retryAfter: SUPERSEDED_RETRY_AFTER_S,
    error: err,
  };
}

/**
 * releaseQuietly gives the key back. It returns the error when the claim
 * turned out not to be ours any more (STALE_TOKEN, NOT_OWNER); any other
 * failure is logged, and the lease frees the key instead.
 */
async function releaseQuietly(client: ClaimdClient, ref: Lease, log: GuardLogger): Promise<ClaimdError | undefined> {
  try {
    await client.release(ref);
  } catch (e) {
    const err = toClaimdError(e);
    if (notOurs(err)) {
      return err;
    }
    log.warn("claimd: release failed; the key frees when its lease ends", { key: ref.key, error: err.message });
  }
  return undefined;
}

/**
 * Heartbeat renews the lease while the handler runs. Renewals are chained
 * (never overlapping). STALE_TOKEN, NOT_OWNER or NOT_FOUND (another holder
 * took over) abort the signal; INVALID_TRANSITION (the handler ended the
 * event itself) stops the heartbeat; any other failure is retried on the
 * next beat.
 */
class Heartbeat {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private inflight: Promise<void> = Promise.resolve();
  private stopped = false;
  /** lost is the refusal that ended ownership, if any. */
  lost: ClaimdError | undefined;

  constructor(
    private readonly client: ClaimdClient,
    private readonly ref: Lease,
    private readonly leaseMs: number | undefined,
    private readonly everyMs: number,
    private readonly log: GuardLogger,
  ) {}

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  start(): void {
    if (this.stopped) {
      return;
    }
    this.timer = setTimeout(() => {
      this.inflight = this.beat().finally(() => this.start());
    }, this.everyMs);
  }

  private async beat(): Promise<void> {
    if (this.stopped) {
      return;
    }
    try {
      await this.client.renew(
        { ...this.ref, ...(this.leaseMs !== undefined ? { leaseMs: this.leaseMs } : {}) },
        { timeoutMs: this.everyMs, retry: { totalTimeoutMs: this.everyMs } },
      );
    } catch (e) {
      const err = toClaimdError(e);
      if (err instanceof InvalidTransitionError) {
        this.stopped = true; // terminal already: nothing left to renew, nothing lost
        return;
      }
      if (!notOurs(err) && !(err instanceof RecordNotFoundError)) {
        this.log.warn("claimd: lease renewal failed; retrying", { key: this.ref.key, error: err.message });
        return;
      }
      this.lost = err;
      this.stopped = true;
      this.controller.abort(err);
    }
  }

  /** stop ends the heartbeat and waits for a renewal in flight. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.inflight;
  }
}

/**
 * leaseMsOf is the lease to heartbeat against: the one requested, else the
 * provider's (asked once per client and provider), never more than what the
 * claim shows left, so a client clock behind the server's cannot stretch it.
 */
async function leaseMsOf(client: ClaimdClient, request: ClaimInput, claim: ClaimResponse): Promise<number> {
  const left = claim.leaseExpiresAt ? millis(claim.leaseExpiresAt) - Date.now() : Infinity;
  let known = request.leaseMs;
  if (known === undefined) {
    let byProvider = providerLeases.get(client);
    if (!byProvider) {
      byProvider = new Map();
      providerLeases.set(client, byProvider);
    }
    known = byProvider.get(request.provider);
    if (known === undefined) {
      try {
        const p = await client.getProvider(request.provider, { retry: false, timeoutMs: 1000 });
        known = p.lease ? durationMs(p.lease) : undefined;
        if (known !== undefined) {
          byProvider.set(request.provider, known);
        }
      } catch {
        // fall back on what the claim shows
      }
    }
  }
  const lease = Math.min(known ?? Infinity, left > 0 ? left : Infinity);
  return Number.isFinite(lease) ? lease : 30_000;
}

const providerLeases = new WeakMap<ClaimdClient, Map<string, number>>();

function millis(t: Timestamp): number {
  return Number(t.seconds) * 1000 + Math.floor(t.nanos / 1_000_000);
}

function durationMs(d: Duration): number {
  return Number(d.seconds) * 1000 + Math.floor(d.nanos / 1_000_000);
}

/** secondsUntil is a Retry-After: whole seconds until t, at least 1. */
function secondsUntil(t: Timestamp | undefined): number {
  return t ? Math.max(1, Math.ceil((millis(t) - Date.now()) / 1000)) : 1;
}

const encoder = new TextEncoder();

function text(s: string): Uint8Array {
  return encoder.encode(s);
}

/** truncate encodes s as UTF-8 in at most max bytes, never splitting a character. */
function truncate(s: string, max: number): Uint8Array {
  const b = encoder.encode(s);
  if (b.length <= max) {
    return b;
  }
  let end = Math.max(0, max);
  while (end > 0 && (b[end]! & 0xc0) === 0x80) {
    end--; // back off a continuation byte
  }
  return b.slice(0, end);
}

function jsonSafe(_key: string, v: unknown): unknown {
  return typeof v === "bigint" ? v.toString() : v;
}

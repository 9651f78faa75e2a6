/**
 * @claimd/client/powertools: claimd as the persistence store of Powertools
 * for AWS Lambda (TypeScript) idempotency. Code that uses makeIdempotent,
 * the idempotent decorator or the Middy middleware switches by changing its
 * persistence store:
 *
 *     import { makeIdempotent } from "@aws-lambda-powertools/idempotency";
 *     import { ClaimdPersistenceLayer } from "@claimd/client/powertools";
 *
 *     const persistenceStore = new ClaimdPersistenceLayer({ client: "claimd.internal:50051", namespace: "orders", provider: "lambda" });
 *     export const handler = makeIdempotent(async (event, context) => ..., { persistenceStore });
 *
 * Powertools keeps deciding what to do (its IdempotencyConfig, its key and
 * payload hashing, its response hook and local cache); each record it reads
 * or writes is a claimd record, with claimd's fencing underneath. The
 * mapping is the Python layer's (clients/python/src/claimd/powertools.py):
 *
 *     Powertools                        claimd
 *     _putRecord INPROGRESS             Claim with start: ACQUIRED keeps the key's
 *                                       lease secret and fencing token until the
 *                                       call ends
 *     ... an existing record            DUPLICATE (COMPLETED, its stored
 *                                       response), IN_PROGRESS (INPROGRESS until
 *                                       the holder's lease ends), PAYLOAD_MISMATCH
 *                                       (a record of another payload hash):
 *                                       IdempotencyItemAlreadyExistsError carries
 *                                       it, and Powertools answers as it always does
 *     payload validation                the claim's payloadSha256, the SHA-256 of
 *                                       Powertools' payload hash
 *     _updateRecord COMPLETED           Transition to SETTLED with the response as
 *                                       JSON, fenced by the key's token and secret
 *     _deleteRecord (the function threw)  Release, fenced: the next call runs
 *     expiresAfterSeconds               the window: claimd keeps a record at least
 *                                       as long as the provider retries; a longer
 *                                       expiresAfterSeconds is sent as the window
 *     in-progress expiry                the claim's lease (leaseMs, default the
 *                                       provider's), not the Lambda's remaining
 *                                       time: a function that outlives it may be
 *                                       taken over, and its update is then refused
 *                                       (StaleTokenError) instead of overwriting
 *                                       the new holder's record
 *
 * It needs @aws-lambda-powertools/idempotency 2.x (an optional peer
 * dependency: only this entry point imports it).
 */
import { createHash, timingSafeEqual } from "node:crypto";

import { timestampMs, type Timestamp } from "@bufbuild/protobuf/wkt";
import {
  IdempotencyItemAlreadyExistsError,
  IdempotencyItemNotFoundError,
  IdempotencyRecordStatus,
  IdempotencyValidationError,
} from "@aws-lambda-powertools/idempotency";
import { BasePersistenceLayer, IdempotencyRecord } from "@aws-lambda-powertools/idempotency/persistence";
import type { IdempotencyRecordOptions } from "@aws-lambda-powertools/idempotency/types";

import { createClient, leaseOf, type ClaimdClient, type ClaimInput, type ClientOptions, type Lease } from "./client.js";
import { NotOwnerError, PermissionDeniedError, RecordNotFoundError, StaleTokenError } from "./errors.js";
import { EventState, Outcome, type ClaimResponse, type Record as ClaimRecord } from "./gen/idempotency/v1/claim_pb.js";
import type { GuardLogger } from "./guard.js";

/** ClaimdPersistenceLayerOptions configure a ClaimdPersistenceLayer. */
export interface ClaimdPersistenceLayerOptions {
  /**
   * client is a ClaimdClient (shared, with its TLS, token and retry policy),
   * or a claimd address to create one for with clientOptions.
   */
  client: ClaimdClient | string;
  /** clientOptions apply to an address only; a ClaimdClient has its own. */
  clientOptions?: ClientOptions;
  /** namespace holds the records (one team's). */
  namespace: string;
  /** provider is a provider of claimd's registry: its lease, window and max_lease. */
  provider: string;
  /** leaseMs overrides the provider's lease (at most its max_lease): how long a call is in progress. */
  leaseMs?: number;
  /**
   * windowMs is the dedup window (at least the provider's). Without it, an
   * expiresAfterSeconds longer than the provider's window is sent as the
   * claim's window; reading the provider's window (once) needs the read
   * role, and without it the provider's window stands.
   */
  windowMs?: number;
  /** logger receives what an operator must see (a takeover, a missing read role). Default: JSON lines on the console. */
  logger?: GuardLogger;
}

const consoleLogger: GuardLogger = {
  warn: (message, fields) => console.warn(JSON.stringify({ level: "warn", msg: message, ...fields })),
};

/** A record read back from claimd keeps the SHA-256 of the payload hash it was claimed with, not the hash itself. */
class StoredRecord extends IdempotencyRecord {
  constructor(
    options: IdempotencyRecordOptions,
    readonly payloadSha256: Uint8Array,
  ) {
    super(options);
  }
}

/**
 * PAYLOAD_MISMATCH_HASH stands for the payload hash of a record claimd
 * found another payload under: no digest Powertools makes (base64) equals
 * it, so Powertools' own validation throws IdempotencyValidationError.
 */
const PAYLOAD_MISMATCH_HASH = "claimd: another payload";

/**
 * ClaimdPersistenceLayer is a Powertools persistence layer on claimd (see
 * the module doc). Powertools' idempotency key (its keyPrefix, by default
 * the Lambda function's name, and the hash of the key data) is claimd's
 * event id.
 */
export class ClaimdPersistenceLayer extends BasePersistenceLayer {
  /** maxHeld bounds the claims held at once: past it, abandoned ones are dropped. */
  static maxHeld = 1024;
  /** abandonedAfterMs is how long past its lease's end a held claim is kept. */
  static abandonedAfterMs = 15 * 60_000;

  /** client is the ClaimdClient the layer calls (made from an address when one was given). */
  readonly client: ClaimdClient;
  readonly namespace: string;
  readonly provider: string;
  private readonly leaseMs: number | undefined;
  private readonly windowMs: number | undefined;
  private readonly log: GuardLogger;
  /** held are the claims of calls in progress, by idempotency key: what the update or delete presents. */
  private readonly held = new Map<string, { lease: Lease; leaseEndsMs: number }>();
  private providerTtlMs: number | undefined;

  constructor(opts: ClaimdPersistenceLayerOptions) {
    super();
    for (const field of ["namespace", "provider"] as const) {
      if (typeof opts[field] !== "string" || opts[field] === "") {
        throw new TypeError(`ClaimdPersistenceLayer: ${field} must be a non-empty string`);
      }
    }
    for (const field of ["leaseMs", "windowMs"] as const) {
      const v = opts[field];
      if (v !== undefined && !(Number.isFinite(v) && v > 0)) {
        throw new RangeError(`ClaimdPersistenceLayer: ${field} ${v} must be a positive number of milliseconds`);
      }
    }
    if (typeof opts.client === "string") {
      this.client = createClient(opts.client, opts.clientOptions);
    } else if (opts.clientOptions !== undefined) {
      throw new TypeError("ClaimdPersistenceLayer: clientOptions apply to an address, not to a ClaimdClient");
    } else {
      this.client = opts.client;
    }
    this.namespace = opts.namespace;
    this.provider = opts.provider;
    this.leaseMs = opts.leaseMs;
    this.windowMs = opts.windowMs;
    this.log = opts.logger ?? consoleLogger;
  }

  // --- Powertools' contract ---------------------------------------------------

  /**
   * _putRecord claims the key for an INPROGRESS record. An existing record
   * throws IdempotencyItemAlreadyExistsError carrying it; a record of
   * another payload carries a hash that fails Powertools' validation (which
   * wraps any other error from here in IdempotencyPersistenceLayerError).
   */
  protected async _putRecord(record: IdempotencyRecord): Promise<void> {
    const key = record.idempotencyKey;
    const request: ClaimInput = {
      namespace: this.namespace,
      provider: this.provider,
      eventId: key,
      start: true,
      ...(record.payloadHash ? { payloadSha256: sha256(record.payloadHash) } : {}),
      ...(this.leaseMs !== undefined ? { leaseMs: this.leaseMs } : {}),
    };
    const windowMs = await this.window();
    if (windowMs !== undefined) {
      request.windowMs = windowMs;
    }
    const claim = await this.client.claim(request);
    if (claim.outcome === Outcome.ACQUIRED) {
      if (this.held.size >= ClaimdPersistenceLayer.maxHeld) {
        this.forgetAbandoned();
      }
      if (this.held.has(key)) {
        // Only after the earlier call's lease ended: that call can no longer
        // be told apart from this one here, and its update now presents
        // this claim. claimd's LEASE_EXPIRED told the new holder.
        this.log.warn("claimd.powertools: a call in this process was taken over by another call in it", { key });
      }
      this.held.set(key, { lease: leaseOf(request, claim), leaseEndsMs: claim.leaseExpiresAt ? timestampMs(claim.leaseExpiresAt) : Date.now() });
      return;
    }
    throw new IdempotencyItemAlreadyExistsError(`Failed to put record for already existing idempotency key: ${key}`, this.claimedRecord(claim, record.payloadHash));
  }

  /**
   * _getRecord reads the key's record; a released one (the function threw)
   * is no record, as Powertools' deleted item.
   */
  protected async _getRecord(idempotencyKey: string): Promise<IdempotencyRecord> {
    let rec: ClaimRecord;
    try {
      rec = await this.client.get({ namespace: this.namespace, provider: this.provider, key: idempotencyKey });
    } catch (e) {
      if (e instanceof RecordNotFoundError) {
        throw new IdempotencyItemNotFoundError(`${idempotencyKey} has no record`, { cause: e });
      }
      throw e;
    }
    if (rec.released) {
      throw new IdempotencyItemNotFoundError(`${idempotencyKey} was released`);
    }
    return storedRecord(rec);
  }

  /**
   * _updateRecord settles the key with the function's response (as JSON),
   * as the holder of the claim _putRecord made: its fencing token and lease
   * secret. A claim taken over meanwhile is refused (StaleTokenError) and
   * the new holder's record stands.
   */
  protected async _updateRecord(record: IdempotencyRecord): Promise<void> {
    const claim = this.take(record.idempotencyKey);
    if (claim === undefined) {
      // The key Powertools settles is not one this layer claimed: the
      // function changed the data its key is read from.
      throw new Error(`ClaimdPersistenceLayer: no claim held for ${record.idempotencyKey}`);
    }
    const response = record.responseData;
    const result = response === undefined ? "" : JSON.stringify(response);
    await this.client.transition({ ...claim.lease, to: EventState.SETTLED, result });
  }

  /**
   * _deleteRecord releases the key after the function threw, so the next
   * call runs it again. A key another holder took over meanwhile is
   * theirs: nothing to release.
   */
  protected async _deleteRecord(record: IdempotencyRecord): Promise<void> {
    const claim = this.take(record.idempotencyKey);
    if (claim === undefined) {
      return;
    }
    try {
      await this.client.release(claim.lease);
    } catch (e) {
      if (e instanceof StaleTokenError || e instanceof NotOwnerError) {
        this.log.warn("claimd.powertools: the key was taken over; not released", { key: claim.lease.key, error: e.message });
        return;
      }
      throw e;
    }
  }

  /**
   * processExistingRecord validates a record read from claimd by the
   * SHA-256 claimd keeps (Powertools compares its own hash, which claimd
   * does not store); once it matches, the record carries this call's hash
   * for Powertools' check and its local cache. Other records go to
   * Powertools as they are.
   */
  override processExistingRecord(stored: IdempotencyRecord, processed: Parameters<BasePersistenceLayer["processExistingRecord"]>[1]): IdempotencyRecord {
    if (stored instanceof StoredRecord && this.isPayloadValidationEnabled()) {
      const hash = processed instanceof IdempotencyRecord ? (processed.payloadHash ?? "") : this.payloadHash(processed);
      // Claimed without payload validation: claimd compares nothing either.
      if (stored.payloadSha256.length > 0 && !sameDigest(sha256(hash), stored.payloadSha256)) {
        throw new IdempotencyValidationError("Payload does not match stored record for this event key", stored);
      }
      stored.payloadHash = hash;
    }
    return super.processExistingRecord(stored, processed);
  }

  // --- claimd's side -------------------------------------------------------------

  /**
   * payloadHash is Powertools' payload hash of data: its own method, which
   * its TypeScript declarations keep private (2.x).
   */
  private payloadHash(data: unknown): string {
    const own = (this as unknown as { getHashedPayload?: (data: unknown) => string }).getHashedPayload;
    if (typeof own !== "function") {
      throw new Error("ClaimdPersistenceLayer: this Powertools has no getHashedPayload; @aws-lambda-powertools/idempotency 2.x is required");
    }
    return own.call(this, data);
  }

  /**
   * forgetAbandoned drops the claims of calls Powertools never finished
   * (the update named another key, or never came: the record stays in
   * progress until its lease ends), once their lease ended abandonedAfterMs
   * ago: a lapsed lease keeps its token until another holder takes over, so
   * a slow call is given that long.
   */
  private forgetAbandoned(): void {
    const cutoff = Date.now() - ClaimdPersistenceLayer.abandonedAfterMs;
    for (const [key, claim] of this.held) {
      if (claim.leaseEndsMs < cutoff) {
        this.held.delete(key);
      }
    }
  }

  private take(key: string): { lease: Lease; leaseEndsMs: number } | undefined {
    const claim = this.held.get(key);
    this.held.delete(key);
    return claim;
  }

  /**
   * window is the claim's window: windowMs, else expiresAfterSeconds when it
   * is longer than the provider's window (claimd never keeps a record for
   * less than the provider retries).
   */
  private async window(): Promise<number | undefined> {
    if (this.windowMs !== undefined) {
      return this.windowMs;
    }
    if (this.providerTtlMs === undefined) {
      try {
        const p = await this.client.getProvider(this.provider);
        this.providerTtlMs = p.ttl ? Number(p.ttl.seconds) * 1000 + Math.floor(p.ttl.nanos / 1e6) : 0;
      } catch (e) {
        if (!(e instanceof PermissionDeniedError)) {
          throw e; // an unknown provider, claimd down: the call fails, the event is kept
        }
        // A principal with the claim role only: keep the provider's window,
        // and say how to ask for a longer one.
        this.log.warn("claimd.powertools: cannot read the provider; expiresAfterSeconds is not sent as a window: grant the read role, or pass windowMs", {
          provider: this.provider,
          error: e.message,
        });
        this.providerTtlMs = Infinity;
      }
    }
    const wanted = this.getExpiresAfterSeconds() * 1000;
    return wanted > this.providerTtlMs ? wanted : undefined;
  }

  /**
   * claimedRecord is the existing record a claim that did not acquire found,
   * as Powertools reads it. claimd compared the payload already, so it
   * carries this call's payload hash (or one that fails validation).
   */
  private claimedRecord(claim: ClaimResponse, payloadHash: string | undefined): IdempotencyRecord {
    const base = { idempotencyKey: claim.key, expiryTimestamp: epochSeconds(claim.windowExpiresAt) };
    switch (claim.outcome) {
      case Outcome.PAYLOAD_MISMATCH:
        return new IdempotencyRecord({ ...base, status: IdempotencyRecordStatus.COMPLETED, payloadHash: PAYLOAD_MISMATCH_HASH });
      case Outcome.DUPLICATE:
        return new IdempotencyRecord({ ...base, status: IdempotencyRecordStatus.COMPLETED, responseData: responseData(claim.result), ...hashed(payloadHash) });
      case Outcome.SUPERSEDED:
        return new IdempotencyRecord({ ...base, status: IdempotencyRecordStatus.COMPLETED, ...hashed(payloadHash) });
    }
    // IN_PROGRESS (another holder's live lease), DEFERRED (not yet).
    const until =
      claim.outcome === Outcome.DEFERRED && claim.retryAfter
        ? Date.now() + Number(claim.retryAfter.seconds) * 1000
        : claim.leaseExpiresAt
          ? timestampMs(claim.leaseExpiresAt)
          : undefined;
    return new IdempotencyRecord({
      ...base,
      status: IdempotencyRecordStatus.INPROGRESS,
      ...(until !== undefined ? { inProgressExpiryTimestamp: until } : {}),
      ...hashed(payloadHash),
    });
  }
}

function storedRecord(rec: ClaimRecord): StoredRecord {
  const base = { idempotencyKey: rec.key, expiryTimestamp: epochSeconds(rec.windowExpiresAt) };
  if (rec.state === EventState.SETTLED || rec.state === EventState.FAILED) {
    return new StoredRecord({ ...base, status: IdempotencyRecordStatus.COMPLETED, responseData: responseData(rec.result) }, rec.payloadSha256);
  }
  return new StoredRecord(
    {
      ...base,
      status: IdempotencyRecordStatus.INPROGRESS,
      ...(rec.leaseExpiresAt ? { inProgressExpiryTimestamp: timestampMs(rec.leaseExpiresAt) } : {}),
    },
    rec.payloadSha256,
  );
}

function hashed(payloadHash: string | undefined): { payloadHash?: string } {
  return payloadHash !== undefined ? { payloadHash } : {};
}

function epochSeconds(t: Timestamp | undefined): number | undefined {
  // Rounded up: a record must not look expired to Powertools while claimd still keeps it.
  return t ? Math.ceil(timestampMs(t) / 1000) : undefined;
}

const utf8 = new TextDecoder();

/**
 * responseData is a stored result as Powertools' response: the JSON this
 * layer stored, parsed; text another claimd guard stored (any language's)
 * as a string; nothing as undefined.
 */
function responseData(result: Uint8Array): IdempotencyRecordOptions["responseData"] {
  if (result.length === 0) {
    return undefined;
  }
  const text = utf8.decode(result);
  try {
    return JSON.parse(text) as IdempotencyRecordOptions["responseData"];
  } catch {
    return text;
  }
}

function sha256(text: string): Uint8Array {
  return new Uint8Array(createHash("sha256").update(text, "utf8").digest());
}

function sameDigest(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

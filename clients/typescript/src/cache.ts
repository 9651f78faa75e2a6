/**
 * The client's duplicate cache, off unless createClient(target, { localCache: n }).
 *
 * A receiver that settled a delivery, or was told it is a DUPLICATE, answers
 * the provider's next retries of it from memory instead of asking claimd.
 * Only what cannot change is kept: a SETTLED or FAILED record's answer, until
 * its window ends (window_expires_at on the local clock). Nothing owned is
 * kept (no ACQUIRED, no IN_PROGRESS), so a cached answer never lets a handler
 * run or keeps one from running. Only claims by event id are answered from it
 * (a raw delivery's key is derived by claimd's rules), never a claim placed
 * in an entity lifecycle, and a claim whose payloadSha256 differs from the
 * stored one asks claimd (which answers PAYLOAD_MISMATCH). Least recently
 * used entries go first.
 */
import { clone, create } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";

import type { ClaimInput } from "./client.js";
import {
  ClaimResponseSchema,
  EventState,
  KeySource,
  Outcome,
  type ClaimResponse,
  type Record as ClaimRecord,
} from "./gen/idempotency/v1/claim_pb.js";

/** SCOPE_SEPARATOR joins an event id and its scope into claimd's canonical key. */
const SCOPE_SEPARATOR = "\x1f";

interface Entry {
  answer: ClaimResponse;
  payload: Uint8Array;
  expiresMs: number;
}

const cached = new WeakSet<ClaimResponse>();

/** fromLocalCache reports whether a claim's answer came from the client's duplicate cache, not from claimd. */
export function fromLocalCache(claim: ClaimResponse): boolean {
  return cached.has(claim);
}

/** DuplicateCache holds at most size settled answers (see the module doc). */
export class DuplicateCache {
  // A Map iterates in insertion order: re-inserting on use makes its first key the least recently used.
  private readonly entries = new Map<string, Entry>();

  constructor(
    readonly size: number,
    private readonly now: () => number = Date.now,
  ) {
    if (!Number.isInteger(size) || size <= 0) {
      throw new RangeError(`localCache: ${size} must be a positive integer (leave it unset to turn the cache off)`);
    }
  }

  get length(): number {
    return this.entries.size;
  }

  /** lookup is the cached DUPLICATE answer to req, or undefined to ask claimd. */
  lookup(req: ClaimInput): ClaimResponse | undefined {
    if (req.eventId === undefined || req.delivery !== undefined || req.entityId) {
      return undefined;
    }
    const key = req.scope ? req.eventId + SCOPE_SEPARATOR + req.scope : req.eventId;
    const k = cacheKey(req.namespace, req.provider, key);
    const e = this.entries.get(k);
    if (e === undefined) {
      return undefined;
    }
    this.entries.delete(k);
    if (e.expiresMs <= this.now()) {
      return undefined;
    }
    this.entries.set(k, e);
    if (req.payloadSha256?.length && e.payload.length && !sameBytes(req.payloadSha256, e.payload)) {
      return undefined;
    }
    const answer = clone(ClaimResponseSchema, e.answer); // the caller may change its copy
    cached.add(answer);
    return answer;
  }

  /** rememberClaim keeps a DUPLICATE answer claimd gave to req (for the payload req was sent with). */
  rememberClaim(req: ClaimInput, resp: ClaimResponse): void {
    if (resp.outcome !== Outcome.DUPLICATE || resp.keySource !== KeySource.EVENT_ID || req.entityId || resp.entity !== undefined) {
      return;
    }
    const answer = clone(ClaimResponseSchema, resp);
    answer.leaseSecret = new Uint8Array();
    this.put(cacheKey(req.namespace, req.provider, resp.key), answer, req.payloadSha256 ?? new Uint8Array());
  }

  /** rememberRecord keeps a record this client settled or failed. */
  rememberRecord(rec: ClaimRecord | undefined): void {
    if (rec === undefined || rec.released || rec.lifecycle !== "" || (rec.state !== EventState.SETTLED && rec.state !== EventState.FAILED)) {
      return;
    }
    const answer = create(ClaimResponseSchema, {
      outcome: Outcome.DUPLICATE,
      key: rec.key,
      keySource: KeySource.EVENT_ID,
      fencingToken: rec.fencingToken,
      state: rec.state,
      attempt: rec.attempt,
      result: rec.result,
      holder: rec.holder,
      ...(rec.windowExpiresAt ? { windowExpiresAt: rec.windowExpiresAt } : {}),
      ...(rec.firstSeenAt ? { firstSeenAt: rec.firstSeenAt } : {}),
    });
    this.put(cacheKey(rec.namespace, rec.provider, rec.key), answer, rec.payloadSha256);
  }

  private put(k: string, answer: ClaimResponse, payload: Uint8Array): void {
    if (answer.windowExpiresAt === undefined) {
      return;
    }
    const expiresMs = timestampMs(answer.windowExpiresAt);
    if (expiresMs <= this.now()) {
      return;
    }
    this.entries.delete(k);
    this.entries.set(k, { answer, payload, expiresMs });
    while (this.entries.size > this.size) {
      const oldest = this.entries.keys().next().value as string;
      this.entries.delete(oldest);
    }
  }
}

function cacheKey(namespace: string, provider: string, key: string): string {
  return JSON.stringify([namespace, provider, key]);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

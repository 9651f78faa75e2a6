import { randomBytes } from "node:crypto";
import * as net from "node:net";
import { hostname } from "node:os";
import type { Duplex } from "node:stream";
import * as tls from "node:tls";

import { create } from "@bufbuild/protobuf";
import type { Duration } from "@bufbuild/protobuf/wkt";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { createClient as createConnectClient } from "@connectrpc/connect";
import type { Client, Interceptor } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";

import {
  ClaimRequestSchema,
  ClaimService,
  type ClaimResponse,
  type EventState,
  Outcome,
  GetRequestSchema,
  type Record as ClaimRecord,
  ReleaseRequestSchema,
  RenewRequestSchema,
  TransitionRequestSchema,
  type TransitionResponse,
} from "./gen/idempotency/v1/claim_pb.js";
import { DuplicateCache } from "./cache.js";
import { type Provider, ProviderService } from "./gen/idempotency/v1/provider_pb.js";
import { type ResolvedRetryPolicy, type RetryPolicy, resolveRetryPolicy, withRetry } from "./retry.js";
import {
  bearerInterceptor,
  checkTlsOptions,
  checkToken,
  isLoopbackHost,
  type TlsOptions,
  tlsConnectOptions,
  type TokenProvider,
} from "./security.js";

/** DEFAULT_TIMEOUT_MS bounds one attempt of a call unless ClientOptions.timeoutMs says otherwise. */
export const DEFAULT_TIMEOUT_MS = 5_000;

/**
 * ClientOptions configures createClient. Every field is optional; missing
 * ones mean the defaults given.
 */
export interface ClientOptions {
  /** timeoutMs is the deadline of one attempt of a call. Default 5000. */
  timeoutMs?: number;
  /**
   * connectTimeoutMs bounds opening the TCP (and TLS) connection; a connect
   * that takes longer fails as UNAVAILABLE and is retried. Default 2000.
   */
  connectTimeoutMs?: number;
  /** keepalive sends HTTP/2 PINGs to notice a dead connection. */
  keepalive?: {
    /**
     * intervalMs between PINGs while a call waits without data, and the idle
     * time after which a connection is checked with one PING before reuse.
     * Default 30000. Keep it at 10000 or more: claimd permits a PING every
     * 10 s and answers more frequent ones with GOAWAY ENHANCE_YOUR_CALM,
     * which fails the calls in flight.
     * Calls are bounded (timeoutMs, plus waitMs), so at 30 s a call sends
     * one PING at most.
     */
    intervalMs?: number;
    /** timeoutMs a PING may take before the connection is dropped. Default 10000. */
    timeoutMs?: number;
  };
  /** retry bounds retries on UNAVAILABLE and friends; see RetryPolicy. */
  /**
   * localCache keeps up to this many settled answers (least recently used
   * go first) and answers a claim by event id for one of them without
   * asking claimd, until the record's window ends: a provider's retries of
   * a delivery this client settled, or was told is a DUPLICATE. Only
   * SETTLED and FAILED records are kept, never an owned or in-progress key;
   * a raw delivery, an entity lifecycle and another payloadSha256 always ask
   * claimd. fromLocalCache(claim) tells a cached answer. Off by default.
   */
  localCache?: number;
  retry?: RetryPolicy;
  /** holder is the default ClaimRequest.holder. Default "<hostname>/<pid>". */
  holder?: string;
  /** interceptors run around every attempt (metrics, tests). They never see the token. */
  interceptors?: Interceptor[];
  /**
   * token is the bearer token ("claimd token new"), or a function returning
   * it that is called before every attempt (rotation). It is sent as
   * "authorization: Bearer <token>", only over TLS or to a loopback target,
   * and appears in no error or inspected value.
   */
  token?: string | TokenProvider;
  /**
   * tls connects over TLS: true with node's default roots, or TlsOptions
   * (CA, client certificate for mTLS, server name). A target
   * "https://host:port" is TLS too.
   */
  tls?: TlsOptions | boolean;
  /**
   * insecure allows plaintext to a target that is not a loopback address.
   * Without it such a target needs tls, and createClient throws. A token is
   * never sent in plaintext off loopback: insecure with a token throws.
   */
  insecure?: boolean;
}

/** CallOptions adjusts one call. */
export interface CallOptions {
  /** signal cancels the call, retries included. */
  signal?: AbortSignal;
  /** timeoutMs overrides ClientOptions.timeoutMs for each attempt. */
  timeoutMs?: number;
  /** retry overrides the client's policy; false makes a single attempt. */
  retry?: RetryPolicy | false;
}

/** Delivery is a raw webhook delivery; claimd derives the key from it. */
export interface DeliveryInput {
  /** headers as received (names are matched case-insensitively). */
  headers?: { [name: string]: string };
  /** body is the raw body, byte for byte as received. */
  body: Uint8Array | string;
}

/**
 * ClaimInput is a ClaimRequest in JavaScript terms: durations in
 * milliseconds, and the key as exactly one of eventId or delivery.
 */
export interface ClaimInput {
  namespace: string;
  provider: string;
  /** eventId is the provider's event id. Exactly one of eventId and delivery. */
  eventId?: string;
  /** delivery is the raw delivery; the server applies the provider's key rule. */
  delivery?: DeliveryInput;
  scope?: string;
  /** payloadSha256 is a 32-byte digest; computed by claimd for a delivery. */
  payloadSha256?: Uint8Array;
  /** leaseMs is the lease requested; default the provider's lease. */
  leaseMs?: number;
  /** holder is audit text; default ClientOptions.holder. */
  holder?: string;
  /**
   * attemptId identifies this logical claim across the client's own retries.
   * Default: 16 random bytes in hex, drawn once per claim() call.
   */
  attemptId?: string;
  /** waitMs waits up to this long (≤ 30000) for an IN_PROGRESS holder's result. */
  waitMs?: number;
  /**
   * entityId and eventType (both or neither) place an event sent by eventId
   * in the provider's entity lifecycle that declares eventType: claimd then
   * orders it against its entity (DEFERRED while it came too early,
   * SUPERSEDED once the entity is past it). A delivery's are read from it
   * by the provider's rules.
   */
  entityId?: string;
  eventType?: string;
  /** start records an ACQUIRED claim already in PROCESSING (one call instead of two). */
  start?: boolean;
  /**
   * windowMs asks for a dedup window longer than the provider's (its retry
   * horizon plus margin), for callers whose own retries outlive the
   * provider's. claimd refuses one shorter than the provider's or over 400
   * days (INVALID_ARGUMENT naming ClaimRequest.window; a guard answers 500).
   * It applies when the claim opens a window; a duplicate is answered within
   * the window its first claim opened.
   */
  windowMs?: number;
}

/** RecordRef names one record: the canonical key that Claim returned. */
export interface RecordRef {
  namespace: string;
  provider: string;
  key: string;
}

/**
 * Lease is the owner's handle on a claimed record, and what transition, renew
 * and release present: the record's name, its fencing token and the lease
 * secret that only the ACQUIRED answer carried. The token is a sequence
 * number anyone may read (get shows it); the secret proves ownership, so keep
 * a Lease as private as a password while the claim runs. Make it with
 * leaseOf(request, claim).
 */
export interface Lease extends RecordRef {
  fencingToken: bigint | number;
  /** leaseSecret is the ClaimResponse's leaseSecret (16 bytes). */
  leaseSecret: Uint8Array;
}

/**
 * leaseOf is the Lease of an ACQUIRED claim, made for the request's namespace
 * and provider. It throws a TypeError for any other answer: only ACQUIRED
 * owns anything (and carries a secret).
 */
export function leaseOf(request: { namespace: string; provider: string }, claim: ClaimResponse): Lease {
  if (claim.outcome !== Outcome.ACQUIRED || claim.leaseSecret.length === 0) {
    throw new TypeError(`leaseOf: the claim of ${JSON.stringify(claim.key)} was not ACQUIRED (outcome ${Outcome[claim.outcome]})`);
  }
  return {
    namespace: request.namespace,
    provider: request.provider,
    key: claim.key,
    fencingToken: claim.fencingToken,
    leaseSecret: claim.leaseSecret,
  };
}

/** TransitionInput moves a record to `to`, as the owner of its lease. */
export interface TransitionInput extends Lease {
  to: EventState;
  /** result is stored with SETTLED or FAILED (≤ 64 KiB); strings as UTF-8. */
  result?: Uint8Array | string;
  /** extendLeaseMs sets the lease to now + extendLeaseMs (non-terminal targets). */
  extendLeaseMs?: number;
  /**
   * effectRecovered, with SETTLED, says that result is the stored result of
   * an earlier holder's effect fence (clients/GUARD.md, row 23): claimd
   * counts, logs and audits the recovery. The guard sets it.
   */
  effectRecovered?: boolean;
}

/** RenewInput extends the holder's lease. */
export interface RenewInput extends Lease {
  /** leaseMs sets the lease to now + leaseMs; default the provider's lease. */
  leaseMs?: number;
}

/**
 * ClaimdClient is a typed claimd client. Every call rejects with a
 * ClaimdError (see errors.ts) and retries, within the policy, when claimd
 * did not answer.
 */
export interface ClaimdClient {
  /** claim asks whether the delivery is the first and whether we may act on it. */
  claim(req: ClaimInput, opts?: CallOptions): Promise<ClaimResponse>;
  /** transition moves the event forward; a repeat with the same lease is a no-op. */
  transition(req: TransitionInput, opts?: CallOptions): Promise<TransitionResponse>;
  /** renew extends the live holder's lease (the guard's heartbeat). */
  renew(req: RenewInput, opts?: CallOptions): Promise<ClaimRecord>;
  /** release gives the key back: the side effect did not happen. */
  release(req: Lease, opts?: CallOptions): Promise<ClaimRecord>;
  /** get reads a record from the durable tier: its token, never a lease secret. */
  get(req: RecordRef, opts?: CallOptions): Promise<ClaimRecord>;
  /** getProvider returns a provider or group as the server derived it. */
  getProvider(name: string, opts?: CallOptions): Promise<Provider>;
  /** listProviders lists the registry. */
  listProviders(opts?: CallOptions): Promise<Provider[]>;
  /** target is the base URL the client talks to. */
  readonly target: string;
  /** holder is the default holder text of claims. */
  readonly holder: string;
  /** close drops the connection; calls in flight fail. */
  close(): void;
}

/**
 * createClient returns a client of the claimd at target ("127.0.0.1:50051",
 * or a URL "http://host:port" / "https://host:port"). It connects lazily, on
 * the first call.
 *
 * Plaintext is the default only for a loopback target (127.0.0.1, [::1],
 * localhost), and each connection checks that its peer is one; any other
 * target needs `tls` (or an https URL), or `insecure` without a token, and
 * createClient throws a TypeError that says which option to add.
 */
export function createClient(target: string, opts: ClientOptions = {}): ClaimdClient {
  const tlsOpts = opts.tls === true ? {} : opts.tls === false ? undefined : opts.tls;
  let baseUrl = /^https?:\/\//.test(target) ? target : `http://${target}`;
  if (tlsOpts !== undefined) {
    if (baseUrl.startsWith("http:")) {
      baseUrl = "https:" + baseUrl.slice("http:".length);
    }
    checkTlsOptions(tlsOpts);
  }
  const url = new URL(baseUrl);
  const secure = url.protocol === "https:";
  if (secure && opts.insecure) {
    throw new TypeError("createClient: give one of tls (or an https target) and insecure");
  }
  if (opts.token !== undefined && typeof opts.token !== "function") {
    const problem = checkToken(opts.token);
    if (problem !== undefined) {
      throw new TypeError(`createClient: token: ${problem}`);
    }
  }
  if (!secure && opts.token !== undefined && opts.insecure) {
    throw new TypeError("createClient: insecure would send the bearer token in plaintext; use tls");
  }
  if (!secure && !opts.insecure && !isLoopbackHost(url.hostname)) {
    const what = opts.token !== undefined ? "the bearer token" : "calls";
    throw new TypeError(
      `createClient: ${clip(url.host)} is not a loopback address, and ${what} must not cross the network in plaintext: ` +
        "give tls: { caFile, certFile, keyFile } (or insecure: true for plaintext without a token)",
    );
  }
  const token = opts.token;
  const provider: TokenProvider | undefined = typeof token === "string" ? () => token : token;
  const session = new Http2SessionManager(
    url,
    {
      pingIntervalMs: opts.keepalive?.intervalMs ?? 30_000,
      pingTimeoutMs: opts.keepalive?.timeoutMs ?? 10_000,
      pingIdleConnection: false,
    },
    { createConnection: () => dial(url, opts.connectTimeoutMs ?? 2_000, tlsOpts, !opts.insecure) },
  );
  const transport = createGrpcTransport({
    baseUrl,
    sessionManager: session,
    // The token is set innermost, after the caller's interceptors ran.
    interceptors: [...(opts.interceptors ?? []), ...(provider ? [bearerInterceptor(provider)] : [])],
  });
  return new Claimd(
    baseUrl,
    createConnectClient(ClaimService, transport),
    createConnectClient(ProviderService, transport),
    session,
    resolveRetryPolicy(opts.retry),
    opts.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    opts.holder ?? `${hostname()}/${process.pid}`,
    opts.localCache === undefined ? undefined : new DuplicateCache(opts.localCache),
  );
}

/**
 * dial opens the connection under a connect timeout. http2.connect has none
 * of its own, and without one a black-holed address would eat the whole
 * call deadline instead of failing fast as UNAVAILABLE (ETIMEDOUT). A
 * plaintext connection that must stay on this machine (loopbackOnly) is
 * dropped unless its peer is a loopback address: "localhost" could resolve
 * elsewhere.
 */
function dial(url: URL, timeoutMs: number, tlsOpts: TlsOptions | undefined, loopbackOnly: boolean): Duplex {
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  const tlsOn = url.protocol === "https:";
  const port = Number(url.port || (tlsOn ? 443 : 80));
  const servername = tlsOpts?.serverName ?? (net.isIP(host) ? undefined : host);
  const socket = tlsOn
    ? tls.connect({ host, port, ...tlsConnectOptions(tlsOpts ?? {}), ...(servername ? { servername } : {}), ALPNProtocols: ["h2"] })
    : net.connect({ host, port });
  if (!tlsOn && loopbackOnly) {
    socket.once("connect", () => {
      const peer = socket.remoteAddress ?? "";
      if (!isLoopbackHost(peer)) {
        socket.destroy(new Error(`claimd: ${clip(url.host)} resolved to ${peer}, not a loopback address: plaintext refused`));
      }
    });
  }
  const timer = setTimeout(() => {
    const err = new Error(`connect to ${url.host}: timed out after ${timeoutMs}ms`) as NodeJS.ErrnoException;
    err.code = "ETIMEDOUT";
    socket.destroy(err);
  }, timeoutMs);
  timer.unref();
  socket.once(tlsOn ? "secureConnect" : "connect", () => clearTimeout(timer));
  socket.once("close", () => clearTimeout(timer));
  return socket;
}

class Claimd implements ClaimdClient {
  constructor(
    readonly target: string,
    private readonly claims: Client<typeof ClaimService>,
    private readonly providers: Client<typeof ProviderService>,
    private readonly session: Http2SessionManager,
    private readonly policy: ResolvedRetryPolicy,
    private readonly timeoutMs: number,
    readonly holder: string,
    private readonly cache: DuplicateCache | undefined,
  ) {}

  private call<T>(opts: CallOptions | undefined, fn: (o: { timeoutMs: number; signal?: AbortSignal }) => Promise<T>): Promise<T> {
    const policy = opts?.retry === false ? { ...this.policy, maxAttempts: 1 } : resolveRetryPolicy({ ...this.policy, ...opts?.retry });
    const timeoutMs = opts?.timeoutMs ?? this.timeoutMs;
    return withRetry(policy, timeoutMs, opts?.signal, (a) =>
      fn(a.signal ? { timeoutMs: a.timeoutMs, signal: a.signal } : { timeoutMs: a.timeoutMs }),
    );
  }

  async claim(req: ClaimInput, opts?: CallOptions): Promise<ClaimResponse> {
    if (req.eventId !== undefined && req.delivery !== undefined) {
      throw new TypeError("claim: give exactly one of eventId or delivery");
    }
    const hit = this.cache?.lookup(req);
    if (hit !== undefined) {
      return hit;
    }
    // One attempt_id for every retry of this logical claim: a retry whose
    // first attempt did reach the server gets the same ACQUIRED and token
    // back instead of IN_PROGRESS from itself.
    const msg = create(ClaimRequestSchema, {
      namespace: req.namespace,
      provider: req.provider,
      key:
        req.eventId !== undefined
          ? { case: "eventId", value: req.eventId }
          : req.delivery !== undefined
            ? { case: "delivery", value: { headers: req.delivery.headers ?? {}, body: bytes(req.delivery.body) } }
            : { case: undefined },
      scope: req.scope ?? "",
      payloadSha256: req.payloadSha256 ?? new Uint8Array(),
      lease: duration(req.leaseMs),
      holder: req.holder ?? this.holder,
      attemptId: req.attemptId ?? randomBytes(16).toString("hex"),
      wait: duration(req.waitMs),
      entityId: req.entityId ?? "",
      eventType: req.eventType ?? "",
      start: req.start ?? false,
      window: duration(req.windowMs),
    });
    // A wait holds the call open on the server; give it that much more time.
    const waited = req.waitMs ? { ...opts, timeoutMs: (opts?.timeoutMs ?? this.timeoutMs) + req.waitMs } : opts;
    const resp = await this.call(waited, (o) => this.claims.claim(msg, o));
    this.cache?.rememberClaim(req, resp);
    return resp;
  }

  async transition(req: TransitionInput, opts?: CallOptions): Promise<TransitionResponse> {
    const msg = create(TransitionRequestSchema, {
      ...fenced(req),
      to: req.to,
      result: req.result === undefined ? new Uint8Array() : bytes(req.result),
      extendLease: duration(req.extendLeaseMs),
      effectRecovered: req.effectRecovered ?? false,
    });
    const resp = await this.call(opts, (o) => this.claims.transition(msg, o));
    this.cache?.rememberRecord(resp.record);
    return resp;
  }

  async renew(req: RenewInput, opts?: CallOptions): Promise<ClaimRecord> {
    const msg = create(RenewRequestSchema, { ...fenced(req), lease: duration(req.leaseMs) });
    return required((await this.call(opts, (o) => this.claims.renew(msg, o))).record);
  }

  async release(req: Lease, opts?: CallOptions): Promise<ClaimRecord> {
    const msg = create(ReleaseRequestSchema, fenced(req));
    return required((await this.call(opts, (o) => this.claims.release(msg, o))).record);
  }

  async get(req: RecordRef, opts?: CallOptions): Promise<ClaimRecord> {
    const msg = create(GetRequestSchema, ref(req));
    return required((await this.call(opts, (o) => this.claims.get(msg, o))).record);
  }

  async getProvider(name: string, opts?: CallOptions): Promise<Provider> {
    return required((await this.call(opts, (o) => this.providers.getProvider({ name }, o))).provider);
  }

  async listProviders(opts?: CallOptions): Promise<Provider[]> {
    return (await this.call(opts, (o) => this.providers.listProviders({}, o))).providers;
  }

  close(): void {
    this.session.abort();
  }
}

/** clip keeps a caller-given string printable in an error. */
function clip(s: string, max = 64): string {
  return s.length <= max ? JSON.stringify(s) : `${JSON.stringify(s.slice(0, max))}… (${s.length} bytes)`;
}

function ref(r: RecordRef): RecordRef {
  return { namespace: r.namespace, provider: r.provider, key: r.key };
}

/** fenced is the part of a request that proves ownership: name, token and secret. */
function fenced(l: Lease): RecordRef & { fencingToken: bigint; leaseSecret: Uint8Array } {
  return { ...ref(l), fencingToken: BigInt(l.fencingToken), leaseSecret: l.leaseSecret };
}

function required<T>(v: T | undefined): T {
  if (v === undefined) {
    throw new Error("claimd answered without the message it documents"); // a server bug, not ours to hide
  }
  return v;
}

const utf8 = new TextEncoder();

/** bytes encodes strings as UTF-8 and passes bytes through. */
export function bytes(v: Uint8Array | string): Uint8Array {
  return typeof v === "string" ? utf8.encode(v) : v;
}

/** duration converts milliseconds to a Duration; undefined stays unset. */
export function duration(ms: number | undefined): Duration | undefined {
  if (ms === undefined) {
    return undefined;
  }
  const whole = Math.trunc(ms);
  return create(DurationSchema, {
    seconds: BigInt(Math.trunc(whole / 1000)),
    nanos: (whole % 1000) * 1_000_000,
  });
}

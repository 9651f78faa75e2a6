/**
 * @claimd/client: a claimd client for Node. Start with createClient and
 * guard; see README.md.
 */
export {
  bytes,
  createClient,
  type CallOptions,
  type ClaimdClient,
  type ClaimInput,
  type ClientOptions,
  type DeliveryInput,
  type Lease,
  leaseOf,
  type RecordRef,
  type RenewInput,
  type TransitionInput,
} from "./client.js";
export {
  ClaimdError,
  Code,
  codeName,
  DurableTierUnavailableError,
  ERROR_DOMAIN,
  ErrorReason,
  InvalidArgumentError,
  InvalidTransitionError,
  NotOwnerError,
  PermissionDeniedError,
  ProviderNotFoundError,
  RecordNotFoundError,
  ResourceExhaustedError,
  ResultMismatchError,
  StaleTokenError,
  toClaimdError,
  UnauthenticatedError,
  type ErrorInfo,
} from "./errors.js";
export {
  EFFECTS_SCHEMA,
  EffectError,
  effectKey,
  pruneEffects,
  type EffectDatabase,
  type EffectFn,
  type EffectOutcome,
  type EffectTx,
  type Fx,
  type PgPool,
  type PgPoolClient,
  type PgQueryable,
  type SqliteDatabase,
  type SqliteStatement,
} from "./effect.js";
export { isLoopbackHost, type TlsOptions, type TokenProvider } from "./security.js";
export {
  describeGuardResult,
  guard,
  MAX_FAILURE_BYTES,
  MAX_RESULT_BYTES,
  permanent,
  PermanentError,
  ResultNotStorableError,
  SUPERSEDED_RETRY_AFTER_S,
  UNAVAILABLE_RETRY_AFTER_S,
  type GuardContext,
  type GuardHandler,
  type GuardLogger,
  type GuardOptions,
  type GuardResult,
} from "./guard.js";
export { fromLocalCache } from "./cache.js";
export { idempotent, jsonCodec, NotRunError, payloadDigest, type Codec, type IdempotentOptions, type JsonCodecOptions } from "./function.js";
export { backoffMs, resolveRetryPolicy, type RetryPolicy } from "./retry.js";
export {
  EventState,
  KeySource,
  Outcome,
  Reason,
  Tier,
  type ClaimResponse,
  type Record as ClaimRecord,
  type TransitionResponse,
} from "./gen/idempotency/v1/claim_pb.js";
export type { Provider } from "./gen/idempotency/v1/provider_pb.js";

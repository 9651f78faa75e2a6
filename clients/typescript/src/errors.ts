import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorReason as GenErrorReason } from "./gen/idempotency/v1/claim_pb.js";

export { Code };

/** ERROR_DOMAIN is the ErrorInfo domain of every error claimd returns. */
export const ERROR_DOMAIN = "claimd.dev";

/** ErrorReasonName is the name of an ErrorReason value: an ErrorInfo reason. */
export type ErrorReasonName = Exclude<keyof typeof GenErrorReason, "ERROR_REASON_UNSPECIFIED">;

/**
 * ErrorReason holds the ErrorInfo reasons claimd sends, each its own name
 * (ErrorReason.STALE_TOKEN === "STALE_TOKEN"). Branch on these (or on the
 * subclasses below), never on messages. Built from the generated
 * idempotency.v1.ErrorReason, so no list of reasons is typed by hand and a
 * reason added to the proto appears here when the code is generated again.
 */
export const ErrorReason: { readonly [K in ErrorReasonName]: K } = Object.freeze(
  Object.fromEntries(
    Object.keys(GenErrorReason)
      .filter((k) => Number.isNaN(Number(k)) && k !== "ERROR_REASON_UNSPECIFIED")
      .map((k) => [k, k]),
  ) as { [K in ErrorReasonName]: K },
);

/** ErrorInfo is the decoded google.rpc.ErrorInfo detail of a claimd error. */
export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

/**
 * ClaimdError is what every client call rejects with: the gRPC code, and the
 * ErrorInfo reason when the server sent one (transport failures have none).
 */
export class ClaimdError extends Error {
  /** code is the gRPC status code (Connect's Code has the same numbers). */
  readonly code: Code;
  /** reason is the ErrorInfo reason, e.g. "STALE_TOKEN"; undefined without one. */
  readonly reason: string | undefined;
  /** metadata is the ErrorInfo metadata, e.g. {current_state, to}. */
  readonly metadata: Record<string, string>;
  /** rawMessage is the server's message without the "[code]" prefix. */
  readonly rawMessage: string;
  /**
   * retryAfterMs is the google.rpc.RetryInfo delay the server sent (a rate
   * limit's RESOURCE_EXHAUSTED); undefined without one.
   */
  readonly retryAfterMs: number | undefined;
  /**
   * fields are the fields a google.rpc.BadRequest names
   * ("ClaimRequest.lease"); empty when the server sent none.
   */
  readonly fields: readonly string[];

  constructor(
    code: Code,
    message: string,
    info?: ErrorInfo,
    options?: { cause?: unknown; retryAfterMs?: number; fields?: readonly string[] },
  ) {
    super(`[${codeName(code)}]${info ? ` ${info.reason}:` : ""} ${message}`, options);
    this.name = new.target.name;
    this.code = code;
    this.reason = info?.reason;
    this.metadata = info?.metadata ?? {};
    this.rawMessage = message;
    this.retryAfterMs = options?.retryAfterMs;
    this.fields = options?.fields ?? [];
  }

  /**
   * unavailable reports whether claimd could not be reached or could not
   * answer in time: the caller should answer its provider "retry later".
   */
  get unavailable(): boolean {
    return isTransient(this.code, this.reason);
  }
}

/**
 * StaleTokenError: a newer holder exists, or the token was released. claimd
 * answers it ABORTED (older servers FAILED_PRECONDITION); the reason
 * STALE_TOKEN decides, whatever the code.
 */
export class StaleTokenError extends ClaimdError {}

/**
 * NotOwnerError: the fencing token is the current one but the lease secret is
 * not its owner's (PERMISSION_DENIED). Only the lease of an ACQUIRED claim
 * writes a record; a token read with get does not.
 */
export class NotOwnerError extends ClaimdError {}

/** InvalidTransitionError: the record's state does not allow the operation. */
export class InvalidTransitionError extends ClaimdError {
  /** currentState is the record's state as the server reported it. */
  get currentState(): string | undefined {
    return this.metadata["current_state"];
  }
}

/**
 * ResultMismatchError: SETTLED or FAILED repeated, with the current token,
 * carrying another result than the stored one. Nothing was written: the
 * first result stands.
 */
export class ResultMismatchError extends ClaimdError {
  /** currentState is the record's state as the server reported it. */
  get currentState(): string | undefined {
    return this.metadata["current_state"];
  }
}

/**
 * InvalidArgumentError: claimd rejected the request's fields (a delivery it
 * cannot derive a key from, a bad namespace). Nothing was written, and
 * sending it again changes nothing.
 */
export class InvalidArgumentError extends ClaimdError {}

/** RecordNotFoundError: no record for (namespace, provider, key). */
export class RecordNotFoundError extends ClaimdError {}

/** ProviderNotFoundError: the provider is not in the server's registry. */
export class ProviderNotFoundError extends ClaimdError {}

/** DurableTierUnavailableError: claimd runs but its durable tier does not answer. */
export class DurableTierUnavailableError extends ClaimdError {}

/**
 * UnauthenticatedError: claimd requires credentials and the call's were
 * missing or unknown (reason CREDENTIALS_MISSING, TOKEN_MALFORMED,
 * TOKEN_UNKNOWN, IDENTITY_UNKNOWN or PRINCIPAL_CONFLICT). Nothing was
 * written; retrying changes nothing until the token or certificate is fixed.
 */
export class UnauthenticatedError extends ClaimdError {}

/**
 * PermissionDeniedError: the principal (metadata.principal) may not use the
 * namespace (NAMESPACE_DENIED) or call the method (ROLE_DENIED,
 * METHOD_DENIED). Nothing was written.
 */
export class PermissionDeniedError extends ClaimdError {}

/**
 * ResourceExhaustedError: the principal is over its rate limit
 * (RATE_LIMITED), still after the client's retries; retryAfterMs says when
 * claimd admits a call again. Nothing was written.
 */
export class ResourceExhaustedError extends ClaimdError {}

const byCode: Partial<Record<Code, typeof ClaimdError>> = {
  [Code.InvalidArgument]: InvalidArgumentError,
  [Code.Unauthenticated]: UnauthenticatedError,
  [Code.PermissionDenied]: PermissionDeniedError,
  [Code.ResourceExhausted]: ResourceExhaustedError,
};

const byReason: Record<string, typeof ClaimdError> = {
  [ErrorReason.STALE_TOKEN]: StaleTokenError,
  [ErrorReason.NOT_OWNER]: NotOwnerError,
  [ErrorReason.INVALID_TRANSITION]: InvalidTransitionError,
  [ErrorReason.RESULT_MISMATCH]: ResultMismatchError,
  [ErrorReason.RECORD_NOT_FOUND]: RecordNotFoundError,
  [ErrorReason.PROVIDER_NOT_FOUND]: ProviderNotFoundError,
  [ErrorReason.DURABLE_TIER_UNAVAILABLE]: DurableTierUnavailableError,
};

/**
 * toClaimdError turns anything a Connect call threw into a ClaimdError of the
 * class matching its ErrorInfo reason (the reason decides before the code).
 * A ClaimdError passes through.
 */
export function toClaimdError(err: unknown): ClaimdError {
  if (err instanceof ClaimdError) {
    return err;
  }
  const ce = ConnectError.from(err);
  const info = errorInfo(ce);
  const Class = (info && byReason[info.reason]) || byCode[ce.code] || ClaimdError;
  const retryAfterMs = retryDelayMs(ce);
  const options = retryAfterMs === undefined ? { cause: err } : { cause: err, retryAfterMs };
  return new Class(ce.code, ce.rawMessage, info, { ...options, fields: badFields(ce) });
}

/**
 * isTransient reports whether a code (with the ErrorInfo reason, if any)
 * means "claimd did not answer" rather than "claimd said no". Connect reports
 * a connection reset as ABORTED without a reason; claimd's own ABORTED
 * always carries one (STALE_TOKEN: another holder owns the key), and
 * repeating that call cannot help.
 */
export function isTransient(code: Code, reason?: string): boolean {
  return code === Code.Unavailable || code === Code.DeadlineExceeded || (code === Code.Aborted && !reason);
}

const errorInfoType = "google.rpc.ErrorInfo";

/** errorInfo finds the first ErrorInfo detail of err, in any domain. */
function errorInfo(err: ConnectError): ErrorInfo | undefined {
  for (const d of err.details) {
    if ("type" in d && d.type === errorInfoType) {
      try {
        return decodeErrorInfo(d.value);
      } catch {
        return undefined; // a malformed detail must not hide the status
      }
    }
  }
  return undefined;
}

/** retryDelayMs is the delay of err's google.rpc.RetryInfo detail, if any. */
function retryDelayMs(err: ConnectError): number | undefined {
  for (const d of err.details) {
    if ("type" in d && d.type === "google.rpc.RetryInfo") {
      try {
        return decodeRetryInfo(d.value);
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/** badFields are the fields of err's google.rpc.BadRequest detail, if any. */
function badFields(err: ConnectError): string[] {
  for (const d of err.details) {
    if ("type" in d && d.type === "google.rpc.BadRequest") {
      try {
        return decodeBadRequestFields(d.value);
      } catch {
        return [];
      }
    }
  }
  return [];
}

/**
 * decodeBadRequestFields reads the field names of google.rpc.BadRequest from
 * its wire form: field_violations = 1, each a FieldViolation (field = 1,
 * description = 2).
 */
export function decodeBadRequestFields(bytes: Uint8Array): string[] {
  const fields: string[] = [];
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.LengthDelimited) {
      const v = new BinaryReader(r.bytes());
      while (v.pos < v.len) {
        const [vno, vwt] = v.tag();
        if (vno === 1 && vwt === WireType.LengthDelimited) {
          fields.push(v.string());
        } else {
          v.skip(vwt);
        }
      }
    } else {
      r.skip(wt);
    }
  }
  return fields;
}

/**
 * decodeRetryInfo reads google.rpc.RetryInfo from its wire form: retry_delay
 * = 1, a google.protobuf.Duration (seconds = 1, nanos = 2). It returns the
 * delay in milliseconds, or undefined when the field is absent.
 */
export function decodeRetryInfo(bytes: Uint8Array): number | undefined {
  const r = new BinaryReader(bytes);
  let ms: number | undefined;
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.LengthDelimited) {
      const d = new BinaryReader(r.bytes());
      let seconds = 0;
      let nanos = 0;
      while (d.pos < d.len) {
        const [dno, dwt] = d.tag();
        if (dno === 1 && dwt === WireType.Varint) {
          seconds = Number(d.int64());
        } else if (dno === 2 && dwt === WireType.Varint) {
          nanos = d.int32();
        } else {
          d.skip(dwt);
        }
      }
      ms = Math.max(0, seconds * 1000 + nanos / 1e6);
    } else {
      r.skip(wt);
    }
  }
  return ms;
}

/**
 * decodeErrorInfo reads google.rpc.ErrorInfo from its wire form: reason = 1,
 * domain = 2, map<string, string> metadata = 3 (entries: key = 1, value = 2).
 * Three fields do not justify vendoring and generating googleapis.
 */
export function decodeErrorInfo(bytes: Uint8Array): ErrorInfo {
  const info: ErrorInfo = { reason: "", domain: "", metadata: {} };
  const r = new BinaryReader(bytes);
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.LengthDelimited) {
      info.reason = r.string();
    } else if (no === 2 && wt === WireType.LengthDelimited) {
      info.domain = r.string();
    } else if (no === 3 && wt === WireType.LengthDelimited) {
      const entry = new BinaryReader(r.bytes());
      let key = "";
      let value = "";
      while (entry.pos < entry.len) {
        const [eno, ewt] = entry.tag();
        if (eno === 1 && ewt === WireType.LengthDelimited) {
          key = entry.string();
        } else if (eno === 2 && ewt === WireType.LengthDelimited) {
          value = entry.string();
        } else {
          entry.skip(ewt);
        }
      }
      info.metadata[key] = value;
    } else {
      r.skip(wt);
    }
  }
  return info;
}

/** codeName is the gRPC name of a code, e.g. "FAILED_PRECONDITION". */
export function codeName(code: Code): string {
  const name = Code[code];
  return name ? name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase() : `CODE_${code}`;
}

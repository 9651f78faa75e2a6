"""Errors of the claimd client. A failed call raises a ClaimdError whose class
says what the caller can do about it; the gRPC code and the server's
google.rpc.ErrorInfo reason are kept on it for logs and finer branching."""

from __future__ import annotations

from collections.abc import Mapping

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from claimd._gen.idempotency.v1 import claim_pb2 as _pb

ERROR_DOMAIN = "claimd.dev"
"""ERROR_DOMAIN is the ErrorInfo domain of every error claimd returns."""

# The ErrorInfo reasons the client branches on: the names of the proto's
# ErrorReason (the reason string is the value's name), read from the
# generated code so that no list of them is typed by hand.
REASON_STALE_TOKEN = _pb.ErrorReason.Name(_pb.ErrorReason.STALE_TOKEN)
"""REASON_STALE_TOKEN: another holder owns the key now (ABORTED)."""
REASON_NOT_OWNER = _pb.ErrorReason.Name(_pb.ErrorReason.NOT_OWNER)
"""REASON_NOT_OWNER: the lease secret is not the token's owner's (PERMISSION_DENIED)."""
REASON_INVALID_TRANSITION = _pb.ErrorReason.Name(_pb.ErrorReason.INVALID_TRANSITION)
"""REASON_INVALID_TRANSITION: the state machine forbids the move (FAILED_PRECONDITION)."""
REASON_RESULT_MISMATCH = _pb.ErrorReason.Name(_pb.ErrorReason.RESULT_MISMATCH)
"""REASON_RESULT_MISMATCH: a terminal move repeated with another result (FAILED_PRECONDITION)."""
REASON_RECORD_NOT_FOUND = _pb.ErrorReason.Name(_pb.ErrorReason.RECORD_NOT_FOUND)
"""REASON_RECORD_NOT_FOUND: no record of the key (NOT_FOUND)."""
REASON_PROVIDER_NOT_FOUND = _pb.ErrorReason.Name(_pb.ErrorReason.PROVIDER_NOT_FOUND)
"""REASON_PROVIDER_NOT_FOUND: the provider is not registered (NOT_FOUND)."""

_STATUS_DETAILS_KEY = "grpc-status-details-bin"


class ClaimdError(Exception):
    """ClaimdError is any failure of a claimd call.

    code is the gRPC status code (None for a client-side decision such as
    PayloadMismatch), reason the ErrorInfo reason the server attached
    (e.g. "STALE_TOKEN"; "" when none), metadata the ErrorInfo metadata
    (INVALID_TRANSITION carries "current_state" and "to"; a refused principal
    "principal"), retry_after the google.rpc.RetryInfo delay in seconds
    (None when the server sent none), fields the fields a
    google.rpc.BadRequest names ("ClaimRequest.lease"; empty when it sent
    none).
    """

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        metadata: Mapping[str, str] | None = None,
        retry_after: float | None = None,
        fields: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: Mapping[str, str] = dict(metadata or {})
        self.retry_after = retry_after
        self.fields = fields

    def __str__(self) -> str:
        code = self.code.name if self.code is not None else "CLIENT"
        reason = f"/{self.reason}" if self.reason else ""
        return f"{code}{reason}: {self.message}"


class StaleToken(ClaimdError):
    """StaleToken: another holder took the key over (or this token was
    released); the caller no longer owns the delivery and must not settle it."""


class NotOwner(ClaimdError):
    """NotOwner: the fencing token is the current one but the lease secret is
    not its owner's (PERMISSION_DENIED). Only the lease of an ACQUIRED claim
    writes a record; a token read with get does not."""


class InvalidTransition(ClaimdError):
    """InvalidTransition: the state machine forbids the move (for example,
    the record is already terminal). metadata["current_state"] names where
    it is."""


class ResultMismatch(ClaimdError):
    """ResultMismatch: SETTLED or FAILED repeated, with the current token,
    carrying another result than the stored one. Nothing was written: the
    first result stands. metadata["current_state"] names the state."""


class InvalidArgument(ClaimdError):
    """InvalidArgument: claimd rejected the request's fields (a delivery it
    cannot derive a key from, a bad namespace); nothing was written, and
    sending it again changes nothing."""


class NotFound(ClaimdError):
    """NotFound: no such record (reason RECORD_NOT_FOUND) or no such provider
    (reason PROVIDER_NOT_FOUND)."""


class Unavailable(ClaimdError):
    """Unavailable: claimd could not be reached, its durable tier could not,
    or it did not answer in time (code UNAVAILABLE or DEADLINE_EXCEEDED),
    after the client's retries. Fail closed: answer the provider a retryable
    status. A Transition that timed out may still have been applied."""


class Unauthenticated(ClaimdError):
    """Unauthenticated: claimd requires credentials and the call's were
    missing or unknown. reason says which: CREDENTIALS_MISSING,
    TOKEN_MALFORMED, TOKEN_UNKNOWN (revoked, mistyped, another server's),
    IDENTITY_UNKNOWN (the client certificate names no principal) or
    PRINCIPAL_CONFLICT. Nothing was written; retrying changes nothing until
    the token or certificate is fixed."""


class PermissionDenied(ClaimdError):
    """PermissionDenied: the caller's principal (metadata["principal"]) may
    not use the namespace (reason NAMESPACE_DENIED) or call the method
    (ROLE_DENIED, METHOD_DENIED). Nothing was written."""


class ResourceExhausted(ClaimdError):
    """ResourceExhausted: the caller's principal is over its rate limit
    (reason RATE_LIMITED), still after the client's retries; retry_after says
    in how many seconds claimd admits a call again. Nothing was written."""


class PayloadMismatch(ClaimdError):
    """PayloadMismatch: the key was claimed before with a different payload.
    A Claim reports it as an outcome, not an error; the guard returns it as
    its error (and logs it) so that it can be alerted on."""


class InProgress(ClaimdError):
    """InProgress: claimd.idempotent found another holder's live lease on the
    key (outcome IN_PROGRESS): the function did not run. retry_after is the
    seconds left on that lease; call again then, or pass wait= to wait for
    the holder's outcome."""


class Deferred(ClaimdError):
    """Deferred: claimd.idempotent's event arrived before its prerequisite in
    its entity's lifecycle (outcome DEFERRED): the function did not run.
    retry_after is when to deliver it again."""


class Superseded(ClaimdError):
    """Superseded: claimd.idempotent's event is older than its entity's state
    (outcome SUPERSEDED): the function did not run, and never will."""


class PermanentError(Exception):
    """PermanentError marks a handler failure that retrying cannot fix (a
    malformed event, a closed account): the guard records the event FAILED
    with the message and answers 200 so the provider stops retrying.

    Raise it directly, or wrap a cause: ``raise PermanentError("bad") from e``.
    """


_BY_REASON: dict[str, type[ClaimdError]] = {
    REASON_STALE_TOKEN: StaleToken,
    REASON_NOT_OWNER: NotOwner,
    REASON_INVALID_TRANSITION: InvalidTransition,
    REASON_RESULT_MISMATCH: ResultMismatch,
}
"""_BY_REASON: the reasons that name an error whatever its code."""

_BY_CODE: dict[grpc.StatusCode, type[ClaimdError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: Unavailable,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}
"""_BY_CODE: the class of an error whose reason names none."""


def _details(err: grpc.RpcError) -> list[any_pb2.Any]:
    # A Connect call's error (claimd._connect.ConnectError) carries the
    # details of its error body; a gRPC call's are in its trailers.
    status_details = getattr(err, "status_details", None)
    if status_details is not None:
        return list(status_details)
    trailing = getattr(err, "trailing_metadata", None)
    if trailing is None:
        return []
    for key, value in trailing() or ():
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            return list(status_pb2.Status.FromString(value).details)
    return []


def _error_info(details: list[any_pb2.Any]) -> error_details_pb2.ErrorInfo | None:
    for detail in details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            if info.domain == ERROR_DOMAIN:
                return info
    return None


def _retry_delay(details: list[any_pb2.Any]) -> float | None:
    for detail in details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            seconds: float = info.retry_delay.ToTimedelta().total_seconds()
            return max(0.0, seconds)
    return None


def _bad_fields(details: list[any_pb2.Any]) -> tuple[str, ...]:
    for detail in details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            return tuple(v.field for v in bad.field_violations)
    return ()


def retry_delay(err: grpc.RpcError) -> float | None:
    """retry_delay is the RetryInfo delay, in seconds, a failed call carries."""
    return _retry_delay(_details(err))


def from_rpc_error(err: grpc.RpcError) -> ClaimdError:
    """from_rpc_error maps a failed gRPC call to the ClaimdError subclass its
    code and ErrorInfo reason call for. Reasons decide before codes: a stale
    token is ABORTED from this claimd and FAILED_PRECONDITION from older
    ones (like INVALID_TRANSITION), and is StaleToken from both."""
    code_fn = getattr(err, "code", None)
    details_fn = getattr(err, "details", None)
    code: grpc.StatusCode = code_fn() if code_fn is not None else grpc.StatusCode.UNKNOWN
    message = (details_fn() if details_fn is not None else None) or str(err)
    details = _details(err)
    info = _error_info(details)
    reason = info.reason if info is not None else ""
    metadata = dict(info.metadata) if info is not None else {}

    cls = _BY_REASON.get(reason) or _BY_CODE.get(code, ClaimdError)
    return cls(
        message,
        code=code,
        reason=reason,
        metadata=metadata,
        retry_after=_retry_delay(details),
        fields=_bad_fields(details),
    )

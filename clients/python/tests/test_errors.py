"""from_rpc_error: the reason decides the class, whatever the code, so that a
stale token is StaleToken from this claimd (ABORTED) and from older ones
(FAILED_PRECONDITION); the reasons are the proto's names."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from claimd import errors
from claimd._gen.idempotency.v1 import claim_pb2
from claimd.errors import (
    ClaimdError,
    InvalidTransition,
    NotFound,
    NotOwner,
    ResultMismatch,
    StaleToken,
    Unavailable,
    from_rpc_error,
)


class FakeError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """FakeError is a failed call with a code and, optionally, an ErrorInfo."""

    def __init__(self, code: grpc.StatusCode, reason: str = "", domain: str = errors.ERROR_DOMAIN) -> None:
        self._code = code
        self._status = status_pb2.Status(code=code.value[0], message="refused")
        if reason:
            detail = any_pb2.Any()
            detail.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain))
            self._status.details.append(detail)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._status.message

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return (("grpc-status-details-bin", self._status.SerializeToString()),)


CASES = [
    ("stale token from this claimd", grpc.StatusCode.ABORTED, "STALE_TOKEN", StaleToken),
    ("stale token from an older claimd", grpc.StatusCode.FAILED_PRECONDITION, "STALE_TOKEN", StaleToken),
    ("invalid transition", grpc.StatusCode.FAILED_PRECONDITION, "INVALID_TRANSITION", InvalidTransition),
    ("result mismatch", grpc.StatusCode.FAILED_PRECONDITION, "RESULT_MISMATCH", ResultMismatch),
    ("not the owner", grpc.StatusCode.PERMISSION_DENIED, "NOT_OWNER", NotOwner),
    ("record not found", grpc.StatusCode.NOT_FOUND, "RECORD_NOT_FOUND", NotFound),
    ("durable tier down", grpc.StatusCode.UNAVAILABLE, "DURABLE_TIER_UNAVAILABLE", Unavailable),
    # ABORTED without claimd's reason is no stale token: nothing says who owns the key.
    ("aborted without a reason", grpc.StatusCode.ABORTED, "", ClaimdError),
]


@pytest.mark.parametrize(("desc", "code", "reason", "want"), CASES, ids=[c[0] for c in CASES])
def test_reason_decides(desc: str, code: grpc.StatusCode, reason: str, want: type[ClaimdError]) -> None:
    err = from_rpc_error(FakeError(code, reason))
    got = type(err).__name__
    assert type(err) is want, f"{desc}: from_rpc_error({code.name}/{reason!r}) = {got}, want {want.__name__}"
    assert (err.code, err.reason) == (code, reason)


def test_reason_of_another_domain_is_ignored() -> None:
    err = from_rpc_error(FakeError(grpc.StatusCode.ABORTED, "STALE_TOKEN", domain="example.com"))
    assert type(err) is ClaimdError, f"ErrorInfo of another domain made {type(err).__name__}"


def test_reasons_are_the_proto_names() -> None:
    names = set(claim_pb2.ErrorReason.keys())
    for const in (
        "REASON_STALE_TOKEN",
        "REASON_NOT_OWNER",
        "REASON_INVALID_TRANSITION",
        "REASON_RESULT_MISMATCH",
        "REASON_RECORD_NOT_FOUND",
        "REASON_PROVIDER_NOT_FOUND",
    ):
        value = getattr(errors, const)
        assert value in names, f"errors.{const} = {value!r}, not a name of idempotency.v1.ErrorReason"
        assert const == "REASON_" + value

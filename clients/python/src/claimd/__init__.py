"""claimd: ask claimd before a webhook's side effect whether the delivery is
the first and yours, and let the guard run the correct flow around it.

    from claimd import Client, Delivery

    with Client("127.0.0.1:50051") as client:
        with client.guard("billing", "stripe", delivery=Delivery(headers, body)) as g:
            if g.acquired:
                g.settle(charge(g.claim))
        answer(g.result.status, g.result.body, g.result.headers)
"""

from claimd._function import MissingKey
from claimd.client import Client, Seconds, default_holder
from claimd.errors import (
    ERROR_DOMAIN,
    ClaimdError,
    Deferred,
    InProgress,
    InvalidArgument,
    InvalidTransition,
    NotFound,
    NotOwner,
    PayloadMismatch,
    PermanentError,
    PermissionDenied,
    ResourceExhausted,
    ResultMismatch,
    StaleToken,
    Superseded,
    Unauthenticated,
    Unavailable,
)
from claimd.guard import Guard, GuardResult, idempotent
from claimd.retry import RetryPolicy
from claimd.security import TLSConfig, TokenProvider
from claimd.serialize import ResultNotStorable
from claimd.types import (
    MAX_RESULT_BYTES,
    Claim,
    Delivery,
    EntityPosition,
    EventRef,
    EventState,
    KeySource,
    Lease,
    Outcome,
    Reason,
    Record,
    Tier,
    Transitioned,
)

__all__ = [
    "ERROR_DOMAIN",
    "MAX_RESULT_BYTES",
    "Claim",
    "ClaimdError",
    "Client",
    "Deferred",
    "Delivery",
    "EntityPosition",
    "EventRef",
    "EventState",
    "Guard",
    "GuardResult",
    "InProgress",
    "InvalidArgument",
    "InvalidTransition",
    "KeySource",
    "Lease",
    "MissingKey",
    "NotFound",
    "NotOwner",
    "Outcome",
    "PayloadMismatch",
    "PermanentError",
    "PermissionDenied",
    "Reason",
    "Record",
    "ResourceExhausted",
    "ResultMismatch",
    "ResultNotStorable",
    "RetryPolicy",
    "Seconds",
    "StaleToken",
    "Superseded",
    "TLSConfig",
    "Tier",
    "TokenProvider",
    "Transitioned",
    "Unauthenticated",
    "Unavailable",
    "default_holder",
    "idempotent",
]

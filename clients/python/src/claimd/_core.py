"""_core: the guard and the client's calls, decided once for both shells.

claimd.guard and claimd.client (blocking stubs and threads) and claimd.aio
(grpc.aio and tasks) are thin shells over this module: it builds the
requests, maps every answer to the row of clients/GUARD.md it belongs to,
encodes results and failure texts, paces the heartbeat, and says after each
claimd call which call comes next. The shells only make the calls, run the
handler and keep the heartbeat alive, each in its own concurrency model. A
change to what the guard does is made here, once; a shell that decides
anything itself drifts from the other silently.

GuardCore is the guard's state. A shell drives it as a loop:

    call = core.open()                        # Call(CLAIM)
    while call is not None:
        try:
            answer = <make call, sync or awaited>
        except Exception as err:
            call = core.failed(call, err)      # re-raises what is not its to handle
        else:
            call = core.answered(call, answer)

and asks it again when the handler returned (settle), failed (fail,
handler_raised) or a renewal answered (renewed, renew_failed). The handler's
effect (claimd.effects) is recorded in GuardCore.effect; settle reads it, so
a fence an earlier holder committed settles with its stored result and
effect_recovered (GUARD.md row 23) in both shells alike.

GuardFront (a Guard's construction, acquired, claim, result, check) and
ClientFront (Client.guard) are the parts of the public classes that do not
call claimd: each shell subclasses them and adds only its calls.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import secrets
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, Protocol, TypeVar

import grpc
from google.protobuf import duration_pb2

from claimd import serialize
from claimd._gen.idempotency.v1 import claim_pb2 as pb
from claimd.errors import (
    ClaimdError,
    InvalidArgument,
    InvalidTransition,
    NotFound,
    NotOwner,
    PayloadMismatch,
    PermanentError,
    ResourceExhausted,
    ResultMismatch,
    StaleToken,
    Unavailable,
)
from claimd.types import (
    MAX_RESULT_BYTES,
    Claim,
    Delivery,
    EventRef,
    EventState,
    Lease,
    Outcome,
    Reason,
    Record,
    Seconds,
)

log = logging.getLogger("claimd")

GuardKey = str | EventRef | Delivery
"""GuardKey is what a guarded function takes first: an event id, an EventRef
(an event id with its entity and event type), or a raw Delivery."""

UNAVAILABLE_RETRY_AFTER = 5
"""UNAVAILABLE_RETRY_AFTER is the Retry-After, in seconds, of a 503 when
claimd could not be asked or could not record an outcome."""

SUPERSEDED_RETRY_AFTER = 1
"""SUPERSEDED_RETRY_AFTER is the Retry-After, in seconds, of a 409 when
another holder took the key over: its lease is unknown here, and the
provider's retry meets IN_PROGRESS with the right Retry-After."""

MAX_FAILURE_BYTES = 1024
"""MAX_FAILURE_BYTES bounds the error text stored as a FAILED record's result."""

MIN_HEARTBEAT = 0.1
"""MIN_HEARTBEAT is the floor of the heartbeat's interval in seconds, for
very short leases (GUARD.md)."""

# The bodies of the answers that are not a result, the same in every claimd
# guard (clients/GUARD.md).
IN_PROGRESS_BODY = b"delivery in progress elsewhere; retry later\n"
PAYLOAD_MISMATCH_BODY = b"payload differs from an earlier delivery with the same key\n"
REJECTED_BODY = b"delivery rejected by claimd\n"
REFUSED_BODY = b"claimd refused the delivery\n"
RATE_LIMITED_BODY = b"claimd rate limit reached; retry later\n"
UNAVAILABLE_BODY = b"claimd unavailable; retry later\n"
UNEXPECTED_BODY = b"unexpected answer from claimd\n"
DEFERRED_BODY = b"event arrived before its prerequisite; retry later\n"
SUPERSEDED_BODY = b"event superseded by a later state of its entity\n"
TAKEN_OVER_BODY = b"delivery taken over by another holder; retry later\n"
HANDLER_FAILED_BODY = b"processing failed; retry later\n"
UNSETTLED_BODY = b"could not record the outcome; retry later\n"


@dataclasses.dataclass(frozen=True)
class GuardResult:
    """GuardResult is what to answer the provider, and what happened.

    status is the HTTP status; body the response body (the stored result for
    200); retry_after the Retry-After seconds for 409 and 503; outcome the
    Claim's outcome (None when the Claim itself failed); ran whether the
    guarded code ran; error the exception behind a non-2xx answer, a
    PermanentError, a PayloadMismatch, or why a settled result was not
    stored (over 64 KiB, or not encodable); claim the Claim, when there is
    one.
    """

    status: int
    body: bytes = b""
    retry_after: int | None = None
    outcome: Outcome | None = None
    ran: bool = False
    error: BaseException | None = None
    claim: Claim | None = None

    @property
    def headers(self) -> Mapping[str, str]:
        """headers are the response headers the answer needs (Retry-After)."""
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


# --- requests ---------------------------------------------------------------


def seconds(v: Seconds) -> float:
    """seconds is a duration in seconds."""
    return v.total_seconds() if isinstance(v, timedelta) else float(v)


def duration(v: Seconds | None) -> duration_pb2.Duration | None:
    """duration is v as a protobuf Duration, None for None (the field unset)."""
    if v is None:
        return None
    d = duration_pb2.Duration()
    d.FromTimedelta(timedelta(seconds=seconds(v)))
    return d


def held_lease(held: Claim | Lease) -> Lease:
    """held_lease is the Lease of an ACQUIRED Claim (ValueError for any
    other), or the Lease itself."""
    return held.lease if isinstance(held, Claim) else held


def claim_request(
    default_holder: str,
    namespace: str,
    provider: str,
    *,
    event_id: str | None,
    delivery: Delivery | None,
    scope: str,
    payload_sha256: bytes | None,
    lease: Seconds | None,
    holder: str | None,
    attempt_id: str | None,
    wait: Seconds | None,
    entity_id: str,
    event_type: str,
    start: bool,
    window: Seconds | None = None,
) -> tuple[pb.ClaimRequest, float]:
    """claim_request is the ClaimRequest of Client.claim, and how many
    seconds each attempt may take on top of the client's timeout (the
    claim's wait). Every retry sends this request, so one attempt_id."""
    if (event_id is None) == (delivery is None):
        raise ValueError("claim: exactly one of event_id or delivery is required")
    req = pb.ClaimRequest(
        namespace=namespace,
        provider=provider,
        scope=scope,
        payload_sha256=payload_sha256 or b"",
        holder=default_holder if holder is None else holder,
        attempt_id=attempt_id or secrets.token_hex(16),
        lease=duration(lease),
        wait=duration(wait),
        entity_id=entity_id,
        event_type=event_type,
        start=start,
        window=duration(window),
    )
    if event_id is not None:
        req.event_id = event_id
    elif delivery is not None:
        req.delivery.CopyFrom(pb.Delivery(headers=dict(delivery.headers), body=delivery.body))
    return req, seconds(wait) if wait is not None else 0.0


def _owner(held: Claim | Lease) -> dict[str, Any]:
    """_owner is the fields by which a Transition, Renew or Release proves
    ownership: the key, its fencing token and the lease secret."""
    lease = held_lease(held)
    return {
        "namespace": lease.namespace,
        "provider": lease.provider,
        "key": lease.key,
        "fencing_token": lease.fencing_token,
        "lease_secret": lease.lease_secret,
    }


def transition_request(
    held: Claim | Lease,
    to: EventState,
    result: bytes,
    extend_lease: Seconds | None,
    effect_recovered: bool,
) -> pb.TransitionRequest:
    """transition_request is the TransitionRequest of Client.transition."""
    return pb.TransitionRequest(
        **_owner(held),
        to=pb.EventState.Name(to),
        result=result,
        extend_lease=duration(extend_lease),
        effect_recovered=effect_recovered,
    )


def renew_request(held: Claim | Lease, lease: Seconds | None) -> pb.RenewRequest:
    """renew_request is the RenewRequest of Client.renew."""
    return pb.RenewRequest(**_owner(held), lease=duration(lease))


def release_request(held: Claim | Lease) -> pb.ReleaseRequest:
    """release_request is the ReleaseRequest of Client.release."""
    return pb.ReleaseRequest(**_owner(held))


def delivery_of(key: GuardKey) -> tuple[str | None, Delivery | None, str, str]:
    """delivery_of is what a guarded function's first argument names: its
    event_id, delivery, entity_id and event_type, as Guard takes them."""
    ref = EventRef(key) if isinstance(key, str) else key
    if isinstance(ref, Delivery):
        return None, ref, "", ""
    return ref.event_id, None, ref.entity_id, ref.event_type


# --- answers ------------------------------------------------------------------


def seconds_until(t: datetime | None, minimum: int = 1) -> int:
    """seconds_until is the whole seconds from now until t, rounded up, at
    least minimum (minimum when t is None)."""
    if t is None:
        return minimum
    return max(minimum, math.ceil((t - datetime.now(timezone.utc)).total_seconds()))


def answer_unowned(claim: Claim) -> GuardResult:
    """answer_unowned is the answer to a claim that owns nothing, so the
    handler does not run (GUARD.md rows 1-3, 10, 21, 22)."""
    if claim.outcome == Outcome.DUPLICATE:
        return GuardResult(200, claim.result, outcome=claim.outcome, claim=claim)
    if claim.outcome == Outcome.IN_PROGRESS:
        return GuardResult(
            409, IN_PROGRESS_BODY, seconds_until(claim.lease_expires_at), outcome=claim.outcome, claim=claim
        )
    if claim.outcome == Outcome.PAYLOAD_MISMATCH:
        mismatch = PayloadMismatch(f"key {claim.key!r} was claimed with a different payload")
        log.error("claimd: %s/%s: %s", claim.namespace, claim.provider, mismatch)
        return GuardResult(422, PAYLOAD_MISMATCH_BODY, outcome=claim.outcome, error=mismatch, claim=claim)
    if claim.outcome == Outcome.DEFERRED:
        # No token was issued: nothing to release. The provider's retry,
        # after Retry-After, is the replay.
        return GuardResult(409, DEFERRED_BODY, deferred_retry_after(claim), outcome=claim.outcome, claim=claim)
    if claim.outcome == Outcome.SUPERSEDED:
        return GuardResult(200, SUPERSEDED_BODY, outcome=claim.outcome, claim=claim)
    unknown = ClaimdError(f"claim answered outcome {claim.outcome!r}")
    return GuardResult(500, UNEXPECTED_BODY, outcome=claim.outcome, error=unknown, claim=claim)


def deferred_retry_after(claim: Claim) -> int:
    """deferred_retry_after is a DEFERRED claim's retry_after in whole
    seconds, rounded up, at least 1 (1 when claimd sent none)."""
    if claim.retry_after is None:
        return 1
    return max(1, math.ceil(claim.retry_after.total_seconds()))


DELIVERY_FIELDS = (
    "ClaimRequest.delivery",
    "ClaimRequest.event_id",
    "ClaimRequest.key",
    "ClaimRequest.entity_id",
    "ClaimRequest.event_type",
)
"""DELIVERY_FIELDS are the ClaimRequest fields that carry what the provider
sent. An INVALID_ARGUMENT that names only these rejects the delivery itself
(GUARD.md row 4); any other field (lease, window, wait, scope, namespace,
holder, payload_sha256) is the receiver's own configuration (row 25)."""


def rejects_delivery(err: ClaimdError) -> bool:
    """rejects_delivery reports whether err is an INVALID_ARGUMENT whose
    google.rpc.BadRequest names only DELIVERY_FIELDS: a delivery claimd can
    never accept. One without a BadRequest is not: only what claimd says was
    wrong with the delivery may tell a provider to stop retrying."""
    if not isinstance(err, InvalidArgument) or not err.fields:
        return False
    return all(any(f == d or f.startswith((d + " ", d + ".")) for d in DELIVERY_FIELDS) for f in err.fields)


def refused(err: ClaimdError) -> tuple[int, bytes, int | None]:
    """refused is the answer to a claimd call that failed before the handler
    ran (GUARD.md rows 4-9, 25): 400 for a delivery claimd will never accept
    (one it cannot key), 503 with Retry-After when claimd could not answer or
    this principal is over its rate limit (claimd's RetryInfo delay), 500
    otherwise (credentials, grants, an unknown provider, a lease or window
    the provider does not allow: only an operator fixes those, and the
    provider must keep retrying meanwhile)."""
    if rejects_delivery(err):
        return 400, REJECTED_BODY, None
    if isinstance(err, ResourceExhausted):
        wait = math.ceil(err.retry_after) if err.retry_after else UNAVAILABLE_RETRY_AFTER
        return 503, RATE_LIMITED_BODY, max(1, wait)
    if isinstance(err, Unavailable) or err.code == grpc.StatusCode.CANCELLED:
        return 503, UNAVAILABLE_BODY, UNAVAILABLE_RETRY_AFTER
    return 500, REFUSED_BODY, None


def ended_already(err: ClaimdError) -> bool:
    """ended_already reports whether a settle or fail found the record
    SETTLED or FAILED already under this guard's own token: the block ended
    the event itself through the typed calls. The outcome is recorded; the
    stored result stands."""
    if isinstance(err, ResultMismatch):
        return True
    return isinstance(err, InvalidTransition) and err.metadata.get("current_state") in (
        "EVENT_STATE_SETTLED",
        "EVENT_STATE_FAILED",
    )


def taken_over_from_processing(claim: Claim) -> bool:
    """taken_over_from_processing reports whether claim took the key over
    from a holder that had started the side effect: such a key is never
    released (a release resets the state to RECEIVED and would hide it)."""
    return claim.reason == Reason.LEASE_EXPIRED and claim.state == EventState.PROCESSING


def started_by_claim(claim: Claim) -> bool:
    """started_by_claim reports whether the claim (made with start) already
    recorded PROCESSING: a new, released or window-expired key. A
    LEASE_EXPIRED takeover keeps the state its vanished holder reached, so the
    guard still moves it to PROCESSING (a no-op from PROCESSING that checks the
    token)."""
    return claim.reason != Reason.LEASE_EXPIRED and claim.state == EventState.PROCESSING


def encode(result: object) -> bytes:
    """encode applies the guards' result rule (GUARD.md, Results) by the
    client's one serializer (claimd.serialize): bytes-like as they are, str
    as UTF-8, None as empty, anything else as compact JSON in UTF-8, which
    knows dataclasses, pydantic models, Decimal, datetime, UUID and Enum too.
    It raises what the encoder raises for a value it cannot encode: TypeError
    for an unknown type, ValueError for NaN, a cycle or text that is not
    UTF-8."""
    return serialize.encode(result)


def failure_text(err: BaseException) -> bytes:
    """failure_text is the text stored with FAILED: the error's message (its
    class name when empty) in UTF-8, cut to MAX_FAILURE_BYTES on a character
    boundary."""
    text = str(err) or type(err).__name__
    return text.encode("utf-8")[:MAX_FAILURE_BYTES].decode("utf-8", "ignore").encode("utf-8")


# --- heartbeat pacing -----------------------------------------------------------


def heartbeat_pace(rec: Record) -> float:
    """heartbeat_pace is the interval until the next renewal: a third of the
    lease rec holds, no shorter than MIN_HEARTBEAT."""
    lease = rec.lease
    return max(MIN_HEARTBEAT, lease.total_seconds() / 3) if lease is not None else MIN_HEARTBEAT


def first_pace(claim: Claim, lease: Seconds | None) -> float:
    """first_pace is the pace when the claim itself started the event (no
    Transition record to read the lease from): the lease asked for, else the
    one claimd granted, until the claim's lease_expires_at."""
    if lease is not None:
        secs = seconds(lease)
    elif claim.lease_expires_at is not None:
        secs = (claim.lease_expires_at - datetime.now(timezone.utc)).total_seconds()
    else:
        return MIN_HEARTBEAT
    return max(MIN_HEARTBEAT, secs / 3)


# --- the guard's state ------------------------------------------------------------


class EffectRecord(Protocol):
    """EffectRecord is what the guard needs to know of the handler's effect
    (claimd.effects, GUARD.md "Exactly-once effects") when it settles: done
    is true when an earlier holder had committed the effect's fence, and
    result is then the fence's stored result (bytes, or a value encoded by
    the guards' rule)."""

    @property
    def done(self) -> bool: ...

    @property
    def result(self) -> object: ...


class Op(enum.Enum):
    """Op is a call the guard asks its shell to make."""

    CLAIM = "claim"  # client.claim(namespace, provider, **core.claim_args)
    START = "start"  # client.transition(claim, PROCESSING)
    HEARTBEAT = "heartbeat"  # start the heartbeat, first renewal after call.pace
    SETTLE = "settle"  # client.transition(claim, call.to, result=..., effect_recovered=...), detached
    RELEASE = "release"  # client.release(claim), detached


@dataclasses.dataclass(frozen=True)
class Call:
    """Call is the next thing a shell must do for its guard (Op says which);
    to, result and effect_recovered are the Transition of a SETTLE, pace the
    first interval of a HEARTBEAT."""

    op: Op
    to: EventState = EventState.PROCESSING
    result: bytes = b""
    effect_recovered: bool = False
    pace: float = 0.0


def settle_options(call: Call) -> dict[str, bool]:
    """settle_options are the keyword arguments of a SETTLE's Transition
    besides its result: effect_recovered, only when set, so that a
    Client.transition wrapped or replaced with its earlier signature (a test
    double) still settles every delivery without an effect."""
    return {"effect_recovered": True} if call.effect_recovered else {}


_CLAIM = Call(Op.CLAIM)
_START = Call(Op.START)
_RELEASE = Call(Op.RELEASE)


class GuardCore:
    """GuardCore is one guard's state and all its decisions (see the module
    doc): what to call next after each answer, and the answer for the
    provider once decided. on_lost is called once when another holder took
    the key over (the shell sets its cancellation)."""

    def __init__(
        self,
        namespace: str,
        provider: str,
        *,
        event_id: str | None,
        delivery: Delivery | None,
        scope: str,
        payload_sha256: bytes | None,
        lease: Seconds | None,
        holder: str | None,
        wait: Seconds | None,
        entity_id: str,
        event_type: str,
        start: bool,
        on_lost: Callable[[], None],
        window: Seconds | None = None,
    ) -> None:
        if (event_id is None) == (delivery is None):
            raise ValueError("guard: exactly one of event_id or delivery is required")
        self.namespace = namespace
        self.provider = provider
        self.lease = lease
        self.claim_args: dict[str, Any] = {
            "event_id": event_id,
            "delivery": delivery,
            "scope": scope,
            "payload_sha256": payload_sha256,
            "lease": lease,
            "holder": holder,
            "wait": wait,
            "entity_id": entity_id,
            "event_type": event_type,
            "start": start,
        }
        if window is not None:
            # Only when set, so that a Client.claim wrapped or replaced with
            # its earlier signature (a test double) still claims.
            self.claim_args["window"] = window
        self._on_lost = on_lost
        self.claim: Claim | None = None
        self.answer: GuardResult | None = None
        self.lost: ClaimdError | None = None
        self.ran = False
        # done is set as settle or fail begins: the side effect may have
        # happened, and from then on nothing may release the claim.
        self.done = False
        self.effect: EffectRecord | None = None
        """effect is the handler's effect (claimd.effects), set by the guard
        when the handler opens one; settle reads it (GUARD.md row 23)."""
        # What a pending SETTLE answers once claimd recorded it, and what a
        # pending RELEASE answers (_raised: the handler's exception).
        self._body = b""
        self._error: BaseException | None = None
        self._to = EventState.SETTLED
        self._pending: GuardResult | None = None
        self._raised: BaseException | None = None

    @property
    def acquired(self) -> bool:
        """acquired is true while the handler must (or may) do the work."""
        return self.claim is not None and self.claim.acquired and self.answer is None

    def claimed(self) -> Claim:
        """claimed is the Claim; RuntimeError when the Claim call failed."""
        if self.claim is None:
            raise RuntimeError("Guard.claim: the Claim call failed; see Guard.result.error")
        return self.claim

    def check(self) -> None:
        """check raises StaleToken (or NotOwner) once another holder took the
        key over."""
        if self.lost is not None:
            raise self.lost

    def open(self) -> Call:
        """open is the first call: the Claim."""
        return _CLAIM

    def answered(self, call: Call, answer: Any) -> Call | None:
        """answered takes the answer to call and says what to do next."""
        if call.op is Op.CLAIM:
            claim: Claim = answer
            self.claim = claim
            if claim.outcome != Outcome.ACQUIRED:
                self.answer = answer_unowned(claim)
                return None
            if started_by_claim(claim):
                return Call(Op.HEARTBEAT, pace=first_pace(claim, self.lease))
            # A repeat of PROCESSING is a no-op on the server, so a
            # LEASE_EXPIRED taker whose predecessor got that far passes through.
            return _START
        if call.op is Op.START:
            return Call(Op.HEARTBEAT, pace=heartbeat_pace(answer.record))
        if call.op is Op.SETTLE:
            c = self.claimed()
            self.answer = GuardResult(200, self._body, outcome=c.outcome, ran=True, error=self._error, claim=c)
        elif call.op is Op.RELEASE:
            self.answer = self._pending
        return None

    def failed(self, call: Call, err: Exception) -> Call | None:
        """failed takes the error call raised and says what to do next. It
        re-raises an error that is not claimd's, except from a SETTLE: the
        outcome of a settle that failed in any way is unknown (GUARD.md row 19)."""
        if call.op is Op.SETTLE:
            self._settle_failed(err)
            return None
        if not isinstance(err, ClaimdError) or call.op is Op.HEARTBEAT:
            raise err
        if call.op is Op.CLAIM:
            status, body, retry = refused(err)
            if status == 500:
                # UNAUTHENTICATED, PERMISSION_DENIED, an unknown provider and
                # a lease or window the provider does not allow land here:
                # this receiver's configuration is wrong, which only an
                # operator fixes. 500 and not 4xx, so that the provider keeps
                # retrying meanwhile; logged at error, so that someone does.
                log.error("claimd: claim %s/%s refused (configuration): %s", self.namespace, self.provider, err)
            self.answer = GuardResult(status, body, retry, error=err)
            return None
        c = self.claimed()
        if call.op is Op.START:
            if isinstance(err, (StaleToken, NotOwner)):
                self.answer = self._answer_lost(err)
                return None
            status, body, retry = refused(err)
            self._pending = GuardResult(status, body, retry, outcome=c.outcome, error=err, claim=c)
            if taken_over_from_processing(c):
                self.answer = self._pending
                return None
            # The handler did not run: give the key back so that the
            # provider's retry need not wait out the lease (if the release
            # fails, the lease frees the key).
            return _RELEASE
        # RELEASE
        if isinstance(err, (StaleToken, NotOwner)) and self._raised is not None:
            self.answer = dataclasses.replace(self._answer_lost(err), error=self._raised)
            return None
        if not isinstance(err, (StaleToken, NotOwner)):
            # The lease runs out on its own; the next delivery then takes over.
            log.warning("claimd: release %s/%s/%s failed: %s", c.namespace, c.provider, c.key, err)
        self.answer = self._pending
        return None

    def settle(self, result: object) -> Call | None:
        """settle is the decision after the handler returned result (or the
        block called settle): SETTLED with the encoded result, or with the
        fence's stored result and effect_recovered when the handler's effect
        was done by an earlier holder. A result that cannot be encoded or
        stored is settled empty: the side effect happened, and refusing to
        settle would let it run again."""
        self.done = True
        recovered = self.effect is not None and self.effect.done
        if self.effect is not None and recovered:
            result = self.effect.result
        try:
            body = encode(result)
        except Exception as err:  # whatever the encoder raises, the side effect happened
            log.error(
                "claimd: result of type %s cannot be encoded (%s); settling without it", type(result).__name__, err
            )
            return self._finish(EventState.SETTLED, b"", err, recovered)
        return self._finish(EventState.SETTLED, body, None, recovered)

    def fail(self, reason: str | BaseException) -> Call | None:
        """fail is the decision after the handler failed permanently: FAILED
        with the reason's text, answered 200 so the provider stops retrying."""
        self.done = True
        err = reason if isinstance(reason, BaseException) else PermanentError(reason)
        return self._finish(EventState.FAILED, failure_text(err), err, False)

    def _finish(self, to: EventState, body: bytes, error: BaseException | None, recovered: bool) -> Call | None:
        if self.answer is not None:
            raise RuntimeError("Guard: settle() or fail() after the answer was decided")
        claim = self.claim
        if claim is None or not claim.acquired:
            raise RuntimeError("Guard: settle() or fail() without an acquired claim")
        self.ran = True
        if self.lost is not None:
            self.answer = self._answer_lost(self.lost)
            return None
        stored = body
        if len(body) > MAX_RESULT_BYTES:
            log.error(
                "claimd: result of %s is %d bytes, over %d; settling without it", claim.key, len(body), MAX_RESULT_BYTES
            )
            error = error or ValueError(f"result is {len(body)} bytes, over {MAX_RESULT_BYTES}; not stored")
            stored = b""
        self._to, self._body, self._error = to, body, error
        return Call(Op.SETTLE, to, stored, recovered)

    def _settle_failed(self, err: Exception) -> None:
        c = self.claimed()
        if isinstance(err, (StaleToken, NotOwner)):
            self.answer = self._answer_lost(err)
            return
        if isinstance(err, ClaimdError) and ended_already(err):
            # The block ended the event itself; its stored outcome stands,
            # and the provider may stop retrying.
            log.warning("claimd: %s/%s/%s was ended by the handler itself: %s", c.namespace, c.provider, c.key, err)
            self.answer = GuardResult(200, self._body, outcome=c.outcome, ran=True, error=self._error or err, claim=c)
            return
        # Ambiguous: the transition may or may not have been applied. Either
        # way the record is not released, whatever failed (claimd, the
        # network, a bug in this client).
        log.error("claimd: %s %s/%s/%s failed: %s", self._to.name, c.namespace, c.provider, c.key, err)
        self.answer = GuardResult(
            503, UNSETTLED_BODY, UNAVAILABLE_RETRY_AFTER, outcome=c.outcome, ran=True, error=err, claim=c
        )

    def handler_raised(self, exc: BaseException) -> tuple[Call | None, bool]:
        """handler_raised is the decision after exc escaped the handler (or
        the with-block): the next call, and whether to swallow exc. It is the
        only path to a release, and releases only when the handler raised an
        Exception before it returned, on a key not taken over from
        PROCESSING: once settle or fail began, or when the block was
        interrupted (a BaseException that is not an Exception), the side
        effect may have happened. The shell has stopped the heartbeat."""
        if self.done:
            if self.answer is None:
                # settle or fail was itself interrupted (KeyboardInterrupt
                # mid-call): whether it was recorded is unknown. Keep the
                # claim; its lease hands it over with state PROCESSING.
                self.answer = GuardResult(
                    503,
                    UNSETTLED_BODY,
                    UNAVAILABLE_RETRY_AFTER,
                    outcome=Outcome.ACQUIRED,
                    ran=True,
                    error=exc,
                    claim=self.claim,
                )
            return None, False
        if not self.acquired:
            return None, False  # nothing is owned: an exception has nothing to undo
        claim = self.claimed()
        self.ran = True
        if isinstance(exc, PermanentError):
            return self.fail(exc), True
        failed = GuardResult(500, HANDLER_FAILED_BODY, outcome=claim.outcome, ran=True, error=exc, claim=claim)
        where = f"{claim.namespace}/{claim.provider}/{claim.key}"
        if self.lost is not None:
            self.answer = dataclasses.replace(self._answer_lost(self.lost), error=exc)
        elif not isinstance(exc, Exception):
            # An interruption, not the handler saying that nothing happened:
            # leave the claim to its lease, and let it propagate.
            log.warning("claimd: %s interrupted (%r); the key frees at its lease end", where, exc)
            self.answer = failed
        elif taken_over_from_processing(claim):
            # Logged here, once, with its traceback: the guard swallows it
            # (the provider sees a 500), so nothing else would.
            log.error(
                "claimd: handler failed on %s, taken over from PROCESSING; leaving the key to its lease: %r",
                where,
                exc,
                exc_info=exc,
            )
            self.answer = failed
        else:
            log.error("claimd: handler failed on %s; releasing the key for a retry: %r", where, exc, exc_info=exc)
            self._pending, self._raised = failed, exc
            return _RELEASE, True
        return None, isinstance(exc, Exception)

    def abandon(self, err: BaseException) -> None:
        """abandon ends the work without writing anything, after the handler
        returned a result that cannot be stored (claimd.idempotent): the side
        effect may have happened, so the claim is not released, and an empty
        result is not settled either (a duplicate would get it as the
        answer). The lease frees the key; the next delivery acquires it with
        LEASE_EXPIRED and state PROCESSING. The shell has stopped the
        heartbeat."""
        claim = self.claimed()
        self.done = self.ran = True
        log.error(
            "claimd: %s/%s/%s: result not stored (%s); leaving the key to its lease",
            claim.namespace,
            claim.provider,
            claim.key,
            err,
        )
        self.answer = GuardResult(
            503, UNSETTLED_BODY, UNAVAILABLE_RETRY_AFTER, outcome=claim.outcome, ran=True, error=err, claim=claim
        )

    def renewed(self, rec: Record) -> float:
        """renewed is the interval until the next renewal after one succeeded."""
        return heartbeat_pace(rec)

    def renew_failed(self, err: ClaimdError) -> bool:
        """renew_failed says whether the heartbeat keeps renewing after err:
        not once another holder took over (StaleToken, NotOwner, NotFound:
        the handler is cancelled) or the record is terminal (settled or
        failed meanwhile); otherwise yes, at the same pace: the lease is
        still ours until someone takes it over."""
        if isinstance(err, (StaleToken, NotOwner, NotFound)):
            self._lose(err)
            return False
        if isinstance(err, InvalidTransition):
            return False
        c = self.claimed()
        log.warning("claimd: renew %s/%s/%s failed: %s", c.namespace, c.provider, c.key, err)
        return True

    def _lose(self, err: ClaimdError) -> None:
        self.lost = err
        self._on_lost()
        c = self.claim
        if c is not None:
            log.warning("claimd: lost %s/%s/%s (token %d): %s", c.namespace, c.provider, c.key, c.fencing_token, err)

    def _answer_lost(self, err: ClaimdError) -> GuardResult:
        # Another holder owns the delivery now: come back shortly, and meet
        # its IN_PROGRESS with the right Retry-After.
        if self.lost is None:
            self._lose(err)
        return GuardResult(
            409,
            TAKEN_OVER_BODY,
            SUPERSEDED_RETRY_AFTER,
            outcome=Outcome.ACQUIRED,
            ran=self.ran,
            error=err,
            claim=self.claim,
        )


class Cancellation(Protocol):
    """Cancellation is what a guard sets when another holder took over: a
    threading.Event (claimd.guard) or an asyncio.Event (claimd.aio)."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


ClientT = TypeVar("ClientT")
CancelT = TypeVar("CancelT", bound=Cancellation)
FrontT = TypeVar("FrontT", bound="GuardFront[Any, Any]")


class GuardFront(Generic[ClientT, CancelT]):
    """GuardFront is what both Guards show their block, built on one
    GuardCore: client, namespace, provider, lease, cancelled, acquired,
    claim, result and check(). A shell adds the calls (settle, fail, the
    with-block) in its own concurrency model, and _cancellation."""

    _BLOCK = "with-block"  # how the shell's docs name its block, for result's error

    def __init__(
        self,
        client: ClientT,
        namespace: str,
        provider: str,
        *,
        event_id: str | None = None,
        delivery: Delivery | None = None,
        scope: str = "",
        payload_sha256: bytes | None = None,
        lease: Seconds | None = None,
        holder: str | None = None,
        wait: Seconds | None = None,
        entity_id: str = "",
        event_type: str = "",
        start: bool = True,
        window: Seconds | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.provider = provider
        self.lease = lease
        self.cancelled: CancelT = self._cancellation()
        self._core = GuardCore(
            namespace,
            provider,
            event_id=event_id,
            delivery=delivery,
            scope=scope,
            payload_sha256=payload_sha256,
            lease=lease,
            holder=holder,
            wait=wait,
            entity_id=entity_id,
            event_type=event_type,
            start=start,
            on_lost=self.cancelled.set,
            window=window,
        )

    @classmethod
    def _for_key(
        cls: type[FrontT],
        client: Any,
        namespace: str,
        provider: str,
        key: GuardKey,
        *,
        scope: str,
        lease: Seconds | None,
        holder: str | None,
        wait: Seconds | None,
        start: bool,
        window: Seconds | None = None,
        payload_sha256: bytes | None = None,
    ) -> FrontT:
        """_for_key is the guard of a guarded function's call, for the
        delivery its first argument names."""
        event_id, delivery, entity_id, event_type = delivery_of(key)
        return cls(
            client,
            namespace,
            provider,
            event_id=event_id,
            delivery=delivery,
            scope=scope,
            lease=lease,
            holder=holder,
            wait=wait,
            entity_id=entity_id,
            event_type=event_type,
            start=start,
            window=window,
            payload_sha256=payload_sha256,
        )

    def _cancellation(self) -> CancelT:
        raise NotImplementedError

    @property
    def acquired(self) -> bool:
        """acquired is true when the block must do the work."""
        return self._core.acquired

    @property
    def claim(self) -> Claim:
        """claim is claimd's answer. It raises RuntimeError when the Claim
        call itself failed (result.error says why)."""
        return self._core.claimed()

    @property
    def result(self) -> GuardResult:
        """result is the answer for the provider; set once the block ended
        (or as soon as the claim decided that the block must not run)."""
        if self._core.answer is None:
            raise RuntimeError(f"Guard.result is set when the {self._BLOCK} ends")
        return self._core.answer

    def check(self) -> None:
        """check raises StaleToken (or NotOwner) when another holder took the
        key over, so long work stops between steps."""
        self._core.check()


GuardT = TypeVar("GuardT", bound="GuardFront[Any, Any]")


class ClientFront(Generic[GuardT]):
    """ClientFront is what both Clients build alike: guard(). A shell names
    its Guard class in _guard_class."""

    def _guard_class(self) -> type[GuardT]:
        raise NotImplementedError

    def guard(
        self,
        namespace: str,
        provider: str,
        *,
        event_id: str | None = None,
        delivery: Delivery | None = None,
        scope: str = "",
        payload_sha256: bytes | None = None,
        lease: Seconds | None = None,
        holder: str | None = None,
        wait: Seconds | None = None,
        entity_id: str = "",
        event_type: str = "",
        start: bool = True,
        window: Seconds | None = None,
    ) -> GuardT:
        """guard claims a delivery for a with-block (async with, in
        claimd.aio) and settles, fails or releases it as the block ends; see
        Guard. wait lets an IN_PROGRESS claim wait (at most 30s) for the
        holder to finish, or for its lease to run out, before answering.
        entity_id and event_type place an event sent by event_id in its
        entity's lifecycle (a delivery's are read from it). window asks for
        a dedup window longer than the provider's (claimd refuses a shorter
        one; the guard then answers 500, GUARD.md row 25)."""
        return self._guard_class()(
            self,
            namespace,
            provider,
            event_id=event_id,
            delivery=delivery,
            scope=scope,
            payload_sha256=payload_sha256,
            lease=lease,
            holder=holder,
            wait=wait,
            entity_id=entity_id,
            event_type=event_type,
            start=start,
            window=window,
        )

"""The typed wrappers against a real claimd: values, enums and errors."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta, timezone
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2

from claimd import (
    Claim,
    ClaimdError,
    Client,
    Delivery,
    EventState,
    GuardResult,
    InvalidArgument,
    InvalidTransition,
    KeySource,
    Lease,
    NotFound,
    NotOwner,
    Outcome,
    Reason,
    ResultMismatch,
    StaleToken,
    Tier,
)
from claimd._gen.idempotency.v1 import claim_pb2
from claimd.types import PROTO_ENUMS, _enum, _time

# The typed calls and their error mapping: the client contract, over each transport.
pytestmark = pytest.mark.both_transports


def test_enums_print_their_names() -> None:
    # Logs and messages show the proto's names, not numbers; comparisons
    # with ints still hold.
    for py_enum in PROTO_ENUMS:
        for member in py_enum:
            logged = logging.LogRecord("claimd", logging.INFO, __file__, 0, "%s", (member,), None).getMessage()
            assert (str(member), f"{member}", logged) == (member.name,) * 3, f"{py_enum.__name__}.{member.name}"
            assert f"{py_enum.__name__}.{member.name}" in repr(member)
            assert member == member.value and int(member) == member.value
    assert f"{Outcome.DUPLICATE:>12}|" == "   DUPLICATE|"
    r = GuardResult(200, b"", outcome=Outcome.DUPLICATE)
    assert "Outcome.DUPLICATE" in repr(r), repr(r)


def test_enums_mirror_the_proto() -> None:
    for py_enum, (proto_name, prefix) in PROTO_ENUMS.items():
        proto = claim_pb2.DESCRIPTOR.enum_types_by_name[proto_name]
        want = {v.name.removeprefix(prefix): v.number for v in proto.values}
        got = {m.name: m.value for m in py_enum}
        assert got == want, f"{py_enum.__name__} = {got}, want {want} (from {proto_name})"


def test_claim_transition_settle_duplicate(client: Client, ns: str, evt: str) -> None:
    c = client.claim(ns, "stripe", event_id=evt, holder="pod-a", lease=30)
    assert (c.outcome, c.reason, c.fencing_token, c.state) == (Outcome.ACQUIRED, Reason.NEW, 1, EventState.RECEIVED), (
        f"Claim({evt!r}) = {c}"
    )
    assert c.key == evt and c.key_source == KeySource.EVENT_ID and c.holder == "pod-a"
    assert c.attempt == 1 and len(c.attempt_id) == 32
    assert c.ttl == timedelta(hours=84), f"Claim({evt!r}).ttl = {c.ttl}, want Stripe's 72h + 12h"
    assert c.lease_expires_at is not None and c.first_seen_at is not None
    assert c.lease_expires_at - c.first_seen_at == timedelta(seconds=30)
    assert len(c.lease_secret) == 16 and c.lease == Lease(ns, "stripe", evt, 1, c.lease_secret)

    moved = client.transition(c, EventState.PROCESSING)
    assert moved.changed and moved.record.state == EventState.PROCESSING
    again = client.transition(c, EventState.PROCESSING)
    assert not again.changed, "a repeated transition must succeed without changing anything"

    settled = client.transition(c, EventState.SETTLED, result=b'{"charge":"ch_1"}')
    assert settled.record.state == EventState.SETTLED and settled.record.result == b'{"charge":"ch_1"}'

    dup = client.claim(ns, "stripe", event_id=evt)
    assert (dup.outcome, dup.state, dup.result) == (Outcome.DUPLICATE, EventState.SETTLED, b'{"charge":"ch_1"}')
    assert dup.reason == Reason.UNSPECIFIED and dup.served_by != Tier.UNSPECIFIED
    assert (dup.fencing_token, dup.lease_secret) == (0, b""), "only the owner gets the token and secret"
    with pytest.raises(ValueError):
        dup.lease  # noqa: B018 (a duplicate owns nothing)

    rec = client.get(ns, "stripe", evt)
    assert (rec.namespace, rec.provider, rec.key, rec.state, rec.fencing_token, rec.holder) == (
        ns,
        "stripe",
        evt,
        EventState.SETTLED,
        1,
        "pod-a",
    )


def test_release_hands_the_key_to_the_next_claim(client: Client, ns: str, evt: str) -> None:
    first = client.claim(ns, "stripe", event_id=evt)
    rec = client.release(first)
    assert rec.released
    second = client.claim(ns, "stripe", event_id=evt)
    assert (second.outcome, second.reason, second.fencing_token, second.attempt) == (
        Outcome.ACQUIRED,
        Reason.RELEASED,
        2,
        2,
    ), f"Claim({evt!r}) after Release = {second}"


def test_renew_extends_the_lease(client: Client, ns: str, evt: str) -> None:
    c = client.claim(ns, "stripe", event_id=evt, lease=5)
    rec = client.renew(c, lease=timedelta(seconds=120))
    assert rec.lease == timedelta(seconds=120), f"Renew(lease=120s) record lease = {rec.lease}"


def stripe_delivery(event_id: str, amount: int, signature: str) -> Delivery:
    body = json.dumps({"id": event_id, "type": "charge.succeeded", "data": {"amount": amount}}).encode()
    return Delivery(headers={"Stripe-Signature": signature, "Content-Type": "application/json"}, body=body)


def test_delivery_key_is_derived_by_the_server(client: Client, ns: str, evt: str) -> None:
    first = client.claim(ns, "stripe", delivery=stripe_delivery(evt, 100, "t=1,v1=aa"))
    assert (first.outcome, first.key, first.key_source) == (Outcome.ACQUIRED, evt, KeySource.BODY_FIELD)

    # Stripe re-signs every retry: the same event with a new signature is the same key.
    retry = client.claim(ns, "stripe", delivery=stripe_delivery(evt, 100, "t=2,v1=bb"))
    assert (retry.outcome, retry.key) == (Outcome.IN_PROGRESS, evt)

    other_body = client.claim(ns, "stripe", delivery=stripe_delivery(evt, 999, "t=3,v1=cc"))
    assert other_body.outcome == Outcome.PAYLOAD_MISMATCH, f"Claim(other body) outcome = {other_body.outcome}"


def test_payload_sha256_with_event_id(client: Client, ns: str, evt: str) -> None:
    client.claim(ns, "stripe", event_id=evt, payload_sha256=hashlib.sha256(b"a").digest())
    c = client.claim(ns, "stripe", event_id=evt, payload_sha256=hashlib.sha256(b"b").digest())
    assert c.outcome == Outcome.PAYLOAD_MISMATCH


def test_claim_needs_exactly_one_key(client: Client, ns: str) -> None:
    with pytest.raises(ValueError):
        client.claim(ns, "stripe")
    with pytest.raises(ValueError):
        client.claim(ns, "stripe", event_id="evt_1", delivery=Delivery({}, b"{}"))


@dataclass
class ErrorCase:
    desc: str
    call: Callable[[Client, str, Claim], Any]
    want: type[ClaimdError]
    code: grpc.StatusCode
    reason: str
    metadata: dict[str, str] | None = None


ERROR_CASES = [
    ErrorCase(
        desc="transition out of a terminal state",
        call=lambda cl, ns, c: cl.transition(c, EventState.PROCESSING),
        want=InvalidTransition,
        code=grpc.StatusCode.FAILED_PRECONDITION,
        reason="INVALID_TRANSITION",
        metadata={"current_state": "EVENT_STATE_SETTLED", "to": "EVENT_STATE_PROCESSING"},
    ),
    ErrorCase(
        desc="renew of a terminal record",
        call=lambda cl, ns, c: cl.renew(c),
        want=InvalidTransition,
        code=grpc.StatusCode.FAILED_PRECONDITION,
        reason="INVALID_TRANSITION",
    ),
    ErrorCase(
        desc="release of a terminal record",
        call=lambda cl, ns, c: cl.release(c),
        want=InvalidTransition,
        code=grpc.StatusCode.FAILED_PRECONDITION,
        reason="INVALID_TRANSITION",
    ),
    ErrorCase(
        desc="a token never issued",
        call=lambda cl, ns, c: cl.transition(
            dataclasses.replace(c.lease, fencing_token=c.fencing_token + 1), EventState.FAILED
        ),
        want=StaleToken,
        code=grpc.StatusCode.ABORTED,
        reason="STALE_TOKEN",
    ),
    ErrorCase(
        desc="the current token with another secret",
        call=lambda cl, ns, c: cl.transition(dataclasses.replace(c.lease, lease_secret=bytes(16)), EventState.SETTLED),
        want=NotOwner,
        code=grpc.StatusCode.PERMISSION_DENIED,
        reason="NOT_OWNER",
    ),
    ErrorCase(
        desc="get of a missing record",
        call=lambda cl, ns, c: cl.get(ns, "stripe", "evt_never_claimed"),
        want=NotFound,
        code=grpc.StatusCode.NOT_FOUND,
        reason="RECORD_NOT_FOUND",
    ),
    ErrorCase(
        desc="claim for an unknown provider",
        call=lambda cl, ns, c: cl.claim(ns, "no-such-provider", event_id="evt_1"),
        want=NotFound,
        code=grpc.StatusCode.NOT_FOUND,
        reason="PROVIDER_NOT_FOUND",
        metadata={"provider": "no-such-provider"},
    ),
    ErrorCase(
        desc="settle repeated with another result",
        call=lambda cl, ns, c: cl.transition(c, EventState.SETTLED, result=b"another"),
        want=ResultMismatch,
        code=grpc.StatusCode.FAILED_PRECONDITION,
        reason="RESULT_MISMATCH",
        metadata={"current_state": "EVENT_STATE_SETTLED"},
    ),
    ErrorCase(
        desc="bad namespace",
        call=lambda cl, ns, c: cl.claim("Billing", "stripe", event_id="evt_1"),
        want=InvalidArgument,
        code=grpc.StatusCode.INVALID_ARGUMENT,
        reason="INVALID_ARGUMENT",
    ),
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda c: c.desc)
def test_errors(client: Client, ns: str, evt: str, case: ErrorCase) -> None:
    c = client.claim(ns, "stripe", event_id=evt)
    client.transition(c, EventState.PROCESSING)
    client.transition(c, EventState.SETTLED)
    with pytest.raises(ClaimdError) as info:
        case.call(client, ns, c)
    err = info.value
    assert type(err) is case.want, f"{case.desc}: raised {type(err).__name__} ({err}), want {case.want.__name__}"
    assert (err.code, err.reason) == (case.code, case.reason), f"{case.desc}: {err}"
    if case.metadata is not None:
        assert dict(err.metadata) == case.metadata, f"{case.desc}: metadata = {err.metadata}"
    assert isinstance(err.__cause__, grpc.RpcError), f"{case.desc}: the gRPC error must be kept as __cause__"


def test_a_token_read_with_get_does_not_write(client: Client, ns: str, evt: str) -> None:
    owner = client.claim(ns, "stripe", event_id=evt, holder="pod-a")
    before = client.get(ns, "stripe", evt)
    stranger = Lease(ns, "stripe", evt, before.fencing_token, b"made-up secret!!")
    calls: list[Callable[[], Any]] = [
        lambda: client.transition(stranger, EventState.PROCESSING),
        lambda: client.renew(stranger, lease=600),
        lambda: client.release(stranger),
    ]
    for call in calls:
        with pytest.raises(NotOwner) as info:
            call()
        assert info.value.code == grpc.StatusCode.PERMISSION_DENIED, info.value
    assert client.get(ns, "stripe", evt) == before, "a refused write must change nothing"
    assert client.transition(owner, EventState.PROCESSING).changed


def test_the_secret_stays_out_of_reprs(client: Client, ns: str, evt: str) -> None:
    c = client.claim(ns, "stripe", event_id=evt)
    for text in (repr(c), repr(c.lease), str(c.lease)):
        assert c.lease_secret.hex() not in text and repr(c.lease_secret) not in text, text
        assert evt in text


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [
        (0, 0),
        (1_764_000_000, 999_999_999),
        (1_764_000_000, 1_500),
        (-1, 999_999_001),
        (-62135596800, 0),
        (253402300799, 999_999_999),
    ],
)
def test_times_read_as_protobuf_reads_them(seconds: int, nanos: int) -> None:
    ts = timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)
    got = _time(ts, True)
    assert got == ts.ToDatetime(tzinfo=timezone.utc) and got is not None and got.tzinfo == timezone.utc


@pytest.mark.parametrize(("seconds", "nanos"), [(253402300800, 0), (-62135596801, 0), (0, 1_000_000_000), (0, -1)])
def test_a_time_out_of_range_is_refused_as_protobuf_refuses_it(seconds: int, nanos: int) -> None:
    with pytest.raises(ValueError):
        _time(timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos), True)


def test_an_enum_value_this_client_does_not_know_reads_as_unspecified() -> None:
    for py_enum in PROTO_ENUMS:
        assert _enum(py_enum, 10_000) is py_enum(0)
        for member in py_enum:
            assert _enum(py_enum, member.value) is member

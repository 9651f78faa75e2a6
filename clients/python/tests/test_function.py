"""Function mode (claimd.idempotent, sync and asyncio), the serializer, and
the guards' key=, payload=, scope= and window=, against a real claimd."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import logging
import uuid
from decimal import Decimal
from typing import Any

import grpc
import pydantic
import pytest

import claimd.aio
from claimd import (
    Client,
    Delivery,
    EventState,
    InProgress,
    MissingKey,
    PayloadMismatch,
    PermanentError,
    ResultNotStorable,
    idempotent,
)
from claimd.serialize import Serializer, decode, encode
from claimd.testing import ClaimdServer


class Tier(enum.Enum):
    GOLD = "gold"


@dataclasses.dataclass
class Line:
    sku: str
    price: Decimal


@dataclasses.dataclass
class Receipt:
    id: uuid.UUID
    total: Decimal
    at: dt.datetime
    day: dt.date
    tier: Tier
    lines: list[Line]
    note: str | None = None


class Invoice(pydantic.BaseModel):
    number: int
    amount: Decimal
    due: dt.date


def receipt() -> Receipt:
    return Receipt(
        id=uuid.uuid4(),
        total=Decimal("12.30"),
        at=dt.datetime(2026, 12, 3, 7, 0, tzinfo=dt.timezone.utc),
        day=dt.date(2026, 12, 3),
        tier=Tier.GOLD,
        lines=[Line("a", Decimal("10.00")), Line("b", Decimal("2.30"))],
    )


# --- the serializer, by itself ------------------------------------------------------


@pytest.mark.parametrize(
    ("desc", "value", "tp"),
    [
        ("dataclass with nested dataclasses, Decimal, datetime, date, UUID, Enum", receipt(), Receipt),
        ("pydantic model", Invoice(number=7, amount=Decimal("99.90"), due=dt.date(2027, 1, 1)), Invoice),
        ("Decimal", Decimal("0.10"), Decimal),
        ("datetime", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), dt.datetime),
        ("UUID", uuid.UUID(int=7), uuid.UUID),
        ("list of dataclasses", [Line("x", Decimal("1"))], list[Line]),
        ("optional, set", Decimal("5"), Decimal | None),
        ("optional, unset", None, Decimal | None),
        ("str", "charged \u2713", str),
        ("bytes", b"\x00\xff", bytes),
    ],
)
def test_round_trip(desc: str, value: Any, tp: Any) -> None:
    body = Serializer(returns=tp).dumps(value)
    got = Serializer(returns=tp).loads(body)
    assert got == value, f"{desc}: decode(encode(v)) = {got!r}, want {value!r}"
    assert type(got) is type(value), f"{desc}: decoded a {type(got).__name__}, want {type(value).__name__}"


def test_encoding_is_the_guards_rule() -> None:
    assert encode({"a": "é <&>", "n": Decimal("1.50")}) == '{"a":"é <&>","n":"1.50"}'.encode()
    assert encode(None) == b"" and encode("x") == b"x" and encode(b"\x00") == b"\x00"
    assert decode(b'{"a":1}') == {"a": 1}, "without a type a duplicate gets the JSON value"
    assert decode(b"plain text") == "plain text", "text that is not JSON comes back as text"


@pytest.mark.parametrize(
    ("desc", "value"),
    [
        ("an arbitrary object", object()),
        ("NaN", float("nan")),
        ("an infinite Decimal", Decimal("Infinity")),
        ("over 64 KiB", "x" * 65537),
    ],
)
def test_unstorable_results_raise(desc: str, value: Any) -> None:
    with pytest.raises(ResultNotStorable):
        Serializer().dumps(value)


# --- claimd.idempotent ---------------------------------------------------------------


def test_typed_value_on_first_and_duplicate_calls(client: Client, ns: str, evt: str) -> None:
    runs: list[str] = []

    @idempotent(client, ns, "stripe")
    def charge(event_id: str, amount: Decimal) -> Receipt:
        runs.append(event_id)
        r = receipt()
        r.total = amount
        return r

    first = charge(evt, Decimal("12.30"))
    again = charge(evt, Decimal("999"))
    assert isinstance(again, Receipt) and isinstance(again.lines[0], Line) and isinstance(again.id, uuid.UUID)
    assert again == first, f"duplicate = {again}, want the first call's {first}"
    assert runs == [evt], f"charge ran {len(runs)} times, want once"


def test_pydantic_and_decoder(client: Client, ns: str) -> None:
    @client.idempotent(ns, "stripe")
    def invoice(event_id: str) -> Invoice:
        return Invoice(number=1, amount=Decimal("3.5"), due=dt.date(2027, 2, 1))

    eid = f"evt_{uuid.uuid4().hex}"
    assert invoice(eid) == invoice(eid) == Invoice(number=1, amount=Decimal("3.5"), due=dt.date(2027, 2, 1))

    @client.idempotent(ns, "stripe", encoder=lambda v: v.hex(), decoder=lambda b: bytes.fromhex(b.decode()))
    def token(event_id: str) -> Any:
        return b"\x01\x02"

    eid = f"evt_{uuid.uuid4().hex}"
    assert token(eid) == b"\x01\x02" and token(eid) == b"\x01\x02"
    assert client.get(ns, "stripe", eid).result == b"0102", "encoder= decides the stored bytes"


def test_exceptions_propagate_and_release(client: Client, ns: str, evt: str) -> None:
    calls: list[int] = []

    @idempotent(client, ns, "stripe")
    def flaky(event_id: str) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("bank timeout")
        return "ok"

    with pytest.raises(ConnectionError, match="bank timeout"):
        flaky(evt)
    assert client.get(ns, "stripe", evt).released, "a retryable failure releases the key"
    assert flaky(evt) == "ok" and flaky(evt) == "ok"
    assert len(calls) == 2


def test_permanent_error_is_raised_again_for_duplicates(client: Client, ns: str, evt: str) -> None:
    @idempotent(client, ns, "stripe")
    def close(event_id: str) -> str:
        raise PermanentError("account closed")

    for _ in range(2):
        with pytest.raises(PermanentError, match="account closed"):
            close(evt)
    assert client.get(ns, "stripe", evt).state == EventState.FAILED


def test_unstorable_result_raises_before_settling(
    client: Client, ns: str, evt: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A value that cannot be stored is raised before the guard settles:
    nothing is stored empty, and the key is left to its lease (the side
    effect may have happened), so the next call after the lease runs
    again and is told so (LEASE_EXPIRED, PROCESSING)."""
    runs: list[int] = []

    class Opaque:
        pass

    @idempotent(client, ns, "stripe", lease=0.3, wait=10)
    def op(event_id: str) -> Any:
        runs.append(1)
        return Opaque() if len(runs) == 1 else {"ok": True}

    with caplog.at_level(logging.ERROR, logger="claimd"), pytest.raises(ResultNotStorable):
        op(evt)
    rec = client.get(ns, "stripe", evt)
    assert rec.state == EventState.PROCESSING and not rec.released, f"record {rec.state}, want PROCESSING held"
    assert rec.result == b"", "nothing was settled"
    assert any("result not stored" in r.getMessage() for r in caplog.records)
    # The retry waits for the lease (wait=10), takes the key over and runs.
    assert op(evt) == {"ok": True}
    rec = client.get(ns, "stripe", evt)
    assert rec.state == EventState.SETTLED and rec.fencing_token == 2


def test_in_progress_raises(client: Client, ns: str, evt: str) -> None:
    seen: list[InProgress] = []

    @idempotent(client, ns, "stripe")
    def slow(event_id: str) -> str:
        try:
            slow(event_id)
        except InProgress as err:
            seen.append(err)
        return "done"

    assert slow(evt) == "done"
    assert len(seen) == 1 and seen[0].retry_after is not None and seen[0].retry_after >= 1


def test_key_jmespath_and_argument(client: Client, ns: str) -> None:
    runs: list[Any] = []

    @idempotent(client, ns, "stripe", key="order.id", argument="event")
    def ship(tenant: str, event: dict[str, Any]) -> int:
        runs.append(event)
        return len(runs)

    oid = uuid.uuid4().hex
    assert ship("acme", {"order": {"id": oid, "note": 1}}) == 1
    assert ship("acme", event={"order": {"id": oid, "note": 2}}) == 1
    assert client.get(ns, "stripe", oid).state == EventState.SETTLED, "the JMESPath value is the event id"
    with pytest.raises(MissingKey):
        ship("acme", {"order": {}})
    assert len(runs) == 1


def test_key_callable_and_scope_keep_functions_apart(client: Client, ns: str, evt: str) -> None:
    """Two functions guarded on one delivery share its key unless scope= keeps them apart."""

    @idempotent(client, ns, "stripe", key=lambda e: e["id"])
    def email(e: dict[str, Any]) -> str:
        return "mailed"

    @idempotent(client, ns, "stripe", key=lambda e: e["id"])
    def ledger_unscoped(e: dict[str, Any]) -> str:
        return "booked"

    @idempotent(client, ns, "stripe", key=lambda e: e["id"], scope="ledger")
    def ledger(e: dict[str, Any]) -> str:
        return "booked"

    assert email({"id": evt}) == "mailed"
    assert ledger_unscoped({"id": evt}) == "mailed", "without scope the second function gets the first one's result"
    assert ledger({"id": evt}) == "booked", "scope= keeps the second function apart"


def test_payload_subset(client: Client, ns: str, evt: str) -> None:
    """payload= hashes the part a duplicate must repeat: a changing
    timestamp is a duplicate, another amount a PayloadMismatch."""

    @client.guarded(ns, "stripe", key="id", payload="[amount, currency]")
    def pay(g: Any, event: dict[str, Any]) -> str:
        return f"paid {event['amount']}"

    first = pay({"id": evt, "amount": 100, "currency": "eur", "sent_at": 1})
    assert first.status == 200 and first.body == b"paid 100"
    again = pay({"id": evt, "amount": 100, "currency": "eur", "sent_at": 2})
    assert (again.status, again.body, again.ran) == (200, b"paid 100", False)
    other = pay({"id": evt, "amount": 999, "currency": "eur", "sent_at": 3})
    assert other.status == 422 and isinstance(other.error, PayloadMismatch)

    @idempotent(client, ns, "stripe", payload=lambda event_id, amount: amount, scope="fn")
    def pay_fn(event_id: str, amount: int) -> int:
        return amount

    assert pay_fn(evt, 5) == 5 and pay_fn(evt, 5) == 5
    with pytest.raises(PayloadMismatch):
        pay_fn(evt, 6)


def test_payload_needs_an_event_id(client: Client, ns: str) -> None:
    @client.guarded(ns, "stripe", payload="amount")
    def handle(g: Any, event: dict[str, Any]) -> None:
        return None

    with pytest.raises(TypeError, match="payload= needs a key by event id"):
        handle(Delivery({}, b'{"id": "evt_1", "amount": 1}'), {"amount": 1})


def test_guarded_key_reads_the_handlers_arguments(client: Client, ns: str, evt: str) -> None:
    @client.guarded(ns, "stripe", key="data.object.id")
    def handle(g: Any, event: dict[str, Any]) -> dict[str, Any]:
        return {"key": g.claim.key}

    r = handle({"data": {"object": {"id": evt}}})
    assert r.status == 200 and r.body == f'{{"key":"{evt}"}}'.encode()


def test_guard_form_stores_typed_results(client: Client, ns: str, evt: str) -> None:
    """The guard form encodes dataclasses, Decimal and datetime too (they
    were stored empty before the one serializer)."""

    @client.guarded(ns, "stripe")
    def handle(g: Any) -> Receipt:
        return receipt()

    r = handle(evt)
    assert r.status == 200 and r.error is None and r.body
    assert client.get(ns, "stripe", evt).result == r.body
    assert decode(r.body, Receipt).total == Decimal("12.30")


def test_refused_lease_is_a_500_logged_at_error(client: Client, ns: str, caplog: pytest.LogCaptureFixture) -> None:
    """GUARD.md row 25: a lease over the provider's max_lease is the
    receiver's configuration, not the delivery's: 500 (the provider keeps
    retrying), logged at error level; a delivery claimd cannot key is
    still 400 (row 4)."""

    @client.guarded(ns, "stripe", lease=dt.timedelta(hours=1))
    def handle(g: Any) -> None:
        raise AssertionError("must not run")

    with caplog.at_level(logging.ERROR, logger="claimd"):
        r = handle(f"evt_{uuid.uuid4().hex}")
    assert r.status == 500 and r.body == b"claimd refused the delivery\n"
    assert r.error is not None and "ClaimRequest.lease" in r.error.fields  # type: ignore[attr-defined]
    assert [m for m in caplog.records if m.levelno == logging.ERROR and "configuration" in m.getMessage()]

    @client.guarded(ns, "stripe")
    def keyed(g: Any) -> None:
        raise AssertionError("must not run")

    bad = keyed(Delivery({"Content-Type": "application/json"}, b"not json"))
    assert bad.status == 400, f"an unkeyable delivery = {bad.status}, want 400"


# --- asyncio -----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_aio_idempotent(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    async with claimd.aio.Client(claimd_server.grpc_address) as aclient:
        await _aio_idempotent(aclient, ns, evt)


async def _aio_idempotent(aclient: claimd.aio.Client, ns: str, evt: str) -> None:
    runs: list[int] = []

    @aclient.idempotent(ns, "stripe", key="id", payload="amount")
    async def charge(event: dict[str, Any]) -> Receipt:
        runs.append(1)
        return receipt()

    first = await charge({"id": evt, "amount": 1})
    again = await charge({"id": evt, "amount": 1})
    assert isinstance(again, Receipt) and again == first and len(runs) == 1
    with pytest.raises(PayloadMismatch):
        await charge({"id": evt, "amount": 2})

    @claimd.aio.idempotent(aclient, ns, "stripe", scope="raises")
    async def boom(event_id: str) -> None:
        raise ValueError("nope")

    with pytest.raises(ValueError, match="nope"):
        await boom(evt)
    assert (await aclient.get(ns, "stripe", evt + "\x1fraises")).released


class Capture(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Capture keeps the ClaimRequests a client sends."""

    def __init__(self) -> None:
        self.claims: list[Any] = []

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if details.method.endswith("/Claim"):
            self.claims.append(request)
        return continuation(details, request)


def test_window_is_sent_per_call(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    """window= goes out as ClaimRequest.window, per decorator; claimd
    decides what it allows (never shorter than the provider's window)."""
    capture = Capture()
    with Client(claimd_server.grpc_address, interceptors=[capture]) as c:

        @c.guarded(ns, "stripe", window=dt.timedelta(days=30))
        def handle(g: Any) -> str:
            return "ok"

        @c.idempotent(ns, "stripe", scope="plain")
        def plain(event_id: str) -> str:
            return "ok"

        assert handle(evt).status == 200
        assert plain(evt) == "ok"
    assert capture.claims[0].HasField("window") and capture.claims[0].window.seconds == 30 * 86400
    assert not capture.claims[1].HasField("window"), "no window= sends none: the provider's window"


def test_window_longer_is_kept_shorter_is_a_500(client: Client, ns: str, evt: str) -> None:
    """claimd opens the window a call asks for when it is at least the
    provider's; a shorter one is the receiver's configuration: 500 (GUARD.md
    row 25), never a 4xx that drops the event."""

    @client.guarded(ns, "stripe", window=dt.timedelta(days=30))
    def long(g: Any) -> str:
        return "ok"

    r = long(evt)
    assert r.status == 200 and r.claim is not None and r.claim.ttl == dt.timedelta(days=30)

    @client.guarded(ns, "stripe", window=dt.timedelta(hours=1))
    def short(g: Any) -> str:
        raise AssertionError("must not run")

    r = short(f"evt_{uuid.uuid4().hex}")
    assert (r.status, r.body) == (500, b"claimd refused the delivery\n")
    assert r.error is not None and "ClaimRequest.window" in r.error.fields  # type: ignore[attr-defined]

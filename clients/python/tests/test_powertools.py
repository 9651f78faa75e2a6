"""claimd.powertools: Powertools for AWS Lambda (Python) idempotency, run
unchanged on claimd through ClaimdPersistenceLayer, against a real claimd.

Each test is one of the scenarios Powertools documents for its idempotency
utility (the idempotent decorator on a handler, idempotent_function with
data_keyword_argument, event_key_jmespath, payload_validation_jmespath,
raise_on_no_idempotency_key, expires_after_seconds, a call in progress, a
handler that raises, response_hook, use_local_cache), written as its docs
write them, with the persistence store swapped; plus what claimd adds
(fencing: an update after a takeover is refused).

The claimd here runs the built-in registry plus two providers of its own
(--providers, extends: builtin): "lambda" (a 2h window, 60s lease) and
"lambda-short" (a 3s window, 1s lease) for expiry and takeovers.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyKeyError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord
from conftest import target_for
from connectproxy import ConnectProxy

from claimd import Client, EventState
from claimd.powertools import ClaimdPersistenceLayer
from claimd.testing import ClaimdServer

PROVIDERS = """version: 1
extends: builtin
providers:
  lambda:
    retry_horizon: 1h
    margin: 1h
    lease: 60s
    max_lease: 10m
    source: https://docs.powertools.aws.dev/lambda/python/latest/utilities/idempotency/
    reviewed_on: 2026-12-01
  lambda-short:
    retry_horizon: 2s
    margin: 1s
    lease: 1s
    max_lease: 2s
    source: https://docs.powertools.aws.dev/lambda/python/latest/utilities/idempotency/
    reviewed_on: 2026-12-01
"""


@pytest.fixture(scope="module")
def pt_server(claimd_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClaimdServer]:
    d = tmp_path_factory.mktemp("powertools")
    providers = d / "providers.yaml"
    providers.write_text(PROVIDERS)
    server = ClaimdServer.start(claimd_binary, d / "data", extra_args=("--providers", str(providers)))
    yield server
    assert server.stop() == 0, server.tail()


class CountingInterceptor(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """CountingInterceptor counts the ClaimService calls the layer makes."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        self.calls.append(details.method.rsplit("/", 1)[-1])
        return continuation(details, request)


@pytest.fixture
def counter() -> CountingInterceptor:
    return CountingInterceptor()


@pytest.fixture
def pt_client(pt_server: ClaimdServer, counter: CountingInterceptor, transport: str) -> Iterator[Client]:
    """pt_client is the layer's client over each transport; counter sees its
    calls through the interceptor (gRPC) or a ConnectProxy (Connect)."""
    if transport == "grpc":
        with Client(pt_server.grpc_address, interceptors=[counter]) as c:
            yield c
        return

    def count(method: str, request: Any) -> None:
        counter.calls.append(method)

    with ConnectProxy(pt_server.http_address, count) as proxy, Client(proxy.url) as c:
        yield c


@pytest.fixture
def store(pt_client: Client, ns: str) -> ClaimdPersistenceLayer:
    return ClaimdPersistenceLayer(pt_client, namespace=ns, provider="lambda")


class LambdaContext:
    """LambdaContext is the part of Lambda's context Powertools reads."""

    function_name = "claimd-powertools-test"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def only_record(client: Client, ns: str, provider: str, store: ClaimdPersistenceLayer, data: Any) -> Any:
    """only_record reads the claimd record Powertools keys data by."""
    key = store._get_hashed_idempotency_key(data)
    assert key is not None
    return client.get(ns, provider, key)


def test_idempotent_handler_runs_once(store: ClaimdPersistenceLayer, pt_client: Client, ns: str) -> None:
    """Docs: the idempotent decorator on a Lambda handler; the whole event is the key."""
    runs: list[str] = []

    @idempotent(persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        runs.append(event["order"])
        return {"payment_id": f"pay_{event['order']}", "message": "success", "statusCode": 200}

    event = {"order": uuid.uuid4().hex, "amount": 100}
    first = handler(event, LambdaContext())
    again = handler(dict(event), LambdaContext())
    assert again == first, f"duplicate answered {again}, want the first response {first}"
    assert runs == [event["order"]], f"handler ran {len(runs)} times, want 1"
    rec = only_record(pt_client, ns, "lambda", store, event)
    assert rec.state == EventState.SETTLED, f"claimd record state {rec.state}, want SETTLED"
    assert rec.fencing_token == 1


def test_idempotent_function_data_keyword_argument(store: ClaimdPersistenceLayer) -> None:
    """Docs: idempotent_function with data_keyword_argument and
    event_key_jmespath on the argument; register_lambda_context."""
    config = IdempotencyConfig(event_key_jmespath="order_id")
    runs: list[str] = []

    @idempotent_function(data_keyword_argument="order", config=config, persistence_store=store)
    def process_order(order: dict[str, Any]) -> dict[str, Any]:
        runs.append(order["order_id"])
        return {"processed": order["order_id"], "items": len(order["items"])}

    config.register_lambda_context(LambdaContext())
    order_id = uuid.uuid4().hex
    first = process_order(order={"order_id": order_id, "items": ["a", "b"]})
    # The key is order_id alone: other items are the same order.
    again = process_order(order={"order_id": order_id, "items": ["c"]})
    other = process_order(order={"order_id": uuid.uuid4().hex, "items": []})
    assert first == {"processed": order_id, "items": 2}
    assert again == first, f"duplicate answered {again}, want {first}"
    assert other["items"] == 0
    assert len(runs) == 2, f"process_order ran {len(runs)} times for two orders, want 2"


@dataclasses.dataclass
class Order:
    order_id: str
    amount: int


def test_idempotent_function_dataclass_output(store: ClaimdPersistenceLayer) -> None:
    """Docs: idempotent_function with a dataclass input and output_serializer."""
    from aws_lambda_powertools.utilities.idempotency.serialization.dataclass import DataclassSerializer

    config = IdempotencyConfig(event_key_jmespath="order_id")

    @idempotent_function(
        data_keyword_argument="order",
        config=config,
        persistence_store=store,
        output_serializer=DataclassSerializer(model=Order),
    )
    def charge(order: Order) -> Order:
        return Order(order.order_id, order.amount * 2)

    o = Order(uuid.uuid4().hex, 21)
    first = charge(order=o)
    again = charge(order=o)
    assert isinstance(again, Order), f"duplicate is a {type(again).__name__}, want Order"
    assert again == first == Order(o.order_id, 42)


def test_event_key_jmespath_selects_the_key(store: ClaimdPersistenceLayer) -> None:
    """Docs: event_key_jmespath with powertools_json(body) and a multi-select."""
    config = IdempotencyConfig(event_key_jmespath='powertools_json(body).["user", "product_id"]')
    runs: list[int] = []

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        runs.append(1)
        return {"statusCode": 200, "body": event["body"]}

    user = uuid.uuid4().hex
    e1 = {"body": f'{{"user": "{user}", "product_id": "123456789", "charge_type": "subscription"}}'}
    e2 = {"body": f'{{"user": "{user}", "product_id": "123456789", "charge_type": "one-off"}}'}
    first = handler(e1, LambdaContext())
    assert handler(e2, LambdaContext()) == first, "a delivery with the same user and product is a duplicate"
    assert len(runs) == 1


def test_payload_validation_jmespath(store: ClaimdPersistenceLayer) -> None:
    """Docs: payload_validation_jmespath: the same key with another amount
    raises IdempotencyValidationError; the same amount is a duplicate."""
    config = IdempotencyConfig(event_key_jmespath="[userDetail, productId]", payload_validation_jmespath="amount")

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return {"message": "success", "amount": event["amount"]}

    user = uuid.uuid4().hex
    first = handler({"userDetail": user, "productId": 1, "amount": 100}, LambdaContext())
    assert handler({"userDetail": user, "productId": 1, "amount": 100, "note": "x"}, LambdaContext()) == first
    with pytest.raises(IdempotencyValidationError):
        handler({"userDetail": user, "productId": 1, "amount": 101}, LambdaContext())


def test_payload_validation_from_local_cache(pt_client: Client, ns: str) -> None:
    """payload validation holds when the record comes from Powertools' local
    cache or from a read of claimd's record (_get_record) too."""
    store = ClaimdPersistenceLayer(pt_client, namespace=ns, provider="lambda")
    config = IdempotencyConfig(event_key_jmespath="id", payload_validation_jmespath="amount", use_local_cache=True)

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> int:
        return int(event["amount"])

    eid = uuid.uuid4().hex
    assert handler({"id": eid, "amount": 5}, LambdaContext()) == 5
    assert handler({"id": eid, "amount": 5}, LambdaContext()) == 5
    with pytest.raises(IdempotencyValidationError):
        handler({"id": eid, "amount": 6}, LambdaContext())
    # A layer without the cache reads claimd's record (its SHA-256 of the payload hash).
    fresh = ClaimdPersistenceLayer(pt_client, namespace=ns, provider="lambda")
    fresh.configure(config, function_name=f"{handler.__module__}.{handler.__qualname__}")
    key = store._get_hashed_idempotency_key({"id": eid})
    assert key is not None
    rec = fresh._get_record(key)
    fresh._validate_payload({"id": eid, "amount": 5}, rec)
    with pytest.raises(IdempotencyValidationError):
        fresh._validate_payload({"id": eid, "amount": 6}, rec)


def test_raise_on_no_idempotency_key(store: ClaimdPersistenceLayer, counter: CountingInterceptor) -> None:
    """Docs: raise_on_no_idempotency_key: an event without the key raises
    IdempotencyKeyError and claimd is not asked."""
    config = IdempotencyConfig(event_key_jmespath='["user.email", "order_id"]', raise_on_no_idempotency_key=True)

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return {"ok": True}

    with pytest.raises(IdempotencyKeyError):
        handler({"user": {"uid": "BB0D045C"}, "order_id": None}, LambdaContext())
    assert "Claim" not in counter.calls, f"claimd was asked: {counter.calls}"


def test_expires_after_seconds(pt_client: Client, ns: str) -> None:
    """Docs: expires_after_seconds: once the record expired, the same event
    runs again. claimd keeps a record for the provider's window at least
    (lambda-short: 3s), so that window decides here."""
    store = ClaimdPersistenceLayer(pt_client, namespace=ns, provider="lambda-short")
    config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=1)
    runs: list[int] = []

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> int:
        runs.append(1)
        return len(runs)

    event = {"id": uuid.uuid4().hex}
    assert handler(event, LambdaContext()) == 1
    assert handler(event, LambdaContext()) == 1, "a duplicate within the window runs again"
    rec = only_record(pt_client, ns, "lambda-short", store, event)
    assert rec.window_expires_at is not None
    # Wait for the window to end, on claimd's record: the condition observed
    # is the window's end itself (there is nothing to synchronise with).
    deadline = time.monotonic() + 10
    while time.time() <= rec.window_expires_at.timestamp():
        assert time.monotonic() < deadline, "the window did not end within 10s"
        time.sleep(0.05)
    assert handler(event, LambdaContext()) == 2, "an expired record must let the event run again"
    assert len(runs) == 2


def test_expires_after_seconds_longer_than_the_providers_window(pt_client: Client, ns: str) -> None:
    """An expires_after_seconds longer than the provider's window is sent as
    the claim's window: the record outlives the provider's 3s."""
    store = ClaimdPersistenceLayer(pt_client, namespace=ns, provider="lambda-short")
    config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=3600)

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> str:
        return "once"

    event = {"id": uuid.uuid4().hex}
    assert handler(event, LambdaContext()) == "once"
    rec = only_record(pt_client, ns, "lambda-short", store, event)
    assert rec.first_seen_at is not None and rec.window_expires_at is not None
    window = rec.window_expires_at - rec.first_seen_at
    assert window == timedelta(hours=1), f"record window {window}, want expires_after_seconds (1h)"


def test_in_progress(store: ClaimdPersistenceLayer) -> None:
    """Docs: a second call while the first is in progress raises
    IdempotencyAlreadyInProgressError (claimd: IN_PROGRESS, the holder's
    lease is live)."""
    seen: list[BaseException] = []

    @idempotent(persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> str:
        if event.get("nested") is None:
            try:
                handler({**event}, context)  # the same event, while this call holds it
            except IdempotencyAlreadyInProgressError as err:
                seen.append(err)
        return "done"

    assert handler({"id": uuid.uuid4().hex}, LambdaContext()) == "done"
    assert len(seen) == 1, "the concurrent call must raise IdempotencyAlreadyInProgressError"


def test_handler_exception_deletes_the_record(store: ClaimdPersistenceLayer, pt_client: Client, ns: str) -> None:
    """Docs: a handler that raises deletes the record, so the retry runs
    (claimd: the claim is released, fenced)."""
    attempts: list[int] = []

    @idempotent(persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("payment provider timed out")
        return "paid"

    event = {"id": uuid.uuid4().hex}
    with pytest.raises(RuntimeError, match="timed out"):
        handler(event, LambdaContext())
    rec = only_record(pt_client, ns, "lambda", store, event)
    assert rec.released, "the failed call must release the key"
    assert handler(event, LambdaContext()) == "paid"
    assert handler(event, LambdaContext()) == "paid"
    assert len(attempts) == 2
    assert only_record(pt_client, ns, "lambda", store, event).fencing_token == 2


def test_response_hook_on_duplicates(store: ClaimdPersistenceLayer) -> None:
    """Docs: response_hook runs on a duplicate's response (with the record), not on the first call."""
    hooked: list[DataRecord] = []

    def hook(response: Any, record: DataRecord) -> Any:
        hooked.append(record)
        return {
            **response,
            "x-idempotent-key": record.idempotency_key,
            "x-idempotent-expiration": record.expiry_timestamp,
        }

    config = IdempotencyConfig(event_key_jmespath="order_id", response_hook=hook)

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        return {"order": event["order_id"]}

    event = {"order_id": uuid.uuid4().hex}
    first = handler(event, LambdaContext())
    assert first == {"order": event["order_id"]} and not hooked
    again = handler(event, LambdaContext())
    assert len(hooked) == 1
    assert again["order"] == event["order_id"]
    assert again["x-idempotent-key"] == hooked[0].idempotency_key
    assert again["x-idempotent-expiration"] and again["x-idempotent-expiration"] > time.time()


def test_use_local_cache(store: ClaimdPersistenceLayer, counter: CountingInterceptor) -> None:
    """Docs: use_local_cache: a duplicate in the same process is answered
    from memory, without asking the store."""
    config = IdempotencyConfig(event_key_jmespath="id", use_local_cache=True, local_cache_max_items=16)
    runs: list[int] = []

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
        runs.append(1)
        return {"n": len(runs)}

    event = {"id": uuid.uuid4().hex}
    assert handler(event, LambdaContext()) == {"n": 1}
    asked = list(counter.calls)
    assert asked == ["GetProvider", "Claim", "Transition"], f"first call made {asked}"
    for _ in range(3):
        assert handler(event, LambdaContext()) == {"n": 1}
    assert counter.calls == asked, f"duplicates asked claimd: {counter.calls[len(asked) :]}"


def test_takeover_refuses_the_late_update(pt_client: Client, ns: str) -> None:
    """claimd's fencing under Powertools: a handler that outlives its lease
    is taken over; its update is refused (Powertools raises
    IdempotencyPersistenceLayerError) and the new holder's record stands."""
    store = ClaimdPersistenceLayer(pt_client, namespace=ns, provider="lambda-short")
    config = IdempotencyConfig(event_key_jmespath="id")
    event = {"id": uuid.uuid4().hex}

    def take_over() -> Any:
        key = store._get_hashed_idempotency_key(event)
        # Waits for the handler's lease (1s) to end, then acquires.
        other = pt_client.claim(ns, "lambda-short", event_id=key, wait=10, lease=2)
        assert other.acquired, f"takeover claim = {other.outcome}, want ACQUIRED"
        pt_client.transition(other, EventState.SETTLED, result=b'"by the new holder"')
        return other

    taken: list[Any] = []

    @idempotent(config=config, persistence_store=store)
    def handler(event: dict[str, Any], context: LambdaContext) -> str:
        taken.append(take_over())
        return "by the late holder"

    with pytest.raises(IdempotencyPersistenceLayerError):
        handler(event, LambdaContext())
    rec = only_record(pt_client, ns, "lambda-short", store, event)
    assert rec.result == b'"by the new holder"', f"stored {rec.result!r}, want the new holder's"
    assert rec.fencing_token == taken[0].fencing_token == 2


@pytest.mark.both_transports
def test_address_and_import_guard(pt_server: ClaimdServer, ns: str, transport: str) -> None:
    """A layer made from an address (or a URL: Connect) makes its own client; client options on a Client are refused."""
    store = ClaimdPersistenceLayer(target_for(pt_server, transport), namespace=ns, provider="lambda", timeout=3.0)
    try:
        assert (store.client.timeout, store.client.transport) == (3.0, transport)

        @idempotent_function(data_keyword_argument="x", persistence_store=store)
        def double(x: int) -> int:
            return x * 2

        assert double(x=21) == 42
        assert double(x=21) == 42
    finally:
        store.client.close()
    with pytest.raises(TypeError):
        ClaimdPersistenceLayer(store.client, namespace=ns, provider="lambda", timeout=1.0)


def test_abandoned_claims_are_forgotten(pt_client: Client, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call Powertools never finishes (its output serializer raised before
    the update) leaves its record in progress and its claim held; once over
    the bound, claims whose lease ended ABANDONED_AFTER ago are dropped."""
    import claimd.powertools as cp

    monkeypatch.setattr(cp, "_MAX_HELD", 1)
    monkeypatch.setattr(cp, "ABANDONED_AFTER", timedelta(0))
    store = ClaimdPersistenceLayer(pt_client, namespace=ns, provider="lambda-short")

    class Broken:
        def to_dict(self, data: Any) -> dict[str, Any]:
            raise ValueError("cannot serialize")

        def from_dict(self, data: dict[str, Any]) -> Any:
            return data

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=store,
        config=IdempotencyConfig(event_key_jmespath="id"),
        output_serializer=Broken(),
    )
    def process(order: dict[str, str]) -> str:
        return "done"

    first = {"id": uuid.uuid4().hex}
    with pytest.raises(IdempotencyPersistenceLayerError):
        process(order=first)
    key = store._get_hashed_idempotency_key(first)
    assert key in store._held, "the unfinished call's claim is held"
    rec = only_record(pt_client, ns, "lambda-short", store, first)
    assert rec.state == EventState.PROCESSING, "nothing was stored for the unfinished call"
    assert rec.lease_expires_at is not None
    deadline = time.monotonic() + 10
    while time.time() <= rec.lease_expires_at.timestamp():  # the lease's end is the condition
        assert time.monotonic() < deadline, "the lease did not end within 10s"
        time.sleep(0.05)
    with pytest.raises(IdempotencyPersistenceLayerError):
        process(order={"id": uuid.uuid4().hex})
    assert key not in store._held, "the abandoned claim must be forgotten once over the bound"
    assert len(store._held) == 1

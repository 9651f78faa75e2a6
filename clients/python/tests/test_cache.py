"""The client's duplicate cache (Client(local_cache=N), claimd.aio too):
settled answers only, within their window, bounded, off by default; against
a real claimd, counting the Claim calls that reach it."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import grpc
import pytest

import claimd.aio
from claimd import Client, EventState, Outcome
from claimd._cache import DuplicateCache
from claimd.testing import ClaimdServer


class Counter(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.claims = 0

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if details.method.endswith("/Claim"):
            self.claims += 1
        return continuation(details, request)


@pytest.fixture
def counted(claimd_server: ClaimdServer) -> Iterator[tuple[Client, Counter]]:
    counter = Counter()
    with Client(claimd_server.grpc_address, interceptors=[counter], local_cache=2) as c:
        yield c, counter


def test_settled_duplicates_are_answered_locally(counted: tuple[Client, Counter], ns: str, evt: str) -> None:
    client, counter = counted

    @client.guarded(ns, "stripe")
    def handle(g: Any) -> str:
        return "charged"

    first = handle(evt)
    assert first.status == 200 and counter.claims == 1
    for _ in range(3):
        r = handle(evt)
        assert (r.status, r.body, r.ran) == (200, b"charged", False)
        assert r.claim is not None and r.claim.cached and r.claim.outcome == Outcome.DUPLICATE
    assert counter.claims == 1, f"{counter.claims} Claim calls reached claimd, want 1 (duplicates from the cache)"


def test_only_settled_answers_are_kept(counted: tuple[Client, Counter], ns: str, evt: str) -> None:
    """An ACQUIRED, IN_PROGRESS or released key always asks claimd."""
    client, counter = counted
    held = client.claim(ns, "stripe", event_id=evt)
    assert held.acquired
    assert client.claim(ns, "stripe", event_id=evt).outcome == Outcome.IN_PROGRESS
    client.release(held)
    again = client.claim(ns, "stripe", event_id=evt, start=True)
    assert again.acquired and not again.cached
    assert counter.claims == 3
    client.transition(again, EventState.FAILED, result=b"declined")
    dup = client.claim(ns, "stripe", event_id=evt)
    assert dup.cached and dup.state == EventState.FAILED and dup.result == b"declined"
    assert counter.claims == 3


def test_a_duplicate_claimd_answered_is_kept(counted: tuple[Client, Counter], ns: str, evt: str) -> None:
    """A DUPLICATE claimd answered (another process settled it) is kept too;
    another payload digest asks claimd, which answers PAYLOAD_MISMATCH."""
    client, counter = counted
    digest = hashlib.sha256(b"a").digest()
    with Client(client.target) as other:
        c = other.claim(ns, "stripe", event_id=evt, payload_sha256=digest, start=True)
        other.transition(c, EventState.SETTLED, result=b"done elsewhere")
    assert client.claim(ns, "stripe", event_id=evt, payload_sha256=digest).outcome == Outcome.DUPLICATE
    cached = client.claim(ns, "stripe", event_id=evt, payload_sha256=digest)
    assert cached.cached and cached.result == b"done elsewhere" and counter.claims == 1
    other_payload = client.claim(ns, "stripe", event_id=evt, payload_sha256=hashlib.sha256(b"b").digest())
    assert other_payload.outcome == Outcome.PAYLOAD_MISMATCH and counter.claims == 2


def test_bounded_lru(counted: tuple[Client, Counter], ns: str) -> None:
    client, counter = counted
    ids = [f"evt_{uuid.uuid4().hex}" for _ in range(3)]
    for eid in ids:
        c = client.claim(ns, "stripe", event_id=eid, start=True)
        client.transition(c, EventState.SETTLED, result=eid.encode())
    assert counter.claims == 3
    assert client.claim(ns, "stripe", event_id=ids[2]).cached
    assert client.claim(ns, "stripe", event_id=ids[1]).cached
    first = client.claim(ns, "stripe", event_id=ids[0])
    assert not first.cached and first.outcome == Outcome.DUPLICATE, "the least recently used entry was evicted"
    assert counter.claims == 4


def test_an_entry_ends_with_its_window() -> None:
    """An entry past its window_expires_at is dropped (read on the local clock)."""
    clock = [datetime(2026, 12, 3, tzinfo=timezone.utc)]
    cache = DuplicateCache(4, now=lambda: clock[0])
    base: Any = None
    from claimd.types import Claim, KeySource, Reason, Tier

    base = Claim(
        namespace="ns",
        provider="stripe",
        outcome=Outcome.DUPLICATE,
        reason=Reason.UNSPECIFIED,
        key="evt_1",
        key_source=KeySource.EVENT_ID,
        fencing_token=1,
        state=EventState.SETTLED,
        lease_expires_at=None,
        window_expires_at=clock[0] + timedelta(hours=1),
        ttl=None,
        attempt=1,
        first_seen_at=None,
        result=b"r",
        served_by=Tier.DURABLE,
        holder="h",
    )
    args: dict[str, Any] = {
        "event_id": "evt_1",
        "scope": "",
        "payload_sha256": None,
        "entity_id": "",
        "attempt_id": "a",
    }
    cache.remember_claim(base, None)
    assert cache.lookup("ns", "stripe", **args) is not None
    clock[0] += timedelta(hours=1)
    assert cache.lookup("ns", "stripe", **args) is None and len(cache) == 0
    with pytest.raises(ValueError):
        DuplicateCache(0)


def test_off_by_default(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    counter = Counter()
    with Client(claimd_server.grpc_address, interceptors=[counter]) as client:
        c = client.claim(ns, "stripe", event_id=evt, start=True)
        client.transition(c, EventState.SETTLED)
        for _ in range(2):
            assert not client.claim(ns, "stripe", event_id=evt).cached
    assert counter.claims == 3


@pytest.mark.asyncio
async def test_aio_cache(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    async with claimd.aio.Client(claimd_server.grpc_address, local_cache=8) as client:

        @client.guarded(ns, "stripe")
        async def handle(g: Any) -> str:
            return "ok"

        assert (await handle(evt)).status == 200
        r = await handle(evt)
        assert r.claim is not None and r.claim.cached and r.body == b"ok"

"""claimd.aio against a real claimd: the typed calls, retries that reuse the
attempt_id, the security rules it shares with the sync client, and the guard
contract's scenarios (clients/guardspec/scenarios.json) through both forms of
the async guard, read and checked by test_guardspec's runner."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
import guardspec_effects as fxspec
import pytest
from conftest import target_for
from effectdb import EffectDB
from test_guardspec import (
    CASES,
    Faults,
    Run,
    _arrange,
    _body,
    _check,
    _delivery_key,
    _entity,
    _outlive_lease,
    _text,
    check_effect_key,
    effect_db_for,
    fault_status,
    faulty_client,
    handler_outcome,
    plain,
)
from test_retry import closed_port

from claimd import Client as SyncClient
from claimd import EventRef, EventState, GuardResult, NotFound, Outcome, Reason, RetryPolicy, Unavailable
from claimd.aio import Client, Guard
from claimd.testing import ClaimdServer

__all__ = ["effect_db_for", "plain"]  # fixtures, used by name

pytestmark = pytest.mark.asyncio


class AioFaults(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """AioFaults fails the calls that faults names, as Faults does for the
    sync client: every attempt, without reaching claimd."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    async def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        f = self.faults.fault_for(details.method, request)
        if f is not None:
            code, st = fault_status(f)
            trailing = grpc.aio.Metadata(("grpc-status-details-bin", st.SerializeToString()))
            raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details=st.message)
        return await continuation(details, request)


class LoseFirstClaim(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """LoseFirstClaim drops the answer to the first Claim after claimd acted
    on it, and records every Claim attempt as sent."""

    def __init__(self) -> None:
        self.claims: list[Any] = []

    async def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if not method.endswith("/Claim"):
            return await continuation(details, request)
        self.claims.append(type(request).FromString(request.SerializeToString()))
        call = await continuation(details, request)
        if len(self.claims) == 1:
            await call  # claimd decided and answered ...
            raise grpc.aio.AioRpcError(  # ... and the answer never arrived
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), details="answer lost (injected)"
            )
        return call


async def _behave(run: Run, g: Guard, request: dict[str, Any], h: dict[str, Any] | None) -> object:
    """_behave is test_guardspec's handler for the async guard: the other
    holder's blocking calls run in a thread, so the heartbeat task keeps
    running meanwhile."""
    run.runs += 1
    run.calls.append("handler")
    if h is None:
        return None
    claim = g.claim
    for key, state in (("settle_itself", EventState.SETTLED), ("fail_itself", EventState.FAILED)):
        if key in h:
            await asyncio.to_thread(functools.partial(run.plain.transition, claim, state, result=_body(h[key], key)))
    if h.get("taken_over"):
        await asyncio.to_thread(run.plain.release, claim)
        taker = await asyncio.to_thread(
            functools.partial(
                run.plain.claim,
                run.ns,
                request.get("provider", "stripe"),
                holder="guardspec-taker",
                **_delivery_key(run, request),
            )
        )
        if not taker.acquired:
            run.problems.append(f"the taker's claim: {taker.outcome.name}, want ACQUIRED")
        else:
            try:
                await asyncio.wait_for(g.cancelled.wait(), 10)
            except asyncio.TimeoutError:
                run.problems.append("the handler was not cancelled within 10s of the takeover")
    if h.get("outlive_lease"):
        await asyncio.to_thread(_outlive_lease, run, claim, request)
    if "effect" in h:
        assert run.db is not None
        check_effect_key(run, g.effect_key("charge"), claim)
        return await fxspec.effect_handler_async(run.db, g, h["effect"], _text, run.fx_done)
    return handler_outcome(h)


async def _deliver(run: Run, client: Client, form: str, d: dict[str, Any]) -> tuple[GuardResult, bool]:
    request = d.get("request", {})
    provider = request.get("provider", "stripe")
    lease = request["lease_ms"] / 1000 if "lease_ms" in request else None
    wait = request["wait_ms"] / 1000 if "wait_ms" in request else None
    before = run.runs
    key = _delivery_key(run, request)
    if form == "decorator":

        @client.guarded(run.ns, provider, lease=lease, wait=wait)
        async def handle(g: Guard) -> object:
            return await _behave(run, g, request, d.get("handler"))

        result = await handle(
            EventRef(key["event_id"], **_entity(run, request)) if "event_id" in key else key["delivery"]
        )
    else:
        async with client.guard(run.ns, provider, lease=lease, wait=wait, **key, **_entity(run, request)) as g:
            if g.acquired:
                await g.settle(await _behave(run, g, request, d.get("handler")))
        result = g.result
    return result, run.runs > before


@pytest.mark.parametrize("form", ["decorator", "with-block"])
@pytest.mark.parametrize(("sc", "dialect"), CASES)
async def test_scenario(
    sc: dict[str, Any],
    dialect: str | None,
    form: str,
    transport: str,
    claimd_server: ClaimdServer,
    plain: SyncClient,
    ns: str,
    evt: str,
    effect_db_for: EffectDB | None,
) -> None:
    run = Run(ns=ns, evt=evt, plain=plain, db=effect_db_for)
    faults = Faults(run.calls)
    unreachable = bool(sc.get("unreachable"))
    with faulty_client(claimd_server, transport, faults, unreachable, Client, AioFaults(faults)) as made:
        async with made as client:
            for step in sc.get("arrange", []):
                _arrange(run, step)
            for i, d in enumerate(sc["deliveries"]):
                run.calls.clear()
                run.fx_done.clear()
                faults.active = d.get("faults", [])
                try:
                    result, ran = await _deliver(run, client, form, d)
                finally:
                    faults.active = []
                _check(run, f"delivery {i + 1}", result, ran, d["expect"])
    assert run.runs == sc["handler_runs"], f"handler runs = {run.runs}, want {sc['handler_runs']}"


@pytest.mark.both_transports
async def test_typed_calls(claimd_server: ClaimdServer, transport: str, ns: str, evt: str) -> None:
    async with Client(target_for(claimd_server, transport)) as client:
        c = await client.claim(ns, "stripe", event_id=evt, lease=30)
        assert (c.outcome, c.reason, c.fencing_token) == (Outcome.ACQUIRED, Reason.NEW, 1)
        assert (await client.transition(c, EventState.PROCESSING)).changed
        renewed = await client.renew(c, lease=60)
        assert renewed.lease is not None and renewed.lease.total_seconds() == pytest.approx(60, abs=1)
        released = await client.release(c)
        assert released.released
        again = await client.claim(ns, "stripe", event_id=evt)
        assert (again.outcome, again.reason, again.fencing_token) == (Outcome.ACQUIRED, Reason.RELEASED, 2)
        await client.transition(again, EventState.PROCESSING)
        done = await client.transition(again, EventState.SETTLED, result=b"ok")
        assert done.record.state == EventState.SETTLED
        assert (await client.get(ns, "stripe", evt)).result == b"ok"
        dup = await client.claim(ns, "stripe", event_id=evt)
        assert (dup.outcome, dup.result) == (Outcome.DUPLICATE, b"ok")
        with pytest.raises(NotFound):
            await client.get(ns, "stripe", "evt_never_claimed")

        stripe = await client.get_provider("stripe")
        assert stripe.name == "stripe" and stripe.key_rule and stripe.lease is not None
        names = {p.name for p in await client.list_providers()}
        assert "stripe" in names and len(names) > 1
        with pytest.raises(NotFound):
            await client.get_provider("no-such-provider")


async def test_claim_retry_reuses_attempt_id(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    lose = LoseFirstClaim()
    async with Client(claimd_server.grpc_address, interceptors=[lose]) as client:
        c = await client.claim(ns, "stripe", event_id=evt)
        assert len(lose.claims) == 2, f"Claim attempts = {len(lose.claims)}, want 2 (one lost answer, one retry)"
        assert lose.claims[0].attempt_id == lose.claims[1].attempt_id == c.attempt_id != ""
        assert (c.outcome, c.reason, c.fencing_token) == (Outcome.ACQUIRED, Reason.NEW, 1)
        assert (await client.transition(c, EventState.PROCESSING)).changed
        other = await client.claim(ns, "stripe", event_id=evt)
        assert other.outcome == Outcome.IN_PROGRESS


async def test_unreachable_claimd_is_retried_within_the_policy(evt: str) -> None:
    lose = LoseFirstClaim()
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05, total_timeout=5)
    async with Client(closed_port(), retry=policy, interceptors=[lose]) as client:
        with pytest.raises(Unavailable):
            await client.claim("billing", "stripe", event_id=evt)
    assert len(lose.claims) == 3, f"attempts = {len(lose.claims)}, want RetryPolicy.max_attempts = 3"
    assert len({c.attempt_id for c in lose.claims}) == 1


async def test_plaintext_rules_are_the_sync_clients() -> None:
    with pytest.raises(ValueError, match="not a loopback address"):
        Client("claimd.example:50051", token="t0ken")
    with pytest.raises(ValueError, match="plaintext"):
        Client("claimd.example:50051", token="t0ken", insecure=True)

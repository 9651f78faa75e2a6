"""claimd.aio: the asyncio client (grpc.aio), for FastAPI, aiohttp and other
async receivers. The same typed calls, retry policy, security options and
guard contract (clients/GUARD.md) as the sync claimd.Client, awaited:

    from claimd import Delivery
    from claimd.aio import Client

    client = Client("127.0.0.1:50051")           # one per event loop

    @client.guarded("billing", "stripe")
    async def charge(g, event: dict) -> dict:
        return {"charge": await ledger.append(event)}

    r = await charge(Delivery(headers, raw_body), json.loads(raw_body))
    return Response(r.body, status=r.status, headers=r.headers)

or, for code that does not fit one function:

    async with client.guard("billing", "stripe", delivery=d) as g:
        if g.acquired:
            await g.settle(await charge(g.claim))
    respond(g.result.status, g.result.body, g.result.headers)

The heartbeat is an asyncio task per guard that renews the lease every
lease/3 while the handler runs; a takeover sets Guard.cancelled (an
asyncio.Event). Settle, fail and release are shielded from the cancellation
of the request's task: once begun they finish, and the task's
CancelledError propagates afterwards (a cancelled handler, like any
BaseException, leaves the claim to its lease).

What to send and what each answer means is decided in claimd._core, for this
module and the sync claimd.guard and claimd.client alike; this module only
awaits the calls.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

import grpc
import grpc.aio

from claimd import _connect
from claimd._cache import DuplicateCache
from claimd._core import (
    Call,
    ClientFront,
    GuardFront,
    GuardKey,
    GuardResult,
    Op,
    claim_request,
    release_request,
    renew_request,
    settle_options,
    transition_request,
)
from claimd._function import Calls, KeySpec, PayloadSpec, keyed_split, settled_value, unowned_value
from claimd._gen.idempotency.v1 import claim_pb2 as pb
from claimd._gen.idempotency.v1 import claim_pb2_grpc as pb_grpc
from claimd._gen.idempotency.v1 import provider_pb2 as provider_pb
from claimd._gen.idempotency.v1 import provider_pb2_grpc as provider_grpc
from claimd.client import DEFAULT_KEEPALIVE, Seconds, channel_options, default_holder
from claimd.effects import GuardEffects
from claimd.errors import ClaimdError, Unavailable
from claimd.retry import RetryPolicy, call_with_retry_async
from claimd.security import TLSConfig, TokenProvider, channel_credentials
from claimd.serialize import Decoder, Encoder, ResultNotStorable, Serializer
from claimd.types import Claim, Delivery, EventState, Lease, Provider, Record, Transitioned

__all__ = ["Client", "Guard", "GuardResult", "guarded", "idempotent"]

P = ParamSpec("P")
T = TypeVar("T")


class Client(ClientFront["Guard"]):
    """Client is claimd.Client for asyncio: the same arguments and calls,
    each a coroutine. Make it inside the event loop that uses it (grpc.aio
    binds a channel to its loop) and close it with await close(), or use it
    as an async context manager. interceptors are grpc.aio client
    interceptors. transport="connect" (the default for an http:// or
    https:// URL) makes the calls as Connect calls over asyncio streams, a
    few kept-alive HTTP/1.1 connections bound to the loop that first uses
    them; see claimd.Client."""

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        connect_timeout: float = 5.0,
        keepalive: float = DEFAULT_KEEPALIVE,
        holder: str | None = None,
        token: str | TokenProvider | None = None,
        tls: TLSConfig | bool | None = None,
        insecure: bool = False,
        credentials: grpc.ChannelCredentials | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
        options: Sequence[tuple[str, Any]] = (),
        local_cache: int | None = None,
        transport: str | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"Client.timeout: {timeout} must be > 0")
        self.transport = _connect.choose(
            target, transport, interceptors=interceptors, options=options, credentials=credentials
        )
        self.target = target
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self.holder = default_holder() if holder is None else holder
        self._cache = DuplicateCache(local_cache) if local_cache is not None else None
        self._stub: Any
        self._providers: Any
        if self.transport == "connect":
            ep = _connect.endpoint(target, token=token, tls=tls, insecure=insecure)
            self._connect: _connect.AioTransport | None = _connect.AioTransport(
                ep, _connect.Headers(ep, token, "claimd-python-aio"), connect_timeout
            )
            self._stub = _connect.Stub(self._connect, pb.DESCRIPTOR.services_by_name["ClaimService"])
            self._providers = _connect.Stub(self._connect, provider_pb.DESCRIPTOR.services_by_name["ProviderService"])
            return
        self._connect = None
        creds, security_options = channel_credentials(
            target, token=token, tls=tls, insecure=insecure, credentials=credentials
        )
        opts = channel_options(keepalive, connect_timeout, security_options, options)
        chain = list(interceptors) or None
        if creds is None:
            self._channel = grpc.aio.insecure_channel(target, options=opts, interceptors=chain)
        else:
            self._channel = grpc.aio.secure_channel(target, creds, options=opts, interceptors=chain)
        self._stub = pb_grpc.ClaimServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._providers = provider_grpc.ProviderServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        """close closes the channel (Connect: its idle connections); calls
        in flight fail with CANCELLED (Connect: they finish)."""
        if self._connect is not None:
            await self._connect.close()
        else:
            await self._channel.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def wait_ready(self, timeout: float) -> None:
        """wait_ready waits until the channel is connected, or raises
        Unavailable after timeout seconds."""
        if self._connect is not None:
            try:
                await self._connect.ready(timeout)
            except grpc.RpcError as err:
                raise Unavailable(
                    f"no connection to {self.target} within {timeout}s: {err.details()}",
                    code=grpc.StatusCode.UNAVAILABLE,
                ) from err
            return
        try:
            await asyncio.wait_for(self._channel.channel_ready(), timeout)
        except asyncio.TimeoutError as err:
            raise Unavailable(
                f"no connection to {self.target} within {timeout}s", code=grpc.StatusCode.UNAVAILABLE
            ) from err

    async def claim(
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
        attempt_id: str | None = None,
        wait: Seconds | None = None,
        entity_id: str = "",
        event_type: str = "",
        start: bool = False,
        window: Seconds | None = None,
    ) -> Claim:
        """claim is claimd.Client.claim: exactly one of event_id or delivery;
        every retry sends the same attempt_id (default: 16 random bytes, hex)."""
        req, extra = claim_request(
            self.holder,
            namespace,
            provider,
            event_id=event_id,
            delivery=delivery,
            scope=scope,
            payload_sha256=payload_sha256,
            lease=lease,
            holder=holder,
            attempt_id=attempt_id,
            wait=wait,
            entity_id=entity_id,
            event_type=event_type,
            start=start,
            window=window,
        )
        if self._cache is not None:
            hit = self._cache.lookup(
                namespace,
                provider,
                event_id=event_id,
                scope=scope,
                payload_sha256=payload_sha256,
                entity_id=entity_id,
                attempt_id=req.attempt_id,
            )
            if hit is not None:
                return hit
        resp: pb.ClaimResponse = await self._call(self._stub.Claim, req, extra)
        claim = Claim.from_pb(namespace, provider, req.attempt_id, resp)
        if self._cache is not None:
            self._cache.remember_claim(claim, payload_sha256)
        return claim

    async def transition(
        self,
        claim: Claim | Lease,
        to: EventState,
        *,
        result: bytes = b"",
        extend_lease: Seconds | None = None,
        effect_recovered: bool = False,
    ) -> Transitioned:
        """transition is claimd.Client.transition."""
        req = transition_request(claim, to, result, extend_lease, effect_recovered)
        resp: pb.TransitionResponse = await self._call(self._stub.Transition, req)
        record = Record.from_pb(resp.record)
        if self._cache is not None:
            self._cache.remember_record(record)
        return Transitioned(record=record, changed=resp.changed)

    async def renew(self, claim: Claim | Lease, *, lease: Seconds | None = None) -> Record:
        """renew is claimd.Client.renew."""
        req = renew_request(claim, lease)
        resp: pb.RenewResponse = await self._call(self._stub.Renew, req)
        return Record.from_pb(resp.record)

    async def release(self, claim: Claim | Lease) -> Record:
        """release is claimd.Client.release."""
        req = release_request(claim)
        resp: pb.ReleaseResponse = await self._call(self._stub.Release, req)
        return Record.from_pb(resp.record)

    async def get(self, namespace: str, provider: str, key: str) -> Record:
        """get is claimd.Client.get."""
        req = pb.GetRequest(namespace=namespace, provider=provider, key=key)
        resp: pb.GetResponse = await self._call(self._stub.Get, req)
        return Record.from_pb(resp.record)

    async def get_provider(self, name: str) -> Provider:
        """get_provider is claimd.Client.get_provider."""
        resp: provider_pb.GetProviderResponse = await self._call(
            self._providers.GetProvider, provider_pb.GetProviderRequest(name=name)
        )
        return Provider.from_pb(resp.provider)

    async def list_providers(self) -> list[Provider]:
        """list_providers is claimd.Client.list_providers."""
        resp: provider_pb.ListProvidersResponse = await self._call(
            self._providers.ListProviders, provider_pb.ListProvidersRequest()
        )
        return [Provider.from_pb(p) for p in resp.providers]

    def _guard_class(self) -> type[Guard]:
        return Guard

    def guarded(
        self,
        namespace: str,
        provider: str,
        *,
        key: KeySpec = None,
        payload: PayloadSpec = None,
        argument: str | None = None,
        scope: str = "",
        window: Seconds | None = None,
        lease: Seconds | None = None,
        holder: str | None = None,
        wait: Seconds | None = None,
        start: bool = True,
    ) -> Callable[
        [Callable[Concatenate[Guard, P], Awaitable[object]]],
        Callable[..., Coroutine[Any, Any, GuardResult]],
    ]:
        """guarded decorates async fn(guard, *args) -> result; see guarded."""
        return guarded(
            self,
            namespace,
            provider,
            key=key,
            payload=payload,
            argument=argument,
            scope=scope,
            window=window,
            lease=lease,
            holder=holder,
            wait=wait,
            start=start,
        )

    def idempotent(
        self,
        namespace: str,
        provider: str,
        *,
        key: KeySpec = None,
        payload: PayloadSpec = None,
        argument: str | None = None,
        scope: str = "",
        window: Seconds | None = None,
        lease: Seconds | None = None,
        holder: str | None = None,
        wait: Seconds | None = None,
        encoder: Encoder | None = None,
        decoder: Decoder | None = None,
    ) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[Any, Any, T]]]:
        """idempotent is claimd.aio.idempotent on this client."""
        return idempotent(
            self,
            namespace,
            provider,
            key=key,
            payload=payload,
            argument=argument,
            scope=scope,
            window=window,
            lease=lease,
            holder=holder,
            wait=wait,
            encoder=encoder,
            decoder=decoder,
        )

    async def _call(self, method: Any, req: Any, extra: float = 0.0) -> Any:
        return await call_with_retry_async(self.retry, self.timeout, lambda t: method(req, timeout=t), extra)


class Guard(GuardFront[Client, asyncio.Event], GuardEffects):
    """Guard is claimd.Guard for asyncio, used with async with. Inside the
    block: acquired, claim, await settle(result), await fail(reason),
    cancelled (an asyncio.Event set on a takeover), check(), effect_key(step)
    and `async with g.effect(conn) as fx:` (claimd.effects). After the
    block, result is the answer. Exceptions are handled as the sync Guard
    handles them (GUARD.md): an Exception from the block before settle() or
    fail() releases the claim (fails it, for a PermanentError) and does not
    propagate; a BaseException (asyncio.CancelledError included) leaves the
    claim to its lease and propagates. Every decision is claimd._core's, as
    for the sync Guard; this class makes the calls."""

    _BLOCK = "async with-block"
    _heartbeat: asyncio.TimerHandle | asyncio.Task[None] | None = None

    def _cancellation(self) -> asyncio.Event:
        return asyncio.Event()

    async def __aenter__(self) -> Guard:
        return await self._open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None:
            if self.acquired:
                await self.settle(b"")
            return False
        return await self._handler_raised(exc)

    async def _open(self) -> Guard:
        await self._drive(self._core.open())
        return self

    async def settle(self, result: object = b"") -> None:
        """settle is claimd.Guard.settle: SETTLED with result, encoded by the
        guards' rule; over 64 KiB or not encodable, settled empty."""
        self._stop_heartbeat()
        await self._drive(self._core.settle(result))

    async def fail(self, reason: str | BaseException) -> None:
        """fail is claimd.Guard.fail: FAILED with the reason's text (at most
        1 KiB), answered 200 so the provider stops retrying."""
        self._stop_heartbeat()
        await self._drive(self._core.fail(reason))

    async def _handler_raised(self, exc: BaseException) -> bool:
        """_handler_raised is claimd.Guard._handler_raised: GuardCore.handler_raised
        decides, and this makes the release or fail it asks for."""
        self._stop_heartbeat()
        call, swallow = self._core.handler_raised(exc)
        await self._drive(call)
        return swallow

    async def _drive(self, call: Call | None) -> None:
        """_drive makes the calls the core asks for until it has none."""
        while call is not None:
            try:
                answer = await self._send(call)
            except Exception as err:
                call = self._core.failed(call, err)
            else:
                call = self._core.answered(call, answer)

    async def _send(self, call: Call) -> Any:
        # Settle, fail and release are shielded: a provider that hangs up
        # must not cancel the record of a side effect that happened, nor the
        # return of a key.
        if call.op is Op.CLAIM:
            return await self.client.claim(self.namespace, self.provider, **self._core.claim_args)
        if call.op is Op.START:
            return await self.client.transition(self.claim, EventState.PROCESSING)
        if call.op is Op.SETTLE:
            return await asyncio.shield(
                self.client.transition(self.claim, call.to, result=call.result, **settle_options(call))
            )
        if call.op is Op.RELEASE:
            return await asyncio.shield(self.client.release(self.claim))
        # A timer until the first renewal is due: a handler that ends within
        # a third of its lease (most do) costs a timer, not a task that is
        # started, parked in a sleep and cancelled.
        self._heartbeat = asyncio.get_running_loop().call_later(call.pace, self._renewal_due, call.pace)
        return None

    def _renewal_due(self, interval: float) -> None:
        self._heartbeat = asyncio.create_task(self._renew(interval), name=f"claimd-heartbeat {self.claim.key}")

    async def _renew(self, interval: float) -> None:
        """_renew is the heartbeat task, started when the first renewal is
        due: it renews the lease at the core's pace (interval until a
        renewal says otherwise) until cancelled or the core says to stop."""
        while True:
            try:
                rec = await self.client.renew(self.claim, lease=self.lease)
            except ClaimdError as err:
                if not self._core.renew_failed(err):
                    return
            else:
                interval = self._core.renewed(rec)
            await asyncio.sleep(interval)

    def _abandon(self, err: BaseException) -> None:
        """_abandon ends the work without writing anything (GuardCore.abandon)."""
        self._stop_heartbeat()
        self._core.abandon(err)

    def _stop_heartbeat(self) -> None:
        # Cancelled, not awaited: a renewal in flight is harmless after a
        # settle, and waiting for its retries would only delay the answer.
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None


@overload
def guarded(
    client: Client,
    namespace: str,
    provider: str,
    *,
    key: None = None,
    payload: PayloadSpec = None,
    argument: str | None = None,
    scope: str = "",
    window: Seconds | None = None,
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    start: bool = True,
) -> Callable[
    [Callable[Concatenate[Guard, P], Awaitable[object]]],
    Callable[Concatenate[GuardKey, P], Coroutine[Any, Any, GuardResult]],
]: ...


@overload
def guarded(
    client: Client,
    namespace: str,
    provider: str,
    *,
    key: str | Callable[..., GuardKey],
    payload: PayloadSpec = None,
    argument: str | None = None,
    scope: str = "",
    window: Seconds | None = None,
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    start: bool = True,
) -> Callable[
    [Callable[Concatenate[Guard, P], Awaitable[object]]],
    Callable[P, Coroutine[Any, Any, GuardResult]],
]: ...


def guarded(
    client: Client,
    namespace: str,
    provider: str,
    *,
    key: KeySpec = None,
    payload: PayloadSpec = None,
    argument: str | None = None,
    scope: str = "",
    window: Seconds | None = None,
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    start: bool = True,
) -> Callable[
    [Callable[Concatenate[Guard, P], Awaitable[object]]],
    Callable[..., Coroutine[Any, Any, GuardResult]],
]:
    """guarded is Client.guarded: async fn(guard, *args, **kwargs) -> result
    becomes async f(event_id_or_delivery, *args, **kwargs) -> GuardResult,
    or, with key=, async f(*args, **kwargs) -> GuardResult (key=, payload=,
    argument=, scope= and window= as in claimd.guard.guarded). fn's result is
    settled as Guard.settle encodes it; an exception from fn releases the
    claim (fails it, for a PermanentError), and once fn has returned nothing
    releases it."""

    def decorate(
        fn: Callable[Concatenate[Guard, P], Awaitable[object]],
    ) -> Callable[..., Coroutine[Any, Any, GuardResult]]:
        calls = Calls(fn, key=key, payload=payload, argument=argument, guard_first=True)

        @functools.wraps(fn)
        async def run(*call_args: Any, **kwargs: Any) -> GuardResult:
            # JMESPath expressions and callables see fn's own arguments.
            if key is None:
                delivery, args = keyed_split(call_args)
            else:
                args = call_args
                delivery = calls.key(args, kwargs)
            digest = calls.digest(args, kwargs, delivery)
            g = Guard._for_key(
                client,
                namespace,
                provider,
                delivery,
                scope=scope,
                lease=lease,
                holder=holder,
                wait=wait,
                start=start,
                window=window,
                payload_sha256=digest,
            )
            await g._open()
            if not g.acquired:
                return g.result
            try:
                returned = await fn(g, *args, **kwargs)
            except BaseException as exc:
                if await g._handler_raised(exc):
                    return g.result
                raise
            # fn returned: the side effect may have happened; no path from
            # here leads to a release.
            if g.acquired:
                await g.settle(returned)
            return g.result

        return run

    return decorate


def idempotent(
    client: Client,
    namespace: str,
    provider: str,
    *,
    key: KeySpec = None,
    payload: PayloadSpec = None,
    argument: str | None = None,
    scope: str = "",
    window: Seconds | None = None,
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    encoder: Encoder | None = None,
    decoder: Decoder | None = None,
) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """idempotent is claimd.idempotent for coroutine functions: the first
    call runs async fn and stores its value, every duplicate gets it back,
    typed; exceptions propagate (see claimd.guard.idempotent)."""

    def decorate(fn: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        calls = Calls(fn, key=key, payload=payload, argument=argument)
        serializer = Serializer.for_function(fn, encoder=encoder, decoder=decoder)

        @functools.wraps(fn)
        async def run(*args: P.args, **kwargs: P.kwargs) -> T:
            delivery, digest = calls.delivery(args, kwargs)
            g = Guard._for_key(
                client,
                namespace,
                provider,
                delivery,
                scope=scope,
                lease=lease,
                holder=holder,
                wait=wait,
                start=True,
                window=window,
                payload_sha256=digest,
            )
            await g._open()
            if not g.acquired:
                value: T = unowned_value(g.result, serializer)
                return value
            try:
                returned = await fn(*args, **kwargs)
            except BaseException as exc:
                await g._handler_raised(exc)
                raise
            try:
                stored = serializer.dumps(returned)
            except ResultNotStorable as err:
                g._abandon(err)
                raise
            await g.settle(stored)
            settled: T = settled_value(g.result, returned, stored, serializer)
            return settled

        return run

    return decorate

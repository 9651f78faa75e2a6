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
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Concatenate, ParamSpec

import grpc
import grpc.aio

from claimd._gen.idempotency.v1 import claim_pb2 as pb
from claimd._gen.idempotency.v1 import claim_pb2_grpc as pb_grpc
from claimd._gen.idempotency.v1 import provider_pb2 as provider_pb
from claimd._gen.idempotency.v1 import provider_pb2_grpc as provider_grpc
from claimd.client import DEFAULT_KEEPALIVE, Seconds, _duration, _lease, _seconds, channel_options, default_holder
from claimd.errors import (
    ClaimdError,
    InvalidTransition,
    NotFound,
    NotOwner,
    PermanentError,
    StaleToken,
    Unavailable,
)
from claimd.guard import (
    _HANDLER_FAILED,
    _TAKEN_OVER,
    _UNSETTLED,
    SUPERSEDED_RETRY_AFTER,
    UNAVAILABLE_RETRY_AFTER,
    GuardKey,
    GuardResult,
    _answer_unowned,
    _encode,
    _ended_already,
    _failure_text,
    _Heartbeat,
    _refused,
    _started_by_claim,
    _taken_over_from_processing,
)
from claimd.retry import RetryPolicy, call_with_retry_async
from claimd.security import TLSConfig, TokenProvider, channel_credentials
from claimd.types import (
    MAX_RESULT_BYTES,
    Claim,
    Delivery,
    EventRef,
    EventState,
    Lease,
    Outcome,
    Provider,
    Record,
    Transitioned,
)

__all__ = ["Client", "Guard", "GuardResult", "guarded"]

log = logging.getLogger("claimd")

P = ParamSpec("P")


class Client:
    """Client is claimd.Client for asyncio: the same arguments and calls,
    each a coroutine. Make it inside the event loop that uses it (grpc.aio
    binds a channel to its loop) and close it with await close(), or use it
    as an async context manager. interceptors are grpc.aio client
    interceptors."""

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
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"Client.timeout: {timeout} must be > 0")
        creds, security_options = channel_credentials(
            target, token=token, tls=tls, insecure=insecure, credentials=credentials
        )
        self.target = target
        self.timeout = timeout
        self.retry = retry if retry is not None else RetryPolicy()
        self.holder = default_holder() if holder is None else holder
        opts = channel_options(keepalive, connect_timeout, security_options, options)
        chain = list(interceptors) or None
        if creds is None:
            self._channel = grpc.aio.insecure_channel(target, options=opts, interceptors=chain)
        else:
            self._channel = grpc.aio.secure_channel(target, creds, options=opts, interceptors=chain)
        self._stub = pb_grpc.ClaimServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._providers = provider_grpc.ProviderServiceStub(self._channel)  # type: ignore[no-untyped-call]

    async def close(self) -> None:
        """close closes the channel; calls in flight fail with CANCELLED."""
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
    ) -> Claim:
        """claim is claimd.Client.claim: exactly one of event_id or delivery;
        every retry sends the same attempt_id (default: 16 random bytes, hex)."""
        if (event_id is None) == (delivery is None):
            raise ValueError("claim: exactly one of event_id or delivery is required")
        req = pb.ClaimRequest(
            namespace=namespace,
            provider=provider,
            scope=scope,
            payload_sha256=payload_sha256 or b"",
            holder=self.holder if holder is None else holder,
            attempt_id=attempt_id or secrets.token_hex(16),
            lease=_duration(lease),
            wait=_duration(wait),
            entity_id=entity_id,
            event_type=event_type,
            start=start,
        )
        if event_id is not None:
            req.event_id = event_id
        elif delivery is not None:
            req.delivery.CopyFrom(pb.Delivery(headers=dict(delivery.headers), body=delivery.body))
        extra = _seconds(wait) if wait is not None else 0.0
        resp: pb.ClaimResponse = await self._call(self._stub.Claim, req, extra)
        return Claim.from_pb(namespace, provider, req.attempt_id, resp)

    async def transition(
        self,
        claim: Claim | Lease,
        to: EventState,
        *,
        result: bytes = b"",
        extend_lease: Seconds | None = None,
    ) -> Transitioned:
        """transition is claimd.Client.transition."""
        held = _lease(claim)
        req = pb.TransitionRequest(
            namespace=held.namespace,
            provider=held.provider,
            key=held.key,
            fencing_token=held.fencing_token,
            lease_secret=held.lease_secret,
            to=pb.EventState.Name(to),
            result=result,
            extend_lease=_duration(extend_lease),
        )
        resp: pb.TransitionResponse = await self._call(self._stub.Transition, req)
        return Transitioned(record=Record.from_pb(resp.record), changed=resp.changed)

    async def renew(self, claim: Claim | Lease, *, lease: Seconds | None = None) -> Record:
        """renew is claimd.Client.renew."""
        held = _lease(claim)
        req = pb.RenewRequest(
            namespace=held.namespace,
            provider=held.provider,
            key=held.key,
            fencing_token=held.fencing_token,
            lease_secret=held.lease_secret,
            lease=_duration(lease),
        )
        resp: pb.RenewResponse = await self._call(self._stub.Renew, req)
        return Record.from_pb(resp.record)

    async def release(self, claim: Claim | Lease) -> Record:
        """release is claimd.Client.release."""
        held = _lease(claim)
        req = pb.ReleaseRequest(
            namespace=held.namespace,
            provider=held.provider,
            key=held.key,
            fencing_token=held.fencing_token,
            lease_secret=held.lease_secret,
        )
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
    ) -> Guard:
        """guard claims a delivery for an async with-block; see Guard."""
        return Guard(
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
        )

    def guarded(
        self,
        namespace: str,
        provider: str,
        *,
        scope: str = "",
        lease: Seconds | None = None,
        holder: str | None = None,
        wait: Seconds | None = None,
        start: bool = True,
    ) -> Callable[
        [Callable[Concatenate[Guard, P], Awaitable[object]]],
        Callable[Concatenate[GuardKey, P], Coroutine[Any, Any, GuardResult]],
    ]:
        """guarded decorates async fn(guard, *args) -> result; see guarded."""
        return guarded(self, namespace, provider, scope=scope, lease=lease, holder=holder, wait=wait, start=start)

    async def _call(self, method: Any, req: Any, extra: float = 0.0) -> Any:
        return await call_with_retry_async(self.retry, self.timeout, lambda t: method(req, timeout=t), extra)


class Guard:
    """Guard is claimd.Guard for asyncio, used with async with. Inside the
    block: acquired, claim, await settle(result), await fail(reason),
    cancelled (an asyncio.Event set on a takeover) and check(). After the
    block, result is the answer. Exceptions are handled as the sync Guard
    handles them (GUARD.md): an Exception from the block before settle() or
    fail() releases the claim (fails it, for a PermanentError) and does not
    propagate; a BaseException (asyncio.CancelledError included) leaves the
    claim to its lease and propagates."""

    def __init__(
        self,
        client: Client,
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
    ) -> None:
        if (event_id is None) == (delivery is None):
            raise ValueError("guard: exactly one of event_id or delivery is required")
        self.client = client
        self.namespace = namespace
        self.provider = provider
        self.lease = lease
        self._event_id = event_id
        self._delivery = delivery
        self._scope = scope
        self._payload_sha256 = payload_sha256
        self._holder = holder
        self._wait = wait
        self._entity_id = entity_id
        self._event_type = event_type
        self._start_at_claim = start
        self._claim: Claim | None = None
        self.cancelled = asyncio.Event()
        self._lost: ClaimdError | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._result: GuardResult | None = None
        self._ran = False
        # _done is set as settle() or fail() begins: from then on nothing
        # may release the claim.
        self._done = False

    @property
    def acquired(self) -> bool:
        """acquired is true when the block must do the work."""
        return self._claim is not None and self._claim.acquired and self._result is None

    @property
    def claim(self) -> Claim:
        """claim is claimd's answer; RuntimeError when the Claim call failed."""
        if self._claim is None:
            raise RuntimeError("Guard.claim: the Claim call failed; see Guard.result.error")
        return self._claim

    @property
    def result(self) -> GuardResult:
        """result is the answer for the provider, set once the block ended
        (or as soon as the claim decided that the block must not run)."""
        if self._result is None:
            raise RuntimeError("Guard.result is set when the async with-block ends")
        return self._result

    def check(self) -> None:
        """check raises StaleToken (or NotOwner) when another holder took the
        key over, so long work stops between steps."""
        if self._lost is not None:
            raise self._lost

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
        try:
            claim = await self.client.claim(
                self.namespace,
                self.provider,
                event_id=self._event_id,
                delivery=self._delivery,
                scope=self._scope,
                payload_sha256=self._payload_sha256,
                lease=self.lease,
                holder=self._holder,
                wait=self._wait,
                entity_id=self._entity_id,
                event_type=self._event_type,
                start=self._start_at_claim,
            )
        except ClaimdError as err:
            status, body, retry = _refused(err)
            if status == 500:
                log.error("claimd: claim %s/%s failed: %s", self.namespace, self.provider, err)
            self._result = GuardResult(status, body, retry, error=err)
            return self
        self._claim = claim
        if claim.outcome == Outcome.ACQUIRED:
            await self._start(claim)
        else:
            self._result = _answer_unowned(claim)
        return self

    async def _start(self, claim: Claim) -> None:
        if _started_by_claim(claim):
            self._heartbeat = asyncio.create_task(
                self._renew(_Heartbeat._first_pace(claim, self.lease)), name=f"claimd-heartbeat {claim.key}"
            )
            return
        try:
            moved = await self.client.transition(claim, EventState.PROCESSING)
        except (StaleToken, NotOwner) as err:
            self._result = self._answer_lost(err)
            return
        except ClaimdError as err:
            if not _taken_over_from_processing(claim):
                await self._release_quietly()
            status, body, retry = _refused(err)
            self._result = GuardResult(status, body, retry, outcome=claim.outcome, error=err, claim=claim)
            return
        self._heartbeat = asyncio.create_task(
            self._renew(_Heartbeat._pace(moved.record)), name=f"claimd-heartbeat {claim.key}"
        )

    async def _renew(self, interval: float) -> None:
        """_renew is the heartbeat task: it renews the lease every lease/3
        (the pace of the sync guard; interval is the first) until cancelled,
        and reports a takeover."""
        c = self.claim
        while True:
            await asyncio.sleep(interval)
            try:
                rec = await self.client.renew(c, lease=self.lease)
            except (StaleToken, NotOwner, NotFound) as err:
                self._lose(err)
                return
            except InvalidTransition:
                return  # terminal: settled or failed meanwhile
            except ClaimdError as err:
                log.warning("claimd: renew %s/%s/%s failed: %s", c.namespace, c.provider, c.key, err)
                continue
            interval = _Heartbeat._pace(rec)

    async def settle(self, result: object = b"") -> None:
        """settle is claimd.Guard.settle: SETTLED with result, encoded by the
        guards' rule; over 64 KiB or not encodable, settled empty."""
        self._done = True
        try:
            body = _encode(result)
        except Exception as err:  # whatever the encoder raises, the side effect happened
            log.error(
                "claimd: result of type %s cannot be encoded (%s); settling without it", type(result).__name__, err
            )
            await self._finish(EventState.SETTLED, b"", err)
            return
        await self._finish(EventState.SETTLED, body, None)

    async def fail(self, reason: str | BaseException) -> None:
        """fail is claimd.Guard.fail: FAILED with the reason's text (at most
        1 KiB), answered 200 so the provider stops retrying."""
        self._done = True
        err = reason if isinstance(reason, BaseException) else PermanentError(reason)
        await self._finish(EventState.FAILED, _failure_text(err), err)

    async def _finish(self, to: EventState, body: bytes, error: BaseException | None) -> None:
        if self._result is not None:
            raise RuntimeError("Guard: settle() or fail() after the answer was decided")
        claim = self._claim
        if claim is None or not claim.acquired:
            raise RuntimeError("Guard: settle() or fail() without an acquired claim")
        self._ran = True
        self._stop_heartbeat()
        if self._lost is not None:
            self._result = self._answer_lost(self._lost)
            return
        stored = body
        if len(body) > MAX_RESULT_BYTES:
            log.error(
                "claimd: result of %s is %d bytes, over %d; settling without it", claim.key, len(body), MAX_RESULT_BYTES
            )
            error = error or ValueError(f"result is {len(body)} bytes, over {MAX_RESULT_BYTES}; not stored")
            stored = b""
        try:
            # Shielded: a provider that hangs up must not cancel the record
            # of a side effect that happened.
            await asyncio.shield(self.client.transition(claim, to, result=stored))
        except (StaleToken, NotOwner) as err:
            self._result = self._answer_lost(err)
            return
        except ClaimdError as err:
            if not _ended_already(err):
                self._result = self._unsettled(to, err)
                return
            log.warning(
                "claimd: %s/%s/%s was ended by the handler itself: %s", claim.namespace, claim.provider, claim.key, err
            )
            error = error or err
        except Exception as err:
            self._result = self._unsettled(to, err)
            return
        self._result = GuardResult(200, body, outcome=claim.outcome, ran=True, error=error, claim=claim)

    def _unsettled(self, to: EventState, err: Exception) -> GuardResult:
        c = self.claim
        log.error("claimd: %s %s/%s/%s failed: %s", to.name, c.namespace, c.provider, c.key, err)
        return GuardResult(503, _UNSETTLED, UNAVAILABLE_RETRY_AFTER, outcome=c.outcome, ran=True, error=err, claim=c)

    async def _handler_raised(self, exc: BaseException) -> bool:
        """_handler_raised is claimd.Guard._handler_raised: the only path to
        a release, taken only for an Exception raised before settle() or
        fail() began, on a key not taken over from PROCESSING."""
        if self._done:
            if self._result is None:
                self._stop_heartbeat()
                self._result = GuardResult(
                    503,
                    _UNSETTLED,
                    UNAVAILABLE_RETRY_AFTER,
                    outcome=Outcome.ACQUIRED,
                    ran=True,
                    error=exc,
                    claim=self._claim,
                )
            return False
        if not self.acquired:
            return False
        claim = self.claim
        self._ran = True
        if isinstance(exc, PermanentError):
            await self.fail(exc)
            return True
        self._stop_heartbeat()
        failed = GuardResult(500, _HANDLER_FAILED, outcome=claim.outcome, ran=True, error=exc, claim=claim)
        if self._lost is not None:
            self._result = dataclasses.replace(self._answer_lost(self._lost), error=exc)
        elif not isinstance(exc, Exception):
            log.warning(
                "claimd: %s/%s/%s interrupted (%r); the key frees at its lease end",
                claim.namespace,
                claim.provider,
                claim.key,
                exc,
            )
            self._result = failed
        elif _taken_over_from_processing(claim):
            log.warning(
                "claimd: handler failed on %s/%s/%s taken over from PROCESSING; leaving the key to its lease: %s",
                claim.namespace,
                claim.provider,
                claim.key,
                exc,
            )
            self._result = failed
        else:
            lost = await self._release_quietly()
            self._result = dataclasses.replace(self._answer_lost(lost), error=exc) if lost is not None else failed
        return isinstance(exc, Exception)

    def _lose(self, err: ClaimdError) -> None:
        self._lost = err
        self.cancelled.set()
        c = self._claim
        if c is not None:
            log.warning("claimd: lost %s/%s/%s (token %d): %s", c.namespace, c.provider, c.key, c.fencing_token, err)

    def _answer_lost(self, err: ClaimdError) -> GuardResult:
        if self._lost is None:
            self._lose(err)
        return GuardResult(
            409,
            _TAKEN_OVER,
            SUPERSEDED_RETRY_AFTER,
            outcome=Outcome.ACQUIRED,
            ran=self._ran,
            error=err,
            claim=self._claim,
        )

    def _stop_heartbeat(self) -> None:
        # Cancelled, not awaited: a renewal in flight is harmless after a
        # settle, and waiting for its retries would only delay the answer.
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    async def _release_quietly(self) -> ClaimdError | None:
        c = self.claim
        try:
            await asyncio.shield(self.client.release(c))
        except (StaleToken, NotOwner) as err:
            return err
        except ClaimdError as err:
            log.warning("claimd: release %s/%s/%s failed: %s", c.namespace, c.provider, c.key, err)
        return None


def guarded(
    client: Client,
    namespace: str,
    provider: str,
    *,
    scope: str = "",
    lease: Seconds | None = None,
    holder: str | None = None,
    wait: Seconds | None = None,
    start: bool = True,
) -> Callable[
    [Callable[Concatenate[Guard, P], Awaitable[object]]],
    Callable[Concatenate[GuardKey, P], Coroutine[Any, Any, GuardResult]],
]:
    """guarded is Client.guarded: async fn(guard, *args, **kwargs) -> result
    becomes async f(event_id_or_delivery, *args, **kwargs) -> GuardResult.
    fn's result is settled as Guard.settle encodes it; an exception from fn
    releases the claim (fails it, for a PermanentError), and once fn has
    returned nothing releases it."""

    def decorate(
        fn: Callable[Concatenate[Guard, P], Awaitable[object]],
    ) -> Callable[Concatenate[GuardKey, P], Coroutine[Any, Any, GuardResult]]:
        @functools.wraps(fn)
        async def run(key: GuardKey, /, *args: P.args, **kwargs: P.kwargs) -> GuardResult:
            ref = EventRef(key) if isinstance(key, str) else key
            g = Guard(
                client,
                namespace,
                provider,
                event_id=ref.event_id if isinstance(ref, EventRef) else None,
                delivery=ref if isinstance(ref, Delivery) else None,
                scope=scope,
                lease=lease,
                holder=holder,
                wait=wait,
                entity_id=ref.entity_id if isinstance(ref, EventRef) else "",
                event_type=ref.event_type if isinstance(ref, EventRef) else "",
                start=start,
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

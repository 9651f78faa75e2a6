"""Client: a channel to claimd with its dial options, and typed wrappers of
the ClaimService calls."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc

from claimd import _connect
from claimd._cache import DuplicateCache
from claimd._core import ClientFront, claim_request, release_request, renew_request, transition_request
from claimd._function import KeySpec, PayloadSpec
from claimd._gen.idempotency.v1 import claim_pb2 as pb
from claimd._gen.idempotency.v1 import claim_pb2_grpc as pb_grpc
from claimd._gen.idempotency.v1 import provider_pb2 as provider_pb
from claimd._gen.idempotency.v1 import provider_pb2_grpc as provider_grpc
from claimd.errors import Unavailable
from claimd.guard import Guard, GuardResult, guarded, idempotent
from claimd.retry import RetryPolicy, call_with_retry
from claimd.security import StaticBearer, TLSConfig, TokenProvider, channel_credentials
from claimd.serialize import Decoder, Encoder
from claimd.types import Claim, Delivery, EventState, Lease, Provider, Record, Transitioned
from claimd.types import Seconds as Seconds  # re-exported: it was defined here

# The client imports the guard; the guard names the Client in annotations
# only (under TYPE_CHECKING), so the modules import each other one way only.

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_KEEPALIVE = 300.0
"""DEFAULT_KEEPALIVE is the keepalive ping interval in seconds. claimd
permits pings every 10 seconds, with or without calls in flight, and answers
more frequent ones with GOAWAY too_many_pings; lower this (not below 10)
behind a load balancer that drops idle connections sooner."""


def default_holder() -> str:
    """default_holder names this process for claimd's audit trail: host/pid."""
    return f"{socket.gethostname()}/{os.getpid()}"[:255]


def channel_options(
    keepalive: float,
    connect_timeout: float,
    security_options: Sequence[tuple[str, Any]],
    options: Sequence[tuple[str, Any]],
) -> list[tuple[str, Any]]:
    """channel_options are the gRPC channel arguments of a client (the sync
    one and claimd.aio's): keepalive and reconnection, then what security
    needs, then the caller's own options, which override both."""
    opts: dict[str, Any] = {
        "grpc.keepalive_time_ms": int(keepalive * 1000),
        "grpc.keepalive_timeout_ms": 20_000,
        "grpc.keepalive_permit_without_calls": 0,
        # gRPC core uses the minimum reconnect backoff as the deadline of
        # one connection attempt (default 20s).
        "grpc.min_reconnect_backoff_ms": int(connect_timeout * 1000),
        # While disconnected, calls fail fast with UNAVAILABLE (and the
        # guard answers 503); cap the reconnect backoff (default 120s)
        # so a restarted claimd is reached again within seconds.
        "grpc.initial_reconnect_backoff_ms": 200,
        "grpc.max_reconnect_backoff_ms": 5_000,
    }
    opts.update(dict(security_options))
    opts.update(dict(options))
    return list(opts.items())


class Client(ClientFront["Guard"]):
    """Client talks to one claimd. It is thread-safe: share one per process.

    target is a gRPC target ("127.0.0.1:50051", "dns:///claimd:50051"), or
    the URL of claimd's HTTP listener ("http://127.0.0.1:8080",
    "https://claimd.internal:8443") for the Connect transport.
    transport says which ("grpc" or "connect"); by default a target that is
    an http:// or https:// URL is Connect and any other is gRPC. Connect
    makes the same calls, with the same answers, errors, retries, deadlines
    and credentials, as unary Connect calls over a few kept-alive HTTP/1.1
    connections: it costs the caller about half the CPU of gRPC's stack per
    call (tests/bench_duplicates.py), so prefer it for webhook receivers.
    interceptors, options and credentials configure a gRPC channel and
    refuse Connect; keepalive is gRPC's too.
    timeout bounds each attempt of a call (a Claim that waits gets its wait
    on top); retry says how calls that fail with UNAVAILABLE are retried.
    connect_timeout bounds one connection attempt. holder is recorded with
    every claim for audit (default: host/pid). interceptors wrap every call;
    options are extra gRPC channel arguments, which override the client's own.

    Security: tls=TLSConfig(ca_file=..., cert_file=..., key_file=...,
    server_name=...) connects over TLS (tls=True: TLS with the system roots),
    with a client certificate for a claimd that requires mTLS. token is the
    bearer token ("claimd token new"), a str or a callable asked before every
    call attempt (rotation); it is sent as "authorization: Bearer <token>"
    and appears in no repr, log line or error. Plaintext is the default only
    for a loopback target (127.0.0.1, [::1], localhost, unix:), checked again
    at each connection; any other target without tls raises ValueError unless
    insecure=True, and a token is never sent in plaintext off loopback
    (insecure=True with a token raises ValueError). credentials replaces tls
    with channel credentials of your own.

    local_cache=N keeps up to N settled answers (LRU) and answers their
    duplicates by event id without asking claimd, until their window ends
    (claimd._cache says exactly what is kept); off by default.

    Use it as a context manager, or call close().
    """

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
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
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
            self._connect: _connect.Transport | None = _connect.Transport(
                ep, _connect.Headers(ep, token, "claimd-python"), connect_timeout
            )
            self._stub = _connect.Stub(self._connect, pb.DESCRIPTOR.services_by_name["ClaimService"])
            self._providers = _connect.Stub(self._connect, provider_pb.DESCRIPTOR.services_by_name["ProviderService"])
            return
        self._connect = None
        # A fixed token goes as metadata of each call (StaticBearer): gRPC
        # runs call credentials on a thread per call. Credentials given by the
        # caller keep the token as call credentials, which gRPC sends only
        # over a secure channel.
        static = isinstance(token, str) and credentials is None
        creds, security_options = channel_credentials(
            target, token=token, tls=tls, insecure=insecure, credentials=credentials, static_as_metadata=static
        )
        if static:
            interceptors = (StaticBearer(token), *interceptors)  # type: ignore[arg-type]
        opts = channel_options(keepalive, connect_timeout, security_options, options)
        if creds is None:
            self._raw = grpc.insecure_channel(target, options=opts)
        else:
            self._raw = grpc.secure_channel(target, creds, options=opts)
        channel: grpc.Channel = self._raw
        if interceptors:
            channel = grpc.intercept_channel(self._raw, *interceptors)
        self._stub = pb_grpc.ClaimServiceStub(channel)  # type: ignore[no-untyped-call]
        self._providers = provider_grpc.ProviderServiceStub(channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """close closes the channel (Connect: its idle connections); calls
        in flight fail with CANCELLED (Connect: they finish)."""
        if self._connect is not None:
            self._connect.close()
        else:
            self._raw.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def wait_ready(self, timeout: float) -> None:
        """wait_ready blocks until the channel is connected, or raises
        Unavailable after timeout seconds. Calls do not need it (they connect
        on first use); it is for a process that wants to fail at start-up."""
        if self._connect is not None:
            try:
                self._connect.ready(timeout)
            except grpc.RpcError as err:
                raise Unavailable(
                    f"no connection to {self.target} within {timeout}s: {err.details()}",
                    code=grpc.StatusCode.UNAVAILABLE,
                ) from err
            return
        try:
            grpc.channel_ready_future(self._raw).result(timeout=timeout)
        except grpc.FutureTimeoutError as err:
            raise Unavailable(
                f"no connection to {self.target} within {timeout}s",
                code=grpc.StatusCode.UNAVAILABLE,
            ) from err

    def claim(
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
        """claim asks whether the caller owns a delivery, named by exactly one
        of event_id or delivery. See idempotency.v1.ClaimRequest for each
        field; holder defaults to the client's. entity_id and event_type
        (both or neither) place an event sent by event_id in its entity's
        lifecycle; start records an ACQUIRED claim already in PROCESSING.

        attempt_id identifies this logical claim (default: 16 random bytes,
        hex). Every retry of this call sends the same one, so a Claim whose
        answer was lost is answered again with the same ACQUIRED and token.
        window asks for a dedup window longer than the provider's (claimd
        refuses a shorter one with INVALID_ARGUMENT).
        """
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
        resp: pb.ClaimResponse = self._call(self._stub.Claim, req, extra)
        claim = Claim.from_pb(namespace, provider, req.attempt_id, resp)
        if self._cache is not None:
            self._cache.remember_claim(claim, payload_sha256)
        return claim

    def transition(
        self,
        claim: Claim | Lease,
        to: EventState,
        *,
        result: bytes = b"",
        extend_lease: Seconds | None = None,
        effect_recovered: bool = False,
    ) -> Transitioned:
        """transition moves the event to state to, as the owner of claim (an
        ACQUIRED Claim or its Lease: the token and lease secret). result is
        stored with SETTLED or FAILED and returned to duplicates. Raises
        StaleToken, NotOwner, InvalidTransition or NotFound; ValueError for a
        claim that was not ACQUIRED. effect_recovered says that a SETTLED
        result is the one an earlier holder's effect fence stored (the guard
        sets it; GUARD.md, Exactly-once effects)."""
        req = transition_request(claim, to, result, extend_lease, effect_recovered)
        resp: pb.TransitionResponse = self._call(self._stub.Transition, req)
        record = Record.from_pb(resp.record)
        if self._cache is not None:
            self._cache.remember_record(record)
        return Transitioned(record=record, changed=resp.changed)

    def renew(self, claim: Claim | Lease, *, lease: Seconds | None = None) -> Record:
        """renew extends the lease of claim's owner to now + lease (default:
        the provider's). Raises StaleToken once another holder took over."""
        req = renew_request(claim, lease)
        resp: pb.RenewResponse = self._call(self._stub.Renew, req)
        return Record.from_pb(resp.record)

    def release(self, claim: Claim | Lease) -> Record:
        """release gives the key of claim back: the side effect did not
        happen, and the next delivery acquires it with reason RELEASED."""
        req = release_request(claim)
        resp: pb.ReleaseResponse = self._call(self._stub.Release, req)
        return Record.from_pb(resp.record)

    def get(self, namespace: str, provider: str, key: str) -> Record:
        """get reads a record from the durable tier. Raises NotFound. The
        record shows the fencing token but never the lease secret: reading a
        record does not let anyone write it."""
        req = pb.GetRequest(namespace=namespace, provider=provider, key=key)
        resp: pb.GetResponse = self._call(self._stub.Get, req)
        return Record.from_pb(resp.record)

    def get_provider(self, name: str) -> Provider:
        """get_provider returns the provider (or group) registered as name.
        Raises NotFound."""
        resp: provider_pb.GetProviderResponse = self._call(
            self._providers.GetProvider, provider_pb.GetProviderRequest(name=name)
        )
        return Provider.from_pb(resp.provider)

    def list_providers(self) -> list[Provider]:
        """list_providers returns every registered provider and group."""
        resp: provider_pb.ListProvidersResponse = self._call(
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
    ) -> Callable[[Callable[Concatenate[Guard, P], object]], Callable[..., GuardResult]]:
        """guarded decorates fn(guard, *args) -> result. The decorated
        function takes the delivery first (an event id, an EventRef naming
        the event's entity and event type, or a Delivery) and returns the
        GuardResult; fn runs only when the claim is acquired. With key= (a
        JMESPath expression or a callable) it takes fn's own arguments and
        reads the key from them; payload=, scope= and window= are
        claimd.guard.guarded's. fn's result is stored as Guard.settle encodes
        it: bytes as they are, str as UTF-8, None as empty, a dict, list,
        dataclass, pydantic model or other JSON value as compact JSON."""
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
    ) -> Callable[[Callable[P, T]], Callable[P, T]]:
        """idempotent is claimd.idempotent on this client: fn runs once per
        key and every call returns its value, typed, or raises."""
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

    def _call(self, method: Any, req: Any, extra: float = 0.0) -> Any:
        return call_with_retry(self.retry, self.timeout, lambda t: method(req, timeout=t), extra)

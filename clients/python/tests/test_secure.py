"""The client against a claimd that requires TLS, a client certificate of
its CA (mTLS) and a principal of its auth file for every call, with tokens
made by `claimd token new` and certificates by a throwaway CA (testca)."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import target_for
from testca import CA, Leaf

import claimd.aio
from claimd import (
    ClaimdError,
    Client,
    EventState,
    Outcome,
    PermissionDenied,
    Reason,
    ResourceExhausted,
    RetryPolicy,
    TLSConfig,
    Unauthenticated,
    Unavailable,
)
from claimd.testing import ClaimdServer

# Credentials, tokens in metadata and the refusals they earn: the client contract, over each transport.
pytestmark = pytest.mark.both_transports

SECURE_NS = "pysec"  # granted to principals hooks and mesh
DENIED_NS = "pysec-other"  # granted to nobody
PACED_NS = "pysec-paced"  # principal paced: one call every 2s
SLOW_NS = "pysec-slow"  # principal slow: one call every 10s


def new_token(binary: Path) -> tuple[str, str]:
    """new_token runs `claimd token new` as an operator would and returns the
    token (line 1) and the tokens: line it says to paste."""
    out = subprocess.run([str(binary), "token", "new"], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    paste = next(line.strip() for line in lines[1:] if line.strip().startswith("tokens: "))
    return lines[0], paste


@dataclasses.dataclass
class Secured:
    """Secured is a running claimd that requires TLS, mTLS and a principal."""

    server: ClaimdServer
    ca: CA
    receiver: Leaf  # names no principal: a call needs a token too
    mesh: Leaf  # names principal mesh
    hooks: str
    hooks_next: str
    paced: str
    slow: str
    revoked: str  # listed by no principal

    def client(self, *, cert: Leaf | None = None, transport: str = "grpc", **kwargs: Any) -> Client:
        leaf = cert or self.receiver
        tls = TLSConfig(ca_file=self.ca.ca_file, cert_file=leaf.cert_file, key_file=leaf.key_file)
        return Client(self.target(transport), tls=tls, **kwargs)

    def target(self, transport: str) -> str:
        """target is the gRPC address, or for Connect the URL of the HTTP
        listener, which serves the same TLS and requires the same client
        certificates."""
        return self.server.grpc_address if transport == "grpc" else f"https://{self.server.http_address}"


@pytest.fixture(scope="module")
def secured(claimd_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("secured")
    ca = CA(base / "ca", "claimd python client test CA")
    server_cert = ca.issue("claimd", "127.0.0.1", "localhost", "claimd.test")
    receiver = ca.issue("spiffe://claimd.test/receiver")
    mesh = ca.issue("spiffe://claimd.test/mesh")
    hooks, hooks_line = new_token(claimd_binary)
    hooks_next, next_line = new_token(claimd_binary)
    paced, paced_line = new_token(claimd_binary)
    slow, slow_line = new_token(claimd_binary)
    revoked, _ = new_token(claimd_binary)
    # principal hooks lists two tokens: the second is the one rotated to.
    next_hash = next_line.removeprefix("tokens: [").removesuffix("]")
    hooks_line = hooks_line.removesuffix("]") + f", {next_hash}]"
    auth_file = base / "auth.yaml"
    auth_file.write_text(
        f"""version: 1
principals:
  hooks:
    {hooks_line}
    namespaces: [{SECURE_NS}]
    roles: [claim, read]
  mesh:
    identities: ["spiffe://claimd.test/mesh"]
    namespaces: [{SECURE_NS}]
    roles: [claim]
  paced:
    {paced_line}
    namespaces: [{PACED_NS}]
    roles: [claim]
    rate: {{per_second: 0.5, burst: 1}}
  slow:
    {slow_line}
    namespaces: [{SLOW_NS}]
    roles: [claim]
    rate: {{per_second: 0.1, burst: 1}}
"""
    )
    auth_file.chmod(0o600)  # claimd refuses an auth file other users may read
    health = grpc.ssl_channel_credentials(
        root_certificates=ca.ca_file.read_bytes(),
        private_key=receiver.key_file.read_bytes(),
        certificate_chain=receiver.cert_file.read_bytes(),
    )
    server = ClaimdServer.start(
        claimd_binary,
        base / "data",
        extra_args=(
            "--tls-cert",
            str(server_cert.cert_file),
            "--tls-key",
            str(server_cert.key_file),
            "--tls-client-ca",
            str(ca.ca_file),
            "--auth-file",
            str(auth_file),
        ),
        health_credentials=health,
    )
    yield Secured(server, ca, receiver, mesh, hooks, hooks_next, paced, slow, revoked)
    code = server.stop()
    assert code == 0, f"secured claimd exited {code} on SIGTERM, want 0:\n{server.tail()}"


def evt() -> str:
    return f"evt_{uuid.uuid4().hex}"


def test_guard_round_trip_with_token_and_client_certificate(secured: Secured, transport: str) -> None:
    runs: list[str] = []
    event = evt()
    with secured.client(token=secured.hooks, transport=transport) as client:
        results = []
        for _ in range(2):
            with client.guard(SECURE_NS, "stripe", event_id=event) as g:
                if g.acquired:
                    runs.append(g.claim.key)
                    g.settle({"charged": True})
            results.append(g.result)
    assert [(r.status, r.outcome, r.body) for r in results] == [
        (200, Outcome.ACQUIRED, b'{"charged":true}'),
        (200, Outcome.DUPLICATE, b'{"charged":true}'),
    ], f"guard results {results}\n{secured.server.tail()}"
    assert runs == [event], f"the guarded block ran {len(runs)} times, want once"


@pytest.mark.asyncio
async def test_asyncio_round_trip_with_token_and_client_certificate(secured: Secured, transport: str) -> None:
    # claimd.aio over TLS: for Connect, an asyncio protocol on a TLS transport.
    leaf = secured.receiver
    tls = TLSConfig(ca_file=secured.ca.ca_file, cert_file=leaf.cert_file, key_file=leaf.key_file)
    event = evt()
    async with claimd.aio.Client(secured.target(transport), tls=tls, token=secured.hooks) as client:
        c = await client.claim(SECURE_NS, "stripe", event_id=event, start=True)
        assert c.outcome == Outcome.ACQUIRED, c
        settled = await client.transition(c, EventState.SETTLED, result=b"x" * 65_536)
        assert settled.changed
        dup = await client.claim(SECURE_NS, "stripe", event_id=event)
    # 64 KiB of result (the most): the answer spans several TLS records and reads.
    assert (dup.outcome, dup.result) == (Outcome.DUPLICATE, b"x" * 65_536)


def test_client_certificate_alone_names_principal_mesh(secured: Secured, transport: str) -> None:
    with secured.client(cert=secured.mesh, transport=transport) as client:
        with client.guard(SECURE_NS, "stripe", event_id=evt()) as g:
            if g.acquired:
                g.settle(b"ok")
    assert (g.result.status, g.result.outcome) == (200, Outcome.ACQUIRED), g.result


def test_token_provider_is_asked_per_call(secured: Secured, transport: str) -> None:
    current = [secured.hooks]
    asked: list[int] = []

    def provider() -> str:
        asked.append(1)
        return current[0]

    with secured.client(token=provider, transport=transport) as client:
        assert client.claim(SECURE_NS, "stripe", event_id=evt()).outcome == Outcome.ACQUIRED
        current[0] = secured.hooks_next
        assert client.claim(SECURE_NS, "stripe", event_id=evt()).outcome == Outcome.ACQUIRED
        current[0] = secured.revoked
        with pytest.raises(Unauthenticated):
            client.claim(SECURE_NS, "stripe", event_id=evt())
    assert len(asked) >= 3, f"token provider asked {len(asked)} times for 3 calls, want once per call"


@dataclasses.dataclass(frozen=True)
class Refusal:
    desc: str
    token: Callable[[Secured], str | None]
    namespace: str
    error: type[ClaimdError]
    code: grpc.StatusCode
    reason: str


REFUSALS = [
    Refusal(
        "no token, certificate of no principal",
        lambda s: None,
        SECURE_NS,
        Unauthenticated,
        grpc.StatusCode.UNAUTHENTICATED,
        "IDENTITY_UNKNOWN",
    ),
    Refusal(
        "token no principal lists",
        lambda s: s.revoked,
        SECURE_NS,
        Unauthenticated,
        grpc.StatusCode.UNAUTHENTICATED,
        "TOKEN_UNKNOWN",
    ),
    Refusal(
        "namespace outside the principal's",
        lambda s: s.hooks,
        DENIED_NS,
        PermissionDenied,
        grpc.StatusCode.PERMISSION_DENIED,
        "NAMESPACE_DENIED",
    ),
]


@pytest.mark.parametrize("case", REFUSALS, ids=lambda c: c.desc)
def test_refusals_are_typed_write_nothing_and_guard_answers_500(
    secured: Secured, case: Refusal, transport: str
) -> None:
    event = evt()
    attempts: list[grpc.StatusCode] = []
    # Connect has no interceptors: its attempts are counted on the token
    # provider, asked once per attempt (the case without a token is gRPC's).
    token: Any = case.token(secured)
    if transport == "connect" and token is not None:
        fixed = token

        def token(fixed: str = fixed) -> str:
            attempts.append(case.code)
            return fixed

    interceptors = [Recorder(attempts)] if transport == "grpc" else []
    with secured.client(token=token, interceptors=interceptors, transport=transport) as client:
        with pytest.raises(case.error) as raised:
            client.claim(case.namespace, "stripe", event_id=event)
        err = raised.value
        assert (err.code, err.reason) == (case.code, case.reason), f"claim({event!r}) = {err}"
        if transport == "grpc" or token is not None:
            assert attempts == [case.code], f"attempts {attempts}: a refusal is not retried"
        if case.error is PermissionDenied:
            assert err.metadata.get("principal") == "hooks", err.metadata
        for token in (secured.hooks, secured.revoked):
            assert token not in str(err) and token not in repr(err), "a bearer token is in the error"

        ran = []
        with client.guard(case.namespace, "stripe", event_id=event) as g:
            if g.acquired:
                ran.append(1)
        assert (g.result.status, g.result.ran, ran) == (500, False, []), g.result
        assert isinstance(g.result.error, case.error), g.result.error

    if case.namespace == SECURE_NS:
        # Nothing was written: the key is new to its rightful owner.
        with secured.client(token=secured.hooks) as owner:
            c = owner.claim(SECURE_NS, "stripe", event_id=event)
        assert (c.outcome, c.reason) == (Outcome.ACQUIRED, Reason.NEW), c


class Recorder(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Recorder appends each attempt's status code, and when it ended."""

    def __init__(self, codes: list[grpc.StatusCode], times: list[float] | None = None) -> None:
        self._codes = codes
        self._times = times
        self._lock = threading.Lock()

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        outcome = continuation(details, request)
        code = outcome.code()
        with self._lock:
            self._codes.append(code)
            if self._times is not None:
                self._times.append(time.monotonic())
        return outcome


def test_rate_limit_is_retried_after_its_retry_info_delay(secured: Secured) -> None:
    codes: list[grpc.StatusCode] = []
    times: list[float] = []
    retry = RetryPolicy(max_attempts=3, total_timeout=10.0)
    with secured.client(token=secured.paced, retry=retry, interceptors=[Recorder(codes, times)]) as client:
        client.claim(PACED_NS, "stripe", event_id=evt())
        before = time.monotonic()
        client.claim(PACED_NS, "stripe", event_id=evt())
    ok, exhausted = grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED
    assert codes == [ok, exhausted, ok], f"attempts {codes}, want OK, RESOURCE_EXHAUSTED, OK (burst 1 at 0.5/s)"
    # The bucket refills one call in 2s; the refusal came at once, so claimd's
    # delay is most of that, and the retry waited at least as long.
    assert times[2] - before >= 1.0, f"retried {times[2] - before:.2f}s after the refusal, want claimd's delay"


def test_rate_limit_past_the_call_time_fails_at_once_and_guard_answers_503(secured: Secured) -> None:
    retry = RetryPolicy(max_attempts=4, total_timeout=2.0)
    with secured.client(token=secured.slow, retry=retry) as client:
        client.claim(SLOW_NS, "stripe", event_id=evt())
        start = time.monotonic()
        with pytest.raises(ResourceExhausted) as raised:
            client.claim(SLOW_NS, "stripe", event_id=evt())
        took = time.monotonic() - start
        err = raised.value
        assert err.reason == "RATE_LIMITED" and err.retry_after is not None and err.retry_after > 5, err
        assert took < 2.0, (
            f"the refused claim took {took:.2f}s; the delay outlasts total_timeout, want a prompt failure"
        )

        with client.guard(SLOW_NS, "stripe", event_id=evt()) as g:
            assert not g.acquired
        assert (g.result.status, g.result.ran) == (503, False), g.result
        assert g.result.retry_after is not None and g.result.retry_after > 5, g.result


@pytest.mark.parametrize(("server_name", "ok"), [("claimd.test", True), ("elsewhere.test", False)])
def test_server_name_is_checked(secured: Secured, server_name: str, ok: bool, transport: str) -> None:
    leaf = secured.receiver
    tls = TLSConfig(
        ca_file=secured.ca.ca_file, cert_file=leaf.cert_file, key_file=leaf.key_file, server_name=server_name
    )
    with Client(secured.target(transport), tls=tls, token=secured.hooks, connect_timeout=1.0) as client:
        if ok:
            client.wait_ready(10.0)
        else:
            with pytest.raises(Unavailable):
                client.wait_ready(2.0)


def test_system_roots_do_not_trust_the_test_ca(secured: Secured, transport: str) -> None:
    leaf = secured.receiver
    tls = TLSConfig(cert_file=leaf.cert_file, key_file=leaf.key_file)
    with Client(secured.target(transport), tls=tls, token=secured.hooks, connect_timeout=1.0) as client:
        with pytest.raises(Unavailable):
            client.wait_ready(2.0)


def test_token_stays_out_of_reprs(secured: Secured) -> None:
    with secured.client(token=secured.hooks) as client:
        seen = repr(client) + repr(vars(client))
    assert secured.hooks not in seen


def test_plaintext_loopback_with_token(claimd_binary: Path, tmp_path: Path, transport: str) -> None:
    """A token goes to a claimd on loopback without TLS (make run with an auth
    file): local credentials let it through after checking the peer."""
    token, line = new_token(claimd_binary)
    auth_file = tmp_path / "auth.yaml"
    auth_file.write_text(
        f"version: 1\nprincipals:\n  local:\n    {line}\n    namespaces: [pylocal]\n    roles: [claim]\n"
    )
    auth_file.chmod(0o600)  # claimd refuses an auth file other users may read
    with ClaimdServer.start(claimd_binary, tmp_path / "data", extra_args=("--auth-file", str(auth_file))) as server:
        with Client(target_for(server, transport), token=token) as client:
            with client.guard("pylocal", "stripe", event_id=evt()) as g:
                if g.acquired:
                    g.settle(b"ok")
            assert (g.result.status, g.result.outcome) == (200, Outcome.ACQUIRED), g.result
        with Client(target_for(server, transport)) as anonymous:
            with pytest.raises(Unauthenticated):
                anonymous.claim("pylocal", "stripe", event_id=evt())


SECRET = "cl_not-a-real-token-but-secret-all-the-same"


@pytest.mark.parametrize(
    ("desc", "target", "kwargs", "want"),
    [
        ("remote host, nothing", "claimd.invalid:50051", {}, ["not a loopback address", "tls=TLSConfig", "insecure"]),
        ("remote host, token", "dns:///claimd.invalid:50051", {"token": SECRET}, ["bearer token", "tls=TLSConfig"]),
        ("remote IP, token", "192.0.2.1:50051", {"token": SECRET}, ["not a loopback address"]),
        ("insecure with a token", "claimd.invalid:50051", {"insecure": True, "token": SECRET}, ["plaintext"]),
        ("token with a newline", "127.0.0.1:50051", {"token": SECRET + "\n"}, ["trailing newline"]),
        ("tls and insecure", "127.0.0.1:50051", {"tls": True, "insecure": True}, ["give one of"]),
        ("Connect, remote host", "http://claimd.invalid:8080", {}, ["not a loopback address", "https://", "insecure"]),
        ("Connect, remote, token", "http://192.0.2.1:8080", {"token": SECRET}, ["bearer token", "https://"]),
        ("Connect, insecure, token", "http://claimd.invalid", {"insecure": True, "token": SECRET}, ["plaintext"]),
        ("Connect, tls on http://", "http://127.0.0.1:8080", {"tls": True}, ["https://"]),
        ("Connect, token newline", "http://127.0.0.1:8080", {"token": SECRET + "\n"}, ["trailing newline"]),
        ("Connect, gRPC only", "http://127.0.0.1:8080", {"options": [("grpc.x", 1)]}, ["options", "gRPC channel"]),
        ("a URL as gRPC", "http://127.0.0.1:8080", {"transport": "grpc"}, ["is a URL"]),
        ("Connect, not a URL", "127.0.0.1:8080", {"transport": "connect"}, ["http:// or https:// URL"]),
    ],
)
def test_plaintext_off_loopback_is_refused(desc: str, target: str, kwargs: dict[str, Any], want: list[str]) -> None:
    with pytest.raises(ValueError) as raised:
        Client(target, **kwargs)
    msg = str(raised.value)
    for w in want:
        assert w in msg, f"{desc}: Client({target!r}) raised {msg!r}, want it to say {w!r}"
    assert "secret-all-the-same" not in msg, f"{desc}: the error quotes the token"


def test_certificate_without_key_is_refused() -> None:
    with pytest.raises(ValueError, match="give both or neither"):
        TLSConfig(cert_file="client.pem")


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1:1",
        "localhost:1",
        "[::1]:1",
        "dns:///localhost:1",
        "unix:/tmp/x.sock",
        "http://127.0.0.1:1",
        "http://[::1]:1",
    ],
)
def test_loopback_targets_stay_plaintext(target: str) -> None:
    Client(target, token=SECRET).close()


def test_powertools_layer_with_the_claim_role_only(secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    """ClaimdPersistenceLayer under a principal that may claim but not read
    providers (mesh): it keeps the provider's window, says why at warning
    level, and every call still works."""
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function

    from claimd.powertools import ClaimdPersistenceLayer

    with secured.client(cert=secured.mesh) as client:
        store = ClaimdPersistenceLayer(client, namespace=SECURE_NS, provider="stripe")
        config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=100 * 3600)
        runs: list[int] = []

        @idempotent_function(data_keyword_argument="order", config=config, persistence_store=store)
        def process(order: dict[str, str]) -> int:
            runs.append(1)
            return len(runs)

        order = {"id": evt()}
        with caplog.at_level(logging.WARNING, logger="claimd.powertools"):
            assert process(order=order) == 1
            assert process(order=order) == 1
        assert runs == [1]
        assert any("grant the read role, or pass window=" in r.getMessage() for r in caplog.records)

"""Transport security and credentials of a Client: TLS (and mTLS) settings, a
bearer token sent as call credentials, and the rule that plaintext is for
loopback targets only."""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

TokenProvider = Callable[[], str]
"""TokenProvider returns the bearer token to send; it is called before every
call attempt (from a gRPC thread), so it can rotate tokens. Cache inside it
if fetching a token is slow."""

MAX_TOKEN_BYTES = 512
"""MAX_TOKEN_BYTES is the longest bearer token claimd accepts."""


@dataclasses.dataclass(frozen=True)
class TLSConfig:
    """TLSConfig connects over TLS.

    ca_file is a PEM bundle that verifies claimd's certificate; None uses the
    operating system's bundle (ssl.get_default_verify_paths), or gRPC's own
    roots where the system has none. cert_file and key_file are the client
    certificate and key for a claimd that requires client certificates
    (mTLS): both or neither. server_name is the name claimd's certificate
    must carry when it is not the target's host (an IP address, a load
    balancer). The files are read when the Client is made: make a new Client
    to pick up rotated files.
    """

    ca_file: str | Path | None = None
    cert_file: str | Path | None = None
    key_file: str | Path | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("TLSConfig: cert_file and key_file go together: give both or neither")

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """channel_credentials reads the files into gRPC SSL credentials."""
        roots = _read(self.ca_file, "ca_file") if self.ca_file is not None else _system_roots()
        key = _read(self.key_file, "key_file") if self.key_file is not None else None
        chain = _read(self.cert_file, "cert_file") if self.cert_file is not None else None
        return grpc.ssl_channel_credentials(root_certificates=roots, private_key=key, certificate_chain=chain)


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"TLSConfig.{what}: cannot read {path}: {err.strerror}") from err


def _system_roots() -> bytes | None:
    cafile = ssl.get_default_verify_paths().cafile
    if cafile is None:
        return None  # gRPC's bundled roots
    try:
        return Path(cafile).read_bytes()
    except OSError:
        return None


def check_token(token: str) -> str | None:
    """check_token says what makes token unusable, None when it is fine. The
    answer never quotes the token."""
    if not token:
        return "the token is empty"
    if len(token.encode()) > MAX_TOKEN_BYTES:
        return f"the token is {len(token.encode())} bytes; claimd accepts at most {MAX_TOKEN_BYTES}"
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in token):
        return "the token contains white space or a control character (a trailing newline from a file?)"
    return None


class _BearerAuth(grpc.AuthMetadataPlugin):  # type: ignore[misc]  # grpc ships no type hints
    """_BearerAuth adds "authorization: Bearer <token>" to every call. The
    token stays in the provider's closure; the plugin's repr never shows it."""

    __slots__ = ("_provider",)

    def __init__(self, provider: TokenProvider) -> None:
        self._provider = provider

    def __call__(self, context: Any, callback: Callable[[Any, BaseException | None], None]) -> None:
        try:
            token = self._provider()
        except Exception as err:  # the call fails UNAVAILABLE and is retried
            callback((), ValueError(f"claimd token provider failed: {type(err).__name__}"))
            return
        problem = check_token(token) if isinstance(token, str) else "the token is not a str"
        if problem is not None:
            callback((), ValueError(f"claimd token provider returned an unusable token: {problem}"))
            return
        callback((("authorization", f"Bearer {token}"),), None)

    def __repr__(self) -> str:
        return "<claimd bearer token>"


class _ClientCallDetails(
    collections.namedtuple(
        "_ClientCallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression")
    ),
    grpc.ClientCallDetails,  # type: ignore[misc]
):
    pass


class StaticBearer(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """StaticBearer adds "authorization: Bearer <token>" to every call of a
    client whose token is a fixed str. gRPC runs call credentials
    (metadata_call_credentials) on a thread of its own for every call, which
    cost about 270 µs of CPU and twice that in latency per call in
    bench/python (1 062 against 506 µs a call); a fixed token needs none of
    that. The channel is still a secure or local one: channel_credentials
    refuses plaintext with a token as before. Its repr never shows the
    token."""

    __slots__ = ("_metadata",)

    def __init__(self, token: str) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        md = self._metadata if not details.metadata else (*details.metadata, *self._metadata)
        return continuation(
            _ClientCallDetails(
                details.method, details.timeout, md, details.credentials, details.wait_for_ready, details.compression
            ),
            request,
        )

    def __repr__(self) -> str:
        return "<claimd bearer token>"


def is_loopback_target(target: str) -> bool:
    """is_loopback_target reports whether a gRPC target names this machine: a
    loopback IP, localhost, or a Unix socket. A target it cannot read (a
    custom resolver's) is not loopback."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    if target.startswith(("ipv4:", "ipv6:")):
        return all(_loopback_host(a) for a in target.split(":", 1)[1].split(","))
    for scheme in ("dns:", "passthrough:"):
        if target.startswith(scheme):
            rest = target[len(scheme) :]
            if rest.startswith("//"):
                rest = rest[2:].partition("/")[2]  # the authority is the resolver's
            return _loopback_host(rest)
    if "://" in target:
        return False
    return _loopback_host(target)


def _loopback_host(hostport: str) -> bool:
    host = hostport
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _clip(s: str, limit: int = 64) -> str:
    return repr(s) if len(s) <= limit else f"{s[:limit]!r}… ({len(s)} bytes)"


def channel_credentials(
    target: str,
    *,
    token: str | TokenProvider | None,
    tls: TLSConfig | bool | None,
    insecure: bool,
    credentials: grpc.ChannelCredentials | None,
    static_as_metadata: bool = False,
) -> tuple[grpc.ChannelCredentials | None, list[tuple[str, Any]]]:
    """channel_credentials decides how a Client reaches target: the channel
    credentials (None for a plaintext channel) and the channel options they
    need. It raises ValueError for a combination that would send calls, or
    a token, in plaintext over a network, naming the argument to add."""
    if tls is True:
        tls = TLSConfig()
    elif tls is False:
        tls = None
    if sum((tls is not None, credentials is not None, insecure)) > 1:
        raise ValueError("Client: give one of tls, credentials and insecure")
    call_creds: grpc.CallCredentials | None = None
    if token is not None:
        if isinstance(token, str):
            problem = check_token(token)
            if problem is not None:
                raise ValueError(f"Client.token: {problem}")
            static = token
            # With static_as_metadata the caller sends it itself
            # (StaticBearer), after the checks below on the channel.
            if not static_as_metadata:
                call_creds = grpc.metadata_call_credentials(_BearerAuth(lambda: static), name="claimd-bearer")
        elif callable(token):
            call_creds = grpc.metadata_call_credentials(_BearerAuth(token), name="claimd-bearer")
        else:
            raise ValueError("Client.token: want a str or a callable returning one")

    options: list[tuple[str, Any]] = []
    creds: grpc.ChannelCredentials | None
    if tls is not None:
        creds = tls.channel_credentials()
        if tls.server_name:
            options.append(("grpc.ssl_target_name_override", tls.server_name))
    elif credentials is not None:
        creds = credentials
    elif insecure:
        if token is not None:
            raise ValueError("Client: insecure=True would send the bearer token in plaintext; use tls=TLSConfig(...)")
        return None, options
    elif not is_loopback_target(target):
        what = "the bearer token" if token is not None else "calls"
        raise ValueError(
            f"Client: {_clip(target)} is not a loopback address, and {what} must not cross the network in "
            "plaintext: pass tls=TLSConfig(ca_file=...) (or insecure=True for plaintext without a token)"
        )
    else:
        # Plaintext on loopback. Local credentials check at the connection
        # that the peer is on this machine, and let call credentials through.
        kind = (
            grpc.LocalConnectionType.UDS
            if target.startswith(("unix:", "unix-abstract:"))
            else grpc.LocalConnectionType.LOCAL_TCP
        )
        creds = grpc.local_channel_credentials(kind)
    if call_creds is not None:
        creds = grpc.composite_channel_credentials(creds, call_creds)
    return creds, options

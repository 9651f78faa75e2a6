"""_connect: the Connect transport of both Clients (transport="connect").

Unary Connect calls (https://connectrpc.com/docs/protocol) to claimd's HTTP
listener: POST /<service>/<method> with an application/proto body, over
persistent HTTP/1.1 keep-alive connections, a few kept idle per client. The
HTTP/1.1 here is the little a unary call needs (a request with a
Content-Length; a response with a Content-Length or chunked): measured on
one thread, a Claim costs the calling process about 130 µs of CPU through
this, 270 through http.client (most of it parsing headers with the email
package) and 320-420 through grpcio's blocking stub. tests/bench_duplicates.py
and tests/bench_powertools.py compare the transports through the guard.

Failures are ConnectError, a grpc.RpcError with the gRPC code, message and
google.rpc details of the Connect error body, so the retry policy and
claimd.errors treat them exactly as a failed gRPC call: the same
ClaimdError class, reason, metadata, retry_after and fields.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2, message, message_factory
from google.protobuf.descriptor import ServiceDescriptor

from claimd.security import TLSConfig, TokenProvider, check_token, is_loopback_target

MAX_RESPONSE_BYTES = 32 << 20
"""MAX_RESPONSE_BYTES bounds one response body (claimd's largest is a
record's 64 KiB result, or a list of providers)."""

MAX_LINE_BYTES = 64 << 10
"""MAX_LINE_BYTES bounds a status, header or chunk-size line."""

_RECV_BYTES = 64 << 10
"""_RECV_BYTES is the most one read of a socket takes."""

IDLE_SECONDS = 50.0
"""IDLE_SECONDS is how long an idle connection is kept for the next call.
claimd closes one idle for two minutes; a load balancer may sooner."""

MAX_IDLE = 8
"""MAX_IDLE is how many idle connections a client keeps."""

# Connect's codes are gRPC's names in lower case, but for "canceled".
_CODES: dict[str, grpc.StatusCode] = {c.name.lower(): c for c in grpc.StatusCode}
_CODES["canceled"] = grpc.StatusCode.CANCELLED

# Connect's code for an error body that is not Connect's (a proxy's page).
_HTTP_CODES = {
    400: grpc.StatusCode.INTERNAL,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.UNIMPLEMENTED,
    429: grpc.StatusCode.UNAVAILABLE,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.UNAVAILABLE,
}


class ConnectError(grpc.RpcError):  # type: ignore[misc]  # grpc ships no type hints
    """ConnectError is a failed Connect call in the shape of a failed gRPC
    call: code() and details() (the message), and status_details, the
    google.rpc details the error carried (claimd.errors reads them)."""

    def __init__(self, code: grpc.StatusCode, message: str, details: Sequence[any_pb2.Any] = ()) -> None:
        super().__init__(f"{code.name}: {message}")
        self._code = code
        self._message = message
        self.status_details = list(details)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._message


def error_from_response(status: int, content_type: str, body: bytes) -> ConnectError:
    """error_from_response reads a Connect error body (JSON: code, message,
    details with base64 values); a body that is not one is named by its HTTP
    status as Connect's table says."""
    if content_type.split(";", 1)[0].strip().lower() == "application/json":
        try:
            doc = json.loads(body)
            code = _CODES[doc["code"]]
        except (ValueError, KeyError, TypeError):
            pass
        else:
            return ConnectError(code, str(doc.get("message", "")), _details(doc.get("details")))
    code = _HTTP_CODES.get(status, grpc.StatusCode.UNKNOWN)
    text = body[:200].decode("utf-8", "replace")
    return ConnectError(code, f"HTTP {status} from claimd's HTTP listener: {text!r}")


def _details(raw: Any) -> list[any_pb2.Any]:
    out: list[any_pb2.Any] = []
    if not isinstance(raw, list):
        return out
    for d in raw:
        try:
            value = base64.b64decode(d["value"] + "=" * (-len(d["value"]) % 4))
            out.append(any_pb2.Any(type_url=f"type.googleapis.com/{d['type']}", value=value))
        except (KeyError, TypeError, ValueError, binascii.Error):
            continue
    return out


# --- where and how to connect --------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """Endpoint is a parsed claimd URL: where to dial, what to send as Host,
    the path prefix of the services, and TLS when the scheme is https."""

    host: str
    port: int
    host_header: str
    prefix: str
    ssl_context: ssl.SSLContext | None
    server_hostname: str | None


def endpoint(url: str, *, token: object, tls: TLSConfig | bool | None, insecure: bool) -> Endpoint:
    """endpoint parses url (http://host:port or https://host:port, with an
    optional path prefix) and applies the gRPC channel's rules: plaintext
    only to a loopback host unless insecure=True, and never a token in
    plaintext off loopback. https verifies claimd's certificate with tls's
    CA (the system's by default) and presents tls's client certificate."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"Client: transport='connect' wants an http:// or https:// URL, not {url[:64]!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError("Client: a claimd URL has no query, fragment or credentials")
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    tls_config = TLSConfig() if tls is True else (tls or None)
    if sum((tls_config is not None, insecure)) > 1:
        raise ValueError("Client: give one of tls and insecure")
    context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    if parts.scheme == "https":
        context = ssl_context(tls_config or TLSConfig())
        server_hostname = (tls_config.server_name if tls_config else None) or host
    elif tls_config is not None:
        raise ValueError(f"Client: {url[:64]!r} is plaintext (http://): use an https:// URL with tls")
    elif insecure:
        if token is not None:
            raise ValueError("Client: insecure=True would send the bearer token in plaintext; use an https:// URL")
    elif not is_loopback_target(parts.netloc):
        what = "the bearer token" if token is not None else "calls"
        raise ValueError(
            f"Client: {url[:64]!r} is not a loopback address, and {what} must not cross the network in "
            "plaintext: use an https:// URL (tls=TLSConfig(ca_file=...) to name its CA), or insecure=True "
            "for plaintext without a token"
        )
    return Endpoint(host, port, parts.netloc, parts.path.rstrip("/"), context, server_hostname)


def ssl_context(tls: TLSConfig) -> ssl.SSLContext:
    """ssl_context verifies claimd's certificate with tls.ca_file (the
    system's roots when None) and presents tls's client certificate."""
    try:
        context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file is not None else None)
        if tls.cert_file is not None and tls.key_file is not None:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    except (OSError, ssl.SSLError) as err:
        raise ValueError(f"TLSConfig: cannot load the CA, certificate or key: {err}") from err
    context.set_alpn_protocols(["http/1.1"])
    return context


class Headers:
    """Headers are the request head of every call but its path, timeout and
    length; a token that is a str is written into it once."""

    def __init__(self, ep: Endpoint, token: str | TokenProvider | None, user_agent: str) -> None:
        if isinstance(token, str):
            problem = check_token(token)
            if problem is not None:
                raise ValueError(f"Client.token: {problem}")
        elif token is not None and not callable(token):
            raise ValueError("Client.token: want a str or a callable returning one")
        fixed = (
            f"Host: {ep.host_header}\r\n"
            "Content-Type: application/proto\r\n"
            "Connect-Protocol-Version: 1\r\n"
            f"User-Agent: {user_agent}\r\n"
        )
        if isinstance(token, str):
            fixed += f"Authorization: Bearer {token}\r\n"
            token = None
        self._fixed = fixed.encode("latin-1")
        self._provider = token
        self._prefix = ep.prefix.encode("latin-1")

    def head(self, path: bytes, length: int, timeout: float) -> bytes:
        """head is the request's head up to its body. A token provider is
        asked here, once per attempt; its failure fails the attempt
        UNAVAILABLE (retried), as gRPC fails a call credentials plugin's."""
        auth = b""
        if self._provider is not None:
            try:
                token = self._provider()
            except Exception as err:
                raise ConnectError(
                    grpc.StatusCode.UNAVAILABLE, f"claimd token provider failed: {type(err).__name__}"
                ) from None
            problem = check_token(token) if isinstance(token, str) else "the token is not a str"
            if problem is not None:
                raise ConnectError(
                    grpc.StatusCode.UNAVAILABLE, f"claimd token provider returned an unusable token: {problem}"
                )
            auth = b"Authorization: Bearer %s\r\n" % token.encode()
        ms = max(1, math.ceil(timeout * 1000))
        return b"POST %s%s HTTP/1.1\r\n%s%sConnect-Timeout-Ms: %d\r\nContent-Length: %d\r\n\r\n" % (
            self._prefix,
            path,
            self._fixed,
            auth,
            ms,
            length,
        )


# --- reading a response ----------------------------------------------------------


class _Head:
    """_Head is what a response's status line and headers say."""

    __slots__ = ("chunked", "content_type", "keep", "length", "status")

    def __init__(self, line: bytes) -> None:
        version, _, rest = line.partition(b" ")
        try:
            if not version.startswith(b"HTTP/"):
                raise ValueError
            self.status = int(rest[:3])
        except ValueError:
            raise _Broken(f"not an HTTP response: {line[:60]!r}") from None
        self.keep = version == b"HTTP/1.1"
        self.length = -1
        self.chunked = False
        self.content_type = ""


class _Broken(Exception):
    """_Broken is a response this client cannot read: the connection is
    dropped and the call fails UNAVAILABLE."""


def _chunk_size(line: bytes) -> int:
    try:
        size = int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise _Broken(f"chunk size {line[:20]!r}") from None
    if size < 0:
        raise _Broken("negative chunk size")
    return size


def parse_head(block: bytes) -> _Head:
    """parse_head reads a response's status line and headers, block being
    all of them up to the blank line. Only the four headers that say how the
    body is framed, what it is and whether the connection stays are read."""
    lines = block.split(b"\r\n")
    head = _Head(lines[0])
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            try:
                head.length = int(value)
            except ValueError:
                raise _Broken(f"Content-Length {value.strip()[:20]!r}") from None
            if head.length > MAX_RESPONSE_BYTES:
                raise _Broken(f"a response of {head.length} bytes, over {MAX_RESPONSE_BYTES}")
        elif name == b"content-type":
            head.content_type = value.strip().decode("latin-1")
        elif name == b"transfer-encoding":
            head.chunked = value.strip().lower().endswith(b"chunked")
        elif name == b"connection" and b"close" in value.lower():
            head.keep = False
    return head


# ResponseReader's states: where in a response the next bytes belong.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK, _TRAILER, _TO_EOF = range(6)

_COMPACT_AT = 64 << 10
"""_COMPACT_AT is how many read bytes a ResponseReader keeps before it drops
them from its buffer (a chunked body's earlier chunks)."""


class ResponseReader:
    """ResponseReader reads one HTTP/1.1 response from a connection's bytes,
    fed as they arrive: the sync transport's recv and the asyncio protocol's
    data_received hand them over with no buffered file or stream between.
    feed returns the head and the body once the response is whole, None
    until then; eof says what the connection's end means. Interim (1xx)
    responses are skipped; a body is framed by Content-Length, chunks, or
    the connection's end; every line and body is bounded."""

    __slots__ = ("_buf", "_chunks", "_head", "_need", "_pos", "_scan", "_state", "_total")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._scan = 0  # where the search for a line's end resumes: bytes before it were searched
        self._state = _HEAD
        self._head: _Head | None = None
        self._need = 0
        self._chunks: list[bytes] = []
        self._total = 0

    def feed(self, data: bytes) -> tuple[_Head, bytes] | None:
        """feed takes the next bytes; it returns the response once whole
        and raises _Broken for one this client cannot read."""
        if not self._buf:
            # Nearly always the whole response comes in one read: then it
            # is read from data as it is, with none of the copies below.
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                head = parse_head(data[:end])
                start = end + 4
                stop = start + head.length
                if head.status >= 200 and not head.chunked and start <= stop <= len(data):
                    if stop != len(data):
                        head.keep = False  # bytes after the response: the connection is out of step
                    return head, data[start:stop]
        if self._pos > _COMPACT_AT:
            del self._buf[: self._pos]
            self._pos = self._scan = 0
        self._buf += data
        return self._advance()

    def eof(self) -> tuple[_Head, bytes]:
        """eof is the response when the connection's end ends its body. It
        raises EOFError when nothing of a response came (a kept connection
        the server closed while idle: the request was never read), _Broken
        when the connection closed mid-response."""
        if self._state == _TO_EOF:
            return self._whole(bytes(self._buf[self._pos :]), len(self._buf))
        if not self._buf:
            raise EOFError
        raise _Broken("the connection closed mid-response")

    def _advance(self) -> tuple[_Head, bytes] | None:
        buf = self._buf
        while True:
            state = self._state
            if state == _LENGTH:
                end = self._pos + self._need
                return self._whole(bytes(buf[self._pos : end]), end) if len(buf) >= end else None
            if state == _CHUNK:
                end = self._pos + self._need
                if len(buf) < end + 2:
                    return None
                if buf[end : end + 2] != b"\r\n":
                    raise _Broken("a chunk not followed by CRLF")
                self._chunks.append(bytes(buf[self._pos : end]))
                self._pos = end + 2
                self._state = _CHUNK_SIZE
                continue
            if state == _TO_EOF:
                if len(buf) - self._pos > MAX_RESPONSE_BYTES:
                    raise _Broken(f"a response over {MAX_RESPONSE_BYTES} bytes")
                return None
            # _HEAD, _CHUNK_SIZE and _TRAILER read up to a line's end.
            mark = b"\r\n\r\n" if state == _HEAD else b"\r\n"
            end = buf.find(mark, max(self._pos, self._scan))
            if end < 0:
                self._scan = len(buf) - len(mark) + 1
                if len(buf) - self._pos > MAX_LINE_BYTES:
                    raise _Broken("response headers over 64 KiB" if state == _HEAD else "a line over 64 KiB")
                return None
            line = bytes(buf[self._pos : end])
            self._pos = end + len(mark)
            if state == _HEAD:
                self._start(parse_head(line))
            elif state == _TRAILER:
                if not line:
                    return self._whole(b"".join(self._chunks), self._pos)
                self._count(len(line))
            else:
                size = _chunk_size(line)
                self._count(size)
                self._need = size
                self._state = _CHUNK if size else _TRAILER

    def _start(self, head: _Head) -> None:
        if head.status < 200:
            return  # an interim response: the final one follows
        self._head = head
        if head.chunked:
            self._state = _CHUNK_SIZE
        elif head.length >= 0:
            self._state = _LENGTH
            self._need = head.length
        else:
            head.keep = False  # unbounded by length: the body ends with the connection
            self._state = _TO_EOF

    def _count(self, n: int) -> None:
        self._total += n
        if self._total > MAX_RESPONSE_BYTES:
            raise _Broken(f"a chunked response over {MAX_RESPONSE_BYTES} bytes")

    def _whole(self, body: bytes, end: int) -> tuple[_Head, bytes]:
        head = self._head
        assert head is not None
        if end != len(self._buf):
            head.keep = False  # bytes after the response: the connection is out of step
        return head, body


def _answer(head: _Head, body: bytes) -> bytes:
    if head.status == 200:
        return body
    raise error_from_response(head.status, head.content_type, body)


def _unavailable(what: str, err: BaseException) -> ConnectError:
    return ConnectError(grpc.StatusCode.UNAVAILABLE, f"{what}: {type(err).__name__}: {err}")


def _deadline(timeout: float) -> ConnectError:
    return ConnectError(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {timeout:.3f}s")


# --- the sync transport ----------------------------------------------------------


class _Conn:
    __slots__ = ("idle_since", "sock", "timeout")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.idle_since = 0.0
        self.timeout = sock.gettimeout()

    def read_response(self) -> tuple[_Head, bytes]:
        reader = ResponseReader()
        while True:
            data = self.sock.recv(_RECV_BYTES)
            response = reader.feed(data) if data else reader.eof()
            if response is not None:
                return response

    def close(self) -> None:
        self.sock.close()


class Transport:
    """Transport makes unary Connect calls over a pool of keep-alive
    connections. It is thread-safe: a call takes an idle connection (or
    dials one) and puts it back once the response is read whole."""

    def __init__(self, ep: Endpoint, headers: Headers, connect_timeout: float) -> None:
        self._ep = ep
        self._headers = headers
        self._connect_timeout = connect_timeout
        self._idle: list[_Conn] = []
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()

    def call(self, path: bytes, body: bytes, timeout: float) -> bytes:
        """call POSTs body to path and returns the response body, or raises
        ConnectError. A kept connection the server closed meanwhile is
        dropped and the request sent once more on a new one."""
        request = self._headers.head(path, len(body), timeout) + body
        deadline = time.monotonic() + timeout
        conn = self._take()
        if conn is not None:
            try:
                return self._exchange(conn, request, timeout)
            except (EOFError, ConnectionError):
                pass  # closed while idle: nothing of the request was read
        left = deadline - time.monotonic()
        if left <= 0:
            raise _deadline(timeout)
        try:
            return self._exchange(self._dial(left), request, left)
        except EOFError as err:
            raise _unavailable("claimd closed the connection", err) from None
        except ConnectionError as err:
            raise _unavailable("connection to claimd failed", err) from None

    def _exchange(self, conn: _Conn, request: bytes, timeout: float) -> bytes:
        try:
            if conn.timeout != timeout:  # settimeout costs two system calls
                conn.sock.settimeout(timeout)
                conn.timeout = timeout
            conn.sock.sendall(request)
            head, body = conn.read_response()
        except TimeoutError:
            conn.close()
            raise _deadline(timeout) from None
        except (EOFError, ConnectionError):
            conn.close()
            raise
        except (_Broken, OSError) as err:
            conn.close()
            raise _unavailable("reading claimd's answer", err) from None
        except BaseException:
            conn.close()
            raise
        if head.keep:
            self._put(conn)
        else:
            conn.close()
        return _answer(head, body)

    def _dial(self, timeout: float) -> _Conn:
        if self._closed:
            raise ConnectError(grpc.StatusCode.CANCELLED, "the client is closed")
        try:
            sock = socket.create_connection((self._ep.host, self._ep.port), timeout=min(timeout, self._connect_timeout))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ep.ssl_context is not None:
                sock = self._ep.ssl_context.wrap_socket(sock, server_hostname=self._ep.server_hostname)
        except TimeoutError as err:
            raise _unavailable(
                f"no connection to {self._ep.host_header} within {self._connect_timeout}s", err
            ) from None
        except OSError as err:
            raise _unavailable(f"no connection to {self._ep.host_header}", err) from None
        return _Conn(sock)

    def _take(self) -> _Conn | None:
        now = time.monotonic()
        with self._lock:
            if self._pid != os.getpid():
                # A forked child (a pre-forking server that made the client
                # before the fork) must not speak on its parent's sockets:
                # the answers would go to whichever process reads first.
                self._idle = []
                self._pid = os.getpid()
            while self._idle:
                conn = self._idle.pop()
                if now - conn.idle_since < IDLE_SECONDS:
                    return conn
                conn.close()
        return None

    def _put(self, conn: _Conn) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def ready(self, timeout: float) -> None:
        """ready dials a connection (kept for the next call) or raises."""
        self._put(self._dial(timeout))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


# --- the asyncio transport -------------------------------------------------------


class _AioConn(asyncio.Protocol):
    """_AioConn is one keep-alive connection as an asyncio protocol: a
    response's bytes go from data_received straight into a ResponseReader,
    and the call waiting for it is woken once it is whole (asyncio's streams
    put a buffer and a wake-up per read between the two)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.idle_since = 0.0
        self.closed = False
        self._reader = ResponseReader()
        self._waiter: asyncio.Future[tuple[_Head, bytes]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, request: bytes) -> asyncio.Future[tuple[_Head, bytes]]:
        """send writes request and is the future of its response."""
        assert self.transport is not None
        self._reader = ResponseReader()
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        if self.closed or self.transport.is_closing():
            waiter.set_exception(EOFError())  # closed while idle: nothing was sent
        else:
            self.transport.write(request)
        return waiter

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        try:
            response = self._reader.feed(data)
        except _Broken as err:
            self._waiter = None
            waiter.set_exception(err)
            return
        if response is not None:
            self._waiter = None
            waiter.set_result(response)

    def eof_received(self) -> bool:
        self._ended(None)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended(exc)

    def _ended(self, exc: Exception | None) -> None:
        self.closed = True
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        if isinstance(exc, ConnectionError):
            waiter.set_exception(exc)
            return
        try:
            waiter.set_result(self._reader.eof())
        except (EOFError, _Broken) as err:
            waiter.set_exception(err)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


_timeout = getattr(asyncio, "timeout", None)  # Python 3.11+


async def _within(timeout: float, aw: Any) -> Any:
    if _timeout is not None:
        async with _timeout(timeout):
            return await aw
    return await asyncio.wait_for(aw, timeout)


class AioTransport:
    """AioTransport is Transport for one event loop: the same calls over
    asyncio protocols (_AioConn)."""

    def __init__(self, ep: Endpoint, headers: Headers, connect_timeout: float) -> None:
        self._ep = ep
        self._headers = headers
        self._connect_timeout = connect_timeout
        self._idle: list[_AioConn] = []
        self._closed = False

    async def call(self, path: bytes, body: bytes, timeout: float) -> bytes:
        """call is Transport.call, awaited."""
        request = self._headers.head(path, len(body), timeout) + body
        deadline = time.monotonic() + timeout
        conn = self._take()
        if conn is not None:
            try:
                return await self._exchange(conn, request, timeout)
            except (EOFError, ConnectionError):
                pass
        left = deadline - time.monotonic()
        if left <= 0:
            raise _deadline(timeout)
        try:
            return await self._exchange(await self._dial(left), request, left)
        except EOFError as err:
            raise _unavailable("claimd closed the connection", err) from None
        except ConnectionError as err:
            raise _unavailable("connection to claimd failed", err) from None

    async def _exchange(self, conn: _AioConn, request: bytes, timeout: float) -> bytes:
        waiter = conn.send(request)
        timer = asyncio.get_running_loop().call_later(timeout, _expire, waiter)
        try:
            head, body = await waiter
        except TimeoutError:
            conn.close()
            raise _deadline(timeout) from None
        except (EOFError, ConnectionError):
            conn.close()
            raise
        except (_Broken, OSError) as err:
            conn.close()
            raise _unavailable("reading claimd's answer", err) from None
        except BaseException:
            conn.close()  # cancelled mid-call: the connection's state is unknown
            raise
        finally:
            timer.cancel()
        if head.keep and not self._closed and len(self._idle) < MAX_IDLE:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            conn.close()
        return _answer(head, body)

    async def _dial(self, timeout: float) -> _AioConn:
        if self._closed:
            raise ConnectError(grpc.StatusCode.CANCELLED, "the client is closed")
        try:
            _, conn = await _within(  # (transport, protocol)
                min(timeout, self._connect_timeout),
                asyncio.get_running_loop().create_connection(
                    _AioConn,
                    self._ep.host,
                    self._ep.port,
                    ssl=self._ep.ssl_context,
                    server_hostname=self._ep.server_hostname,
                ),
            )
        except (TimeoutError, asyncio.TimeoutError) as err:
            raise _unavailable(
                f"no connection to {self._ep.host_header} within {self._connect_timeout}s", err
            ) from None
        except OSError as err:
            raise _unavailable(f"no connection to {self._ep.host_header}", err) from None
        assert isinstance(conn, _AioConn)
        return conn

    def _take(self) -> _AioConn | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if now - conn.idle_since < IDLE_SECONDS and not conn.closed:
                return conn
            conn.close()
        return None

    async def ready(self, timeout: float) -> None:
        """ready dials a connection (kept for the next call) or raises."""
        conn = await self._dial(timeout)
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


# --- stubs -------------------------------------------------------------------------


class _Method:
    __slots__ = ("_path", "_response", "_transport")

    def __init__(self, transport: Transport, path: bytes, response: type[message.Message]) -> None:
        self._transport = transport
        self._path = path
        self._response = response

    def __call__(self, request: message.Message, timeout: float) -> message.Message:
        return self._response.FromString(self._transport.call(self._path, request.SerializeToString(), timeout))


class _AioMethod:
    __slots__ = ("_path", "_response", "_transport")

    def __init__(self, transport: AioTransport, path: bytes, response: type[message.Message]) -> None:
        self._transport = transport
        self._path = path
        self._response = response

    async def __call__(self, request: message.Message, timeout: float) -> message.Message:
        body = await self._transport.call(self._path, request.SerializeToString(), timeout)
        return self._response.FromString(body)


class Stub:
    """Stub has a method per RPC of a service, called as a gRPC stub's are:
    stub.Claim(request, timeout=seconds). The methods and their response
    types are read from the service's descriptor."""

    def __init__(self, transport: Transport | AioTransport, service: ServiceDescriptor) -> None:
        for m in service.methods:
            path = f"/{service.full_name}/{m.name}".encode()
            response = message_factory.GetMessageClass(m.output_type)
            method: _Method | _AioMethod
            if isinstance(transport, AioTransport):
                method = _AioMethod(transport, path, response)
            else:
                method = _Method(transport, path, response)
            setattr(self, m.name, method)


def choose(target: str, transport: str | None, **grpc_only: object) -> str:
    """choose names the transport of a Client: transport as given, or by
    target (an http:// or https:// URL is Connect, anything else a gRPC
    target). Arguments that only a gRPC channel takes (credentials,
    interceptors, options) refuse Connect rather than be ignored."""
    url = target.startswith(("http://", "https://"))
    chosen = transport if transport is not None else ("connect" if url else "grpc")
    if chosen not in ("grpc", "connect"):
        raise ValueError(f"Client.transport: {chosen!r}; want 'grpc' or 'connect'")
    if chosen == "grpc" and url:
        raise ValueError(f"Client: {target[:64]!r} is a URL; a gRPC target is host:port (or use transport='connect')")
    if chosen == "connect":
        given = [name for name, v in grpc_only.items() if v]
        if given:
            raise ValueError(f"Client: {', '.join(given)} configure a gRPC channel; transport='connect' has none")
    return chosen

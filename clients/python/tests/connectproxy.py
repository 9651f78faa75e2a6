"""connectproxy: a Connect proxy in front of claimd's HTTP listener for the
tests of the Connect transport, the part of them that gRPC interceptors
play for the gRPC one. Each call is decoded and shown to a hook, which
lets it through, fails it with a Connect error body built from a
google.rpc.Status (as claimd would answer it), or loses its answer after
claimd acted on it. Nothing here stands in for claimd: every call that is
let through is claimd's to answer."""

from __future__ import annotations

import base64
import http.client
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import grpc
from google.protobuf import message_factory
from google.rpc import status_pb2

from claimd._gen.idempotency.v1 import claim_pb2 as pb
from claimd._gen.idempotency.v1 import provider_pb2 as provider_pb

LOSE = "lose"
"""A hook's answer that lets the call reach claimd and then drops the
connection before the answer reaches the client."""

CLOSE_AFTER = "close-after"
"""A hook's answer that lets the call through and closes the connection
after the answer, without saying so (a keep-alive connection that the
server, or a load balancer, dropped while it was idle)."""

Hook = Callable[[str, Any], "tuple[grpc.StatusCode, status_pb2.Status] | str | None"]

# Connect's HTTP status of each code (https://connectrpc.com/docs/protocol).
HTTP_STATUS = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}

_REQUESTS = {
    m.name: message_factory.GetMessageClass(m.input_type)
    for service in (
        pb.DESCRIPTOR.services_by_name["ClaimService"],
        provider_pb.DESCRIPTOR.services_by_name["ProviderService"],
    )
    for m in service.methods
}


def connect_error(code: grpc.StatusCode, st: status_pb2.Status) -> bytes:
    """connect_error is the Connect error body of a google.rpc.Status."""
    name = "canceled" if code == grpc.StatusCode.CANCELLED else code.name.lower()
    details = [{"type": d.TypeName(), "value": base64.b64encode(d.value).decode().rstrip("=")} for d in st.details]
    return json.dumps({"code": name, "message": st.message, "details": details}).encode()


class ConnectProxy:
    """ConnectProxy listens on a free loopback port and forwards Connect
    calls to upstream (host:port of claimd's HTTP listener), asking hook
    about each one first. url is what a Connect client dials."""

    def __init__(self, upstream: str, hook: Hook) -> None:
        local = threading.local()
        self.timeouts: list[str] = []  # each call's Connect-Timeout-Ms
        timeouts = self.timeouts

        def upstream_conn() -> http.client.HTTPConnection:
            conn: http.client.HTTPConnection | None = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(upstream, timeout=60)
            return conn

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                method = self.path.rsplit("/", 1)[-1]
                timeouts.append(self.headers.get("Connect-Timeout-Ms", ""))
                verdict = hook(method, _REQUESTS[method].FromString(body))
                if isinstance(verdict, tuple):
                    code, st = verdict
                    self._answer(HTTP_STATUS.get(code, 500), "application/json", connect_error(code, st))
                    return
                forward = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "connect-protocol-version", "connect-timeout-ms", "authorization")
                }
                conn = upstream_conn()
                conn.request("POST", self.path, body, forward)
                resp = conn.getresponse()
                data = resp.read()
                if verdict == LOSE:
                    self.close_connection = True
                    return
                self._answer(resp.status, resp.getheader("Content-Type", ""), data)
                if verdict == CLOSE_AFTER:
                    self.close_connection = True

            def _answer(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response_only(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="connect-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> ConnectProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

"""The Connect transport's own behaviour, beside the suites that run over
both transports (the client fixture, the guard contract, test_secure):
what a lost answer, a slow claimd and a dropped keep-alive connection do to
a call, and how responses and error bodies are read."""

from __future__ import annotations

import os
import threading
from typing import Any

import grpc
import pytest
from connectproxy import CLOSE_AFTER, LOSE, ConnectProxy, connect_error
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

import claimd.aio
from claimd import Client, EventState, InvalidArgument, Outcome, Reason, RetryPolicy, Unavailable
from claimd._connect import ResponseReader, _Broken, _Head, error_from_response
from claimd.errors import from_rpc_error
from claimd.testing import ClaimdServer


class LoseFirstClaim:
    """LoseFirstClaim lets every call reach claimd and drops the answer to
    the first Claim; it keeps each Claim's attempt_id."""

    def __init__(self) -> None:
        self.attempt_ids: list[str] = []

    def __call__(self, method: str, request: Any) -> str | None:
        if method != "Claim":
            return None
        self.attempt_ids.append(request.attempt_id)
        return LOSE if len(self.attempt_ids) == 1 else None


def test_a_lost_answer_is_asked_again_with_the_same_attempt(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    lose = LoseFirstClaim()
    with ConnectProxy(claimd_server.http_address, lose) as proxy, Client(proxy.url) as client:
        c = client.claim(ns, "stripe", event_id=evt)
        assert (c.outcome, c.reason, c.fencing_token) == (Outcome.ACQUIRED, Reason.NEW, 1)
        assert len(lose.attempt_ids) == 2 and lose.attempt_ids[0] == lose.attempt_ids[1] == c.attempt_id
        assert client.transition(c, EventState.PROCESSING).changed


@pytest.mark.asyncio
async def test_a_lost_answer_is_asked_again_asyncio(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    lose = LoseFirstClaim()
    with ConnectProxy(claimd_server.http_address, lose) as proxy:
        async with claimd.aio.Client(proxy.url) as client:
            c = await client.claim(ns, "stripe", event_id=evt)
            assert (c.outcome, c.reason, c.fencing_token) == (Outcome.ACQUIRED, Reason.NEW, 1)
            assert len(lose.attempt_ids) == 2 and lose.attempt_ids[0] == lose.attempt_ids[1] == c.attempt_id


class StallFirstClaim:
    """StallFirstClaim holds the first Claim until released (or 10s), then
    lets it through; the rest pass at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.claims = 0

    def __call__(self, method: str, request: Any) -> None:
        if method == "Claim":
            self.claims += 1
            if self.claims == 1:
                self.release.wait(10)


def test_an_attempt_past_its_timeout_is_retried(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    stall = StallFirstClaim()
    with ConnectProxy(claimd_server.http_address, stall) as proxy:
        try:
            with Client(proxy.url, timeout=0.5) as client:
                c = client.claim(ns, "stripe", event_id=evt)
        finally:
            stall.release.set()
    assert c.outcome == Outcome.ACQUIRED and stall.claims == 2, (c.outcome, stall.claims)
    # Each attempt tells claimd its deadline.
    assert proxy.timeouts[:2] == ["500", "500"], proxy.timeouts


@pytest.mark.asyncio
async def test_an_attempt_past_its_timeout_is_retried_asyncio(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    stall = StallFirstClaim()
    with ConnectProxy(claimd_server.http_address, stall) as proxy:
        try:
            async with claimd.aio.Client(proxy.url, timeout=0.5) as client:
                c = await client.claim(ns, "stripe", event_id=evt)
        finally:
            stall.release.set()
    assert c.outcome == Outcome.ACQUIRED and stall.claims == 2, (c.outcome, stall.claims)


def test_a_dropped_idle_connection_is_redialled_within_the_attempt(
    claimd_server: ClaimdServer, ns: str, evt: str
) -> None:
    """The proxy closes each connection after its answer without saying so:
    every call finds its kept connection dead, and succeeds on a new one
    without a retry of the policy (max_attempts=1)."""
    with ConnectProxy(claimd_server.http_address, lambda m, r: CLOSE_AFTER) as proxy:
        with Client(proxy.url, retry=RetryPolicy(max_attempts=1)) as client:
            for i in range(3):
                c = client.claim(ns, "stripe", event_id=f"{evt}-{i}")
                assert c.outcome == Outcome.ACQUIRED


@pytest.mark.asyncio
async def test_a_dropped_idle_connection_is_redialled_asyncio(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    with ConnectProxy(claimd_server.http_address, lambda m, r: CLOSE_AFTER) as proxy:
        async with claimd.aio.Client(proxy.url, retry=RetryPolicy(max_attempts=1)) as client:
            for i in range(3):
                c = await client.claim(ns, "stripe", event_id=f"{evt}-{i}")
                assert c.outcome == Outcome.ACQUIRED


def test_a_forked_child_dials_its_own_connections(
    claimd_server: ClaimdServer, ns: str, evt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(f"http://{claimd_server.http_address}") as client:
        client.wait_ready(5.0)  # one kept connection
        transport = client._connect
        assert transport is not None and len(transport._idle) == 1
        kept = transport._idle[0]
        monkeypatch.setattr(os, "getpid", lambda: -1)  # as in a child after fork()
        assert client.claim(ns, "stripe", event_id=evt).outcome == Outcome.ACQUIRED
        assert transport._idle and all(conn is not kept for conn in transport._idle)


def test_field_violations_and_reason_come_from_the_error_body(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    with Client(f"http://{claimd_server.http_address}") as client:
        with pytest.raises(InvalidArgument) as raised:
            client.claim(ns, "stripe", event_id=evt, lease=-1)
    err = raised.value
    assert (err.code, err.reason, err.fields) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ("ClaimRequest.lease",),
    ), err


def test_unreachable_claimd_is_unavailable_after_the_policy(evt: str) -> None:
    policy = RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.02, total_timeout=5)
    with Client("http://127.0.0.1:1", retry=policy) as client:
        with pytest.raises(Unavailable) as raised:
            client.claim("billing", "stripe", event_id=evt)
        with pytest.raises(Unavailable):
            client.wait_ready(1.0)
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE


def _status(code: grpc.StatusCode, *details: Any) -> status_pb2.Status:
    st = status_pb2.Status(code=code.value[0], message="refused")
    for d in details:
        packed = any_pb2.Any()
        packed.Pack(d)
        st.details.append(packed)
    return st


def test_error_body_details_map_as_grpc_trailers_do() -> None:
    bad = error_details_pb2.BadRequest(
        field_violations=[error_details_pb2.BadRequest.FieldViolation(field="ClaimRequest.lease")]
    )
    info = error_details_pb2.ErrorInfo(reason="STALE_TOKEN", domain="claimd.dev", metadata={"current_state": "x"})
    body = connect_error(grpc.StatusCode.ABORTED, _status(grpc.StatusCode.ABORTED, bad, info))
    err = from_rpc_error(error_from_response(409, "application/json", body))
    assert type(err).__name__ == "StaleToken"
    assert (err.code, err.reason, err.metadata, err.fields) == (
        grpc.StatusCode.ABORTED,
        "STALE_TOKEN",
        {"current_state": "x"},
        ("ClaimRequest.lease",),
    )


@pytest.mark.parametrize(
    ("status", "code"),
    [(502, grpc.StatusCode.UNAVAILABLE), (401, grpc.StatusCode.UNAUTHENTICATED), (418, grpc.StatusCode.UNKNOWN)],
)
def test_a_body_that_is_not_connects_is_named_by_its_status(status: int, code: grpc.StatusCode) -> None:
    err = error_from_response(status, "text/html", b"<h1>Bad gateway</h1>")
    assert err.code() == code and f"HTTP {status}" in err.details()


def read(raw: bytes, step: int, *, eof: bool = True) -> tuple[_Head, bytes]:
    """read feeds raw to a ResponseReader step bytes at a time, as a
    connection might deliver it, then ends the connection (eof=True)."""
    reader = ResponseReader()
    for i in range(0, len(raw), step):
        got = reader.feed(raw[i : i + step])
        if got is not None:
            return got
    assert eof, "the response was not whole before the connection's end"
    return reader.eof()


STEPS = [1, 2, 7, 1 << 20]  # byte by byte, in odd pieces, all at once


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\nContent-Length: 3\r\n\r\nabc",
            (200, "application/proto", b"abc", True),
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nde\r\n1\r\nf\r\n0\r\nTrailer: t\r\n\r\n",
            (200, "", b"def", True),
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", (200, "", b"", True)),
        (
            b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            (503, "", b"", False),
        ),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", (200, "", b"hi", False)),
    ],
)
def test_responses_by_length_chunks_and_after_an_interim_one(
    raw: bytes, want: tuple[int, str, bytes, bool], step: int
) -> None:
    head, body = read(raw, step, eof=False)
    assert (head.status, head.content_type, body, head.keep) == want


@pytest.mark.parametrize("step", STEPS)
def test_a_body_without_a_length_ends_with_the_connection(step: int) -> None:
    head, body = read(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", step)
    assert (head.status, body, head.keep) == (200, b"until the end", False)


def test_bytes_after_a_response_leave_the_connection_unkept() -> None:
    head, body = read(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxHTTP/1.1 200 OK\r\n", 1 << 20, eof=False)
    assert (body, head.keep) == (b"x", False)


def test_a_connection_that_ends_before_a_response_is_eof() -> None:
    with pytest.raises(EOFError):
        ResponseReader().eof()


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\nContent-Le",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (64 << 10),
    ],
)
def test_a_broken_response_is_refused(raw: bytes, step: int) -> None:
    with pytest.raises(_Broken):
        read(raw, step)

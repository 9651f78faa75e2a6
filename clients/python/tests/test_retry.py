"""The client's own retries: a Claim whose answer is lost is retried with the
same attempt_id and answered with the same ACQUIRED and token; an
unreachable claimd costs a bounded number of attempts."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from claimd import ClaimdError, Client, EventState, Outcome, Reason, RetryPolicy, Unavailable
from claimd.testing import ClaimdServer


class LostAnswer(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """LostAnswer is the UNAVAILABLE a client sees when the connection drops
    after claimd acted on the call but before its answer arrived."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection reset after the request was sent (injected)"

    def trailing_metadata(self) -> tuple[()]:
        return ()


class Recorder(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Recorder sees every attempt of every call; lose_first drops the
    answer to the first attempt of the named method after the server acted
    on it."""

    def __init__(self, lose_first: str = "") -> None:
        self.lose_first = lose_first
        self.attempts: list[tuple[str, Any]] = []

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        method = details.method.rsplit("/", 1)[-1]
        sent = type(request)()
        sent.CopyFrom(request)  # as sent by this attempt
        self.attempts.append((method, sent))
        outcome = continuation(details, request)
        if method == self.lose_first and sum(m == method for m, _ in self.attempts) == 1:
            outcome.result()  # the server decided and answered ...
            raise LostAnswer()  # ... and the answer never arrived
        return outcome


def test_claim_retry_reuses_attempt_id(claimd_server: ClaimdServer, ns: str, evt: str) -> None:
    rec = Recorder(lose_first="Claim")
    with Client(claimd_server.grpc_address, interceptors=[rec]) as client:
        c = client.claim(ns, "stripe", event_id=evt)
        claims = [req for m, req in rec.attempts if m == "Claim"]
        assert len(claims) == 2, f"Claim attempts = {len(claims)}, want 2 (one lost answer, one retry)"
        assert claims[0].attempt_id == claims[1].attempt_id == c.attempt_id != ""
        assert (c.outcome, c.reason, c.fencing_token) == (Outcome.ACQUIRED, Reason.NEW, 1), (
            f"retried Claim({evt!r}) = {c.outcome.name}/{c.reason.name} token {c.fencing_token}, "
            "want the same ACQUIRED/NEW and token 1 the lost answer carried"
        )
        # ... and the lease secret of that acquisition: the owner can write.
        assert client.transition(c, EventState.PROCESSING).changed

        # The control: another attempt (a new attempt_id) is told IN_PROGRESS.
        other = client.claim(ns, "stripe", event_id=evt)
        assert other.outcome == Outcome.IN_PROGRESS, f"Claim with a new attempt_id outcome = {other.outcome}"


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_unreachable_claimd_is_retried_a_bounded_number_of_times(evt: str) -> None:
    rec = Recorder()
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.05, total_timeout=5)
    start = time.monotonic()
    with Client(closed_port(), retry=policy, interceptors=[rec]) as client:
        with pytest.raises(Unavailable) as info:
            client.claim("billing", "stripe", event_id=evt)
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
    assert len(rec.attempts) == 3, f"attempts = {len(rec.attempts)}, want RetryPolicy.max_attempts = 3"
    assert len({req.attempt_id for _, req in rec.attempts}) == 1, "every attempt must carry the same attempt_id"
    assert time.monotonic() - start < 5


def test_total_timeout_bounds_the_retries(evt: str) -> None:
    policy = RetryPolicy(max_attempts=1000, initial_backoff=0.05, max_backoff=0.05, total_timeout=0.5)
    start = time.monotonic()
    with Client(closed_port(), retry=policy) as client:
        with pytest.raises(Unavailable):
            client.claim("billing", "stripe", event_id=evt)
    elapsed = time.monotonic() - start
    assert elapsed < 2, f"Claim against a closed port took {elapsed:.2f}s, want about total_timeout = 0.5s"


def test_other_errors_are_not_retried(claimd_server: ClaimdServer, evt: str) -> None:
    rec = Recorder()
    with Client(claimd_server.grpc_address, interceptors=[rec]) as client:
        with pytest.raises(ClaimdError) as info:
            client.claim("Not-A-Namespace", "stripe", event_id=evt)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert len(rec.attempts) == 1, f"attempts = {len(rec.attempts)}, want 1: INVALID_ARGUMENT is final"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"total_timeout": 0},
        {"multiplier": 0.5},
        {"initial_backoff": -1},
    ],
    ids=str,
)
def test_retry_policy_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**kwargs)

"""The guard against a real claimd: every case of the client contract
(clients-common.md item 5) plus the answers for each outcome."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_retry import closed_port

from claimd import (
    Claim,
    Client,
    Delivery,
    EventRef,
    EventState,
    Guard,
    GuardResult,
    Lease,
    Outcome,
    PayloadMismatch,
    PermanentError,
    Reason,
    RetryPolicy,
    StaleToken,
    Unavailable,
)
from claimd.testing import ClaimdServer

BOUND = 20.0  # seconds: the most any wait in these tests may take


class Ledger:
    """Ledger counts side effects, thread-safely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rows: list[str] = []

    def append(self, row: str) -> int:
        with self._lock:
            self.rows.append(row)
            return len(self.rows)


def test_duplicate_delivery_has_one_side_effect(client: Client, ns: str, evt: str) -> None:
    ledger = Ledger()

    @client.guarded(ns, "stripe")
    def handle(g: Guard, amount: int) -> bytes:
        row = ledger.append(f"{g.claim.key}:{amount}")
        return f"row {row}".encode()

    first = handle(evt, 100)
    second = handle(evt, 100)
    assert (first.status, first.outcome, first.ran, first.body) == (200, Outcome.ACQUIRED, True, b"row 1")
    assert (second.status, second.outcome, second.ran) == (200, Outcome.DUPLICATE, False)
    assert second.body == first.body, "a duplicate must be answered with the stored result"
    assert ledger.rows == [f"{evt}:100"], f"ledger = {ledger.rows}, want one row"


def test_twenty_concurrent_deliveries_have_one_side_effect(client: Client, ns: str, evt: str) -> None:
    n = 20
    ledger = Ledger()
    answered: list[GuardResult] = []
    cond = threading.Condition()
    start = threading.Barrier(n)

    @client.guarded(ns, "stripe")
    def handle(g: Guard) -> bytes:
        # Hold the claim until every other delivery has been answered, so
        # all 20 claims really overlap.
        with cond:
            assert cond.wait_for(lambda: len(answered) == n - 1, timeout=BOUND), f"answered: {answered}"
        ledger.append(evt)
        return b"charged"

    def deliver() -> GuardResult:
        start.wait(timeout=BOUND)
        r = handle(evt)
        if not r.ran:
            with cond:
                answered.append(r)
                cond.notify_all()
        return r

    threads: list[threading.Thread] = []
    results: list[GuardResult] = []
    for _ in range(n):
        t = threading.Thread(target=lambda: results.append(deliver()))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=BOUND)

    assert len(results) == n
    ran = [r for r in results if r.ran]
    assert len(ran) == 1 and ran[0].status == 200 and ran[0].body == b"charged", f"ran: {ran}"
    others = sorted((r.status, r.outcome) for r in results if not r.ran)
    assert others == [(409, Outcome.IN_PROGRESS)] * (n - 1), f"the other deliveries: {others}"
    assert all(r.retry_after is not None and r.retry_after >= 1 for r in results if not r.ran)
    assert ledger.rows == [evt], f"ledger = {ledger.rows}, want one row"
    late = handle(evt)
    assert (late.status, late.outcome, late.body, late.ran) == (200, Outcome.DUPLICATE, b"charged", False)


def test_a_handler_that_raises_releases_and_the_next_delivery_runs(client: Client, ns: str, evt: str) -> None:
    calls: list[tuple[Reason, int]] = []

    @client.guarded(ns, "stripe")
    def handle(g: Guard) -> bytes:
        calls.append((g.claim.reason, g.claim.fencing_token))
        if len(calls) == 1:
            raise ConnectionError("bank timed out")
        return b"ok"

    failed = handle(evt)
    assert (failed.status, failed.ran) == (500, True)
    assert isinstance(failed.error, ConnectionError)
    rec = client.get(ns, "stripe", evt)
    assert rec.released, f"after a raising handler the record must be released: {rec}"

    retried = handle(evt)
    assert (retried.status, retried.body, retried.ran) == (200, b"ok", True)
    assert calls == [(Reason.NEW, 1), (Reason.RELEASED, 2)], f"handler calls (reason, token) = {calls}"
    assert client.get(ns, "stripe", evt).state == EventState.SETTLED


@pytest.mark.parametrize("form", ["decorator", "with-block"])
@pytest.mark.parametrize(
    ("boom", "status", "logged"),
    [
        pytest.param(ConnectionError("bank timed out"), 500, 1, id="retryable"),
        # A PermanentError is the handler's answer, recorded as FAILED.
        pytest.param(PermanentError("account closed"), 200, 0, id="permanent"),
    ],
)
def test_a_handler_exception_is_logged_once_at_error_with_the_key(
    client: Client,
    ns: str,
    evt: str,
    form: str,
    boom: Exception,
    status: int,
    logged: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The guard swallows the exception (the provider gets a 500), so it is
    # the guard's to log: once, at ERROR, naming the key, with the traceback.
    with caplog.at_level(logging.DEBUG, logger="claimd"):
        if form == "decorator":

            @client.guarded(ns, "stripe")
            def handle(g: Guard) -> bytes:
                raise boom

            result = handle(evt)
        else:
            with client.guard(ns, "stripe", event_id=evt) as g:
                raise boom
            result = g.result
    assert (result.status, result.error) == (status, boom)
    errors = [r for r in caplog.records if r.name == "claimd" and r.levelno >= logging.ERROR]
    assert len(errors) == logged, f"ERROR records = {[r.getMessage() for r in errors]}, want {logged}"
    for record in errors:
        assert f"{ns}/stripe/{evt}" in record.getMessage()
        assert record.exc_info is not None and record.exc_info[1] is boom


def test_a_permanent_error_fails_the_event_and_stops_retries(client: Client, ns: str, evt: str) -> None:
    runs = []

    @client.guarded(ns, "stripe")
    def handle(g: Guard) -> bytes:
        runs.append(1)
        raise PermanentError("account closed")

    first = handle(evt)
    assert (first.status, first.body, first.ran) == (200, b"account closed", True)
    assert isinstance(first.error, PermanentError)
    rec = client.get(ns, "stripe", evt)
    assert (rec.state, rec.result) == (EventState.FAILED, b"account closed")

    dup = handle(evt)
    assert (dup.status, dup.outcome, dup.body, dup.ran) == (200, Outcome.DUPLICATE, b"account closed", False)
    assert runs == [1]


def test_a_long_failure_text_is_bounded(client: Client, ns: str, evt: str) -> None:
    with client.guard(ns, "stripe", event_id=evt) as g:
        if g.acquired:
            g.fail("é" * 5000)
    stored = client.get(ns, "stripe", evt).result
    assert 0 < len(stored) <= 1024 and stored.decode("utf-8") == "é" * (len(stored) // 2)


DEAD_HANDLER = textwrap.dedent(
    """
    import os, sys
    from claimd import Client
    address, ns, evt = sys.argv[1:4]
    client = Client(address)
    with client.guard(ns, "stripe", event_id=evt, lease=1) as g:
        assert g.acquired, g.result
        print(g.claim.fencing_token, flush=True)
        os._exit(3)  # the process dies mid-work: no settle, no release, no heartbeat
    """
)


def test_a_handler_that_dies_is_taken_over_after_its_lease(
    claimd_server: ClaimdServer, client: Client, ns: str, evt: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", DEAD_HANDLER, claimd_server.grpc_address, ns, evt],
        capture_output=True,
        text=True,
        timeout=BOUND,
    )
    assert proc.returncode == 3 and proc.stdout.strip() == "1", f"dead handler: {proc}"
    seen: list[tuple[Reason, EventState, int]] = []

    # wait: claimd keeps re-claiming while the dead holder's lease is live
    # and answers as soon as it runs out (bounded by the wait).
    @client.guarded(ns, "stripe", wait=10)
    def handle(g: Guard) -> bytes:
        seen.append((g.claim.reason, g.claim.state, g.claim.fencing_token))
        return b"recovered"

    r = handle(evt)
    assert (r.status, r.body, r.ran) == (200, b"recovered", True), f"takeover: {r}"
    assert seen == [(Reason.LEASE_EXPIRED, EventState.PROCESSING, 2)], (
        f"taker saw (reason, state, token) = {seen}, want LEASE_EXPIRED with the state the dead holder reached"
    )
    with pytest.raises(StaleToken):  # the dead holder's token, whatever its secret
        client.transition(Lease(ns, "stripe", evt, 1, bytes(16)), EventState.SETTLED)


def test_the_heartbeat_keeps_the_lease_past_its_length(client: Client, ns: str, evt: str) -> None:
    @client.guarded(ns, "stripe", lease=1)
    def handle(g: Guard) -> bytes:
        assert g.claim.lease_expires_at is not None
        original_expiry = g.claim.lease_expires_at
        deadline = time.monotonic() + BOUND
        # Poll until claimd's own clock, as the updated_at of a renewal, is
        # past the original lease end: only the heartbeat can get it there.
        while True:
            rec = client.get(ns, "stripe", evt)
            assert rec.updated_at is not None
            if rec.updated_at > original_expiry:
                break
            assert time.monotonic() < deadline, f"no renewal past {original_expiry}: {rec}"
            g.cancelled.wait(0.05)
        other = client.claim(ns, "stripe", event_id=evt)
        assert other.outcome == Outcome.IN_PROGRESS, (
            f"Claim({evt!r}) past the original lease outcome = {other.outcome.name}, want IN_PROGRESS"
        )
        assert not g.cancelled.is_set()
        return b"done"

    r = handle(evt)
    assert (r.status, r.body) == (200, b"done"), r


def test_a_short_lease_is_renewed_while_a_long_one_waits(client: Client, ns: str, evt: str) -> None:
    """The heartbeat thread sleeps until the first renewal due; one due
    sooner, scheduled while it sleeps, must wake it (and one due later need
    not: that is what spares a thread switch per delivery)."""
    with client.guard(ns, "stripe", event_id=evt + "-long", lease=300) as long_held:
        assert long_held.acquired
        with client.guard(ns, "stripe", event_id=evt, lease=1) as g:
            assert g.acquired and g.claim.lease_expires_at is not None
            original_expiry = g.claim.lease_expires_at
            deadline = time.monotonic() + BOUND
            while True:
                rec = client.get(ns, "stripe", evt)
                assert rec.updated_at is not None
                if rec.updated_at > original_expiry:
                    break
                assert time.monotonic() < deadline, f"no renewal past {original_expiry}: {rec}"
                g.cancelled.wait(0.05)
            g.settle(b"done")
    assert g.result.status == 200, g.result


def test_a_takeover_cancels_the_handler_and_it_does_not_settle(client: Client, ns: str, evt: str) -> None:
    @client.guarded(ns, "stripe", lease=1)
    def handle(g: Guard) -> bytes:
        c = g.claim
        # Someone else ends up owning the key: here, the key is released
        # behind the guard's back and claimed again.
        client.release(c)
        taker = client.claim(ns, "stripe", event_id=evt)
        assert (taker.outcome, taker.fencing_token) == (Outcome.ACQUIRED, 2)
        assert g.cancelled.wait(BOUND), "the heartbeat must notice the takeover"
        with pytest.raises(StaleToken):
            g.check()
        return b"must not be stored"

    r = handle(evt)
    assert (r.status, r.ran) == (409, True) and isinstance(r.error, StaleToken), r
    assert r.retry_after is not None and r.retry_after >= 1
    rec = client.get(ns, "stripe", evt)
    assert (rec.fencing_token, rec.state, rec.result) == (2, EventState.RECEIVED, b""), rec


def test_in_progress_answers_409_with_retry_after(client: Client, ns: str, evt: str) -> None:
    client.claim(ns, "stripe", event_id=evt, lease=60)
    runs = []

    @client.guarded(ns, "stripe")
    def handle(g: Guard) -> bytes:
        runs.append(1)
        return b""

    r = handle(evt)
    assert (r.status, r.outcome, r.ran) == (409, Outcome.IN_PROGRESS, False)
    assert r.retry_after is not None and 1 <= r.retry_after <= 60, r
    assert r.headers == {"Retry-After": str(r.retry_after)}
    assert runs == []


def test_payload_mismatch_answers_422(client: Client, ns: str, evt: str) -> None:
    runs = []

    @client.guarded(ns, "stripe")
    def handle(g: Guard) -> bytes:
        runs.append(1)
        return b"ok"

    assert handle(Delivery({}, f'{{"id":"{evt}","amount":1}}'.encode())).status == 200
    r = handle(Delivery({}, f'{{"id":"{evt}","amount":2}}'.encode()))
    assert (r.status, r.outcome, r.ran) == (422, Outcome.PAYLOAD_MISMATCH, False)
    assert isinstance(r.error, PayloadMismatch)
    assert runs == [1]


@pytest.fixture
def stopped_claimd(claimd_binary: Path, tmp_path: Path) -> Iterator[str]:
    """stopped_claimd is the address of a claimd that answered once and was
    then stopped."""
    server = ClaimdServer.start(claimd_binary, tmp_path / "data")
    try:
        with Client(server.grpc_address) as c:
            assert c.claim("probe", "stripe", event_id="evt_probe").acquired
    finally:
        assert server.stop() == 0
    yield server.grpc_address


@pytest.mark.parametrize("where", ["closed port", "stopped server"])
def test_claimd_down_answers_503_and_runs_nothing(where: str, request: pytest.FixtureRequest, evt: str) -> None:
    address = closed_port() if where == "closed port" else request.getfixturevalue("stopped_claimd")
    runs = []
    policy = RetryPolicy(max_attempts=3, initial_backoff=0.01, total_timeout=2)
    with Client(address, retry=policy, timeout=1) as client:

        @client.guarded("billing", "stripe")
        def handle(g: Guard) -> bytes:
            runs.append(1)
            return b"ok"

        r = handle(evt)
    assert (r.status, r.retry_after, r.outcome, r.ran) == (503, 5, None, False), r
    assert isinstance(r.error, Unavailable)
    assert runs == []


def test_with_block_settles_on_a_normal_exit(client: Client, ns: str, evt: str) -> None:
    with client.guard(ns, "stripe", event_id=evt) as g:
        assert g.acquired
    assert (g.result.status, g.result.body, g.result.ran) == (200, b"", True)
    assert client.get(ns, "stripe", evt).state == EventState.SETTLED


def test_with_block_settle_then_raise_keeps_the_settle(client: Client, ns: str, evt: str) -> None:
    with pytest.raises(KeyError):
        with client.guard(ns, "stripe", event_id=evt) as g:
            g.settle(b"paid")
            raise KeyError("after the side effect")
    assert (g.result.status, g.result.body) == (200, b"paid")
    assert client.get(ns, "stripe", evt).state == EventState.SETTLED


@pytest.mark.parametrize("form", ["decorator", "with-block"])
def test_an_interrupted_handler_propagates_and_keeps_the_claim(client: Client, ns: str, evt: str, form: str) -> None:
    # A KeyboardInterrupt or SystemExit is not the handler saying that nothing
    # happened (GUARD.md row 20): the key is left to its lease, so that the
    # next holder takes it over with state PROCESSING.
    with pytest.raises(KeyboardInterrupt):
        if form == "decorator":

            @client.guarded(ns, "stripe", lease=60)
            def handle(g: Guard) -> bytes:
                raise KeyboardInterrupt

            handle(evt)
        else:
            with client.guard(ns, "stripe", event_id=evt, lease=60) as g:
                raise KeyboardInterrupt
    if form == "with-block":
        assert (g.result.status, g.result.ran) == (500, True), g.result
    rec = client.get(ns, "stripe", evt)
    assert (rec.state, rec.released, rec.fencing_token) == (EventState.PROCESSING, False, 1), rec
    again = client.claim(ns, "stripe", event_id=evt)
    assert again.outcome == Outcome.IN_PROGRESS, f"Claim({evt!r}) outcome = {again.outcome.name}, want IN_PROGRESS"


# Results are encoded by one rule in every claimd guard: bytes as they are,
# str as UTF-8, None as empty, anything else as compact JSON in UTF-8.
ENCODED = [
    pytest.param(
        {"charge": "ch_1", "amount": 100, "note": "é"}, '{"charge":"ch_1","amount":100,"note":"é"}'.encode(), id="dict"
    ),
    pytest.param("charged ✓", "charged ✓".encode(), id="str"),
]


@pytest.mark.parametrize(("returned", "stored"), ENCODED)
def test_a_dict_or_str_result_runs_the_handler_once_across_three_deliveries(
    client: Client, ns: str, evt: str, returned: object, stored: bytes
) -> None:
    ledger = Ledger()

    @client.guarded(ns, "stripe")
    def handle(g: Guard) -> object:
        ledger.append(evt)
        return returned  # what an AWS Powertools handler returns

    first, second, third = (handle(evt) for _ in range(3))
    assert ledger.rows == [evt], f"side effects = {len(ledger.rows)}, want 1 across three deliveries"
    assert (first.status, first.outcome, first.ran, first.body, first.error) == (
        200,
        Outcome.ACQUIRED,
        True,
        stored,
        None,
    ), first
    for dup in (second, third):
        assert (dup.status, dup.outcome, dup.ran, dup.body) == (200, Outcome.DUPLICATE, False, stored), dup
    rec = client.get(ns, "stripe", evt)
    assert (rec.state, rec.result) == (EventState.SETTLED, stored), rec


@pytest.mark.parametrize(("returned", "stored"), ENCODED)
def test_with_block_settle_of_a_dict_or_str_runs_once_across_three_deliveries(
    client: Client, ns: str, evt: str, returned: object, stored: bytes
) -> None:
    ledger = Ledger()
    answers: list[GuardResult] = []
    for _ in range(3):
        with client.guard(ns, "stripe", event_id=evt) as g:
            if g.acquired:
                ledger.append(evt)
                g.settle(returned)
        answers.append(g.result)
    assert ledger.rows == [evt], f"side effects = {len(ledger.rows)}, want 1 across three deliveries"
    assert [(a.status, a.outcome, a.body) for a in answers] == [
        (200, Outcome.ACQUIRED, stored),
        (200, Outcome.DUPLICATE, stored),
        (200, Outcome.DUPLICATE, stored),
    ], answers


@pytest.mark.parametrize(
    ("result", "stored"),
    [
        pytest.param(None, b"", id="None"),
        pytest.param(b"\x00\xffraw", b"\x00\xffraw", id="bytes"),
        pytest.param(bytearray(b"ba"), b"ba", id="bytearray"),
        pytest.param(memoryview(b"mv"), b"mv", id="memoryview"),
        pytest.param("", b"", id="empty str"),
        pytest.param([1, "x", None, True], b'[1,"x",null,true]', id="list"),
        pytest.param({"b": {"a": [1.5]}}, b'{"b":{"a":[1.5]}}', id="nested dict keeps its order"),
        pytest.param(42, b"42", id="int"),
        pytest.param(False, b"false", id="bool"),
    ],
)
def test_results_are_encoded_by_one_rule(client: Client, ns: str, evt: str, result: object, stored: bytes) -> None:
    with client.guard(ns, "stripe", event_id=evt) as g:
        g.settle(result)
    assert (g.result.status, g.result.body, g.result.error) == (200, stored, None), g.result
    assert client.get(ns, "stripe", evt).result == stored


class Charge:
    """Charge is a result the JSON encoder does not know."""


@pytest.mark.parametrize(
    ("returned", "error"),
    [
        pytest.param(Charge(), TypeError, id="object"),
        pytest.param({"amount": float("nan")}, ValueError, id="NaN is not JSON"),
        pytest.param("\ud800", UnicodeEncodeError, id="lone surrogate is not UTF-8"),
    ],
)
def test_a_result_that_cannot_be_encoded_still_never_releases(
    client: Client, ns: str, evt: str, returned: object, error: type[Exception]
) -> None:
    ledger = Ledger()

    @client.guarded(ns, "stripe")
    def handle(g: Guard) -> object:
        ledger.append(evt)
        return returned

    first, second, third = (handle(evt) for _ in range(3))
    assert ledger.rows == [evt], f"side effects = {len(ledger.rows)}, want 1 across three deliveries"
    # The side effect happened: it is recorded (without a result) and the
    # provider is told to stop; the error says why nothing was stored.
    assert (first.status, first.ran, first.body) == (200, True, b""), first
    assert isinstance(first.error, error), first.error
    for dup in (second, third):
        assert (dup.status, dup.outcome, dup.ran, dup.body) == (200, Outcome.DUPLICATE, False, b""), dup
    rec = client.get(ns, "stripe", evt)
    assert (rec.state, rec.result) == (EventState.SETTLED, b""), rec


@pytest.mark.parametrize("form", ["decorator", "with-block"])
@pytest.mark.parametrize(
    "interrupt", [RuntimeError("client bug"), KeyboardInterrupt()], ids=["Exception", "BaseException"]
)
def test_a_settle_that_raises_never_releases(
    client: Client, ns: str, evt: str, form: str, interrupt: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    transition = client.transition

    def settle_raises(*args: object, **kwargs: object) -> object:
        if EventState.SETTLED in args:
            raise interrupt
        return transition(*args, **kwargs)

    monkeypatch.setattr(client, "transition", settle_raises)
    ledger = Ledger()
    answers: list[GuardResult] = []
    propagates = isinstance(interrupt, KeyboardInterrupt)
    with pytest.raises(type(interrupt)) if propagates else contextlib.nullcontext():
        if form == "decorator":

            @client.guarded(ns, "stripe", lease=60)
            def handle(g: Guard) -> bytes:
                ledger.append(evt)
                return b"paid"

            answers.append(handle(evt))
        else:
            with client.guard(ns, "stripe", event_id=evt, lease=60) as g:
                if g.acquired:
                    ledger.append(evt)
                    g.settle(b"paid")
            answers.append(g.result)
    # GUARD.md row 19: the outcome could not be recorded; come back later.
    if not propagates:
        assert [(a.status, a.retry_after, a.ran, a.error) for a in answers] == [(503, 5, True, interrupt)], answers
    elif form == "with-block":
        assert (g.result.status, g.result.ran, g.result.error) == (503, True, interrupt), g.result
    monkeypatch.undo()
    rec = client.get(ns, "stripe", evt)
    assert (rec.state, rec.released, rec.fencing_token) == (EventState.PROCESSING, False, 1), (
        f"after a settle that raised, the record must stay PROCESSING and owned: {rec}"
    )
    again = client.claim(ns, "stripe", event_id=evt)
    assert again.outcome == Outcome.IN_PROGRESS, f"Claim({evt!r}) outcome = {again.outcome.name}, want IN_PROGRESS"
    assert ledger.rows == [evt]


# --- entity lifecycles (GUARD.md rows 10, 21, 22) ------------------------------


@pytest.mark.parametrize(
    ("retry_after", "header"),
    [
        (None, "1"),
        (timedelta(0), "1"),
        (timedelta(seconds=1), "1"),
        (timedelta(seconds=1.2), "2"),
        (timedelta(seconds=59.01), "60"),
    ],
)
def test_deferred_answers_retry_after_rounded_up(
    client: Client, ns: str, evt: str, monkeypatch: pytest.MonkeyPatch, retry_after: timedelta | None, header: str
) -> None:
    # A real DEFERRED (a refund before its charge succeeded) whose retry_after
    # the test sets, to pin the rounding.
    real_claim = client.claim

    def claim(*args: Any, **kwargs: Any) -> Claim:
        return dataclasses.replace(real_claim(*args, **kwargs), retry_after=retry_after)

    monkeypatch.setattr(client, "claim", claim)
    ledger = Ledger()
    with client.guard(ns, "stripe", event_id=evt, entity_id=f"ch_{evt}", event_type="charge.refunded") as g:
        if g.acquired:
            ledger.append(evt)
    r = g.result
    assert (r.status, r.outcome, r.ran, ledger.rows) == (409, Outcome.DEFERRED, False, []), r
    assert r.headers == {"Retry-After": header}, f"retry_after {retry_after}: headers {r.headers}"
    assert r.claim is not None and r.claim.entity is not None and r.claim.entity.awaiting == ("succeeded",), r.claim


def test_superseded_runs_nothing_and_acknowledges(client: Client, ns: str, evt: str) -> None:
    pi = f"pi_{evt}"

    @client.guarded(ns, "stripe")
    def handle(g: Guard) -> str:
        return g.claim.key

    first = handle(EventRef(f"{evt}_succeeded", entity_id=pi, event_type="payment_intent.succeeded"))
    assert (first.status, first.ran) == (200, True), first
    stale = handle(EventRef(evt, entity_id=pi, event_type="payment_intent.processing"))
    assert (stale.status, stale.outcome, stale.ran, stale.headers) == (200, Outcome.SUPERSEDED, False, {}), stale
    assert stale.body == b"event superseded by a later state of its entity\n"
    assert stale.claim is not None and stale.claim.entity is not None and stale.claim.entity.state == "succeeded"


def test_an_outcome_the_guard_does_not_know_is_a_500(
    client: Client, ns: str, evt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A newer claimd's outcome reads as UNSPECIFIED (types._enum).
    real_claim = client.claim

    def claim(*args: Any, **kwargs: Any) -> Claim:
        return dataclasses.replace(real_claim(*args, **kwargs), outcome=Outcome.UNSPECIFIED)

    monkeypatch.setattr(client, "claim", claim)
    with client.guard(ns, "stripe", event_id=evt) as g:
        assert not g.acquired
    r = g.result
    assert (r.status, r.body, r.ran, r.headers) == (500, b"unexpected answer from claimd\n", False, {}), r

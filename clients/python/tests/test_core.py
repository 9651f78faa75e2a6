"""The guard core's decisions (claimd._core.GuardCore), without a claimd:
which call follows each answer, and what the provider is answered. Both
shells (claimd.guard, claimd.aio) make exactly these calls; the guardspec
runners check the same decisions end to end against a real claimd."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from claimd import (
    Claim,
    EventState,
    KeySource,
    NotOwner,
    Outcome,
    PermanentError,
    Reason,
    StaleToken,
    Tier,
    Unavailable,
)
from claimd._core import Call, GuardCore, Op, settle_options


def _claim(reason: Reason = Reason.NEW, state: EventState = EventState.PROCESSING) -> Claim:
    return Claim(
        namespace="ns",
        provider="stripe",
        outcome=Outcome.ACQUIRED,
        reason=reason,
        key="evt_1",
        key_source=KeySource.EVENT_ID,
        fencing_token=1,
        state=state,
        lease_expires_at=None,
        window_expires_at=None,
        ttl=None,
        attempt=1,
        first_seen_at=None,
        result=b"",
        served_by=Tier.LOCAL,
        holder="test",
        lease_secret=b"secret",
    )


def _new(on_lost: list[str]) -> GuardCore:
    return GuardCore(
        "ns",
        "stripe",
        event_id="evt_1",
        delivery=None,
        scope="",
        payload_sha256=None,
        lease=30.0,
        holder=None,
        wait=None,
        entity_id="",
        event_type="",
        start=True,
        on_lost=lambda: on_lost.append("lost"),
    )


def _running(claim: Claim | None = None) -> tuple[GuardCore, list[str]]:
    """_running is a core whose claim was acquired and started: the handler runs."""
    lost: list[str] = []
    core = _new(lost)
    assert core.open().op is Op.CLAIM
    nxt = core.answered(core.open(), claim or _claim())
    if nxt is not None and nxt.op is Op.START:  # a takeover: the guard starts it
        nxt = core.answered(nxt, SimpleNamespace(record=SimpleNamespace(lease=None)))
    assert nxt is not None and nxt.op is Op.HEARTBEAT, nxt
    return core, lost


@dataclass
class Effect:
    """Effect is an EffectRecord as claimd.effects keeps it."""

    done: bool
    result: object


@pytest.mark.parametrize(
    ("desc", "effect", "returned", "want_call", "want_body"),
    [
        ("no effect", None, {"a": 1}, Call(Op.SETTLE, EventState.SETTLED, b'{"a":1}'), b'{"a":1}'),
        (
            "an effect committed in this run",
            Effect(done=False, result=b"mine"),
            b"mine",
            Call(Op.SETTLE, EventState.SETTLED, b"mine"),
            b"mine",
        ),
        (
            "an earlier holder's effect was done (row 23)",
            Effect(done=True, result=b"stored"),
            b"whatever the handler returned",
            Call(Op.SETTLE, EventState.SETTLED, b"stored", effect_recovered=True),
            b"stored",
        ),
    ],
)
def test_settle_after_the_handler_returned(
    desc: str, effect: Effect | None, returned: object, want_call: Call, want_body: bytes
) -> None:
    core, _ = _running()
    core.effect = effect
    call = core.settle(returned)
    assert call == want_call, f"{desc}: settle({returned!r}) = {call}, want {want_call}"
    assert core.answered(call, None) is None
    assert core.answer is not None
    assert (core.answer.status, core.answer.body, core.answer.ran) == (200, want_body, True), desc


def test_settle_options_name_effect_recovered_only_when_set() -> None:
    assert settle_options(Call(Op.SETTLE, EventState.SETTLED, b"x")) == {}
    assert settle_options(Call(Op.SETTLE, EventState.SETTLED, b"x", effect_recovered=True)) == {
        "effect_recovered": True
    }


@pytest.mark.parametrize(
    ("desc", "claim", "exc", "want_op", "want_swallow", "want_status"),
    [
        ("retryable failure: release (row 15)", _claim(), ConnectionError("down"), Op.RELEASE, True, 500),
        (
            "retryable failure on a key taken over from PROCESSING: left to its lease (row 16)",
            _claim(Reason.LEASE_EXPIRED, EventState.PROCESSING),
            ConnectionError("down"),
            None,
            True,
            500,
        ),
        ("permanent failure: FAILED (row 14)", _claim(), PermanentError("no"), Op.SETTLE, True, 200),
        ("interrupted: propagates, nothing written (row 20)", _claim(), KeyboardInterrupt(), None, False, 500),
    ],
)
def test_after_the_handler_raised(
    desc: str, claim: Claim, exc: BaseException, want_op: Op | None, want_swallow: bool, want_status: int
) -> None:
    core, _ = _running(claim)
    call, swallow = core.handler_raised(exc)
    assert (call.op if call else None, swallow) == (want_op, want_swallow), desc
    if call is not None:
        assert core.answered(call, None) is None
    assert core.answer is not None and core.answer.status == want_status, f"{desc}: {core.answer}"


def test_a_release_answered_stale_token_after_the_handler_raised_is_a_takeover() -> None:
    core, lost = _running()
    call, _ = core.handler_raised(ConnectionError("down"))
    assert call is not None and call.op is Op.RELEASE
    assert core.failed(call, StaleToken("taken")) is None
    assert core.answer is not None
    assert (core.answer.status, core.answer.retry_after, type(core.answer.error)) == (409, 1, ConnectionError)
    assert lost == ["lost"]


@pytest.mark.parametrize(
    ("desc", "err", "want_status"),
    [
        ("another holder (row 17)", NotOwner("not yours"), 409),
        ("claimd unreachable (row 19)", Unavailable("down"), 503),
        ("a bug in the client (row 19)", RuntimeError("bug"), 503),
    ],
)
def test_a_settle_that_failed_never_releases(desc: str, err: Exception, want_status: int) -> None:
    core, _ = _running()
    call = core.settle(b"paid")
    assert call is not None
    assert core.failed(call, err) is None, f"{desc}: a call after a failed settle"
    assert core.answer is not None and core.answer.status == want_status, f"{desc}: {core.answer}"


def test_a_start_that_failed_releases_unless_taken_over_from_processing() -> None:
    # A takeover keeps its vanished holder's state, so the guard starts it.
    core = _new([])
    assert core.answered(core.open(), _claim(Reason.LEASE_EXPIRED, EventState.RECEIVED)) == Call(Op.START)
    assert core.failed(Call(Op.START), Unavailable("down")) == Call(Op.RELEASE)
    assert core.answered(Call(Op.RELEASE), None) is None
    assert core.answer is not None and (core.answer.status, core.answer.ran) == (503, False)

    core = _new([])
    assert core.answered(core.open(), _claim(Reason.LEASE_EXPIRED, EventState.PROCESSING)) == Call(Op.START)
    assert core.failed(Call(Op.START), Unavailable("down")) is None
    assert core.answer is not None and core.answer.status == 503

"""The guard contract's scenarios (clients/guardspec/scenarios.json, format in
clients/guardspec/README.md) against a real claimd, through both forms of the
Python guard: the decorator and the with-block. The file is read strictly: a
field this runner does not know fails the run, so the file cannot say more
than the runners check. Scenarios marked effect run once per dialect of the
runner's database (guardspec_effects.py, effectdb.py): a SQLite file and the
PostgreSQL of $CLAIMD_TEST_POSTGRES_URL, which they fail without."""

from __future__ import annotations

import base64
import contextlib
import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import guardspec_effects as fxspec
import pytest
from connectproxy import ConnectProxy
from effectdb import DIALECTS, EffectDB, effect_db
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from test_retry import closed_port

from claimd import (
    ERROR_DOMAIN,
    MAX_RESULT_BYTES,
    Claim,
    Client,
    Delivery,
    EventRef,
    EventState,
    Guard,
    GuardResult,
    Lease,
    Outcome,
    PermanentError,
    RetryPolicy,
)
from claimd import _core as core
from claimd import guard as guard_module
from claimd._gen.idempotency.v1 import claim_pb2 as pb
from claimd.effects import EFFECTS_SCHEMA, effect_key
from claimd.testing import ClaimdServer

SPEC_PATH = Path(__file__).resolve().parents[2] / "guardspec" / "scenarios.json"

# --- reading the file strictly ---------------------------------------------


class SpecError(ValueError):
    """SpecError is a scenario file this runner cannot read as written."""


def _fields(obj: Any, where: str, required: set[str], optional: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    if not isinstance(obj, dict):
        raise SpecError(f"{where}: want an object, got {type(obj).__name__}")
    unknown = set(obj) - required - optional
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {sorted(unknown)}")
    missing = required - set(obj)
    if missing:
        raise SpecError(f"{where}: missing field(s) {sorted(missing)}")
    return obj


def _text(v: Any, where: str) -> str:
    if isinstance(v, str):
        return v
    r = _fields(v, where, {"repeat", "times"}, {"prefix"})
    if not isinstance(r["times"], int) or r["times"] <= 0 or not r["repeat"]:
        raise SpecError(f"{where}: repeat and a positive times are required")
    return str(r.get("prefix", "")) + str(r["repeat"]) * r["times"]


def _body(v: Any, where: str) -> bytes:
    b = _fields(v, where, set(), {"text", "b64"})
    if len(b) != 1:
        raise SpecError(f"{where}: want exactly one of text and b64")
    if "text" in b:
        return _text(b["text"], where + ".text").encode("utf-8")
    return base64.b64decode(b["b64"], validate=True)


_STATES = {"RECEIVED", "VALIDATED", "PROCESSING", "SETTLED", "FAILED"}
_CALLS = {"claim", "start", "settle", "fail", "release", "renew"}
_LANGUAGES = {"go", "python", "typescript", "java"}


def _check_scenario(sc: Any, where: str, row_count: int) -> None:
    _fields(
        sc, where, {"name", "row", "deliveries", "handler_runs"}, {"doc", "unreachable", "arrange", "effect", "pending"}
    )
    pending = sc.get("pending", {})
    if not isinstance(pending, dict) or not set(pending) <= _LANGUAGES or not all(pending.values()):
        raise SpecError(f"{where}.pending: want a mapping of {sorted(_LANGUAGES)} to why")
    uses_db = sc.get("effect") is True
    if "effect" in sc and not uses_db:
        raise SpecError(f"{where}.effect: want true or no field")
    if not 1 <= sc["row"] <= row_count:
        raise SpecError(f"{where}: row {sc['row']} is not a row of GUARD.md (1..{row_count})")
    for i, step in enumerate(sc.get("arrange", [])):
        w = f"{where}.arrange[{i}]"
        op = _fields(step, w, {"op"}, {"lease_ms", "to", "result"})["op"]
        if op == "claim":
            _fields(step, w, {"op", "lease_ms"})
        elif op == "transition":
            _fields(step, w, {"op", "to"}, {"result"})
            if step["to"] not in _STATES:
                raise SpecError(f"{w}: unknown state {step['to']!r}")
            if "result" in step:
                _body(step["result"], w + ".result")
        elif op == "release":
            _fields(step, w, {"op"})
        elif op == "fence":
            _body(_fields(step, w, {"op", "result"})["result"], w + ".result")
            if not uses_db:
                raise SpecError(f"{w}: a fence needs the runner's database (effect: true)")
        else:
            raise SpecError(f"{w}: unknown op {op!r}")
    if not sc["deliveries"]:
        raise SpecError(f"{where}: at least one delivery")
    for i, d in enumerate(sc["deliveries"]):
        w = f"{where}.deliveries[{i}]"
        _fields(d, w, {"expect"}, {"request", "handler", "faults"})
        if "request" in d:
            r = _fields(
                d["request"],
                w + ".request",
                set(),
                {"provider", "body", "headers", "lease_ms", "wait_ms", "event_id", "entity_id", "event_type"},
            )
            if "body" in r:
                _text(r["body"], w + ".request.body")
            if "body" in r and "event_id" in r:
                raise SpecError(f"{w}.request: event_id and body exclude each other")
        if "handler" in d:
            h = _fields(
                d["handler"],
                w + ".handler",
                set(),
                {"returns", "raises", "settle_itself", "fail_itself", "taken_over", "outlive_lease", "effect"},
            )
            if "effect" in h:
                if "returns" in h or "raises" in h or not uses_db:
                    raise SpecError(f"{w}.handler.effect: not with returns or raises, and only with effect: true")
                fxspec.check_handler_effect(h["effect"], w + ".handler.effect", _fields, _text)
            elif ("returns" in h) == ("raises" in h):
                raise SpecError(f"{w}.handler: want exactly one of returns and raises")
            if "returns" in h:
                v = _fields(h["returns"], w + ".handler.returns", set(), {"text", "b64", "json", "none"})
                if len(v) != 1:
                    raise SpecError(f"{w}.handler.returns: want exactly one of text, b64, json, none")
                if "text" in v:
                    _text(v["text"], w + ".handler.returns.text")
            elif "raises" in h:
                _text(_fields(h["raises"], w + ".handler.raises", {"message"}, {"permanent"})["message"], w)
            for k in ("settle_itself", "fail_itself"):
                if k in h:
                    _body(h[k], f"{w}.handler.{k}")
        for j, f in enumerate(d.get("faults", [])):
            f = _fields(f, f"{w}.faults[{j}]", {"call", "code"}, {"reason", "retry_delay_ms"})
            if f["call"] not in _CALLS or f["code"] not in grpc.StatusCode.__members__:
                raise SpecError(f"{w}.faults[{j}]: unknown call {f['call']!r} or code {f['code']!r}")
        e = _fields(
            d["expect"], w + ".expect", {"status", "body", "ran"}, {"retry_after", "claim", "record", "calls", "effect"}
        )
        if "effect" in e:
            if not uses_db:
                raise SpecError(f"{w}.expect.effect: only with effect: true")
            fxspec.check_expect_effect(e["effect"], w + ".expect.effect", _fields, _body)
        if not set(e.get("calls", [])) <= _CALLS | {"handler", "settle_recovered"}:
            raise SpecError(f"{w}.expect.calls: unknown call in {e['calls']!r}")
        _body(e["body"], w + ".expect.body")
        if isinstance(e.get("retry_after"), dict):
            _fields(e["retry_after"], w + ".expect.retry_after", {"min", "max"})
        if "claim" in e:
            _fields(e["claim"], w + ".expect.claim", set(), {"outcome", "reason", "state", "fencing_token"})
        if "record" in e:
            rec = _fields(e["record"], w + ".expect.record", set(), {"state", "released", "fencing_token", "result"})
            if "result" in rec:
                _body(rec["result"], w + ".expect.record.result")


def load_spec() -> dict[str, Any]:
    """load_spec reads scenarios.json and checks every field of it."""
    spec: dict[str, Any] = json.loads(SPEC_PATH.read_text(encoding="utf-8"))
    _fields(spec, str(SPEC_PATH), {"doc", "constants", "row_count", "uncovered_rows", "effects", "scenarios"})
    fx = _fields(spec["effects"], "effects", {"doc", "schema", "ledger_schema", "effect_keys"})
    _fields(fx["schema"], "effects.schema", {"postgres", "sqlite", "mysql"})
    for i, v in enumerate(fx["effect_keys"]):
        _fields(v, f"effects.effect_keys[{i}]", {"namespace", "provider", "key", "step", "effect_key"})
    c = _fields(
        spec["constants"],
        "constants",
        {
            "max_result_bytes",
            "max_failure_text_bytes",
            "unavailable_retry_after_s",
            "superseded_retry_after_s",
            "heartbeat_divisor",
            "heartbeat_floor_ms",
            "retry",
        },
    )
    _fields(
        c["retry"],
        "constants.retry",
        {"max_attempts", "base_backoff_ms", "max_backoff_ms", "multiplier", "total_timeout_ms", "attempt_timeout_ms"},
    )
    names = set()
    for i, sc in enumerate(spec["scenarios"]):
        where = f"scenarios[{i}]"
        _check_scenario(sc, where, spec["row_count"])
        if sc["name"] in names:
            raise SpecError(f"{where}: name {sc['name']!r} is not unique")
        names.add(sc["name"])
    return spec


SPEC = load_spec()


def test_every_row_has_a_scenario_or_a_reason() -> None:
    covered = {sc["row"] for sc in SPEC["scenarios"]}
    excused = {int(r) for r in SPEC["uncovered_rows"]}
    for row in range(1, SPEC["row_count"] + 1):
        assert (row in covered) != (row in excused), (
            f"GUARD.md row {row}: covered {row in covered}, in uncovered_rows {row in excused}; want exactly one"
        )


def test_constants_are_the_contracts(monkeypatch: pytest.MonkeyPatch) -> None:
    c = SPEC["constants"]
    r = c["retry"]
    assert c["max_result_bytes"] == MAX_RESULT_BYTES
    assert c["max_failure_text_bytes"] == guard_module.MAX_FAILURE_BYTES
    assert c["unavailable_retry_after_s"] == guard_module.UNAVAILABLE_RETRY_AFTER
    assert c["superseded_retry_after_s"] == guard_module.SUPERSEDED_RETRY_AFTER
    assert c["heartbeat_floor_ms"] == core.MIN_HEARTBEAT * 1000
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.initial_backoff * 1000, policy.max_backoff * 1000) == (
        r["max_attempts"],
        r["base_backoff_ms"],
        r["max_backoff_ms"],
    )
    assert (policy.multiplier, policy.total_timeout * 1000) == (r["multiplier"], r["total_timeout_ms"])
    assert Client.__init__.__kwdefaults__["timeout"] * 1000 == r["attempt_timeout_ms"]
    # Full jitter: uniform in [0, min(cap, base * multiplier^(n-1))].
    bounds: list[tuple[float, float]] = []
    monkeypatch.setattr(random, "uniform", lambda a, b: bounds.append((a, b)) or b)
    for n in range(1, 7):
        policy.backoff(n)
    want = [
        (0, min(r["max_backoff_ms"], r["base_backoff_ms"] * r["multiplier"] ** (n - 1)) / 1000) for n in range(1, 7)
    ]
    assert [lo for lo, _ in bounds] == [0] * len(want), bounds
    assert [hi for _, hi in bounds] == pytest.approx([hi for _, hi in want]), bounds
    # The heartbeat paces itself at a third of the lease, and no faster than the floor.
    pace = core.heartbeat_pace
    assert pace(SimpleNamespace(lease=timedelta(seconds=3))) == pytest.approx(3 / c["heartbeat_divisor"])
    assert pace(SimpleNamespace(lease=timedelta(milliseconds=1))) == pytest.approx(c["heartbeat_floor_ms"] / 1000)


def test_effects_schema_is_the_librarys() -> None:
    assert dict(EFFECTS_SCHEMA) == SPEC["effects"]["schema"]


def test_effect_keys_are_the_vectors() -> None:
    vectors = SPEC["effects"]["effect_keys"]
    assert vectors, "effects.effect_keys is empty"
    for v in vectors:
        got = effect_key(v["namespace"], v["provider"], v["key"], v["step"])
        assert got == v["effect_key"], (
            f"effect_key({v['namespace']!r}, …, {v['step']!r}) = {got}, want {v['effect_key']}"
        )
        assert len(got) == 39


# --- faults ------------------------------------------------------------------


class InjectedError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """InjectedError is a call that failed without reaching claimd."""

    def __init__(self, code: grpc.StatusCode, status: status_pb2.Status) -> None:
        self._code = code
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._status.message

    def trailing_metadata(self) -> tuple[tuple[str, bytes], ...]:
        return (("grpc-status-details-bin", self._status.SerializeToString()),)


_TO_CALL = {EventState.PROCESSING.name: "start", EventState.SETTLED.name: "settle", EventState.FAILED.name: "fail"}


class Faults(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Faults fails the named calls of the guard's client, every attempt, and
    logs every attempt's name in calls when it is a write (the handler logs
    "handler")."""

    def __init__(self, calls: list[str] | None = None) -> None:
        self.active: list[dict[str, Any]] = []
        self.calls = calls if calls is not None else []

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        f = self.fault_for(details.method, request)
        if f is not None:
            raise InjectedError(*fault_status(f))
        return continuation(details, request)

    def fault_for(self, method: str | bytes, request: Any) -> dict[str, Any] | None:
        """fault_for is the active fault for a call of method, if any."""
        name = (method.decode() if isinstance(method, bytes) else method).rsplit("/", 1)[-1]
        call = name.lower()
        if name == "Transition":
            call = _TO_CALL.get(pb.EventState.Name(request.to).removeprefix("EVENT_STATE_"), "")
            if call == "settle" and request.effect_recovered:
                call = "settle_recovered"
        if call in _CALLS or call == "settle_recovered":
            self.calls.append(call)
        return next((f for f in self.active if f["call"] == call), None)


def fault_status(f: dict[str, Any]) -> tuple[grpc.StatusCode, status_pb2.Status]:
    """fault_status is the code and google.rpc.Status a fault fails its call with."""
    code = grpc.StatusCode[f["code"]]
    st = status_pb2.Status(code=code.value[0], message="injected by guardspec")
    if "reason" in f:
        d = any_pb2.Any()
        d.Pack(error_details_pb2.ErrorInfo(reason=f["reason"], domain=ERROR_DOMAIN))
        st.details.append(d)
    if "retry_delay_ms" in f:
        delay = duration_pb2.Duration()
        delay.FromMilliseconds(f["retry_delay_ms"])
        d = any_pb2.Any()
        d.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        st.details.append(d)
    return code, st


# --- running a scenario --------------------------------------------------------


@dataclass
class Run:
    """Run is one scenario's state: its key, the plain client that plays the
    other holder and reads records, and what went wrong inside handlers."""

    ns: str
    evt: str
    plain: Client
    runs: int = 0
    problems: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # this delivery's, as Faults logs them
    other: Lease | None = None
    db: EffectDB | None = None  # the runner's database, for an effect scenario
    fx_done: list[bool] = field(default_factory=list)  # this delivery's effect: fx.done


def _arrange(run: Run, step: dict[str, Any]) -> None:
    if step["op"] == "claim":
        c = run.plain.claim(run.ns, "stripe", event_id=run.evt, lease=step["lease_ms"] / 1000, holder="guardspec-other")
        assert c.acquired, f"arrange: claim outcome {c.outcome.name}, want ACQUIRED"
        run.other = c.lease
    elif step["op"] == "transition":
        assert run.other is not None
        result = _body(step["result"], "result") if "result" in step else b""
        run.plain.transition(run.other, EventState[step["to"]], result=result)
    elif step["op"] == "fence":
        assert run.other is not None and run.db is not None
        schema = SPEC["effects"]["schema"][run.db.dialect]
        result = _body(step["result"], "result")
        fxspec.arrange_fence(run.db, schema, run.ns, run.other.key, run.other.fencing_token, result)
    else:
        assert run.other is not None
        run.plain.release(run.other)


def _delivery_key(run: Run, request: dict[str, Any]) -> dict[str, Any]:
    if "body" in request:
        body = _text(request["body"], "body").replace("{event_id}", run.evt).encode("utf-8")
        return {"delivery": Delivery(dict(request.get("headers", {})), body)}
    return {"event_id": request.get("event_id", "{event_id}").replace("{event_id}", run.evt)}


def _entity(run: Run, request: dict[str, Any]) -> dict[str, str]:
    """_entity is the claim options that place an event sent by id in its
    entity's lifecycle, when the request names them."""
    return {
        "entity_id": request.get("entity_id", "").replace("{event_id}", run.evt),
        "event_type": request.get("event_type", ""),
    }


def _behave(run: Run, g: Guard, request: dict[str, Any], h: dict[str, Any] | None) -> object:
    """_behave is the scenario's handler, run by the guard with g."""
    run.runs += 1
    run.calls.append("handler")
    if h is None:
        return None
    claim = g.claim
    for key, state in (("settle_itself", EventState.SETTLED), ("fail_itself", EventState.FAILED)):
        if key in h:
            run.plain.transition(claim, state, result=_body(h[key], key))
    if h.get("taken_over"):
        run.plain.release(claim)
        taker = run.plain.claim(
            run.ns, request.get("provider", "stripe"), holder="guardspec-taker", **_delivery_key(run, request)
        )
        if not taker.acquired:
            run.problems.append(f"the taker's claim: {taker.outcome.name}, want ACQUIRED")
        elif not g.cancelled.wait(10):
            run.problems.append("the handler was not cancelled within 10s of the takeover")
    if h.get("outlive_lease"):
        _outlive_lease(run, claim, request)
    if "effect" in h:
        assert run.db is not None
        check_effect_key(run, g.effect_key("charge"), claim)
        return fxspec.effect_handler(run.db, g, h["effect"], _text, run.fx_done)
    return handler_outcome(h)


def check_effect_key(run: Run, got: str, claim: Claim) -> None:
    """check_effect_key compares the guard's effect_key with the function's."""
    want = effect_key(claim.namespace, claim.provider, claim.key, "charge")
    if got != want:
        run.problems.append(f"g.effect_key('charge') = {got}, want {want}")


def handler_outcome(h: dict[str, Any]) -> object:
    """handler_outcome ends a scenario's handler: raises or returns as h says."""
    if "raises" in h:
        message = _text(h["raises"]["message"], "message")
        if h["raises"].get("permanent"):
            raise PermanentError(message)
        raise ConnectionError(message)
    v = h["returns"]
    if "text" in v:
        return _text(v["text"], "text")
    if "b64" in v:
        return base64.b64decode(v["b64"])
    if "json" in v:
        return v["json"]
    return None


def _outlive_lease(run: Run, claim: Claim, request: dict[str, Any]) -> None:
    """_outlive_lease works until claimd's record shows a renewal past the
    lease the claim was granted, then checks that a competing claim still
    meets a live lease. It polls claimd, an observable condition."""
    first = claim.lease_expires_at
    assert first is not None
    deadline = time.monotonic() + 10
    while True:
        rec = run.plain.get(run.ns, claim.provider, claim.key)
        if rec.lease_expires_at and rec.updated_at and rec.lease_expires_at > first and rec.updated_at > first:
            break
        if time.monotonic() > deadline:
            run.problems.append(f"no renewal past the first lease ({first}) within 10s: {rec}")
            return
        time.sleep(0.05)
    other = run.plain.claim(run.ns, claim.provider, holder="guardspec-competitor", **_delivery_key(run, request))
    if other.outcome != Outcome.IN_PROGRESS:
        run.problems.append(f"a competing claim past the first lease: {other.outcome.name}, want IN_PROGRESS")


def _deliver(run: Run, client: Client, form: str, d: dict[str, Any]) -> tuple[GuardResult, bool]:
    request = d.get("request", {})
    provider = request.get("provider", "stripe")
    lease = request["lease_ms"] / 1000 if "lease_ms" in request else None
    wait = request["wait_ms"] / 1000 if "wait_ms" in request else None
    before = run.runs
    key = _delivery_key(run, request)
    if form == "decorator":

        @client.guarded(run.ns, provider, lease=lease, wait=wait)
        def handle(g: Guard) -> object:
            return _behave(run, g, request, d.get("handler"))

        arg = EventRef(key["event_id"], **_entity(run, request)) if "event_id" in key else key["delivery"]
        result = handle(arg)
    else:
        with client.guard(run.ns, provider, lease=lease, wait=wait, **key, **_entity(run, request)) as g:
            if g.acquired:
                g.settle(_behave(run, g, request, d.get("handler")))
        result = g.result
    return result, run.runs > before


def _check(run: Run, what: str, r: GuardResult, ran: bool, e: dict[str, Any]) -> None:
    assert not run.problems, f"{what}: inside the handler: {run.problems}"
    assert r.status == e["status"], f"{what}: status {r.status}, want {e['status']} (error {r.error!r})"
    ra = e.get("retry_after")
    header = r.headers.get("Retry-After")
    if ra is None:
        assert header is None, f"{what}: Retry-After {header!r}, want none"
    else:
        lo, hi = (ra["min"], ra["max"]) if isinstance(ra, dict) else (ra, ra)
        assert header is not None and lo <= int(header) <= hi, f"{what}: Retry-After {header!r}, want {lo}..{hi}"
    want = _body(e["body"], "body")
    assert r.body == want, f"{what}: body {r.body[:80]!r} ({len(r.body)} bytes), want {want[:80]!r} ({len(want)})"
    assert ran == e["ran"] == r.ran, f"{what}: handler ran {ran} (result.ran {r.ran}), want {e['ran']}"
    if "calls" in e:
        assert run.calls == e["calls"], f"{what}: the guard's calls {run.calls}, want {e['calls']}"
    if "claim" in e:
        c = r.claim
        assert c is not None, f"{what}: no claim answer, want {e['claim']}"
        got = {
            "outcome": c.outcome.name,
            "reason": c.reason.name,
            "state": c.state.name,
            "fencing_token": c.fencing_token,
        }
        assert {k: got[k] for k in e["claim"]} == e["claim"], f"{what}: claim {got}, want {e['claim']}"
    if "effect" in e:
        assert run.db is not None
        fxspec.check_effect(run.db, what, run.ns, run.evt, run.fx_done, e["effect"], _body)
    if "record" in e:
        rec = run.plain.get(run.ns, "stripe", run.evt)
        got = {"state": rec.state.name, "released": rec.released, "fencing_token": rec.fencing_token}
        want_rec = {k: v for k, v in e["record"].items() if k != "result"}
        assert {k: got[k] for k in want_rec} == want_rec, f"{what}: record {got}, want {want_rec}"
        if "result" in e["record"]:
            stored = _body(e["record"]["result"], "result")
            assert rec.result == stored, f"{what}: stored result {rec.result[:80]!r}, want {stored[:80]!r}"


@pytest.fixture
def plain(claimd_server: ClaimdServer) -> Iterator[Client]:
    with Client(claimd_server.grpc_address) as c:
        yield c


# Each scenario once, and each effect scenario once per dialect of the
# runner's database; one pending for Python is reported skipped, with why.
CASES = [
    pytest.param(
        sc,
        dialect,
        id=sc["name"] + (f" [{dialect}]" if dialect else ""),
        marks=[pytest.mark.skip(reason=sc["pending"]["python"])] if "python" in sc.get("pending", {}) else [],
    )
    for sc in SPEC["scenarios"]
    for dialect in (DIALECTS if sc.get("effect") else (None,))
]


@pytest.fixture
def effect_db_for(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EffectDB | None]:
    """effect_db_for is the runner's database for the case's dialect (None
    for a scenario without effect): a fresh one holding the ledger table but
    not claimd_effects, which the guard creates on first use."""
    dialect = request.node.callspec.params["dialect"]
    if dialect is None:
        yield None
        return
    with effect_db(dialect, tmp_path) as db:
        db.exec((SPEC["effects"]["ledger_schema"], ()))
        yield db


@contextlib.contextmanager
def faulty_client(
    server: ClaimdServer,
    transport: str,
    faults: Faults,
    unreachable: bool,
    make: Callable[..., Any] = Client,
    interceptor: Any = None,
) -> Iterator[Any]:
    """faulty_client is a client of server over transport, made by make (the
    sync Client or claimd.aio's), whose calls faults can fail: through
    interceptor (gRPC; default faults itself), or a ConnectProxy that asks
    faults (Connect). Unreachable, it dials a closed port. It keeps the
    default retry policy: the contract's. The caller enters and closes it."""
    if transport == "grpc":
        target = closed_port() if unreachable else server.grpc_address
        yield make(target, interceptors=[interceptor if interceptor is not None else faults])
        return
    if unreachable:
        yield make(f"http://{closed_port()}")
        return

    def hook(method: str, request: Any) -> tuple[grpc.StatusCode, status_pb2.Status] | None:
        f = faults.fault_for(method, request)
        return fault_status(f) if f is not None else None

    with ConnectProxy(server.http_address, hook) as proxy:
        yield make(proxy.url)


@pytest.mark.parametrize("form", ["decorator", "with-block"])
@pytest.mark.parametrize(("sc", "dialect"), CASES)
def test_scenario(
    sc: dict[str, Any],
    dialect: str | None,
    form: str,
    transport: str,
    claimd_server: ClaimdServer,
    plain: Client,
    ns: str,
    evt: str,
    effect_db_for: EffectDB | None,
) -> None:
    run = Run(ns=ns, evt=evt, plain=plain, db=effect_db_for)
    faults = Faults(run.calls)
    with faulty_client(claimd_server, transport, faults, bool(sc.get("unreachable"))) as made, made as client:
        for step in sc.get("arrange", []):
            _arrange(run, step)
        for i, d in enumerate(sc["deliveries"]):
            run.calls.clear()
            run.fx_done.clear()
            faults.active = d.get("faults", [])
            try:
                result, ran = _deliver(run, client, form, d)
            finally:
                faults.active = []
            _check(run, f"delivery {i + 1}", result, ran, d["expect"])
    assert run.runs == sc["handler_runs"], f"handler runs = {run.runs}, want {sc['handler_runs']}"


def test_a_field_the_runner_does_not_know_fails_it() -> None:
    sc = json.loads(json.dumps(SPEC["scenarios"][0]))
    sc["deliveries"][0]["expect"]["stauts"] = 200
    with pytest.raises(SpecError, match="stauts"):
        _check_scenario(sc, "scenario", SPEC["row_count"])

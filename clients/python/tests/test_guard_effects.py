"""Guard.effect's rules that the guardspec scenarios do not state, against a
real claimd: a done fence's result is settled whatever the handler returns;
one effect per delivery, only while the guard owns the claim; and the
PostgreSQL race of two first uses creating claimd_effects at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from effectdb import EffectDB, effect_db, postgres_url

from claimd import Client, EventState, Outcome, Reason, StaleToken
from claimd.effects import EFFECTS_SCHEMA, fence
from claimd.testing import ClaimdServer


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Iterator[EffectDB]:
    with effect_db("sqlite", tmp_path) as db:
        yield db


def test_a_done_fence_is_settled_whatever_the_handler_returns(
    client: Client, ns: str, evt: str, sqlite_db: EffectDB
) -> None:
    first = client.claim(ns, "stripe", event_id=evt, lease=0.3)
    client.transition(first, EventState.PROCESSING)
    with closing(sqlite_db.connect()) as conn, fence(conn, first) as fx:
        fx.result = b"first's answer"
    # The first holder vanished before settling; the next takes over.
    with client.guard(ns, "stripe", event_id=evt, wait=5) as g:
        assert (g.claim.reason, g.claim.state) == (Reason.LEASE_EXPIRED, EventState.PROCESSING)
        with closing(sqlite_db.connect()) as conn, g.effect(conn) as fx:
            assert (fx.done, fx.token, fx.result) == (True, first.fencing_token, b"first's answer")
        g.settle({"something": "else"})
    assert (g.result.status, g.result.body) == (200, b"first's answer")
    rec = client.get(ns, "stripe", evt)
    assert (rec.state, rec.result) == (EventState.SETTLED, b"first's answer")
    assert client.claim(ns, "stripe", event_id=evt).outcome == Outcome.DUPLICATE


def test_one_effect_per_delivery_and_only_while_the_guard_owns_the_claim(
    client: Client, ns: str, evt: str, sqlite_db: EffectDB
) -> None:
    with closing(sqlite_db.connect()) as conn:
        with client.guard(ns, "stripe", event_id=evt) as g:
            with g.effect(conn) as fx:
                fx.result = "once"
            with pytest.raises(RuntimeError, match="second effect"):
                g.effect(conn)
            g.settle(fx.result)
            with pytest.raises(RuntimeError, match="only while the guard owns the claim"):
                g.effect(conn)
        assert g.result.body == b"once"
        with client.guard(ns, "stripe", event_id=evt) as dup:
            assert dup.claim.outcome == Outcome.DUPLICATE
            with pytest.raises(RuntimeError, match="only while the guard owns the claim"):
                dup.effect(conn)
        assert g.effect_key("charge") == dup.effect_key("charge") != g.effect_key("refund")


def test_an_effect_opened_after_a_takeover_raises_stale_token(
    client: Client, claimd_server: ClaimdServer, ns: str, evt: str, sqlite_db: EffectDB
) -> None:
    with closing(sqlite_db.connect()) as conn, client.guard(ns, "stripe", event_id=evt, lease=3) as g:
        with Client(claimd_server.grpc_address) as other:
            other.release(g.claim)
            assert other.claim(ns, "stripe", event_id=evt).acquired
        assert g.cancelled.wait(10), "the guard did not notice the takeover"  # its renewal, at lease/3
        with pytest.raises(StaleToken):
            g.effect(conn)
    assert g.result.status == 409
    assert not sqlite_db.has_effects_table()


def test_postgres_first_uses_that_race_to_create_the_table_both_succeed(tmp_path: Path) -> None:
    # Another session creates claimd_effects and has not committed: ours
    # waits on the catalog, then fails on its unique index when the other
    # commits. The effect tries the DDL once more, which finds the table.
    with effect_db("postgres", tmp_path) as db:
        url = postgres_url()
        with psycopg.connect(url, options=f"-c search_path={db.schema}") as other:
            other.execute(EFFECTS_SCHEMA["postgres"])  # in a transaction left open
            got: list[Any] = []

            def first_use() -> None:
                try:
                    with closing(db.connect()) as conn:
                        got.append(conn.info.backend_pid)
                        with fence(conn, _Key("ns", "stripe", "evt_race", 1)) as fx:
                            fx.result = b"ok"
                        got.append(fx)
                except BaseException as err:
                    got.append(err)

            t = threading.Thread(target=first_use)
            t.start()
            deadline = time.monotonic() + 10
            while not got or db.query("SELECT wait_event_type FROM pg_stat_activity WHERE pid = ?", got[0]) != [
                ("Lock",)
            ]:
                assert time.monotonic() < deadline, f"the effect's CREATE never waited: {got}"
                time.sleep(0.01)
            other.commit()
            t.join(30)
        assert len(got) == 2 and not isinstance(got[1], BaseException), got
        assert db.query("SELECT fencing_token, result FROM claimd_effects WHERE key = 'evt_race'") == [(1, b"ok")]


class _Key:
    def __init__(self, namespace: str, provider: str, key: str, fencing_token: int) -> None:
        self.namespace, self.provider, self.key, self.fencing_token = namespace, provider, key, fencing_token

"""claimd.effects on real databases, without a guard: the fence's transaction
on SQLite (a file of the test's own) and PostgreSQL ($CLAIMD_TEST_POSTGRES_URL),
in each transaction mode a caller may hand it."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from effectdb import DIALECTS, EffectDB, effect_db

from claimd.effects import EFFECTS_SCHEMA, Fx, fence, prune_effects

LEDGER = "CREATE TABLE IF NOT EXISTS ledger (key TEXT NOT NULL, writer TEXT NOT NULL)"


@dataclass(frozen=True)
class FakeClaim:
    namespace: str
    provider: str
    key: str
    fencing_token: int


@pytest.fixture(params=DIALECTS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EffectDB]:
    with effect_db(request.param, tmp_path) as d:
        d.exec((LEDGER, ()))
        yield d


# Each way a caller may hand over a connection: sqlite3's default (implicit
# transactions) and isolation_level=None; psycopg outside and in autocommit.
MODES = {"sqlite": ("default", "isolation_level=None"), "postgres": ("default", "autocommit")}


def connect(db: EffectDB, mode: str) -> Any:
    conn = db.connect()
    if mode == "isolation_level=None":
        conn.isolation_level = None
    elif mode == "autocommit":
        conn.autocommit = True
    return conn


def write(db: EffectDB, conn: Any, key: str, writer: str) -> None:
    conn.execute(f"INSERT INTO ledger (key, writer) VALUES ({db.p}, {db.p})", (key, writer))


def ledger(db: EffectDB, key: str) -> list[str]:
    return [r[0] for r in db.query("SELECT writer FROM ledger WHERE key = ? ORDER BY writer", key)]


def fence_row(db: EffectDB, key: str) -> tuple[int, bytes | None] | None:
    rows = db.query("SELECT fencing_token, result FROM claimd_effects WHERE key = ?", key)
    return (int(rows[0][0]), None if rows[0][1] is None else bytes(rows[0][1])) if rows else None


@pytest.mark.parametrize("mode", [0, 1])
def test_first_effect_commits_writes_and_fence_and_the_next_is_done(db: EffectDB, mode: int) -> None:
    m = MODES[db.dialect][mode]
    assert not db.has_effects_table(), "claimd_effects exists before the first effect"
    recorded: list[Fx] = []
    with closing(connect(db, m)) as conn:
        with fence(conn, FakeClaim("ns", "stripe", "evt_1", 1), recorded.append) as fx:
            assert (fx.done, fx.result, fx.token) == (False, None, 1)
            write(db, conn, "evt_1", "first")
            fx.result = {"charge": "ch_1", "note": "é"}
        assert not conn.in_transaction if db.dialect == "sqlite" else conn.info.transaction_status == 0
    assert db.has_effects_table(), "the first effect did not create claimd_effects"
    assert recorded == [fx]
    assert ledger(db, "evt_1") == ["first"]
    assert fence_row(db, "evt_1") == (1, '{"charge":"ch_1","note":"é"}'.encode())

    with closing(connect(db, m)) as conn:
        with fence(conn, FakeClaim("ns", "stripe", "evt_1", 2), recorded.append) as again:
            assert (again.done, again.token, again.result) == (True, 1, b'{"charge":"ch_1","note":"\xc3\xa9"}')
            write(db, conn, "evt_1", "second")  # a block that forgot to check done
            again.result = "ignored"
        assert again.result == '{"charge":"ch_1","note":"é"}'.encode()
    assert recorded == [fx, again]
    assert ledger(db, "evt_1") == ["first"], "a done effect's writes were committed"
    assert fence_row(db, "evt_1") == (1, '{"charge":"ch_1","note":"é"}'.encode())
    # Another provider, namespace or key has a fence of its own.
    for other in (FakeClaim("ns", "adyen", "evt_1", 1), FakeClaim("ns2", "stripe", "evt_1", 1)):
        with closing(connect(db, m)) as conn, fence(conn, other) as fx3:
            assert not fx3.done, other


@pytest.mark.parametrize("mode", [0, 1])
def test_an_exception_in_the_block_rolls_back_and_propagates(db: EffectDB, mode: int) -> None:
    recorded: list[Fx] = []
    with closing(connect(db, MODES[db.dialect][mode])) as conn:
        with pytest.raises(ConnectionError, match="ledger down"):
            with fence(conn, FakeClaim("ns", "stripe", "evt_2", 1), recorded.append) as fx:
                write(db, conn, "evt_2", "first")
                fx.result = "never stored"
                raise ConnectionError("ledger down")
        assert recorded == []
        assert (ledger(db, "evt_2"), fence_row(db, "evt_2")) == ([], None)
        with fence(conn, FakeClaim("ns", "stripe", "evt_2", 2)) as fx:
            assert not fx.done
            write(db, conn, "evt_2", "retry")
    assert (ledger(db, "evt_2"), fence_row(db, "evt_2")) == (["retry"], (2, None))


def test_a_result_the_rule_refuses_raises_in_the_block(db: EffectDB) -> None:
    with closing(db.connect()) as conn:
        with pytest.raises(ValueError):
            with fence(conn, FakeClaim("ns", "stripe", "evt_nan", 1)) as fx:
                write(db, conn, "evt_nan", "first")
                fx.result = float("nan")
    assert (ledger(db, "evt_nan"), fence_row(db, "evt_nan")) == ([], None)


def test_a_concurrent_holder_waits_for_the_fence_and_finds_it_done(db: EffectDB) -> None:
    claim = FakeClaim("ns", "stripe", "evt_3", 1)
    got: list[Fx | BaseException] = []
    pid_b: list[int] = []
    b_ready = threading.Event()
    with closing(db.connect()) as a:

        def second() -> None:
            with closing(db.connect()) as b:
                if db.dialect == "postgres":
                    pid_b.append(b.info.backend_pid)
                b_ready.set()
                try:
                    with fence(b, FakeClaim("ns", "stripe", "evt_3", 2)) as fx:
                        write(db, b, "evt_3", "second")
                    got.append(fx)
                except BaseException as err:
                    got.append(err)

        with fence(a, claim) as fx:
            write(db, a, "evt_3", "first")
            fx.result = b"a"
            t = threading.Thread(target=second)
            t.start()
            assert b_ready.wait(10)
            if db.dialect == "postgres":
                # B's insert waits on A's uncommitted fence row: claimd's
                # contract, observed in pg_stat_activity before A commits.
                deadline = time.monotonic() + 10
                while db.query("SELECT wait_event_type FROM pg_stat_activity WHERE pid = ?", pid_b[0]) != [("Lock",)]:
                    assert time.monotonic() < deadline, "B never waited for A's fence"
                    time.sleep(0.01)
        t.join(30)
    assert len(got) == 1 and isinstance(got[0], Fx), got
    assert (got[0].done, got[0].token, got[0].result) == (True, 1, b"a")
    assert ledger(db, "evt_3") == ["first"]


def test_a_connection_inside_a_transaction_is_refused(db: EffectDB) -> None:
    with closing(db.connect()) as conn:
        write(db, conn, "evt_4", "pending")  # opens a transaction in both drivers' default mode
        with pytest.raises(RuntimeError, match="inside a transaction"):
            fence(conn, FakeClaim("ns", "stripe", "evt_4", 1))
        conn.rollback()
    with pytest.raises(TypeError, match="not a sqlite3 or psycopg 3 connection"):
        fence(object(), FakeClaim("ns", "stripe", "evt_4", 1))


def test_sqlite_statements_in_the_contracts_order(tmp_path: Path) -> None:
    with effect_db("sqlite", tmp_path) as db:
        db.exec((LEDGER, ()))
        with closing(db.connect()) as conn:
            seen: list[str] = []
            conn.set_trace_callback(seen.append)
            for token in (1, 2):
                with fence(conn, FakeClaim("ns", "stripe", "evt_5", token)) as fx:
                    if not fx.done:
                        fx.result = b"r"
        rows = db.query("SELECT sql FROM sqlite_master WHERE name = 'claimd_effects'")
    # The first insert finds no table: roll back, create it, begin again.
    # Then the contract's order, and no DDL per event.
    words = [s.split()[0] for s in seen]
    assert words == [
        "BEGIN",
        "ROLLBACK",
        "CREATE",
        "BEGIN",
        "INSERT",
        "UPDATE",
        "COMMIT",
        "BEGIN",
        "INSERT",
        "SELECT",
        "ROLLBACK",
    ], seen
    assert seen[2] == EFFECTS_SCHEMA["sqlite"] and seen[3] == "BEGIN IMMEDIATE"
    assert rows == [(EFFECTS_SCHEMA["sqlite"].replace(" IF NOT EXISTS", ""),)]


def test_postgres_table_is_the_contracts(tmp_path: Path) -> None:
    with effect_db("postgres", tmp_path) as db:
        with closing(db.connect()) as conn, fence(conn, FakeClaim("ns", "stripe", "evt_6", 1)):
            pass
        cols = db.query(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = ? AND table_name = 'claimd_effects' ORDER BY ordinal_position",
            db.schema,
        )
        pk = db.query(
            "SELECT a.attname FROM pg_index i"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indrelid = (? || '.claimd_effects')::regclass AND i.indisprimary ORDER BY a.attnum",
            db.schema,
        )
    assert cols == [
        ("namespace", "text", "NO"),
        ("provider", "text", "NO"),
        ("key", "text", "NO"),
        ("fencing_token", "bigint", "NO"),
        ("result", "bytea", "YES"),
        ("created_at", "timestamp with time zone", "NO"),
    ]
    assert pk == [("namespace",), ("provider",), ("key",)]


def test_prune_effects_deletes_what_is_older_than_the_cutoff(db: EffectDB) -> None:
    with closing(db.connect()) as conn:
        for i in range(3):
            with fence(conn, FakeClaim("ns", "stripe", f"evt_p{i}", 1)):
                pass
        now = datetime.now(timezone.utc)
        assert prune_effects(conn, now - timedelta(hours=1)) == 0
        assert prune_effects(conn, now + timedelta(hours=1)) == 3
        assert prune_effects(conn, now + timedelta(hours=1)) == 0
        with pytest.raises(ValueError, match="aware"):
            prune_effects(conn, datetime.now())  # the naive datetime it refuses
    assert db.query("SELECT count(*) FROM claimd_effects") == [(0,)]


def test_each_new_sqlite_database_gets_the_table(tmp_path: Path) -> None:
    for i in range(5):
        conn = sqlite3.connect(tmp_path / f"db{i}.sqlite")
        with closing(conn), fence(conn, FakeClaim("ns", "stripe", "evt", 1)) as fx:
            assert not fx.done
        del conn


def test_psycopg_async_connection(tmp_path: Path) -> None:
    import asyncio

    async def run() -> tuple[bool, bool]:
        with effect_db("postgres", tmp_path) as db:
            db.exec((LEDGER, ()))
            conn = await db.aconnect()
            async with conn:
                async with fence(conn, FakeClaim("ns", "stripe", "evt_a", 1)) as fx:
                    await conn.execute("INSERT INTO ledger (key, writer) VALUES ('evt_a', 'a')")
                    fx.result = "x"
                async with fence(conn, FakeClaim("ns", "stripe", "evt_a", 2)) as again:
                    await conn.execute("INSERT INTO ledger (key, writer) VALUES ('evt_a', 'b')")
            assert ledger(db, "evt_a") == ["a"] and fence_row(db, "evt_a") == (1, b"x")
            return fx.done, again.done

    assert asyncio.run(run()) == (False, True)

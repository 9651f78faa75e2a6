"""The runners' databases for effect tests (clients/guardspec/README.md, "The
runner's database"): a SQLite file of the test's own, and a schema of the
test's own on the PostgreSQL at $CLAIMD_TEST_POSTGRES_URL (test.sh starts it
with internal/testenv/cmd/testpg). A test that needs PostgreSQL without the
variable fails; it never skips."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

DIALECTS = ("sqlite", "postgres")


def postgres_url() -> str:
    """postgres_url is the test PostgreSQL's URL; it fails the test without one."""
    url = os.environ.get("CLAIMD_TEST_POSTGRES_URL", "")
    if not url:
        raise AssertionError(
            "CLAIMD_TEST_POSTGRES_URL is not set: run clients/python/test.sh, which starts PostgreSQL "
            "(internal/testenv/cmd/testpg), or export the URL of one"
        )
    return url


@dataclass
class EffectDB:
    """EffectDB is one test's database: connect() opens a new connection to
    it (sqlite3 in the default transaction mode, or psycopg 3 with this
    test's schema first on the search_path)."""

    dialect: str
    path: Path | None = None  # sqlite
    schema: str = ""  # postgres

    def connect(self) -> Any:
        if self.dialect == "sqlite":
            assert self.path is not None
            return sqlite3.connect(self.path, timeout=30)
        return psycopg.connect(postgres_url(), options=f"-c search_path={self.schema}")

    async def aconnect(self) -> Any:
        """aconnect is connect for asyncio: a psycopg.AsyncConnection on
        PostgreSQL, a plain sqlite3 connection (used synchronously) on SQLite."""
        if self.dialect == "sqlite":
            return self.connect()
        return await psycopg.AsyncConnection.connect(postgres_url(), options=f"-c search_path={self.schema}")

    @property
    def p(self) -> str:
        """p is the dialect's placeholder."""
        return "?" if self.dialect == "sqlite" else "%s"

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """query reads rows in a connection of its own ("?" placeholders)."""
        with closing(self.connect()) as conn:
            rows = conn.execute(sql.replace("?", self.p), args).fetchall()
            conn.rollback()
            return [tuple(r) for r in rows]

    def exec(self, *statements: tuple[str, tuple[Any, ...]]) -> None:
        """exec runs statements in one transaction of a connection of its own."""
        with closing(self.connect()) as conn:
            for sql, args in statements:
                conn.execute(sql.replace("?", self.p), args)
            conn.commit()

    def has_effects_table(self) -> bool:
        if self.dialect == "sqlite":
            rows = self.query("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'claimd_effects'")
        else:
            rows = self.query(
                "SELECT count(*) FROM information_schema.tables"
                " WHERE table_schema = ? AND table_name = 'claimd_effects'",
                self.schema,
            )
        return bool(rows[0][0])


@contextmanager
def effect_db(dialect: str, tmp: Path) -> Iterator[EffectDB]:
    """effect_db makes a fresh database of dialect, without claimd_effects
    (the guard creates it on first use), and drops it afterwards."""
    if dialect == "sqlite":
        yield EffectDB("sqlite", path=tmp / f"effects-{uuid.uuid4().hex[:8]}.db")
        return
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_url(), autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            yield EffectDB("postgres", schema=schema)
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")

"""The effect fence: a handler's writes to its own database, exactly once.

    with client.guard("billing", "stripe", event_id=evt) as g:
        if g.acquired:
            with g.effect(conn) as fx:
                if not fx.done:
                    conn.execute("INSERT INTO ledger ...")
                    fx.result = {"booked": evt}
            g.settle(fx.result)

The guard keeps two holders from running at once, but a holder that commits
its write and dies before settling, or that wakes after a takeover, would
write again. The fence closes that gap (clients/GUARD.md, "Exactly-once
effects"): the block's writes commit in one transaction with a row of
claimd_effects for the delivery, and the first transaction to commit that row
wins. In that transaction (SQLite: BEGIN IMMEDIATE):

1. INSERT the fence row (namespace, provider, key, this holder's fencing
   token) ON CONFLICT DO NOTHING. One row inserted: this holder owns the
   fence; a concurrent holder's insert waits for it. None inserted: an
   earlier holder committed this delivery's effect: fx.done is true, and
   fx.result is the result it stored (read with a SELECT).
2. The block runs. Not done: its writes, and fx.result when assigned (an
   UPDATE of the fence row, encoded by the guards' result rule), commit at
   the end of the block. Done: the transaction rolls back at the end of the
   block, so a block that forgot to check fx.done writes nothing either, and
   the guard settles with the stored result, telling claimd it recovered it
   (effect_recovered).
3. An exception in the block rolls back and propagates: no writes, no fence.

Connections: sqlite3.Connection and psycopg 3's Connection (PostgreSQL); in
claimd.aio also psycopg.AsyncConnection (a sqlite3 or psycopg.Connection
works there too, synchronously). The connection must not be inside a
transaction when the effect opens (the effect commits, and must not commit
someone else's work), and the block must not commit or roll back itself.
claimd_effects is created on first use (CREATE TABLE IF NOT EXISTS,
EFFECTS_SCHEMA): on PostgreSQL once per connection, before its first effect;
on SQLite when an effect's insert finds no table (then it rolls back, creates
it and begins again), so neither pays for the DDL on every event. Teams that migrate with their own tools print the
same DDL with `claimd effects-schema --dialect postgres|sqlite|mysql`.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from types import MappingProxyType, TracebackType
from typing import Any, Protocol

from claimd._core import GuardCore, encode

log = logging.getLogger("claimd")

EFFECTS_SCHEMA: Mapping[str, str] = MappingProxyType(
    {
        "postgres": "CREATE TABLE IF NOT EXISTS claimd_effects (\n"
        "    namespace     text        NOT NULL,\n"
        "    provider      text        NOT NULL,\n"
        "    key           text        NOT NULL,\n"
        "    fencing_token bigint      NOT NULL,\n"
        "    result        bytea,\n"
        "    created_at    timestamptz NOT NULL DEFAULT now(),\n"
        "    PRIMARY KEY (namespace, provider, key)\n"
        ")",
        "sqlite": "CREATE TABLE IF NOT EXISTS claimd_effects (\n"
        "    namespace     TEXT    NOT NULL,\n"
        "    provider      TEXT    NOT NULL,\n"
        "    key           TEXT    NOT NULL,\n"
        "    fencing_token INTEGER NOT NULL,\n"
        "    result        BLOB,\n"
        "    created_at    TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n"
        "    PRIMARY KEY (namespace, provider, key)\n"
        ")",
        "mysql": "CREATE TABLE IF NOT EXISTS claimd_effects (\n"
        "    namespace     VARCHAR(63)     NOT NULL,\n"
        "    provider      VARCHAR(63)     NOT NULL,\n"
        "    `key`         VARCHAR(255)    NOT NULL,\n"
        "    fencing_token BIGINT UNSIGNED NOT NULL,\n"
        "    result        MEDIUMBLOB,\n"
        "    created_at    TIMESTAMP(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),\n"
        "    PRIMARY KEY (namespace, provider, `key`)\n"
        ") CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    }
)
"""EFFECTS_SCHEMA is the DDL of claimd_effects per dialect ("postgres",
"sqlite", "mysql"), byte for byte the contract's (clients/guardspec/
scenarios.json, effects.schema): what an effect executes on first use. MySQL's
is printed for migration tools; no guard speaks MySQL yet."""


def effect_key(namespace: str, provider: str, key: str, step: str) -> str:
    """effect_key is a stable idempotency key for step of a delivery, for a
    downstream API (Stripe's or Adyen's Idempotency-Key): "claimd-" and the
    first 32 hex digits of the SHA-256 of namespace, provider, key and step
    joined by NUL bytes (UTF-8). The same across takeovers, replicas and
    claimd's clients in every language; different per step."""
    joined = "\x00".join((namespace, provider, key, step)).encode("utf-8")
    return "claimd-" + hashlib.sha256(joined).hexdigest()[:32]


class Fenced(Protocol):
    """Fenced is what an effect needs of a claim (claimd.Claim has it)."""

    @property
    def namespace(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def fencing_token(self) -> int: ...


class _Dialect:
    """_Dialect is a database's DDL and the fence's statements, in the order
    of the contract and spelled as the Go guard spells them."""

    def __init__(self, name: str, p: str, begin: str) -> None:
        self.name = name
        self.schema = EFFECTS_SCHEMA[name]
        self.begin = begin
        self.insert = (
            f"INSERT INTO claimd_effects (namespace, provider, key, fencing_token) VALUES ({p}, {p}, {p}, {p}) "
            "ON CONFLICT (namespace, provider, key) DO NOTHING"
        )
        self.select_done = (
            f"SELECT fencing_token, result FROM claimd_effects WHERE namespace = {p} AND provider = {p} AND key = {p}"
        )
        self.set_result = (
            f"UPDATE claimd_effects SET result = {p} WHERE namespace = {p} AND provider = {p} AND key = {p}"
        )
        self.prune = f"DELETE FROM claimd_effects WHERE created_at < {p}"


_SQLITE = _Dialect("sqlite", "?", "BEGIN IMMEDIATE")  # writers queue at BEGIN, not fail at COMMIT
_POSTGRES = _Dialect("postgres", "%s", "BEGIN")


def _dialect(conn: object) -> _Dialect:
    if isinstance(conn, sqlite3.Connection):
        if getattr(conn, "autocommit", None) is False:  # Python 3.12's PEP 249 mode: always in a transaction
            raise ValueError("claimd effect: a sqlite3 connection with autocommit=False cannot BEGIN IMMEDIATE")
        return _SQLITE
    if type(conn).__module__.split(".")[0] == "psycopg":
        return _POSTGRES
    raise TypeError(
        f"claimd effect: {type(conn).__module__}.{type(conn).__qualname__} is not a sqlite3 or psycopg 3 connection"
    )


def _in_transaction(conn: Any, d: _Dialect) -> bool:
    if d is _SQLITE:
        return bool(conn.in_transaction)
    return bool(conn.info.transaction_status != 0)  # psycopg.pq.TransactionStatus.IDLE


# PostgreSQL connections whose claimd_effects exists, held weakly. SQLite
# needs no memo (sqlite3's connections cannot be held weakly, and an id()
# may be reused by a connection to another database): an effect there just
# begins, and only an insert that finds no table creates it (_missing_table)
# and begins again, so a database pays for the DDL once, not every event.
_created: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()


def _missing_table(err: BaseException) -> bool:
    return isinstance(err, sqlite3.OperationalError) and "no such table: claimd_effects" in str(err)


class Fx:
    """Fx is a delivery's effect, as its with-block sees it.

    done is true when an earlier holder of the claim already committed this
    delivery's effect: the block's writes roll back, and result is the bytes
    that holder stored. Otherwise result is what the block assigned (None
    until it does); assigning it stores it, encoded by the guards' result rule
    (bytes as they are, str as UTF-8, None as empty, anything else as compact
    JSON), in the fence row with the block's writes. token is the fencing
    token of the holder whose fence stands."""

    def __init__(self, token: int, done: bool = False, stored: bytes | None = None) -> None:
        self.token = token
        self.done = done
        self._value: object = (stored or b"") if done else None
        self._encoded: bytes | None = stored

    @property
    def result(self) -> Any:
        """result is the stored result when done, else what the block assigned."""
        return self._value

    @result.setter
    def result(self, value: object) -> None:
        if self.done:
            # The stored result stands: it is what the guard settles with.
            log.debug("claimd: effect is done; the assigned result is ignored")
            return
        self._encoded = encode(value)  # raises in the block for a value the rule refuses
        self._value = value

    @property
    def stored(self) -> bytes:
        """stored is the encoded result in the fence row (empty when none)."""
        return self._encoded or b""

    def __repr__(self) -> str:
        return f"Fx(done={self.done}, token={self.token}, stored={self.stored[:40]!r})"


class Fence:
    """Fence is the effect's transaction on a connection with the standard
    DB-API calls (conn.execute, conn.commit, conn.rollback); its async twin
    awaits the same calls in the same order."""

    def __init__(self, conn: Any, claim: Fenced, record: Callable[[Fx], None] | None = None) -> None:
        self.conn = conn
        self.claim = claim
        self.d = _dialect(conn)
        self.record = record
        self.fx: Fx | None = None
        if _in_transaction(conn, self.d):
            raise RuntimeError("claimd effect: the connection is inside a transaction; commit or roll back first")

    @property
    def _who(self) -> tuple[str, str, str]:
        return (self.claim.namespace, self.claim.provider, self.claim.key)

    def _found(self, row: Any) -> Fx:
        token, stored = int(row[0]), (bytes(row[1]) if row[1] is not None else None)
        c = self.claim
        log.warning(
            "claimd: effect of %s/%s/%s already committed by token %d; token %d skips its writes",
            *self._who,
            token,
            c.fencing_token,
        )
        return Fx(token, done=True, stored=stored)

    # --- sync -----------------------------------------------------------------

    def _ensure_schema(self, missing: bool = False) -> None:
        if not missing and (self.d is _SQLITE or self._known()):
            return
        try:
            self._ddl()
        except Exception:
            # Two PostgreSQL sessions that CREATE TABLE IF NOT EXISTS at once:
            # the loser fails on the catalog's unique index. The table exists
            # now; the second try says so.
            self._ddl()
        if self.d is _POSTGRES:
            with _lock:
                _created.add(self.conn)

    def _known(self) -> bool:
        with _lock:
            return self.conn in _created

    def _ddl(self) -> None:
        try:
            self.conn.execute(self.d.schema)
            self.conn.commit()  # PostgreSQL outside autocommit opened a transaction for it
        except BaseException:
            self.conn.rollback()
            raise

    def _begin(self) -> Fx:
        conn, d = self.conn, self.d
        if d is _SQLITE or conn.autocommit:
            conn.execute(d.begin)  # psycopg outside autocommit begins by itself
        cur = conn.execute(d.insert, (*self._who, self.claim.fencing_token))
        if cur.rowcount == 1:
            return Fx(self.claim.fencing_token)
        # A fence is committed: the insert waited for its holder's transaction
        # (PostgreSQL) or for the write lock (SQLite), so the row read now is
        # committed.
        return self._found(conn.execute(d.select_done, self._who).fetchone())

    def __enter__(self) -> Fx:
        self._ensure_schema()
        try:
            self.fx = self._begin()
        except BaseException as err:
            self.conn.rollback()
            if not _missing_table(err):
                raise
            self._ensure_schema(missing=True)
            try:
                self.fx = self._begin()
            except BaseException:
                self.conn.rollback()
                raise
        return self.fx

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        fx = self.fx
        assert fx is not None
        if exc is not None or fx.done:
            self.conn.rollback()
        else:
            try:
                if fx._encoded is not None:
                    self.conn.execute(self.d.set_result, (fx._encoded, *self._who))
                self.conn.commit()
            except BaseException:
                # May have committed after all: then the next holder finds the fence.
                self._rollback_quietly()
                raise
        if exc is None and self.record is not None:
            self.record(fx)

    def _rollback_quietly(self) -> None:
        try:
            self.conn.rollback()
        except Exception as err:
            log.warning("claimd: effect rollback after a failed commit: %s", err)

    # --- async ----------------------------------------------------------------

    def _awaits(self) -> bool:
        return type(self.conn).__name__.startswith("Async")  # psycopg.AsyncConnection

    async def _ensure_schema_async(self) -> None:
        if self._known():
            return
        try:
            await self._ddl_async()
        except Exception:
            await self._ddl_async()  # the concurrent CREATE race, as in _ensure_schema
        with _lock:
            _created.add(self.conn)

    async def _ddl_async(self) -> None:
        try:
            await self.conn.execute(self.d.schema)
            await self.conn.commit()
        except BaseException:
            await self.conn.rollback()
            raise

    async def _begin_async(self) -> Fx:
        conn, d = self.conn, self.d
        if conn.autocommit:
            await conn.execute(d.begin)
        cur = await conn.execute(d.insert, (*self._who, self.claim.fencing_token))
        if cur.rowcount == 1:
            return Fx(self.claim.fencing_token)
        cur = await conn.execute(d.select_done, self._who)
        return self._found(await cur.fetchone())

    async def __aenter__(self) -> Fx:
        if not self._awaits():
            return self.__enter__()
        await self._ensure_schema_async()
        try:
            self.fx = await self._begin_async()
        except BaseException:
            await self.conn.rollback()
            raise
        return self.fx

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self._awaits():
            self.__exit__(exc_type, exc, tb)
            return
        fx = self.fx
        assert fx is not None
        if exc is not None or fx.done:
            await self.conn.rollback()
        else:
            try:
                if fx._encoded is not None:
                    await self.conn.execute(self.d.set_result, (fx._encoded, *self._who))
                await self.conn.commit()
            except BaseException:
                try:
                    await self.conn.rollback()
                except Exception as err:
                    log.warning("claimd: effect rollback after a failed commit: %s", err)
                raise
        if exc is None and self.record is not None:
            self.record(fx)


# The guards whose delivery opened its effect: at most one each.
_opened: weakref.WeakSet[GuardCore] = weakref.WeakSet()


def open_effect(core: GuardCore, conn: Any) -> Fence:
    """open_effect is Guard.effect (sync and asyncio): the effect of the
    guard's claim on conn, recorded in the guard (GuardCore.effect) once it
    committed or found its fence done, so that the settle stores the fence's
    result and says it was recovered (GUARD.md row 23). Only while the guard
    owns the claim and has not begun to settle; at most one per delivery
    (RuntimeError otherwise); StaleToken when another holder already took
    the key over."""
    if not core.acquired or core.done:
        raise RuntimeError("claimd effect: only while the guard owns the claim, before settle() or fail()")
    core.check()
    with _lock:
        if core in _opened:
            raise RuntimeError("claimd effect: a second effect in one delivery")
        _opened.add(core)

    def record(fx: Fx) -> None:
        core.effect = fx

    return Fence(conn, core.claimed(), record)


class GuardEffects:
    """GuardEffects gives both guards (claimd.Guard, claimd.aio.Guard) their
    effect and effect_key, on the GuardCore they are built on."""

    _core: GuardCore

    def effect(self, conn: Any) -> Fence:
        """effect opens this delivery's effect fence on conn (a sqlite3 or
        psycopg connection): `with g.effect(conn) as fx:` (`async with` in
        claimd.aio). See the module doc and open_effect."""
        return open_effect(self._core, conn)

    def effect_key(self, step: str) -> str:
        """effect_key is a stable idempotency key for step of this delivery
        (effect_key of its claim), for a downstream API's Idempotency-Key."""
        c = self._core.claimed()
        return effect_key(c.namespace, c.provider, c.key, step)


def fence(conn: Any, claim: Fenced, record: Callable[[Fx], None] | None = None) -> Fence:
    """fence is the effect of claim on conn, for `with` (a sqlite3 or
    psycopg.Connection) or `async with` (also a psycopg.AsyncConnection).
    record is called with the Fx once its transaction committed, or rolled
    back because the fence was done; not when the block raised. Guards call
    it (Guard.effect); use it directly only to fence work outside a guard."""
    return Fence(conn, claim, record)


def prune_effects(conn: Any, before: datetime) -> int:
    """prune_effects deletes the fence rows created before before (an aware
    datetime from your own clock) and returns how many it deleted, in a
    transaction of its own on conn (a sqlite3 or psycopg.Connection, not
    inside a transaction). A fence matters while claimd may still hand its
    delivery to a new holder, within the provider's window (its ttl): pass a
    cutoff older than the longest ttl in use, with a margin. It creates
    claimd_effects when missing, as an effect does."""
    if before.tzinfo is None:
        raise ValueError("prune_effects: before must be an aware datetime (a naive one is ambiguous)")
    f = Fence(conn, _NO_CLAIM)
    d = f.d
    f._ensure_schema(missing=d is _SQLITE)
    cutoff: object = before
    if d is _SQLITE:
        # The DDL's strftime('%Y-%m-%dT%H:%M:%fZ'): text that sorts as the time does.
        u = before.astimezone(timezone.utc)
        cutoff = u.strftime("%Y-%m-%dT%H:%M:%S.") + f"{u.microsecond // 1000:03d}Z"
    try:
        if d is _SQLITE or conn.autocommit:
            conn.execute(d.begin)
        n = int(conn.execute(d.prune, (cutoff,)).rowcount)
        conn.commit()
    except BaseException:
        f._rollback_quietly()
        raise
    return n


class _NoClaim:
    namespace = provider = key = ""
    fencing_token = 0


_NO_CLAIM = _NoClaim()

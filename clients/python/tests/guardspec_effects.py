"""The effect parts of the guardspec runners (test_guardspec.py, test_aio.py):
reading a scenario's effect fields strictly, the arrange op "fence", the
handler's "effect", and the check of expect "effect", on the runner's
database (effectdb.py: a SQLite file, or PostgreSQL). The format is in
clients/guardspec/README.md."""

from __future__ import annotations

import base64
from collections.abc import Callable
from contextlib import closing
from typing import Any

from effectdb import EffectDB

LEDGER_INSERT = "INSERT INTO guardspec_ledger (namespace, key, writer) VALUES (?, ?, ?)"

Fields = Callable[..., dict[str, Any]]


def check_value(v: Any, where: str, fields: Fields, text: Callable[[Any, str], str]) -> None:
    """check_value reads a Value ({"text"}, {"b64"}, {"json"}, {"none"}) strictly."""
    v = fields(v, where, set(), {"text", "b64", "json", "none"})
    if len(v) != 1:
        raise ValueError(f"{where}: want exactly one of text, b64, json, none")
    if "text" in v:
        text(v["text"], where + ".text")


def value(v: dict[str, Any], text: Callable[[Any, str], str]) -> object:
    """value is what a Value stands for, as a Python handler returns it."""
    if "text" in v:
        return text(v["text"], "text")
    if "b64" in v:
        return base64.b64decode(v["b64"])
    if "json" in v:
        return v["json"]
    return None


def check_handler_effect(e: Any, where: str, fields: Fields, text: Callable[[Any, str], str]) -> None:
    """check_handler_effect reads a handler's "effect" field strictly."""
    e = fields(e, where, set(), {"result", "raises"})
    if "result" in e:
        check_value(e["result"], where + ".result", fields, text)
    if "raises" in e:
        text(fields(e["raises"], where + ".raises", {"message"})["message"], where + ".raises.message")


def check_expect_effect(e: Any, where: str, fields: Fields, body: Callable[[Any, str], bytes]) -> None:
    """check_expect_effect reads an expect's "effect" field strictly."""
    e = fields(e, where, set(), {"done", "ledger_rows", "fence"})
    if e.get("fence") is not None:
        f = fields(e["fence"], where + ".fence", {"fencing_token"}, {"result"})
        if "result" in f:
            body(f["result"], where + ".fence.result")


def arrange_fence(db: EffectDB, schema: str, ns: str, key: str, token: int, result: bytes) -> None:
    """arrange_fence commits another holder's effect without the guard: one
    ledger row and its fence row, in one transaction. The table comes from
    the contract's DDL, as a team that migrates with its own tools has it."""
    db.exec(
        (schema, ()),
        (LEDGER_INSERT, (ns, key, "guardspec-other")),
        (
            "INSERT INTO claimd_effects (namespace, provider, key, fencing_token, result) VALUES (?, ?, ?, ?, ?)",
            (ns, "stripe", key, token, result),
        ),
    )


def effect_handler(
    db: EffectDB, g: Any, e: dict[str, Any], text: Callable[[Any, str], str], seen: list[bool]
) -> object:
    """effect_handler is the scenario handler's "effect" for the sync guard:
    it opens g.effect on a connection of its own and, unless done, writes one
    ledger row, assigns the result and raises as e says; it returns the
    effect's result. seen gets fx.done."""
    with closing(db.connect()) as conn:
        with g.effect(conn) as fx:
            seen.append(fx.done)
            if not fx.done:
                conn.execute(LEDGER_INSERT.replace("?", db.p), (g.claim.namespace, g.claim.key, "guard"))
                if "result" in e:
                    fx.result = value(e["result"], text)
                if "raises" in e:
                    raise ConnectionError(text(e["raises"]["message"], "message"))
    return fx.result


async def effect_handler_async(
    db: EffectDB, g: Any, e: dict[str, Any], text: Callable[[Any, str], str], seen: list[bool]
) -> object:
    """effect_handler_async is effect_handler for claimd.aio: `async with`,
    on a psycopg.AsyncConnection (PostgreSQL) or a sqlite3 connection used
    synchronously."""
    conn = await db.aconnect()
    sync = db.dialect == "sqlite"
    try:
        async with g.effect(conn) as fx:
            seen.append(fx.done)
            if not fx.done:
                args = (g.claim.namespace, g.claim.key, "guard")
                sql = LEDGER_INSERT.replace("?", db.p)
                if sync:
                    conn.execute(sql, args)
                else:
                    await conn.execute(sql, args)
                if "result" in e:
                    fx.result = value(e["result"], text)
                if "raises" in e:
                    raise ConnectionError(text(e["raises"]["message"], "message"))
    finally:
        if sync:
            conn.close()
        else:
            await conn.close()
    return fx.result


def check_effect(
    db: EffectDB, what: str, ns: str, key: str, seen: list[bool], e: dict[str, Any], body: Callable[[Any, str], bytes]
) -> None:
    """check_effect compares a delivery's effect with expect.effect: whether
    the handler's effect was done, the ledger rows of the key, the fence row."""
    if "done" in e:
        assert seen == [e["done"]], f"{what}: the handler's effect done = {seen}, want [{e['done']}]"
    if "ledger_rows" in e:
        rows = db.query("SELECT count(*) FROM guardspec_ledger WHERE namespace = ? AND key = ?", ns, key)
        assert rows[0][0] == e["ledger_rows"], f"{what}: ledger rows {rows[0][0]}, want {e['ledger_rows']}"
    if "fence" in e:
        found = (
            db.query(
                "SELECT fencing_token, result FROM claimd_effects WHERE namespace = ? AND provider = ? AND key = ?",
                ns,
                "stripe",
                key,
            )
            if db.has_effects_table()
            else []
        )
        if e["fence"] is None:
            assert found == [], f"{what}: fence row {found}, want none"
            return
        assert len(found) == 1, f"{what}: fence rows {found}, want one"
        token, stored = int(found[0][0]), bytes(found[0][1] or b"")
        assert token == e["fence"]["fencing_token"], f"{what}: fence token {token}, want {e['fence']['fencing_token']}"
        if "result" in e["fence"]:
            want = body(e["fence"]["result"], "result")
            assert stored == want, f"{what}: fence result {stored!r}, want {want!r}"

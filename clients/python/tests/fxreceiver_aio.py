"""fxreceiver_aio: fxreceiver.py for claimd.aio, the same protocol
(clients/guardspec/README.md, "Effect processes") with one task per delivery
on one event loop, and `async with g.effect(conn) as fx:` on a
psycopg.AsyncConnection (PostgreSQL) or a sqlite3 connection used
synchronously (SQLite).

    python fxreceiver_aio.py --claimd ADDR --namespace NS --db sqlite:PATH|postgres://URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sqlite3
import sys
from typing import Any

from claimd.aio import Client

log = logging.getLogger("fxreceiver_aio")


class Receiver:
    """Receiver is one process's deliveries: their gates and its output."""

    def __init__(self, client: Client, namespace: str, db: str) -> None:
        self.client = client
        self.namespace = namespace
        self.db = db
        self._gates: dict[str, asyncio.Event] = {}

    async def connect(self) -> Any:
        if self.db.startswith("sqlite:"):
            return sqlite3.connect(self.db.removeprefix("sqlite:"), timeout=30)
        import psycopg

        return await psycopg.AsyncConnection.connect(self.db)

    def write(self, obj: dict[str, Any]) -> None:
        # One thread writes: lines never interleave.
        sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def gate_for(self, event: str) -> asyncio.Event:
        return self._gates.setdefault(event, asyncio.Event())

    async def deliver(self, msg: dict[str, Any]) -> None:
        event = str(msg["deliver"])
        gate = msg.get("gate")
        go = self.gate_for(event)

        async def at(point: str) -> None:
            if gate == point:
                self.write({"event": event, "at": point})
                await go.wait()

        done = False
        lease, wait = msg["lease_ms"] / 1000, msg.get("wait_ms", 0) / 1000
        async with self.client.guard(self.namespace, "stripe", event_id=event, lease=lease, wait=wait) as g:
            if g.acquired:
                await at("before_effect")
                conn = await self.connect()
                sync = isinstance(conn, sqlite3.Connection)
                try:
                    async with g.effect(conn) as fx:
                        done = fx.done
                        if not fx.done:
                            sql = "INSERT INTO guardspec_ledger (namespace, key, writer) VALUES ({0}, {0}, {0})"
                            args = (self.namespace, event, str(os.getpid()))
                            if sync:
                                conn.execute(sql.format("?"), args)
                            else:
                                await conn.execute(sql.format("%s"), args)
                            fx.result = {"event": event}
                        await at("in_effect")
                        if msg.get("raise"):
                            raise ConnectionError(f"{event}: raised inside the effect, as asked")
                finally:
                    if sync:
                        conn.close()
                    else:
                        await conn.close()
                await at("after_commit")
                await g.settle(fx.result)
        r = g.result
        self.write({"event": event, "status": r.status, "body": r.body.decode("utf-8", "replace"), "done": done})

    async def run(self) -> None:
        tasks: set[asyncio.Task[None]] = set()
        self.write({"ready": True})
        while line := await asyncio.to_thread(sys.stdin.readline):
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                log.error("not a JSON line: %r", line[:200])
                continue
            if "deliver" in msg:
                self.gate_for(str(msg["deliver"]))
                task = asyncio.create_task(self.deliver(msg), name=f"deliver-{msg['deliver']}")
                tasks.add(task)
            elif "go" in msg:
                self.gate_for(str(msg["go"])).set()
            else:
                log.error("unknown message: %r", msg)
        for task in tasks:
            try:
                await task
            except Exception:
                log.exception("delivery %s", task.get_name())


async def amain(args: argparse.Namespace) -> None:
    async with Client(args.claimd) as client:
        await Receiver(client, args.namespace, args.db).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claimd", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--db", required=True, help="sqlite:PATH or postgres://URL")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"fxreceiver_aio[{os.getpid()}] %(levelname)s %(message)s"
    )
    asyncio.run(amain(args))


if __name__ == "__main__":
    main()

"""fxreceiver: the Python receiver that internal/testenv/cmd/effectspec drives
through a crash after the commit and a zombie paused past its lease
(clients/guardspec/README.md, "Effect processes", states the protocol).

    python fxreceiver.py --claimd ADDR --namespace NS --db sqlite:PATH|postgres://URL

It guards deliveries of provider stripe by event id through the sync guard,
one thread per delivery, and writes its ledger through the effect fence:
unless done, one guardspec_ledger row with its PID as writer, and
fx.result = {"event": "<id>"}. Standard input: {"deliver": ...} and
{"go": ...} lines; standard output: {"ready": true} first, then gate and
answer lines, one write each; logs go to standard error. It exits when its
standard input closes, after answering the deliveries under way.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import sys
import threading
from contextlib import closing
from typing import Any

from claimd import Client

log = logging.getLogger("fxreceiver")

GATES = ("before_effect", "in_effect", "after_commit")


class Receiver:
    """Receiver is one process's deliveries: their gates and its output."""

    def __init__(self, client: Client, namespace: str, db: str) -> None:
        self.client = client
        self.namespace = namespace
        self.db = db
        self._out = threading.Lock()
        self._gates: dict[str, threading.Event] = {}
        self._gates_lock = threading.Lock()

    def connect(self) -> Any:
        """connect opens a connection of this delivery's own to the ledger's database."""
        if self.db.startswith("sqlite:"):
            return sqlite3.connect(self.db.removeprefix("sqlite:"), timeout=30)
        import psycopg

        return psycopg.connect(self.db)

    def write(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._out:
            sys.stdout.write(line)
            sys.stdout.flush()

    def gate_for(self, event: str) -> threading.Event:
        with self._gates_lock:
            return self._gates.setdefault(event, threading.Event())

    def deliver(self, msg: dict[str, Any]) -> None:
        event = str(msg["deliver"])
        gate = msg.get("gate")
        go = self.gate_for(event)

        def at(point: str) -> None:
            if gate == point:
                self.write({"event": event, "at": point})
                go.wait()

        done = False
        with self.client.guard(
            self.namespace,
            "stripe",
            event_id=event,
            lease=msg["lease_ms"] / 1000,
            wait=msg.get("wait_ms", 0) / 1000,
        ) as g:
            if g.acquired:
                at("before_effect")
                with closing(self.connect()) as conn:
                    with g.effect(conn) as fx:
                        done = fx.done
                        if not fx.done:
                            conn.execute(
                                "INSERT INTO guardspec_ledger (namespace, key, writer) VALUES ({0}, {0}, {0})".format(
                                    "?" if isinstance(conn, sqlite3.Connection) else "%s"
                                ),
                                (self.namespace, event, str(os.getpid())),
                            )
                            fx.result = {"event": event}
                        at("in_effect")
                        if msg.get("raise"):
                            raise ConnectionError(f"{event}: raised inside the effect, as asked")
                at("after_commit")
                g.settle(fx.result)
        r = g.result
        self.write({"event": event, "status": r.status, "body": r.body.decode("utf-8", "replace"), "done": done})

    def run(self) -> None:
        threads: list[threading.Thread] = []
        self.write({"ready": True})
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                log.error("not a JSON line: %r", line[:200])
                continue
            if "deliver" in msg:
                self.gate_for(str(msg["deliver"]))  # a go that arrives before the gate still opens it
                t = threading.Thread(target=self._deliver_logged, args=(msg,), name=f"deliver-{msg['deliver']}")
                t.start()
                threads.append(t)
            elif "go" in msg:
                self.gate_for(str(msg["go"])).set()
            else:
                log.error("unknown message: %r", msg)
        for t in threads:
            t.join()

    def _deliver_logged(self, msg: dict[str, Any]) -> None:
        try:
            self.deliver(msg)
        except BaseException:
            log.exception("delivery %s", msg.get("deliver"))
            raise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claimd", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--db", required=True, help="sqlite:PATH or postgres://URL")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"fxreceiver[{os.getpid()}] %(levelname)s %(message)s"
    )
    with Client(args.claimd) as client:
        Receiver(client, args.namespace, args.db).run()


if __name__ == "__main__":
    main()

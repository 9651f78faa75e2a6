"""A Stripe webhook receiver that writes one ledger row per event, however
often Stripe delivers it: the standard library's HTTP server, a SQLite
ledger, and claimd's guard in between.

    python receiver.py --claimd 127.0.0.1:50051 --listen 127.0.0.1:8000 --db ledger.db

POST /webhooks/stripe with a Stripe event ({"id": "evt_...", "type": ...,
"data": {"object": {"amount": ...}}}). The raw delivery goes to claimd, which
derives the key from the body's "id" (never from Stripe-Signature, which
changes on every retry) and answers whether this delivery is the first. The
row is written through the guard's effect fence (`with g.effect(db) as fx:`):
in one transaction with a claimd_effects row for the delivery, so a receiver
killed after its commit, or paused past its lease, still writes it once.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from claimd import Client, Delivery, Guard, GuardResult, PermanentError

log = logging.getLogger("receiver")

MAX_BODY = 1 << 20  # Stripe events are far smaller; refuse anything larger


class Ledger:
    """Ledger is the side effect: an append-only table of money movements.
    Each call opens its own connection (or uses the one it is given), so
    request threads share nothing."""

    def __init__(self, path: str) -> None:
        self.path = path
        with closing(self.connect()) as db, db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS ledger ("
                " id INTEGER PRIMARY KEY,"
                " event_id TEXT NOT NULL,"
                " type TEXT NOT NULL,"
                " object_id TEXT NOT NULL DEFAULT '',"
                " order_id TEXT NOT NULL DEFAULT '',"
                " amount INTEGER NOT NULL,"
                " created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            )

    def connect(self) -> sqlite3.Connection:
        """connect opens a connection of the caller's own (close it)."""
        return sqlite3.connect(self.path, timeout=10)

    @staticmethod
    def append(
        db: sqlite3.Connection, event_id: str, event_type: str, amount: int, object_id: str = "", order_id: str = ""
    ) -> int:
        """append writes one row through db (inside the caller's transaction:
        the effect's) and returns its id. amount is what the event books:
        + money in, - money out, 0 a status."""
        cur = db.execute(
            "INSERT INTO ledger (event_id, type, object_id, order_id, amount) VALUES (?, ?, ?, ?, ?)",
            (event_id, event_type, object_id, order_id, amount),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    @staticmethod
    def refunded(db: sqlite3.Connection, charge: str) -> int:
        """refunded is how much the refunds of charge booked out so far, read through db."""
        q = "SELECT COALESCE(-SUM(amount), 0) FROM ledger WHERE object_id = ? AND type = 'charge.refunded'"
        return int(db.execute(q, (charge,)).fetchone()[0])

    def balance(self, order_id: str) -> int:
        """balance is the sum booked for an order."""
        with closing(self.connect()) as db:
            q = "SELECT COALESCE(SUM(amount), 0) FROM ledger WHERE order_id = ?"
            return int(db.execute(q, (order_id,)).fetchone()[0])

    def bookings(self) -> list[tuple[str, str, str, int]]:
        """bookings are every row's event id, type, object and amount, oldest first."""
        with closing(self.connect()) as db:
            q = "SELECT event_id, type, object_id, amount FROM ledger ORDER BY id"
            return [(str(a), str(b), str(c), int(d)) for a, b, c, d in db.execute(q)]

    def rows(self, event_id: str) -> int:
        """rows counts the rows written for event_id."""
        with closing(self.connect()) as db:
            return int(db.execute("SELECT COUNT(*) FROM ledger WHERE event_id = ?", (event_id,)).fetchone()[0])


Handler = Callable[[Guard, Ledger, dict[str, Any]], object]


def book(g: Guard, ledger: Ledger, event: dict[str, Any]) -> object:
    """book is the guarded handler: it writes the event's row through the
    effect fence and returns the answer for Stripe ({"ledger_row": N})."""
    obj = event.get("data", {}).get("object", {})
    amount = obj.get("amount")
    if not isinstance(amount, int):
        # Retrying cannot fix the event: record it FAILED, answer 200.
        raise PermanentError(f"event {event['id']} has no integer data.object.amount")
    event_type = str(event.get("type", ""))
    with closing(ledger.connect()) as db:
        # One transaction: the row and the fence commit together. A holder
        # that committed and died before settling (or a zombie that wakes
        # after a takeover) left its fence: fx.done, and fx.result is the
        # answer it stored. The with-block rolls back whatever it wrote then.
        with g.effect(db) as fx:
            if not fx.done:
                row = ledger.append(
                    db,
                    event["id"],
                    event_type,
                    booked(db, event_type, obj),
                    str(obj.get("id", "")),
                    str(obj.get("metadata", {}).get("order_id", "")),
                )
                fx.result = json.dumps({"ledger_row": row}).encode()
    return fx.result


def booked(db: sqlite3.Connection, event_type: str, obj: dict[str, Any]) -> int:
    """booked is what an event moves. A charge that succeeded brings its
    amount in; a refund takes out what was refunded since the last one
    (charge.refunded carries the running amount_refunded); anything else
    moves nothing. No ordering logic: claimd's Stripe lifecycles never run a
    refund before its charge succeeded (DEFERRED: 409 with Retry-After,
    Stripe retries), never a stale event (SUPERSEDED: 200), and one event of
    a charge at a time, so reading the refunds booked so far is safe."""
    if event_type == "charge.succeeded":
        return int(obj["amount"])
    if event_type == "charge.refunded":
        return -(int(obj.get("amount_refunded", 0)) - Ledger.refunded(db, str(obj.get("id", ""))))
    return 0


def make_server(
    address: tuple[str, int],
    client: Client,
    ledger: Ledger,
    namespace: str = "billing",
    *,
    handler: Handler = book,
    lease: float | None = None,
    wait: float | None = None,
) -> ThreadingHTTPServer:
    """make_server returns the receiver bound to address (not yet serving).
    handler, lease and wait are for tests (the provider's lease by default,
    no wait)."""

    @client.guarded(namespace, "stripe", lease=lease, wait=wait)
    def record(g: Guard, event: dict[str, Any]) -> object:
        return handler(g, ledger, event)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != "/webhooks/stripe":
                self._answer(404, b"not found")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._answer(413, b"too large")
                return
            body = self.rfile.read(length)
            try:
                event = json.loads(body)
                if not isinstance(event, dict) or not isinstance(event.get("id"), str):
                    raise ValueError("no event id")
            except ValueError:
                self._answer(400, b"not a Stripe event")
                return
            # In production, verify Stripe-Signature here, before claiming.
            result = record(Delivery(headers=dict(self.headers.items()), body=body), event)
            self._log(event["id"], result)
            self._answer(result.status, result.body, result.headers)

        def _answer(self, status: int, body: bytes, headers: Any = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json" if status == 200 else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _log(self, event_id: str, r: GuardResult) -> None:
            outcome = r.outcome.name if r.outcome is not None else "-"
            level = logging.WARNING if r.status >= 400 else logging.INFO
            log.log(level, "%s → %d %s ran=%s error=%r", event_id, r.status, outcome, r.ran, r.error)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

    return ThreadingHTTPServer(address, Handler)


# DEFAULT_LISTEN is beside `make run`, whose claimd holds 127.0.0.1:50051
# (gRPC) and 127.0.0.1:8080 (HTTP), so neither of those.
DEFAULT_LISTEN = "127.0.0.1:8000"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claimd", default="127.0.0.1:50051", help="claimd gRPC address")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help="HTTP address to listen on")
    parser.add_argument("--db", default="ledger.db", help="SQLite ledger file")
    parser.add_argument("--namespace", default="billing", help="claimd namespace of this service")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    host, _, port = args.listen.rpartition(":")
    with Client(args.claimd) as client:
        server = make_server((host, int(port)), client, Ledger(args.db), args.namespace)
        # shutdown() waits for serve_forever to return, so call it from
        # another thread than the one serving.
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
        log.info("receiving on http://%s:%d/webhooks/stripe (claimd %s)", *server.server_address[:2], args.claimd)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


if __name__ == "__main__":
    main()

"""A Stripe webhook receiver that writes one ledger row per event, however
often Stripe delivers it: the standard library's HTTP server, a SQLite
ledger, and claimd's guard in between.

    python receiver.py --claimd 127.0.0.1:50051 --listen 127.0.0.1:8080 --db ledger.db

POST /webhooks/stripe with a Stripe event ({"id": "evt_...", "type": ...,
"data": {"object": {"amount": ...}}}). The raw delivery goes to claimd, which
derives the key from the body's "id" (never from Stripe-Signature, which
changes on every retry) and answers whether this delivery is the first.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sqlite3
import threading
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from claimd import Client, Delivery, EventState, Guard, GuardResult, PermanentError, Reason

log = logging.getLogger("receiver")

MAX_BODY = 1 << 20  # Stripe events are far smaller; refuse anything larger


class Ledger:
    """Ledger is the side effect: an append-only table of money movements.
    Each call opens its own connection, so request threads share nothing."""

    def __init__(self, path: str) -> None:
        self.path = path
        with closing(self._connect()) as db, db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS ledger ("
                " id INTEGER PRIMARY KEY,"
                " event_id TEXT NOT NULL,"
                " type TEXT NOT NULL,"
                " amount INTEGER NOT NULL,"
                " created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"
            )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10)

    def append(self, event_id: str, event_type: str, amount: int) -> int:
        """append writes one row and returns its id."""
        with closing(self._connect()) as db, db:
            cur = db.execute(
                "INSERT INTO ledger (event_id, type, amount) VALUES (?, ?, ?)", (event_id, event_type, amount)
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

    def find(self, event_id: str) -> int | None:
        """find returns the id of the row written for event_id, if any."""
        with closing(self._connect()) as db:
            row = db.execute("SELECT id FROM ledger WHERE event_id = ?", (event_id,)).fetchone()
            return int(row[0]) if row else None

    def rows(self, event_id: str) -> int:
        """rows counts the rows written for event_id."""
        with closing(self._connect()) as db:
            return int(db.execute("SELECT COUNT(*) FROM ledger WHERE event_id = ?", (event_id,)).fetchone()[0])


def make_server(
    address: tuple[str, int], client: Client, ledger: Ledger, namespace: str = "billing"
) -> ThreadingHTTPServer:
    """make_server returns the receiver bound to address (not yet serving)."""

    @client.guarded(namespace, "stripe")
    def record(g: Guard, event: dict[str, Any]) -> bytes:
        # A holder that vanished after PROCESSING may have written the row
        # before it died: LEASE_EXPIRED says so, and the ledger knows.
        if g.claim.reason == Reason.LEASE_EXPIRED and g.claim.state == EventState.PROCESSING:
            if (row := ledger.find(event["id"])) is not None:
                return json.dumps({"ledger_row": row}).encode()
        amount = event.get("data", {}).get("object", {}).get("amount")
        if not isinstance(amount, int):
            # Retrying cannot fix the event: record it FAILED, answer 200.
            raise PermanentError(f"event {event['id']} has no integer data.object.amount")
        row = ledger.append(event["id"], str(event.get("type", "")), amount)
        return json.dumps({"ledger_row": row}).encode()

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--claimd", default="127.0.0.1:50051", help="claimd gRPC address")
    parser.add_argument("--listen", default="127.0.0.1:8080", help="HTTP address to listen on")
    parser.add_argument("--db", default="ledger.db", help="SQLite ledger file")
    parser.add_argument("--namespace", default="billing", help="claimd namespace of this service")
    args = parser.parse_args()
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

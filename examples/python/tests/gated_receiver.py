"""gated_receiver: the example's receiver (receiver.make_server with its own
handler, receiver.book) as a process that a test can kill or pause at a known
point, for test_exactly_once.py.

    python tests/gated_receiver.py --claimd ADDR --db LEDGER --namespace NS --gate before|after|none

It serves on a free loopback port with a 500 ms lease and a 10 s wait, and
writes JSON lines on standard output: {"url": ...} once serving, then
{"at": "before"|"after", "event": ID} when a delivery reaches its gate:
"before" the handler (book) runs, or "after" it returned (its effect
committed) and before the guard settles. There the delivery blocks until a
line arrives on standard input.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

from receiver import Ledger, book, make_server  # on PYTHONPATH: examples/python

from claimd import Client, Guard

_out = threading.Lock()


def say(obj: dict[str, Any]) -> None:
    with _out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--claimd", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--gate", choices=("before", "after", "none"), default="none")
    args = p.parse_args()

    def at(point: str, event: dict[str, Any]) -> None:
        if args.gate == point:
            say({"at": point, "event": event["id"]})
            sys.stdin.readline()

    def gated(g: Guard, ledger: Ledger, event: dict[str, Any]) -> object:
        at("before", event)
        result = book(g, ledger, event)
        at("after", event)
        return result

    with Client(args.claimd) as client:
        server = make_server(
            ("127.0.0.1", 0), client, Ledger(args.db), args.namespace, handler=gated, lease=0.5, wait=10
        )
        host, port = server.server_address[:2]
        say({"url": f"http://{host}:{port}/webhooks/stripe"})
        server.serve_forever()


if __name__ == "__main__":
    main()

"""bench_effects: what the effect fence costs per event, on one connection:
N transactions that each insert one ledger row, plain (BEGIN, INSERT, COMMIT)
and fenced (claimd.effects.fence: BEGIN, the fence INSERT, the ledger INSERT,
the result UPDATE, COMMIT), alternating in rounds so that drift hits both.

    python tests/bench_effects.py [-n 2000] [--sqlite PATH] [--postgres URL]

Prints, per database, the median per-transaction time of each and their ratio.
Not a test (pytest does not collect it); no claimd is involved, only the
database's side of the fence.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claimd.effects import fence

LEDGER = "CREATE TABLE IF NOT EXISTS bench_ledger (namespace TEXT NOT NULL, key TEXT NOT NULL, writer TEXT NOT NULL)"


@dataclass(frozen=True)
class Key:
    namespace: str
    provider: str
    key: str
    fencing_token: int


def run(conn: Any, p: str, begin: str | None, n: int, rounds: int) -> tuple[float, float]:
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    insert = f"INSERT INTO bench_ledger (namespace, key, writer) VALUES ({p}, {p}, {p})"
    plain: list[float] = []
    fenced: list[float] = []
    per = n // rounds
    for r in range(rounds):
        t0 = time.perf_counter()
        for i in range(per):
            if begin:
                conn.execute(begin)
            conn.execute(insert, (ns, f"plain-{r}-{i}", "bench"))
            conn.commit()
        plain.append((time.perf_counter() - t0) / per)
        t0 = time.perf_counter()
        for i in range(per):
            with fence(conn, Key(ns, "stripe", f"evt-{r}-{i}", 1)) as fx:
                conn.execute(insert, (ns, f"evt-{r}-{i}", "bench"))
                fx.result = b'{"ok":true}'
        fenced.append((time.perf_counter() - t0) / per)
    return statistics.median(plain), statistics.median(fenced)


def report(name: str, plain: float, fenced: float) -> None:
    us = f"plain {plain * 1e6:.0f} µs, fenced {fenced * 1e6:.0f} µs per transaction"
    print(f"{name}: {us}, ratio {fenced / plain:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000, help="transactions of each kind")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--sqlite", help="SQLite file (default: a temp file)")
    ap.add_argument("--postgres", help="PostgreSQL URL (skipped without)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.sqlite or str(Path(tmp) / "bench.db")
        for mode in ("DELETE", "WAL"):
            with closing(sqlite3.connect(path, isolation_level=None)) as conn:
                conn.execute(f"PRAGMA journal_mode={mode}")
                conn.execute(LEDGER)
                report(f"sqlite journal_mode={mode}", *run(conn, "?", "BEGIN IMMEDIATE", args.n, args.rounds))
    if args.postgres:
        import psycopg

        with psycopg.connect(args.postgres) as conn:
            conn.execute(LEDGER)
            conn.commit()
            report("postgres", *run(conn, "%s", None, args.n, args.rounds))


if __name__ == "__main__":
    main()

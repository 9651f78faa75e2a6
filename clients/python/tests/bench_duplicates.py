"""bench_duplicates: what a duplicate delivery costs the receiver's process,
with and without the client's duplicate cache (Client(local_cache=N)), and
what a first delivery costs, sync and asyncio, against a real claimd.

    python tests/bench_duplicates.py [-n 2000] [--claimd-bin PATH] [--sqlite-durability relaxed]

Starts claimd (embedded tiers, free loopback ports; $CLAIMD_BIN or a build
of this checkout), then, for each client and transport (gRPC, Connect), guards n first deliveries (Claim
with start, Settle) and n duplicates of one settled delivery through
Client.guarded, timed with time.process_time (this process's CPU, all
threads: the client's share, not claimd's) and time.perf_counter (wall).
Prints µs per delivery. Not a test (pytest does not collect it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchserver import detached_claimd

import claimd.aio
from claimd import Client
from claimd.testing import build_claimd

REPO = Path(__file__).resolve().parents[3]


def timed(n: int, step: Callable[[int], Any]) -> tuple[float, float]:
    """timed runs step(0..n-1) and is its CPU and wall µs per call."""
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        step(i)
    return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


async def timed_async(n: int, step: Callable[[int], Any]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        await step(i)
    return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


def sync_case(address: str, n: int, cache: int | None) -> tuple[tuple[float, float], tuple[float, float]]:
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    with Client(address, local_cache=cache) as client:

        @client.guarded(ns, "stripe")
        def handle(g: Any) -> dict[str, str]:
            return {"charge": "ch_1"}

        ids = [f"evt_{uuid.uuid4().hex}" for _ in range(n)]
        handle(f"evt_{uuid.uuid4().hex}")  # connect
        first = timed(n, lambda i: handle(ids[i]))
        dup = ids[0]
        assert handle(dup).status == 200
        duplicate = timed(n, lambda i: handle(dup))
    return first, duplicate


async def async_case(address: str, n: int, cache: int | None) -> tuple[tuple[float, float], tuple[float, float]]:
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    async with claimd.aio.Client(address, local_cache=cache) as client:

        @client.guarded(ns, "stripe")
        async def handle(g: Any) -> dict[str, str]:
            return {"charge": "ch_1"}

        ids = [f"evt_{uuid.uuid4().hex}" for _ in range(n)]
        await handle(f"evt_{uuid.uuid4().hex}")
        first = await timed_async(n, lambda i: handle(ids[i]))
        dup = ids[0]
        assert (await handle(dup)).status == 200
        duplicate = await timed_async(n, lambda i: handle(dup))
    return first, duplicate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=2000, help="deliveries per measurement")
    ap.add_argument("--claimd-bin", default=os.environ.get("CLAIMD_BIN", ""))
    ap.add_argument("--sqlite-durability", default="full", help="claimd's --sqlite-durability (full, relaxed)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        binary = Path(args.claimd_bin) if args.claimd_bin else build_claimd(REPO, Path(tmp) / "bin")
        extra = ("--sqlite-durability", args.sqlite_durability)
        server = stack.enter_context(detached_claimd(binary, Path(tmp) / "data", extra))
        print(f"n={args.n}; µs per delivery, client process CPU (time.process_time) / wall")
        for label, cache in (("no cache", None), ("local_cache=1024", 1024)):
            for target in (server.grpc_address, f"http://{server.http_address}"):
                kind = "connect" if target.startswith("http") else "grpc"
                (fc, fw), (dc, dw) = sync_case(target, args.n, cache)
                print(f"sync {kind:7} {label:17} first {fc:7.1f} / {fw:7.1f}   duplicate {dc:7.1f} / {dw:7.1f}")
                (fc, fw), (dc, dw) = asyncio.run(async_case(target, args.n, cache))
                print(f"aio  {kind:7} {label:17} first {fc:7.1f} / {fw:7.1f}   duplicate {dc:7.1f} / {dw:7.1f}")


if __name__ == "__main__":
    main()

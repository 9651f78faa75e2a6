"""bench_powertools: the client CPU of one idempotent function call, first
and duplicate, under Powertools' @idempotent_function on Redis (its
RedisCachePersistenceLayer) and on claimd (ClaimdPersistenceLayer), beside
claimd's own decorator (claimd.idempotent, sync and claimd.aio's) over each
transport (gRPC and Connect), on the same machine and run.

    python tests/bench_powertools.py [-n 1000] [--claimd-bin PATH] [--redis-server PATH]
                                     [--sqlite-durability relaxed]

Starts redis-server (no persistence, a free loopback port, a temp dir) and
claimd (embedded tiers), both stopped by PID at the end. Needs the redis
package besides the test extra (pip install redis). Times with
time.process_time (this process's CPU: the client's share) and
time.perf_counter; prints µs per call. Not a test.

Redis runs without persistence; claimd fsyncs every commit by default, so
its first deliveries wait several times longer than Powertools' on Redis,
and on a busy machine a process that waits longer pays more CPU for the
same work when it resumes (cold caches). --redis-fsync (appendfsync
always) makes Redis as durable as claimd's default, and --sqlite-durability
relaxed (synchronous=NORMAL) makes claimd nearly as lax as Redis' default.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer
from benchserver import detached_claimd

import claimd.aio
from claimd import Client
from claimd.powertools import ClaimdPersistenceLayer
from claimd.testing import build_claimd

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_redis(binary: str, tmp: Path, fsync: bool) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if fsync else ["--appendonly", "no"]
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", *persistence, "--dir", str(tmp)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    r = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            r.ping()
            return proc, port
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)


def timed(n: int, step: Callable[[int], Any]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        step(i)
    return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


def measure(name: str, fn: Callable[[str], Any], n: int) -> None:
    ids = [uuid.uuid4().hex for _ in range(n)]
    fn(uuid.uuid4().hex)  # connect
    fc, fw = timed(n, lambda i: fn(ids[i]))
    dc, dw = timed(n, lambda i: fn(ids[0]))
    print(f"{name:44} first {fc:7.1f} / {fw:7.1f}   duplicate {dc:7.1f} / {dw:7.1f}")


async def measure_async(name: str, fn: Callable[[str], Any], n: int) -> None:
    ids = [uuid.uuid4().hex for _ in range(n)]
    await fn(uuid.uuid4().hex)  # connect

    async def timed_async(step: Callable[[int], Any]) -> tuple[float, float]:
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            await step(i)
        return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6

    fc, fw = await timed_async(lambda i: fn(ids[i]))
    dc, dw = await timed_async(lambda i: fn(ids[0]))
    print(f"{name:44} first {fc:7.1f} / {fw:7.1f}   duplicate {dc:7.1f} / {dw:7.1f}")


async def claimd_aio(target: str, n: int) -> None:
    async with claimd.aio.Client(target) as client:

        @client.idempotent(f"b{uuid.uuid4().hex[:8]}", "stripe", key="id")
        async def process(order: dict[str, str]) -> dict[str, str]:
            return {"charge": "ch_1"}

        await measure_async(f"claimd.aio.idempotent ({client.transport})", lambda eid: process({"id": eid}), n)


def powertools_fn(store: Any, cache: bool) -> Callable[[str], Any]:
    config = IdempotencyConfig(event_key_jmespath="id", use_local_cache=cache)

    @idempotent_function(data_keyword_argument="order", config=config, persistence_store=store)
    def process(order: dict[str, str]) -> dict[str, str]:
        return {"charge": "ch_1"}

    return lambda eid: process(order={"id": eid})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--claimd-bin", default=os.environ.get("CLAIMD_BIN", ""))
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--sqlite-durability", default="full", help="claimd's --sqlite-durability (full, relaxed)")
    ap.add_argument(
        "--redis-fsync", action="store_true", help="Redis with appendfsync always: it too fsyncs every write"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        binary = Path(args.claimd_bin) if args.claimd_bin else build_claimd(REPO, Path(tmp) / "bin")
        extra = ("--sqlite-durability", args.sqlite_durability)
        server = stack.enter_context(detached_claimd(binary, Path(tmp) / "data", extra))
        rproc, rport = start_redis(args.redis_server, Path(tmp), args.redis_fsync)
        try:
            print(f"n={args.n}; µs per call, client process CPU (time.process_time) / wall")
            targets = (server.grpc_address, f"http://{server.http_address}")
            for cache in (False, True):
                suffix = " +use_local_cache" if cache else ""
                rstore = RedisCachePersistenceLayer(host="127.0.0.1", port=rport, ssl=False)
                measure("Powertools on Redis" + suffix, powertools_fn(rstore, cache), args.n)
                for target in targets:
                    with Client(target) as client:
                        ns = f"b{uuid.uuid4().hex[:8]}"
                        cstore = ClaimdPersistenceLayer(client, namespace=ns, provider="stripe")
                        name = f"Powertools on claimd ({client.transport}){suffix}"
                        measure(name, powertools_fn(cstore, cache), args.n)
            for cache_size in (None, 1024):
                for target in targets:
                    with Client(target, local_cache=cache_size) as client:
                        ns = f"b{uuid.uuid4().hex[:8]}"

                        @client.idempotent(ns, "stripe", key="id")
                        def process(order: dict[str, str]) -> dict[str, str]:
                            return {"charge": "ch_1"}

                        suffix = f" local_cache={cache_size}" if cache_size else ""
                        name = f"claimd.idempotent ({client.transport}){suffix}"
                        measure(name, lambda eid: process({"id": eid}), args.n)
            for target in targets:
                asyncio.run(claimd_aio(target, args.n))
        finally:
            rproc.terminate()
            rproc.wait()


if __name__ == "__main__":
    main()

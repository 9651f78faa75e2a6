"""guard_vs_powertools drives one webhook handler through an idempotency
layer from N threads for a fixed time and prints a JSON summary (the shape
of cmd/claimload's, which bench/cmd/benchrun reads):

    python guard_vs_powertools.py --impl claimd --mode first --threads 8 \
        --duration 15s --claimd 127.0.0.1:50051 --token-file bench.token

--impl claimd     claimd's Python guard (clients/python: Claim with start,
                  heartbeat, SETTLED with the handler's result)
--impl powertools AWS Lambda Powertools' idempotency utility (3.x) on Redis,
                  its RedisCachePersistenceLayer, @idempotent_function
--mode first      every event new
--mode dup        events settled before the run (by --mode settle),
                  delivered again
--mode settle     settles the dup events and exits (not a measurement)

The handler is the same for both: it builds a small result from the event
(the side effect itself is not what is measured). An event counts when the
layer answered it the way its mode expects (first: the handler ran; dup: the
stored result came back without running it); anything else is an error.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable

NAMESPACE = "bench"
PROVIDER = "stripe"
DUP_KEYS = 1000


def handler(event: dict[str, str]) -> dict[str, str]:
    """handler is the webhook's work: a small result from the event."""
    return {"charge": "ch_" + event["id"]}


def duration(s: str) -> float:
    """duration parses Go-style 15s / 500ms / 2m."""
    for suffix, mult in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    return float(s)


def claimd_impl(args: argparse.Namespace) -> tuple[Callable[[str], bool], Callable[[], None]]:
    """claimd_impl is one event through claimd's guard: True when it went as
    the mode expects (first: acquired and settled; dup: the stored result)."""
    from claimd import Client

    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.readline().strip()
    # Plaintext on loopback with a token: the client uses local credentials.
    client = Client(args.claimd, token=token, holder="pybench")
    first = args.mode == "first"

    def one(event_id: str) -> bool:
        with client.guard(NAMESPACE, PROVIDER, event_id=event_id) as g:
            ran = g.acquired
            if ran:
                g.settle(handler({"id": event_id}))
        res = g.result
        if res.error is not None or res.status != 200:
            return False
        return ran if first else (not ran and json.loads(res.body) == handler({"id": event_id}))

    return one, client.close


def powertools_impl(args: argparse.Namespace) -> tuple[Callable[[str], bool], Callable[[], None]]:
    """powertools_impl is one event through Powertools' idempotent_function
    on Redis: the key is the event's id (event_key_jmespath)."""
    import redis
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
    from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer

    client = redis.Redis.from_url(args.redis_url, max_connections=max(64, 2 * args.threads))
    persistence = RedisCachePersistenceLayer(client=client)
    # Stripe's window in claimd (72h + 12h margin), so both keep records
    # equally long.
    config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=84 * 3600)
    ran = threading.local()

    @idempotent_function(data_keyword_argument="event", persistence_store=persistence, config=config)
    def handle(event: dict[str, str]) -> dict[str, str]:
        ran.value = True
        return handler(event)

    first = args.mode == "first"

    def one(event_id: str) -> bool:
        ran.value = False
        out = handle(event={"id": event_id})
        if out != handler({"id": event_id}):
            return False
        return ran.value if first else not ran.value

    return one, client.close


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", choices=["claimd", "powertools"], required=True)
    ap.add_argument("--mode", choices=["first", "dup", "settle"], required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--duration", type=duration, default=15.0)
    ap.add_argument("--prefix", default="py", help="prefix of new event ids; make it unique per run")
    ap.add_argument("--dup-prefix", default="pysettled", help="prefix of the events settled before a dup run")
    ap.add_argument("--claimd", default="127.0.0.1:50051", help="claimd's address: host:port for gRPC, http://host:port (its HTTP listener) for Connect")
    ap.add_argument("--token-file", default="")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/3")
    args = ap.parse_args()
    if args.threads < 1 or args.duration <= 0:
        ap.error("--threads and --duration must be positive")
    # Powertools names its records after the function; outside Lambda it
    # reads this variable.
    os.environ.setdefault("AWS_LAMBDA_FUNCTION_NAME", "pybench")

    dup_ids = [f"{args.dup_prefix}-{i}" for i in range(DUP_KEYS)]
    if args.mode == "settle":
        # The first delivery of each dup event, through the same layer.
        args.mode = "first"
        settle, settle_close = (claimd_impl if args.impl == "claimd" else powertools_impl)(args)
        with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(settle, dup_ids))  # False when settled by an earlier run: fine
        settle_close()
        return 0
    one, close = (claimd_impl if args.impl == "claimd" else powertools_impl)(args)

    seq = iter(range(sys.maxsize))
    seq_lock = threading.Lock()
    stop = threading.Event()
    lats: list[list[float]] = [[] for _ in range(args.threads)]
    errors = [0] * args.threads

    def loop(i: int) -> None:
        lat, err = lats[i], 0
        while not stop.is_set():
            with seq_lock:
                n = next(seq)
            eid = f"{args.prefix}-{n}" if args.mode == "first" else dup_ids[n % DUP_KEYS]
            t0 = time.perf_counter()
            try:
                ok = one(eid)
            except Exception as e:  # noqa: BLE001 - an error is a figure here
                print(f"{args.impl}: {type(e).__name__}: {e}", file=sys.stderr)
                ok = False
            d = time.perf_counter() - t0
            if ok:
                lat.append(d)
            else:
                err += 1
        errors[i] = err

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(args.threads)]
    # The process's CPU over the measured loop only: the interpreter's
    # start and the imports are not the layer's cost per event.
    cpu0 = time.process_time()
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(args.duration)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    close()

    all_lat = sorted(x for lat in lats for x in lat)

    def pct(p: float) -> float:
        if not all_lat:
            return 0.0
        rank = max(math.ceil(p / 100 * len(all_lat)) - 1, 0)
        return round(all_lat[min(rank, len(all_lat) - 1)] * 1000, 3)

    err = sum(errors)
    json.dump(
        {
            "scenario": f"{args.impl}-{args.mode}",
            "callers": args.threads,
            "seconds": elapsed,
            "requests": len(all_lat) + err,
            "calls": len(all_lat) + err,
            "errors": err,
            "error_codes": {"UNEXPECTED": err} if err else None,
            "rps": len(all_lat) / elapsed,
            "p50_ms": pct(50),
            "p99_ms": pct(99),
            "cpu_seconds": cpu,
        },
        sys.stdout,
        indent=2,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

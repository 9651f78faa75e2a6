"""benchserver: the claimd of the client benchmarks (bench_*.py), started
from a child process so that the process they measure does nothing for it.

claimd logs every Claim and Transition at INFO, and ClaimdServer drains that
log with a thread of the process that started it: two lines per first
delivery, each read, written to the log file and parsed as JSON. Started in
the benchmark's own process, that thread's work was counted as the client's
CPU: 133-157 us per first delivery over Connect in the thread itself (its
/proc/self/task stat; a fifth of the process's CPU), besides its GIL
hand-offs with the calling thread.

    with detached_claimd(binary, data_dir, extra_args) as server:
        Client(server.grpc_address)

The child is this file run as a script: it starts a ClaimdServer, prints its
addresses as one JSON line, and stops it (by PID, as ClaimdServer.stop does)
when its standard input closes, which ends the with-block or the benchmark.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from claimd.testing import ClaimdServer


@dataclass(frozen=True)
class Addresses:
    """Addresses are where the child's claimd listens, named as
    ClaimdServer's."""

    grpc_address: str
    http_address: str


@contextlib.contextmanager
def detached_claimd(binary: Path, data_dir: Path, extra_args: tuple[str, ...] = ()) -> Iterator[Addresses]:
    """detached_claimd runs claimd (ClaimdServer.start's arguments) from a
    child process for as long as the with-block lasts."""
    child = subprocess.Popen(
        [sys.executable, __file__, str(binary), str(data_dir), *extra_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError(f"claimd's launcher exited ({child.wait()}) before claimd served")
        doc = json.loads(line)
        yield Addresses(doc["grpc"], doc["http"])
    finally:
        child.stdin.close()
        child.wait(timeout=30)


def _serve(binary: str, data_dir: str, extra_args: list[str]) -> None:
    with ClaimdServer.start(Path(binary), Path(data_dir), extra_args=tuple(extra_args)) as server:
        print(json.dumps({"grpc": server.grpc_address, "http": server.http_address}), flush=True)
        sys.stdin.read()  # until the benchmark closes this end


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], sys.argv[3:])

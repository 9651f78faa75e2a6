"""A Python receiver written as in the README, killed after its commit and
paused past its lease, writes each event exactly once: the example's own
handler (receiver.book, through gated_receiver.py) in real processes, sent
SIGKILL and SIGSTOP at known points, against a real claimd. No step sleeps:
each waits for a line the process writes, or for claimd's answer to a claim
that waits out the lease."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from receiver import Ledger
from test_receiver import post, stripe_event

from claimd import Client, EventState
from claimd.testing import ClaimdServer

GATED = Path(__file__).resolve().parent / "gated_receiver.py"


class Gated:
    """Gated is one gated_receiver.py process and the lines it wrote."""

    def __init__(self, claimd: str, db: Path, namespace: str, gate: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(GATED), "--claimd", claimd, "--db", str(db), "--namespace", namespace, "--gate", gate],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(GATED.parents[1])},  # receiver.py
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = str(self.next()["url"])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def next(self) -> dict[str, Any]:
        """next is the process's next line (30 s at most: a bound, not a delay)."""
        try:
            return dict(json.loads(self._lines.get(timeout=30)))
        except queue.Empty:
            raise AssertionError(f"gated receiver {self.proc.pid}: no line within 30s") from None

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def signal(self, sig: signal.Signals) -> None:
        os.kill(self.proc.pid, sig)
        if sig == signal.SIGSTOP:
            self._stopped()

    def _stopped(self) -> None:
        """_stopped returns once the kernel reports the process stopped. kill
        returns when SIGSTOP is queued, not delivered: a receiver still
        running on the other core could read the line go() writes next and
        start its effect's transaction before it stops, holding the ledger's
        write lock for the whole pause (seen 1 run in 5)."""
        stat = Path(f"/proc/{self.proc.pid}/stat")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            # /proc/PID/stat: "pid (comm) state …"; comm may hold spaces.
            if stat.read_text().rsplit(")", 1)[1].split()[0] == "T":
                return
            time.sleep(0.001)  # polling the observable state, bounded above
        raise AssertionError(f"receiver {self.proc.pid} not stopped 10 s after SIGSTOP")

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(30)


class Spawner:
    """Spawner starts gated receivers that share one ledger and namespace."""

    def __init__(self, claimd: str, tmp: Path) -> None:
        self.claimd = claimd
        self.ns = f"example-{uuid.uuid4().hex[:12]}"
        self.db = tmp / "ledger.db"
        self.ledger = Ledger(str(self.db))
        self.started: list[Gated] = []

    def __call__(self, gate: str) -> Gated:
        g = Gated(self.claimd, self.db, self.ns, gate)
        self.started.append(g)
        return g


@pytest.fixture
def spawn(claimd_server: ClaimdServer, tmp_path: Path) -> Iterator[Spawner]:
    s = Spawner(claimd_server.grpc_address, tmp_path)
    try:
        yield s
    finally:
        for g in s.started:
            g.end()


def settled(claimd_server: ClaimdServer, ns: str, evt: str) -> tuple[EventState, bytes]:
    with Client(claimd_server.grpc_address) as c:
        rec = c.get(ns, "stripe", evt)
    return rec.state, rec.result


def test_killed_after_its_commit_the_next_receiver_writes_nothing_and_answers_the_stored_result(
    spawn: Spawner, claimd_server: ClaimdServer
) -> None:
    evt = f"evt_{uuid.uuid4().hex}"
    body = stripe_event(evt)
    a = spawn("after")
    with ThreadPoolExecutor(1) as pool:
        answer: Future[Any] = pool.submit(post, a.url, body, "t=1,v1=a")
        assert a.next() == {"at": "after", "event": evt}
        assert spawn.ledger.rows(evt) == 1, "A's effect did not commit its row before the gate"
        a.signal(signal.SIGKILL)  # committed, never settled
        assert a.proc.wait(30) == -signal.SIGKILL
        with pytest.raises(OSError):  # the connection died with A: Stripe would retry
            answer.result(30)
    b = spawn("none")
    # B's claim waits for A's lease to end, takes over from PROCESSING, and
    # finds A's fence: it writes nothing and settles A's stored answer.
    assert post(b.url, body, "t=2,v1=b")[:2] == (200, b'{"ledger_row": 1}')
    assert spawn.ledger.rows(evt) == 1
    assert settled(claimd_server, spawn.ns, evt) == (EventState.SETTLED, b'{"ledger_row": 1}')
    # And Stripe's next retry is a plain duplicate.
    assert post(b.url, body, "t=3,v1=c")[:2] == (200, b'{"ledger_row": 1}')
    assert spawn.ledger.rows(evt) == 1


def test_paused_past_its_lease_the_zombie_writes_nothing_when_it_wakes(
    spawn: Spawner, claimd_server: ClaimdServer
) -> None:
    evt = f"evt_{uuid.uuid4().hex}"
    body = stripe_event(evt)
    a = spawn("before")
    with ThreadPoolExecutor(1) as pool:
        zombie: Future[Any] = pool.submit(post, a.url, body, "t=1,v1=a")
        assert a.next() == {"at": "before", "event": evt}
        a.signal(signal.SIGSTOP)  # a GC pause, a stalled VM: no heartbeat
        a.go()  # read when A wakes
        b = spawn("none")
        # B waits out A's lease in claimd, takes over, and writes the row.
        assert post(b.url, body, "t=2,v1=b")[:2] == (200, b'{"ledger_row": 1}')
        assert spawn.ledger.rows(evt) == 1
        a.signal(signal.SIGCONT)
        status, answer, headers = zombie.result(30)
    # A wakes after the takeover: its effect finds B's fence (or its lease is
    # gone), it writes nothing, and answers 409 so that Stripe asks again.
    assert (status, headers.get("Retry-After")) == (409, "1"), (status, answer)
    assert spawn.ledger.rows(evt) == 1
    assert settled(claimd_server, spawn.ns, evt) == (EventState.SETTLED, b'{"ledger_row": 1}')

"""Run a real claimd for tests: build it from a checkout, start it on free
loopback ports with embedded tiers, wait for gRPC health SERVING, stop it by
PID. Needs the [testing] extra (grpcio-health-checking) and Go to build.

    binary = build_claimd(repo, tmp_dir)
    with ClaimdServer.start(binary, data_dir) as server:
        client = Client(server.grpc_address)
"""

from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def build_claimd(repo: Path, out_dir: Path) -> Path:
    """build_claimd runs `go build ./cmd/claimd` in repo and returns the
    binary's path under out_dir. It raises RuntimeError with go's output on
    failure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    binary = out_dir / "claimd"
    proc = subprocess.run(
        ["go", "build", "-o", str(binary), "./cmd/claimd"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"go build ./cmd/claimd in {repo} failed:\n{proc.stdout}{proc.stderr}")
    return binary


class ClaimdServer:
    """ClaimdServer is one running claimd process. Its stderr is drained by a
    thread into log_path (and the last lines kept for error messages), so a
    chatty server never blocks on a full pipe."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path
        self.grpc_address = ""
        self.http_address = ""
        self._tail: collections.deque[str] = collections.deque(maxlen=50)
        self._serving: queue.Queue[dict[str, object]] = queue.Queue()
        self._drain = threading.Thread(target=self._read, name=f"claimd-{self.pid}-stderr", daemon=True)

    @classmethod
    def start(
        cls,
        binary: Path,
        data_dir: Path,
        *,
        extra_args: tuple[str, ...] = (),
        startup_timeout: float = 30.0,
        health_credentials: grpc.ChannelCredentials | None = None,
    ) -> ClaimdServer:
        """start launches `claimd serve` on 127.0.0.1:0 (gRPC and HTTP) with
        its embedded tiers under data_dir, reads the addresses from its
        "claimd serving" log line, and returns once health reports SERVING.
        On any failure the process is stopped and RuntimeError raised.

        For a claimd that serves TLS (extra_args name --tls-cert and the
        rest), health_credentials are what the health check connects with:
        grpc.ssl_channel_credentials trusting its CA, with a client
        certificate when it requires one."""
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = data_dir.with_name(data_dir.name + ".log")
        proc = subprocess.Popen(
            [
                str(binary),
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--http-listen",
                "127.0.0.1:0",
                "--data-dir",
                str(data_dir),
                *extra_args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        server = cls(proc, log_path)
        server._drain.start()
        try:
            server._await_serving(time.monotonic() + startup_timeout, health_credentials)
        except BaseException:
            server.stop()
            raise
        return server

    def _read(self) -> None:
        stream: IO[bytes] | None = self.proc.stderr
        assert stream is not None
        with open(self.log_path, "ab") as log:
            for raw in stream:
                log.write(raw)
                log.flush()
                line = raw.decode("utf-8", "replace").rstrip("\n")
                self._tail.append(line)
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if isinstance(entry, dict) and entry.get("msg") == "claimd serving":
                    self._serving.put(entry)

    def _await_serving(self, deadline: float, credentials: grpc.ChannelCredentials | None) -> None:
        try:
            entry = self._serving.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise RuntimeError(f"claimd (pid {self.pid}) logged no 'claimd serving' line:\n{self.tail()}") from None
        self.grpc_address = str(entry["grpc"])
        self.http_address = str(entry["http"])
        channel = (
            grpc.insecure_channel(self.grpc_address)
            if credentials is None
            else grpc.secure_channel(self.grpc_address, credentials)
        )
        with channel as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            try:
                for resp in stub.Watch(health_pb2.HealthCheckRequest(), timeout=max(0.1, deadline - time.monotonic())):
                    if resp.status == health_pb2.HealthCheckResponse.SERVING:
                        return
            except grpc.RpcError as err:
                raise RuntimeError(f"claimd (pid {self.pid}) never reported SERVING: {err}\n{self.tail()}") from err
        raise RuntimeError(f"claimd (pid {self.pid}) health watch ended before SERVING\n{self.tail()}")

    def tail(self) -> str:
        """tail is the last lines the server logged."""
        return "\n".join(self._tail)

    def stop(self, timeout: float = 15.0) -> int:
        """stop sends SIGTERM to the server's PID (it drains and exits 0),
        SIGKILL after timeout, and returns the exit code. Idempotent."""
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()
        self._drain.join(timeout=timeout)
        return self.proc.returncode

    def __enter__(self) -> ClaimdServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

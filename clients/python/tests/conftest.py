"""Fixtures: one real claimd per test session, built from this checkout (or
taken from $CLAIMD_BIN), started on free loopback ports with embedded tiers
and stopped by PID at the end."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from claimd import Client
from claimd.testing import ClaimdServer, build_claimd

REPO = Path(os.environ.get("CLAIMD_REPO", Path(__file__).resolve().parents[3]))


@pytest.fixture(scope="session")
def claimd_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if bin_path := os.environ.get("CLAIMD_BIN"):
        return Path(bin_path)
    return build_claimd(REPO, tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="session")
def claimd_server(claimd_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClaimdServer]:
    server = ClaimdServer.start(claimd_binary, tmp_path_factory.mktemp("claimd") / "data")
    yield server
    code = server.stop()
    assert code == 0, f"claimd exited {code} on SIGTERM, want 0:\n{server.tail()}"


TRANSPORTS = ("grpc", "connect")
"""TRANSPORTS are the Client's transports; the suites that take the
transport fixture (or client) run once over each."""


def target_for(server: ClaimdServer, transport: str) -> str:
    """target_for is what a Client dials to reach server over transport:
    the gRPC address, or the URL of the HTTP listener (Connect)."""
    return server.grpc_address if transport == "grpc" else f"http://{server.http_address}"


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def client(claimd_server: ClaimdServer, transport: str) -> Iterator[Client]:
    with Client(target_for(claimd_server, transport)) as c:
        yield c


@pytest.fixture
def ns() -> str:
    """ns is a namespace of the test's own, so tests never share records."""
    return f"py-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def evt() -> str:
    """evt is a fresh Stripe-style event id."""
    return f"evt_{uuid.uuid4().hex}"

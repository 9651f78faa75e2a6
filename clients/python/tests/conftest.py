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
"""TRANSPORTS are the Client's transports. A test that takes the transport
fixture (or client) runs over gRPC, the default for a host:port target;
over Connect too when it is marked both_transports, or with
--all-transports."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all-transports",
        action="store_true",
        help="run every test that takes the transport fixture over Connect as well, not only the both_transports ones",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "both_transports: the test exercises the client's contract with claimd (its calls, error mapping, "
        "deadlines and retries, metadata and auth, the asyncio client), so it runs over gRPC and over Connect",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """The guard, function mode, Powertools and the effect fence run once,
    over gRPC: they sit above the client's calls, which the both_transports
    tests check over each transport, so a second run would check the same
    decisions again. A test that is not generated is neither run nor
    reported as skipped."""
    if "transport" not in metafunc.fixturenames:
        return
    both = metafunc.definition.get_closest_marker("both_transports") is not None
    metafunc.parametrize(
        "transport",
        TRANSPORTS if both or metafunc.config.getoption("all_transports") else TRANSPORTS[:1],
        indirect=True,
    )


def target_for(server: ClaimdServer, transport: str) -> str:
    """target_for is what a Client dials to reach server over transport:
    the gRPC address, or the URL of the HTTP listener (Connect)."""
    return server.grpc_address if transport == "grpc" else f"http://{server.http_address}"


@pytest.fixture
def transport(request: pytest.FixtureRequest) -> str:
    """transport is the test's transport, set by pytest_generate_tests."""
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

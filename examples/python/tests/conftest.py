"""Fixtures: a real claimd built from this checkout (or $CLAIMD_BIN), and the
receiver serving on a free loopback port in front of a fresh ledger."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from receiver import Ledger, make_server

from claimd import Client
from claimd.testing import ClaimdServer, build_claimd

REPO = Path(os.environ.get("CLAIMD_REPO", Path(__file__).resolve().parents[3]))


@pytest.fixture(scope="session")
def claimd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClaimdServer]:
    binary = (
        Path(os.environ["CLAIMD_BIN"])
        if "CLAIMD_BIN" in os.environ
        else build_claimd(REPO, tmp_path_factory.mktemp("bin"))
    )
    server = ClaimdServer.start(binary, tmp_path_factory.mktemp("claimd") / "data")
    yield server
    assert server.stop() == 0, server.tail()


class Receiver:
    """Receiver is the example serving in a thread: its URL and its ledger."""

    def __init__(self, url: str, ledger: Ledger) -> None:
        self.url = url
        self.ledger = ledger


@pytest.fixture
def receiver(claimd_server: ClaimdServer, tmp_path: Path) -> Iterator[Receiver]:
    ledger = Ledger(str(tmp_path / "ledger.db"))
    with Client(claimd_server.grpc_address) as client:
        # A namespace per test: entities (a charge, a payment intent) are per
        # namespace, so tests that replay one fixture never meet each other's.
        server = make_server(("127.0.0.1", 0), client, ledger, namespace=f"example-{uuid.uuid4().hex[:12]}")
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            host, port = server.server_address[:2]
            yield Receiver(f"http://{host}:{port}/webhooks/stripe", ledger)
        finally:
            server.shutdown()
            server.server_close()
            thread.join()

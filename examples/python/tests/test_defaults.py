"""The receiver's defaults fit beside `make run`, as the README says."""

from __future__ import annotations

from pathlib import Path

from receiver import parse_args

# CLAIMD_DEFAULTS are the addresses `make run` serves on: gRPC and HTTP.
CLAIMD_DEFAULTS = ("127.0.0.1:50051", "127.0.0.1:8080")


def test_listens_beside_claimd_and_as_documented() -> None:
    args = parse_args([])
    assert args.claimd == CLAIMD_DEFAULTS[0]
    assert args.listen not in CLAIMD_DEFAULTS, f"--listen defaults to {args.listen}, which make run holds"
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert f"--listen {args.listen}" in readme
    port = args.listen.rpartition(":")[2]
    assert f"localhost:{port}/webhooks/stripe" in readme

"""The package as a stranger gets it: a wheel built as `python -m build`
builds it, installed with its [testing] extra into a fresh virtual
environment outside the repository, and used there: a delivery guarded twice
through the sync guard and twice through claimd.aio's, against a claimd that
the installed claimd.testing starts."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]
REPO = PKG.parents[1]

CONSUMER = """
import asyncio, json, sys
from pathlib import Path

import claimd
import claimd.aio
from claimd.testing import ClaimdServer

server = ClaimdServer.start(Path(sys.argv[1]), Path(sys.argv[2]))
effects = []
answers = []
try:
    with claimd.Client(server.grpc_address) as client:
        @client.guarded("pkg-test", "stripe")
        def charge(g):
            effects.append("sync")
            return {"charged": "sync"}

        for _ in range(2):
            r = charge("evt_wheel_sync")
            answers.append([r.status, r.body.decode(), r.outcome.name])

    async def main():
        async with claimd.aio.Client(server.grpc_address) as client:
            @client.guarded("pkg-test", "stripe")
            async def charge(g):
                effects.append("aio")
                return {"charged": "aio"}

            for _ in range(2):
                r = await charge("evt_wheel_aio")
                answers.append([r.status, r.body.decode(), r.outcome.name])

    asyncio.run(main())
finally:
    code = server.stop()
print(json.dumps({"module": claimd.__file__, "effects": effects, "answers": answers, "exit": code}))
"""


def run(args: list[str | Path], cwd: Path) -> str:
    r = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(map(str, args))}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_the_wheel_installs_into_a_fresh_venv_and_guards_a_delivery(tmp_path: Path, claimd_binary: Path) -> None:
    assert not tmp_path.resolve().is_relative_to(REPO), f"{tmp_path} is inside the repository"

    # --no-isolation: the backend is the pinned setuptools of the test extra,
    # so the build needs no download; otherwise it is `python -m build`.
    out = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, PKG], tmp_path)
    wheels = list(out.glob("claimd-*.whl"))
    assert len(wheels) == 1, f"built {wheels}, want one wheel"
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = whl.read(meta).decode()
    for want in ("claimd/py.typed", "claimd/aio.py", "claimd/testing.py", "claimd/_gen/idempotency/v1/claim_pb2.pyi"):
        assert want in names, f"the wheel lacks {want}"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "the wheel lacks LICENSE"
    assert "License-Expression: Apache-2.0" in metadata
    assert not [n for n in names if n.startswith("tests/")], "the wheel ships the tests"
    assert (PKG / "LICENSE").read_text() == (REPO / "LICENSE").read_text(), (
        "clients/python/LICENSE differs from the repository's"
    )

    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", venv], tmp_path)
    py = venv / "bin" / "python"
    run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"{wheels[0]}[testing]"], tmp_path)

    app = tmp_path / "app"
    app.mkdir()
    (app / "main.py").write_text(CONSUMER)
    got = json.loads(run([py, "main.py", claimd_binary, tmp_path / "data"], app))
    assert Path(got["module"]).resolve().is_relative_to(venv.resolve()), f"imported claimd from {got['module']}"
    assert got["effects"] == ["sync", "aio"], f"side effects {got['effects']}, want one per event"
    assert got["answers"] == [
        [200, '{"charged":"sync"}', "ACQUIRED"],
        [200, '{"charged":"sync"}', "DUPLICATE"],
        [200, '{"charged":"aio"}', "ACQUIRED"],
        [200, '{"charged":"aio"}', "DUPLICATE"],
    ]
    assert got["exit"] == 0

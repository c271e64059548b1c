"""Binder cannot be built here (no Docker engine), so its parts are checked: the two environment files
agree, they hold every runtime dependency, and the start script sets the dashboard link and hands over."""

import os
import re
import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _packages(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        m = re.match(r"\s+- ([A-Za-z0-9_.-]+)", line)
        if m and m.group(1) not in ("pip", "-e"):
            names.add(m.group(1).lower())
    return names


def test_the_environment_files_agree_and_hold_every_runtime_dependency():
    main, binder = _packages(ROOT / "environment.yml"), _packages(ROOT / "binder" / "environment.yml")
    assert main == binder
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in deps}
    assert wanted <= main, wanted - main
    assert "jupyter-server-proxy" in binder  # the dashboard link goes through it


def test_binder_start_sets_small_sizes_and_the_dashboard_link_then_runs_the_command():
    out = subprocess.run(["bash", str(ROOT / "binder" / "start"), "bash", "-c",
                          "echo $DBKIT_SMALL $DASK_DISTRIBUTED__DASHBOARD__LINK"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "JUPYTERHUB_SERVICE_PREFIX": "/user/ada/"})
    assert out.stdout.split() == ["1", "/user/ada/proxy/{port}/status"]

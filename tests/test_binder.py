"""Binder cannot be built here (no Docker engine), so its parts are checked: the two environment files
agree, they hold every runtime dependency, and the start script sets the dashboard link and hands over."""

import os
import re
import subprocess
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _specs(path: Path) -> dict[str, str]:
    """``{name: constraint}`` of a conda environment file's package lines (``pip`` and ``-e`` aside)."""
    specs = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s+- ([A-Za-z0-9_.-]+)(\S*)$", line)
        if m and m.group(1) not in ("pip", "-e"):
            specs[m.group(1).lower()] = m.group(2)
    return specs


def test_the_environment_files_agree_and_hold_every_runtime_dependency_with_its_floor():
    main, binder = _specs(ROOT / "environment.yml"), _specs(ROOT / "binder" / "environment.yml")
    assert main == binder, "environment.yml and binder/environment.yml must list the same packages and versions"
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        name, floor = re.match(r"([A-Za-z0-9_.-]+)(\S*)", dep).groups()
        assert main.get(name.lower()) == floor, f"{name}: pyproject says {floor!r}, environment.yml {main.get(name)!r}"
    for lab in ("jupyterlab", "dask-labextension", "jupyter-server-proxy", "bokeh"):
        assert lab in binder, f"Binder needs {lab} for the dashboard"
    assert binder["python"] == "=3.11"


def test_binder_start_sets_small_sizes_and_the_dashboard_link_then_runs_the_command():
    out = subprocess.run(["bash", str(ROOT / "binder" / "start"), "bash", "-c",
                          "echo $DBKIT_SMALL $DASK_DISTRIBUTED__DASHBOARD__LINK"],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "JUPYTERHUB_SERVICE_PREFIX": "/user/ada/"})
    assert out.stdout.split() == ["1", "/user/ada/proxy/{port}/status"]
    lines = [x for x in (ROOT / "binder" / "start").read_text().splitlines() if x.strip()]
    assert lines[-1] == 'exec "$@"', "repo2docker runs start at every launch: it must hand over with exec"

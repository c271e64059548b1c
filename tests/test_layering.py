"""DESIGN.md layering: the numpy core loads no dask, ipywidgets or matplotlib."""

import subprocess
import sys

import pytest

DETECT = (
    "import sys\n{imports}\n"
    "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'ipywidgets', 'matplotlib'))\n"
    "print(','.join(bad))\n"
)


def loaded_after(imports: str) -> str:
    out = subprocess.run([sys.executable, "-c", DETECT.format(imports=imports)], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_core_imports_no_dask_widgets_or_matplotlib():
    core = ("import dbkit, dbkit.nn, dbkit.ps, dbkit.data, dbkit.config, dbkit.settings, dbkit.training, "
            "dbkit.downpour, dbkit.sandblaster, dbkit.partition, dbkit.sync_sgd, dbkit.telemetry, dbkit.jobs, "
            "dbkit.runtime, dbkit.runtime.dask")
    assert loaded_after(core) == ""


def test_every_module_of_the_three_paper_folders_imports_no_dask():
    # Not only the packages: each file, the jobs and their drivers included, loaded one after another.
    walk = ("import importlib, pkgutil\n"
            "import dbkit.downpour, dbkit.sandblaster, dbkit.partition\n"
            "names = [m.name for p in (dbkit.downpour, dbkit.sandblaster, dbkit.partition)\n"
            "         for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.')]\n"
            "assert len(names) > 30, names\n"
            "for n in names:\n"
            "    importlib.import_module(n)")
    loaded = loaded_after(walk)
    assert "dask" not in loaded and "distributed" not in loaded, loaded


def test_an_in_memory_sync_sgd_job_loads_no_dask():
    run = ("import dbkit\njob = dbkit.SyncSGD('linear', 'digits', steps=20)\njob.fit(progress=False)\n"
           "job.stop()\nassert job.report()['steps'] == 20")
    assert loaded_after(run) == ""


def test_only_the_dask_runtime_imports_dask():
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "dbkit"
    importers = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] in ("dask", "distributed") for n in names):
                importers.add(path.relative_to(package).parts[:2])
    assert importers == {("runtime", "dask")}, importers


def test_a_downpour_job_on_in_process_workers_loads_no_dask():
    run = ("from dbkit.runtime import InProcessCluster\nimport dbkit\n"
           "with InProcessCluster(2) as m, dbkit.DownpourSGD('linear', 'digits', cluster=m, replicas=2) as d:\n"
           "    d.fit(steps=20, progress=False)\n"
           "assert d.report()['cluster']['kind'] == 'in-process'")
    assert loaded_after(run) == ""


@pytest.mark.parametrize("module", ["distributed", "matplotlib"])
def test_the_detector_sees_a_forbidden_import(module):
    # The check above means something only if the same detector sees these when loaded.
    assert module in loaded_after(f"import dbkit.nn, {module}")


def test_top_level_names_load_lazily():
    import dbkit

    assert dbkit.DownpourSGD.__name__ == "DownpourSGD" and dbkit.SyncSGD.__name__ == "SyncSGD"
    assert "DownpourSGD" in dir(dbkit)
    with pytest.raises(AttributeError):
        dbkit.NoSuchThing


def test_a_whole_simulation_loads_no_dask_widgets_or_matplotlib():
    # dbkit.sim is the second runtime: numpy, SimPy and greenlet only (matplotlib only to draw a figure).
    run = ("from dbkit.config import RunConfig\nfrom dbkit.sim import Cluster, simulate\n"
           "from dbkit.sim.figures import figure3\n"
           "r = simulate(RunConfig.make(algorithm='downpour', replicas=3, shards=2, steps=30), Cluster('here'))\n"
           "assert r['simulated'] and figure3()['models']")
    assert loaded_after(run) == ""


# ---- the house: no circle across folders, the runtime below the algorithms, every upward arrow named ----------

#: the upward arrows docs/reference.md names, each with its reason (its "The layers" table)
NAMED_UPWARD = {
    "dbkit.config -> dbkit.downpour.replica_kinds",
    "dbkit.jobs.job -> dbkit.downpour.replica_kinds",
    "dbkit.jobs.job -> dbkit.widgets",
    "dbkit.jobs.job -> dbkit.widgets.panel",
    "dbkit.partition.downpour_partition -> dbkit.downpour.exchange",
    "dbkit.partition.lead -> dbkit.downpour.exchange",
    "dbkit.partition.replica -> dbkit.downpour.exchange",
    "dbkit.telemetry.events -> dbkit.sandblaster.records",
    "dbkit.telemetry.partition_plot -> dbkit.partition",
    "dbkit.telemetry.partition_plot -> dbkit.partition.ownership",
    "dbkit.telemetry.sandblaster_block -> dbkit.sandblaster.coordinator",
    "dbkit.telemetry.sandblaster_block -> dbkit.sandblaster.dispatcher",
}


def test_no_import_circle_crosses_folders():
    from .import_graph import circles, directory, imports

    modules, edges = imports()
    crossing = [c for c in circles(edges, sorted(modules)) if len({directory(m, modules) for m in c}) > 1]
    assert crossing == [], crossing


def test_the_runtime_imports_no_algorithm():
    from .import_graph import ALGORITHMS, folder, imports

    modules, edges = imports()
    bad = sorted(f"{a} -> {b}" for a, targets in edges.items() if folder(a, modules).startswith("runtime")
                 for b in targets if folder(b, modules).split("/")[0] in ALGORITHMS)
    assert bad == [], bad


def test_every_upward_arrow_is_named_with_its_reason():
    from pathlib import Path

    from .import_graph import upward_arrows

    found = upward_arrows()
    assert sorted(found - NAMED_UPWARD) == [], "a new import runs up the layers (name it in docs/reference.md)"
    assert sorted(NAMED_UPWARD - found) == [], "an arrow named here is gone: strike it from the list and the docs"
    table = (Path(__file__).resolve().parents[1] / "docs" / "reference.md").read_text()
    for arrow in found:
        a, b = (s.removeprefix("dbkit.") for s in arrow.split(" -> "))
        assert f"`{a}`" in table and f"`{b}`" in table, arrow


def test_the_graph_sees_an_arrow_a_function_import_and_skips_type_checking():
    # The guardrails above mean something only if the reader sees what they look for.
    from .import_graph import RANK, folder, imports

    modules, edges = imports()
    assert "dbkit.jobs" in edges["dbkit.downpour.job"]  # a module-level relative import
    assert "dbkit.widgets.panel" in edges["dbkit.jobs.job"]  # inside Job.panel()
    assert "dbkit.jobs" not in edges["dbkit.widgets.panel"]  # only under TYPE_CHECKING
    assert RANK[folder("dbkit.downpour.job", modules)] > RANK[folder("dbkit.ps.shard", modules)]

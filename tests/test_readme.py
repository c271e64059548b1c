"""The README and the reference: the two commands (one of them is .ci/run, verbatim), links that stay inside
the repository (Binder's launch link aside), and Python snippets that run as scripts."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "docs" / "reference.md", ROOT / "docs" / "benchmarks.md"]
BINDER = "https://mybinder.org/v2/gh/"
STARTS_A_CLUSTER = ("DownpourSGD(", "SandblasterLBFGS(", "on_cluster=True", "dbkit.run(")
DASK_CLUSTER = re.compile(r"(?<!sim\.)\bCluster\(")  # dbkit.sim's Cluster is simulated machines: no processes


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_readme_has_the_two_commands_and_ci_runs_the_second_verbatim():
    commands = _blocks((ROOT / "README.md").read_text(), "bash")[:2]
    assert commands[0].strip() == "python3 -m pip install -e . && python3 -m dbkit demo"
    assert commands[1].strip() in (ROOT / ".ci" / "run").read_text().splitlines()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_links_stay_in_the_repository_and_point_at_files_that_exist(doc):
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if target.startswith("#"):
            continue
        if "://" in target:
            assert doc.name == "README.md" and target.startswith(BINDER), f"{doc.name} links outside: {target}"
            assert target.endswith("urlpath=lab/tree/notebooks/00_tour.ipynb")
            continue
        path, _, anchor = target.partition("#")
        assert (doc.parent / path).exists(), f"{doc.name}: {path} does not exist"
        if anchor and path.endswith(".md"):  # a heading of that file, as GitHub names its anchors
            headings = re.findall(r"^#+ (.+)$", (doc.parent / path).read_text(), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, f"{doc.name}: {path} has no heading #{anchor}"


@pytest.mark.parametrize("doc", DOCS[:2], ids=lambda p: p.name)
def test_python_snippets_that_start_a_cluster_run_as_scripts(doc):
    for code in _blocks(doc.read_text(), "python"):
        tree = ast.parse(code)  # every snippet is valid Python
        # workers in this process, or simulated machines: no processes to guard
        in_process = "InProcessCluster(" in code or "from dbkit.sim import Cluster" in code
        if not in_process and (any(k in code for k in STARTS_A_CLUSTER) or DASK_CLUSTER.search(code)):
            guarded = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
            assert guarded, f"a snippet starting a cluster needs if __name__ == '__main__':\n{code}"

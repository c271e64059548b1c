"""Issue #48, defect 6: an extension cannot silently replace a built-in or another extension's rule, and a rule of
one's own is checked at each push. A file's ``class SGD(UpdateRule)`` named ``"sgd"`` with an empty ``apply`` ran,
reported ``rule: sgd`` and trained nothing; of two files each with a ``ClippedSGD`` named ``"clipped-sgd"``, the
second silently won; a rule writing NaN was blamed on the learning rate; a rule returning a new array instead of
updating in place trained nothing."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from dbkit.ps import ParameterShard, UpdateRule, make_rule, register_rule, registered_rules
from dbkit.ps.rule_guard import RuleError

RULE = """
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dbkit.ps import UpdateRule, register_rule


@register_rule
@dataclass(frozen=True)
class {cls}(UpdateRule):
    name: ClassVar[str] = {name!r}

    def apply(self, params, grad, state, staleness):
        {body}
"""


def _module(module: str, cls: str, name: str, body: str = "params -= np.float32(self.lr) * grad") -> type:
    """``RULE`` run as module ``module`` (as an extension file of that name is imported); its class."""
    m = types.ModuleType(module)
    sys.modules[module] = m
    exec(RULE.format(cls=cls, name=name, body=body), m.__dict__)  # noqa: S102 - a test's own source
    return getattr(m, cls)


def test_a_built_in_rules_name_is_not_taken_by_a_class_of_another_module():
    with pytest.raises(ValueError, match=r"'sgd' is taken by dbkit\.ps\..*SGD; impostor_rules\.SGD cannot take"):
        _module("impostor_rules", "SGD", "sgd", body="pass")
    assert type(make_rule("sgd", 0.1)).__module__.startswith("dbkit.")  # the built-in is still the one


def test_two_files_with_a_class_of_one_name_cannot_both_take_it():
    first = _module("clipped_a", "ClippedSGD", "test-clipped-sgd")
    with pytest.raises(ValueError, match=r"taken by clipped_a\.ClippedSGD; clipped_b\.ClippedSGD cannot take"):
        _module("clipped_b", "ClippedSGD", "test-clipped-sgd")
    assert type(make_rule("test-clipped-sgd", 0.1)) is first


def test_the_same_definition_run_again_replaces_itself():
    """A notebook cell run twice, or a module reloaded: the same module, the same class name."""
    _module("cell_rules", "Cell", "test-cell")
    again = _module("cell_rules", "Cell", "test-cell", body="params -= np.float32(2 * self.lr) * grad")
    assert type(make_rule("test-cell", 0.1)) is again and "test-cell" in registered_rules()


@register_rule
@dataclass(frozen=True)
class WritesNaN(UpdateRule):
    name: ClassVar[str] = "test-writes-nan"

    def apply(self, params, grad, state, staleness):  # noqa: ANN001, ANN201
        params -= np.float32(self.lr) * grad
        params[3] = np.nan


@register_rule
@dataclass(frozen=True)
class ReturnsNew(UpdateRule):
    name: ClassVar[str] = "test-returns-new"

    def apply(self, params, grad, state, staleness):  # noqa: ANN001, ANN201
        return params - np.float32(self.lr) * grad


@register_rule
@dataclass(frozen=True)
class DoesNothing(UpdateRule):
    name: ClassVar[str] = "test-does-nothing"

    def apply(self, params, grad, state, staleness):  # noqa: ANN001, ANN201
        params.copy()


@register_rule
@dataclass(frozen=True)
class WrongShape(UpdateRule):
    name: ClassVar[str] = "test-wrong-shape"

    def apply(self, params, grad, state, staleness):  # noqa: ANN001, ANN201
        return params[:-1]


def _shard(rule: str) -> tuple[ParameterShard, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    start = rng.standard_normal(20).astype(np.float32)
    return ParameterShard(0, 0, 20, start, rule, 0.1), start, rng.standard_normal(20).astype(np.float32)


def test_a_rule_that_returns_new_parameters_updates_as_plain_sgd():
    shard, start, grad = _shard("test-returns-new")
    assert shard.push(grad, 0).accepted
    np.testing.assert_array_equal(shard.params, start - np.float32(0.1) * grad)  # the reference: SGD by hand


@pytest.mark.parametrize("rule,says", [("test-writes-nan", "wrote NaN or inf into the parameters"),
                                       ("test-does-nothing", "changed nothing for a step that is not zero"),
                                       ("test-wrong-shape", "returned (19,), not None")])
def test_a_rule_that_fails_its_check_is_named_and_the_parameters_stay_as_they_were(rule, says):
    shard, start, grad = _shard(rule)
    with pytest.raises(RuleError, match=f"update rule {rule!r} .*{re.escape(says)}.*the push was refused"):
        shard.push(grad, 0)
    np.testing.assert_array_equal(shard.params, start)
    assert shard.version == 0


def test_a_job_whose_rule_writes_nan_fails_blaming_the_rule_not_the_learning_rate(tmp_path):
    path = tmp_path / "nan_rule.py"
    path.write_text(RULE.format(cls="NanRule", name="nan-rule", body="params[0] = np.nan"))
    out = subprocess.run([sys.executable, "-m", "dbkit", "run", "downpour", "--extension", str(path), "--optimizer",
                          "nan-rule", "--model", "linear", "--steps", "40", "--runtime", "in-process", "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    assert "update rule 'nan-rule' (nan_rule.NanRule) wrote NaN" in out.stderr
    assert "learning rate" not in out.stderr


@pytest.mark.parametrize("algorithm", [("downpour",), ("sgd", "--on-cluster")], ids=lambda a: a[0])
def test_an_extension_the_workers_cannot_import_is_named_in_one_line(tmp_path, dask_cluster_address, algorithm):
    """On a cluster of one's own the workers import what the driver loaded; a module only the driver has failed
    with four lines of Dask's deserialization. Now the module, its file and the worker are named before
    anything starts, with what to do: for Downpour's shards and replicas, and SGD's shards on a cluster."""
    path = tmp_path / "only_here_rule.py"
    path.write_text(RULE.format(cls="OnlyHere", name="only-here", body="params -= np.float32(self.lr) * grad"))
    out = subprocess.run([sys.executable, "-m", "dbkit", "run", *algorithm, "--extension", str(path), "--optimizer",
                          "only-here", "--model", "linear", "--steps", "20", "--scheduler", dask_cluster_address,
                          "--quiet"], capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("dbkit: error: the extension module 'only_here_rule'") and str(path) in line
    assert "cannot be imported on worker tcp://127.0.0.1:" in line and "ModuleNotFoundError" in line
    assert "client.upload_file" in line

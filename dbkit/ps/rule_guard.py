"""An update rule of one's own, checked at each push (issue #48): dbkit's own rules are trusted on the shard's hot
path; a rule from an extension has its output checked, and a bad one is refused with its parameters as they
were and the rule named, rather than blamed on the learning rate or silently training nothing.

What is checked: ``apply`` returned nothing (it updated in place) or an array of the parameters' shape (taken
as the new parameters); the parameters and the rule's state are finite afterwards; and a step that is not
zero changed something. A check costs two copies of the shard's slice a push (its parameters and state
before), which only a rule of one's own pays.
"""

from __future__ import annotations

import numpy as np

from .update_rule import UpdateRule, finite_norm


class RuleError(ValueError):
    """An update rule of one's own did something a rule must not: says which rule and what."""


def trusted(rule: UpdateRule) -> bool:
    """Whether ``rule`` is one of dbkit's own (tested here; not checked at each push)."""
    return type(rule).__module__.startswith("dbkit.")


class GuardedUpdate:
    """A shard's update with a rule of one's own: the parameters and state kept before it, and put back if the
    rule fails a check. Owned by one shard, called under its lock."""

    def __init__(self, size: int) -> None:
        self.before = np.empty(size, dtype=np.float32)
        self.state_before: np.ndarray | None = None

    def apply(self, rule: UpdateRule, params: np.ndarray, grad: np.ndarray, scaled: np.ndarray,
              state: np.ndarray | None, spare: np.ndarray, staleness: int) -> None:
        """``rule.apply_scaled`` with its output checked; ``RuleError`` (everything as it was) if it fails."""
        np.copyto(self.before, params)
        if state is not None:
            if self.state_before is None or self.state_before.shape != state.shape:
                self.state_before = np.empty_like(state)
            np.copyto(self.state_before, state)
        moved = bool(np.any(scaled))  # (before the rule may overwrite its scratch)
        try:
            out = rule.apply_scaled(params, grad, scaled, state, spare, staleness)
            problem = self._check(rule, params, state, out, moved)
        except RuleError:
            raise
        except Exception as e:  # noqa: BLE001 - the rule's own error, named
            problem = f"raised {type(e).__name__}: {e}"
        if problem is not None:
            np.copyto(params, self.before)
            if state is not None and self.state_before is not None:
                np.copyto(state, self.state_before)
            raise RuleError(f"update rule {rule.name!r} ({type(rule).__module__}.{type(rule).__qualname__}) "
                            f"{problem}; the push was refused and the parameters left as they were")

    def _check(self, rule: UpdateRule, params: np.ndarray, state: np.ndarray | None, out: object,
               moved: bool) -> str | None:
        if out is not None:
            if not isinstance(out, np.ndarray) or out.shape != params.shape:
                shape = getattr(out, "shape", type(out).__name__)
                return (f"returned {shape}, not None (updated in place) nor an array of the parameters' shape "
                        f"{params.shape}")
            if out is not params:
                np.copyto(params, out, casting="same_kind")  # the new parameters, returned
        if not finite_norm(params):
            return "wrote NaN or inf into the parameters (the pushed gradient and lr * gradient were finite)"
        if state is not None and not finite_norm(state):
            return "wrote NaN or inf into its state"
        kept = state is None or self.state_before is None or np.array_equal(state, self.state_before)
        if moved and kept and np.array_equal(params, self.before):
            return ("changed nothing for a step that is not zero: update params in place (params -= ...) or "
                    "return the new parameters")
        return None

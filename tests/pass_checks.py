"""Shared checks for pass tests (no tests here): outputs agree, a pipeline keeps meaning."""

from __future__ import annotations

import numpy as np

from tw_passes import run_pipeline
from twdialect import evaluate
from twdialect.analysis import first_use_before_def
from twdialect.interp import find_graph
from twdialect.random_graphs import sample_inputs


def assert_same(before: dict, after: dict, rtol: float = 1e-4) -> None:
    """Outputs agree within `rtol` relative to their magnitude (at least 1)."""
    assert before.keys() == after.keys()
    for name in before:
        scale = max(1.0, float(np.max(np.abs(before[name]))))
        err = float(np.max(np.abs(after[name] - before[name])))
        assert err <= rtol * scale, f"output {name}: error {err} vs scale {scale}"


def run_and_compare(module, spec: str, n_positions: int, seed: int = 0, inputs=None):
    """Apply `spec` in place; the result verifies, stays ordered and keeps the oracle's values."""
    inputs = inputs or sample_inputs(module, n_positions, seed)
    before = evaluate(module, inputs)
    run_pipeline(module, spec)
    module.verify()
    assert first_use_before_def(find_graph(module).block) is None
    assert_same(before, evaluate(module, inputs, n_positions=n_positions))
    return module

"""Every library op against an independent numpy reference over its documented distribution,
through the oracle and through the compiled transformer (fp32)."""

import numpy as np
import pytest

from twdialect import evaluate
from twdialect.library import REGISTRY
from twdialect.library.cases import CASES

GEOMETRY = dict(d=256, d_head=16, d_hidden=4096)


def _check(case, got, ref, where):
    allowed = case.atol + case.rtol * np.abs(ref)
    err = np.abs(got - ref)
    bad = np.argwhere(err > allowed)
    assert bad.size == 0, (f"{case.key} ({where}): max error {err.max():.3g} exceeds the "
                           f"contract at {bad[:3].tolist()}")


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_oracle_matches_reference(case):
    inputs = case.sample(np.random.default_rng(1))
    ref = case.reference(inputs)
    got = evaluate(case.module(), inputs)["y"]
    assert got.shape == ref.shape
    _check(case, got, ref, "oracle")


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_compiled_matches_reference(case):
    from tw_lowering import compile

    inputs = case.sample(np.random.default_rng(2))
    ref = case.reference(inputs)
    ct = compile(case.module(), **GEOMETRY)
    _check(case, ct.run(inputs)["y"], ref, "compiled")


def test_every_op_has_a_case():
    covered = {c.op for c in CASES}
    assert sorted(set(REGISTRY) - covered) == []


def test_case_keys_are_unique():
    keys = [c.key for c in CASES]
    assert len(keys) == len(set(keys))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_compiled_many_seeds(case):
    from tw_lowering import compile

    ct = compile(case.module(), **GEOMETRY)
    for seed in range(10, 30):
        inputs = case.sample(np.random.default_rng(seed))
        _check(case, ct.run(inputs)["y"], case.reference(inputs), f"compiled seed {seed}")


def test_builders_are_deterministic():
    from twdialect import print_module

    for case in CASES:
        assert print_module(case.module()) == print_module(case.module()), case.key

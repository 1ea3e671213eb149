"""Refusals that tell the truth (`lowering/refusal.py`): the widths a GeometryError names are
checked against a scan that compiles at every width below them.

The d named is the smallest multiple of d_head that fits (at the same d_head and d_hidden):
it compiles, and every smaller multiple is refused. The d_hidden named (at the same d) is the
smallest that fits: it compiles, and every smaller one is refused. Graphs: the Caesar cipher
and the adder written in primitives (examples/primitive; their feasibility was not monotone
in d before the pressure model), random graphs, and the FileCheck refusal tests'
own graphs (tests/filecheck/lowering/refusal_*.mlir), whose messages hold the scanned widths.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tw_examples.primitive as prim
from tw_lowering import compile  # noqa: A004
from tw_lowering.machine import GeometryError, Machine
from twdialect.random_graphs import random_graph

SMALLEST_D = re.compile(r"smallest d that fits \(d_head=(\d+), d_hidden=(\d+)\): (\d+)")
SMALLEST_D_HIDDEN = re.compile(r"smallest d_hidden that fits at d=(\d+): (\d+)")
LOWERING_CHECKS = Path(__file__).parent / "filecheck" / "lowering"


def fits(module, d: int, d_head: int, d_hidden: int, pipeline=None) -> bool:
    try:
        compile(module, d=d, d_head=d_head, d_hidden=d_hidden, pipeline=pipeline)
        return True
    except GeometryError:
        return False


def refusal(module, d: int, d_head: int, d_hidden: int, pipeline=None) -> str:
    with pytest.raises(GeometryError) as e:
        compile(module, d=d, d_head=d_head, d_hidden=d_hidden, pipeline=pipeline)
    return str(e.value)


def named_d(message: str) -> int:
    m = SMALLEST_D.search(message)
    assert m, f"no smallest d named: {message}"
    return int(m.group(3))


def assert_smallest_d(module, named: int, d_head: int, d_hidden: int, pipeline=None) -> None:
    """`named` fits and every smaller multiple of d_head (above the reserved columns) does not."""
    assert fits(module, named, d_head, d_hidden, pipeline), f"d={named} is refused"
    smaller = [d for d in range(d_head, named, d_head) if d > Machine.RESERVED]
    fitting = [d for d in smaller if fits(module, d, d_head, d_hidden, pipeline)]
    assert not fitting, f"named d={named}, but {fitting} fit too"


def assert_smallest_d_hidden(module, d: int, d_head: int, d_hidden: int, named: int) -> None:
    assert fits(module, d, d_head, named), f"d_hidden={named} is refused at d={d}"
    fitting = [h for h in range(d_hidden, named) if fits(module, d, d_head, h)]
    assert not fitting, f"named d_hidden={named}, but {fitting} fit too"


# --------------------------------------------------------------------------------------
# The programs written in primitives
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("program, d, d_head, d_hidden, smallest", [
    ("caesar", 32, 16, 512, 48),  # its anchor's geometry, one d_head short
    ("caesar", 40, 2, 40, 42),
    ("adder", 14, 2, 14, 16),
    ("adder", 8, 2, 3, 16),
])
@pytest.mark.parametrize("pipeline", [None, "default"])
def test_a_primitive_program_is_told_the_smallest_d_a_scan_finds(program, d, d_head, d_hidden,
                                                                 smallest, pipeline):
    module = prim.load(program).module
    message = refusal(module, d, d_head, d_hidden, pipeline)
    assert named_d(message) == smallest
    assert_smallest_d(module, smallest, d_head, d_hidden, pipeline)


# --------------------------------------------------------------------------------------
# Random graphs
# --------------------------------------------------------------------------------------


def _random(seed: int):
    return random_graph(seed, n_ops=40, max_width=6, library=False)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("d", [8, 16, 24])
def test_a_random_graph_is_told_the_smallest_d_a_scan_finds(seed, d):
    module = _random(seed)
    if fits(module, d, 2, 64):
        pytest.skip("fits")
    assert_smallest_d(module, named_d(refusal(module, d, 2, 64)), 2, 64)


# Widths where dead columns block (measured: a d_hidden of 8 leaves no room for the cancels
# that would let the task at the peak refill the columns of the operands it reads last).
DEAD_COLUMNS = [(0, 38, 40, 13), (1, 40, 42, 15), (8, 44, 46, 12)]  # seed, d, smallest d, d_hidden


@pytest.mark.parametrize("seed, d, smallest, smallest_hidden", DEAD_COLUMNS)
def test_where_dead_columns_block_the_message_says_so_and_names_both_ways_out(
        seed, d, smallest, smallest_hidden):
    module = _random(seed)
    message = refusal(module, d, 2, 8)
    assert "dead columns block, not live values" in message
    assert named_d(message) == smallest
    assert_smallest_d(module, smallest, 2, 8)
    m = SMALLEST_D_HIDDEN.search(message)
    assert m and (int(m.group(1)), int(m.group(2))) == (d, smallest_hidden)
    assert_smallest_d_hidden(module, d, 2, 8, smallest_hidden)


def test_the_ways_out_come_cheapest_first_with_their_parameters():
    seed, d, smallest, smallest_hidden = DEAD_COLUMNS[1]
    message = refusal(_random(seed), d, 2, 8)
    ways = re.search(r"ways out, cheapest first: (.*)$", message).group(1)
    listed = re.findall(r"(d_hidden|d)=(\d+) \(([\d,]+) parameters a layer\)", ways)
    at = {"d_hidden": Machine(d=d, d_head=2, d_hidden=smallest_hidden),
          "d": Machine(d=smallest, d_head=2, d_hidden=8)}
    assert [(k, int(v)) for k, v, _ in listed] == [("d_hidden", smallest_hidden), ("d", smallest)]
    for key, _, params in listed:
        assert int(params.replace(",", "")) == at[key].layer_capacity()


def test_the_default_pipeline_is_named_where_its_graph_fits_as_is():
    """Seed 0 at d=38, d_hidden=8: compiled as written it is refused; the default pipeline's
    graph fits there, at no wider layer, so it is the cheapest way out."""
    module = _random(0)
    message = refusal(module, 38, 2, 8)
    assert re.search(r'ways out, cheapest first: pipeline="default" \(', message)
    assert fits(module, 38, 2, 8, pipeline="default")


def test_where_live_values_block_no_dead_columns_are_blamed():
    """At d=14 the outputs alone are live together beyond the free columns."""
    message = refusal(_random(0), 14, 2, 8)
    assert "no order needs fewer" in message
    assert "dead columns" not in message and "smallest d_hidden" not in message


def test_an_mlp_wider_than_d_hidden_is_told_the_d_hidden_a_scan_finds():
    import numpy as np

    from twdialect import ops as tw

    with tw.Graph("main") as g:
        x = tw.input("x", 1, value_range=(-1, 1))
        tw.output("m", tw.mlp(x, np.ones((1, 40)), None, np.ones((40, 1))))
    message = refusal(g.module, 16, 4, 32)
    assert message.startswith("'tw.mlp' in @main: needs 40 MLP neurons, d_hidden=32")
    assert "no d up to MAX_DIM fits with this d_head and d_hidden" in message
    m = SMALLEST_D_HIDDEN.search(message)
    assert m and int(m.group(1)) == 16
    assert_smallest_d_hidden(g.module, 16, 4, 32, int(m.group(2)))


# --------------------------------------------------------------------------------------
# The FileCheck refusal tests' graphs
# --------------------------------------------------------------------------------------


def _run_geometry(text: str) -> tuple[int, int, int]:
    m = re.search(r"lower-to-transformer\{d=(\d+) d-head=(\d+) d-hidden=(\d+)\}", text)
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


@pytest.mark.parametrize("path", sorted(LOWERING_CHECKS.glob("refusal_*.mlir")),
                         ids=lambda p: p.name)
def test_each_filecheck_refusal_names_the_widths_a_scan_finds(path):
    """The d (and d_hidden) each refusal_*.mlir CHECKs are the scan's: the message is the
    lowering's, its numbers are facts about the graph."""
    from twdialect import parse_module

    text = path.read_text()
    module = parse_module(text)
    d, d_head, d_hidden = _run_geometry(text)
    checks = "\n".join(line for line in text.splitlines() if line.startswith("// CHECK"))
    m = SMALLEST_D.search(checks)
    assert m and (int(m.group(1)), int(m.group(2))) == (d_head, d_hidden)
    assert_smallest_d(module, int(m.group(3)), d_head, d_hidden)
    mh = SMALLEST_D_HIDDEN.search(checks)
    if mh:
        assert int(mh.group(1)) == d
        assert_smallest_d_hidden(module, d, d_head, d_hidden, int(mh.group(2)))

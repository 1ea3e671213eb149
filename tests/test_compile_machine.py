"""`tw_lowering.compile_machine` and `tw-machine`: small firebrand machines compiled by tw,
generated with the KV cache, against `firebrand.reference.run` token for token; the geometry
chosen when unset; the one-line errors."""

import json
import warnings

import pytest

pytest.importorskip("firebrand", reason="firebrand (tw-compiler[firebrand]) is not installed")

from firebrand import reference  # noqa: E402
from firebrand.ir import Machine, constant, history, position_mod, select  # noqa: E402
from firebrand.program import Int  # noqa: E402,F401 - the @program annotations below

from tw_lowering import compile_machine  # noqa: E402
from tw_lowering.machines import CompiledMachine, MachineError  # noqa: E402
from tw_tools.tw_machine import main  # noqa: E402
from twdialect.errors import TwError  # noqa: E402
from tw_frontends.firebrand.translator import FirebrandError  # noqa: E402


def _counter():
    return Machine(history(0) + 1, lower=0, upper=12, halt_values=(12,), context_limit=16)


def _fibonacci():
    return Machine((history(0) + history(1)) % 10, lower=0, upper=9, halt_values=(0,),
                   min_prefix=2, context_limit=40)


def _select():
    x = history(0)
    table = [3, 1, 4, 1, 5, 2, 6, 5, 3]  # indexed by x + (position mod 3), 0..8
    nxt = select(x.equals(6), constant(0), (x + position_mod(3)).lookup(table))
    return Machine(nxt, lower=0, upper=6, halt_values=(0,), context_limit=24)


def _compiled(machine, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float32's static bound on the softmax reads
        return compile_machine(machine, **kw)


@pytest.fixture(scope="module")
def counter():
    return _compiled(_counter())


@pytest.fixture(scope="module")
def fibonacci():
    return _compiled(_fibonacci())


@pytest.fixture(scope="module")
def selecting():
    return _compiled(_select())


@pytest.mark.parametrize("prefix,steps", [([0], 20), ([5], 3), ([12], 5), ([7], 0)])
def test_counter_matches_reference(counter, prefix, steps):
    assert isinstance(counter, CompiledMachine)
    assert counter.generate(prefix, steps) == reference.run(counter.machine, prefix, steps)


@pytest.mark.parametrize("prefix", [[1, 1], [2, 7], [5, 5], [3, 0], [9, 9]])
def test_fibonacci_matches_reference(fibonacci, prefix):
    got = fibonacci.generate(prefix, 30)
    assert got == reference.run(fibonacci.machine, prefix, 30)
    assert fibonacci.stats.layers >= 1 and fibonacci.stats.heads >= 1


@pytest.mark.parametrize("prefix", [[1], [2], [4, 5], [3, 3, 3], [6]])
def test_select_lookup_matches_reference(selecting, prefix):
    assert selecting.generate(prefix, 15) == reference.run(selecting.machine, prefix, 15)


def test_stats_come_from_the_compiled_model(fibonacci):
    s, cs = fibonacci.stats, fibonacci.compiled.stats
    assert (s.layers, s.floor, s.residual, s.d_head) == (cs.n_layers, cs.floor, cs.d, cs.d_head)
    assert s.params == cs.allocated_params == fibonacci.compiled.allocated_params()
    assert s.neurons == sum(cs.neurons_per_layer) and s.heads == sum(cs.heads_per_layer)
    assert fibonacci.max_context == 40


def test_geometry_narrowest_at_fewest_layers(selecting):
    s = selecting.stats
    assert s.d_head == 16 and s.residual % 16 == 0 and s.d_hidden == 4 * s.residual
    wider = _compiled(_select(), d=4 * s.residual)
    assert s.layers <= wider.stats.layers
    if s.residual > 16:  # one d_head narrower: deeper, or it does not fit
        try:
            narrower = _compiled(_select(), d=s.residual - 16)
        except TwError:
            pass
        else:
            assert narrower.stats.layers > s.layers
    assert wider.generate([2], 15) == reference.run(wider.machine, [2], 15)


def test_max_context_defaults():
    m = Machine(history(0) + 1, lower=0, upper=3, halt_values=(3,))
    assert _compiled(m).max_context == 256
    with pytest.raises(MachineError, match="exceeds the machine's context_limit 16"):
        compile_machine(_counter(), max_context=17)


def test_context_overflow_is_one_line(counter):
    with pytest.raises(MachineError) as e:
        counter.generate([0] * 17, 1)
    assert "beyond max_context 16" in str(e.value) and "\n" not in str(e.value)
    m = Machine(history(0) + 1, lower=0, upper=30, halt_values=(30,), context_limit=8)
    with pytest.raises(MachineError, match="not halted") as e:
        _compiled(m).generate([0], 20)
    assert "\n" not in str(e.value)


def test_value_outside_alphabet_is_one_line():
    m = Machine(history(0) + 1, lower=0, upper=5, context_limit=12)  # no halt: 6 comes next
    with pytest.raises(ValueError, match="outside alphabet"):
        reference.run(m, [3], 5)
    with pytest.raises(MachineError, match=r"next value 6 lies outside its alphabet \[0, 5\]"):
        _compiled(m).generate([3], 5)


def test_bad_prefix_is_one_line(fibonacci):
    with pytest.raises(MachineError, match="needs at least 2"):
        fibonacci.generate([1], 3)
    with pytest.raises(MachineError, match="outside the machine's alphabet"):
        fibonacci.generate([1, 10], 3)


def test_refused_construct_is_named():
    # an interval beyond 2**24 (float32's exact integers): refused naming the op
    m = Machine((history(0) * 5000000).relu(), lower=0, upper=9, context_limit=16)
    with pytest.raises(FirebrandError) as e:
        compile_machine(m)
    assert "scale(5000000)" in str(e.value) and "\n" not in str(e.value)


def test_cli_runs_a_machine(capsys):
    assert main(["fibonacci", "1", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    m = Machine((history(0) + history(1)) % 10, lower=0, upper=9, halt_values=(0,), min_prefix=2)
    assert out["tokens"] == reference.run(m, [1, 1], 100)
    assert out["halted"] and out["steps"] == len(out["tokens"]) - 2 and out["layers"] >= 1
    assert main(["counter", "3", "--upper", "6"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "3 4 5 6" and lines[1].startswith("# 3 steps (halted)")


@pytest.mark.parametrize("argv,says", [
    (["rv32", "no-such.elf"], "rv32: cannot read no-such.elf"),
    (["nope"], "unknown machine"),
    (["counter", "x"], "not an integer"),
])
def test_cli_errors_are_one_line(capsys, argv, says):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tw-machine: error: ") and says in err


@pytest.mark.parametrize("name,words,layers_below", [
    ("gcd", ["6", "4"], 23),              # firebrand: 23 FFN stages
    ("histogram", ["0", "2", "1", "2"], 21),
    ("stack", ["push:3", "push:4", "pop"], 13),
    ("life", [], 17),
    ("arithmetic", ["12+34="], 122),
])
def test_bundled_firebrand_machines_run_exactly(name, words, layers_below):
    """Every firebrand machine tw-machine bundles compiles (hard reads count as integers, so
    the float32 check of the tents behind them passes) and generates the reference's tokens,
    in fewer layers than firebrand's own compile has FFN stages."""
    import types

    from tw_tools.tw_machine import build

    args = types.SimpleNamespace(max_context=None, upper=15, modulus=10)
    machine, prefix = build(name, words, args)
    cm = compile_machine(machine)
    steps = min(400, cm.max_context - len(prefix))
    assert cm.generate(prefix, steps) == reference.run(machine, prefix, steps)
    assert cm.stats.layers < layers_below


def _program_gcd():
    """An @program function (firebrand reads its annotations from the module's globals)."""
    from firebrand.program import program

    def gcd(a: Int[0, 31], b: Int[0, 31]):
        while a != 0 and b != 0:
            if a > b:
                a = a - b
            else:
                b = b - a
        return a + b

    return program(max_context=1024)(gcd)


def _example_machines():
    """firebrand's other example machines, each as a user holds it (a spec, a RecordMachine
    with its transition, a SequenceMachine, an @program function), with a small input."""
    from firebrand.machines.gcd import gcd_machine
    from firebrand.machines.instruction import ADD, LOAD, OUT, SET, STORE, InstructionSpec
    from firebrand.machines.lambda_calculus import App, Lam, LambdaSpec, Var
    from firebrand.machines.pixel import PixelMachineSpec
    from firebrand.machines.scheduled_histogram import ScheduledHistogramSpec
    from firebrand.machines.tile import TileMachineSpec
    gcd = _program_gcd()
    lam = LambdaSpec()
    ins = InstructionSpec()
    tile = TileMachineSpec()
    seq = gcd_machine(value_limit=15, max_context=512)

    program_ = [(SET, 3), (ADD, 4), (STORE, 1), (LOAD, 1), (OUT, 0)]
    return {
        "lambda": (lam, {}, list(lam.serialize(App(Lam(Var(0)), Lam(Var(0))))[0])),
        "pixel": (PixelMachineSpec(), {}, list(PixelMachineSpec().encode([1, 2]))),
        "tile": (tile, {}, list(tile.encode([1], [[0] * tile.width] * tile.height))),
        "instruction": (ins.protocol, {"transition": ins.transition}, list(ins.encode(program_))),
        "scheduled_histogram": (ScheduledHistogramSpec(cells=3, capacity=8), {},
                                list(ScheduledHistogramSpec(cells=3, capacity=8).encode([0, 2, 1]))),
        "indexed_histogram": (ScheduledHistogramSpec(cells=3, capacity=8, indexed=True), {},
                              list(ScheduledHistogramSpec(cells=3, capacity=8, indexed=True)
                                   .encode([0, 2, 1]))),
        "sequence_gcd": (seq, {}, list(seq.initialize(a=6, b=4, result=0))),
        "program_gcd": (gcd, {}, list(gcd.prompt(12, 8))),
    }


@pytest.mark.parametrize("name", ["lambda", "pixel", "tile", "instruction", "scheduled_histogram",
                                  "indexed_histogram", "sequence_gcd", "program_gcd"])
def test_every_firebrand_form_compiles_and_runs_exactly(name):
    from tw_frontends.firebrand import as_machine

    held, kw, prefix = _example_machines()[name]
    machine = as_machine(held, **kw)
    cm = compile_machine(held, **kw)
    steps = min(400, cm.max_context - len(prefix))
    assert cm.generate(prefix, steps) == reference.run(machine, prefix, steps)


def test_machine_forms_refused_in_one_line():
    from firebrand.machines.instruction import InstructionSpec

    from tw_lowering.machines import MachineError

    with pytest.raises(MachineError, match="a RecordMachine needs its transition"):
        compile_machine(InstructionSpec().protocol)
    with pytest.raises(MachineError, match="transition= goes with a firebrand RecordMachine"):
        compile_machine(Machine(history(0), lower=0, upper=3), transition=lambda s: None)
    with pytest.raises(MachineError, match="got int"):
        compile_machine(3)

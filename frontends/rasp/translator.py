"""RASP programs (DeepMind tracr's language) as tw graphs, exact by construction.

    from tracr.rasp import rasp
    from tw_frontends.rasp.translator import translate
    program = rasp.Map(lambda x: x + 1, rasp.tokens)
    rg = translate(program, vocab={1, 2, 3}, max_seq_len=5)
    rg.module                        # a tw module: evaluate it, run passes, compile it

`tw_lowering.compile_rasp_to_model` (tracr's own interface) compiles the result.

The sequence the graph runs on is tracr's: position 0 holds the BOS token, positions 1..n the
input tokens, so RASP's `indices` at position p is p - 1. Encodings follow tracr's
annotations (`rasp.categorical`, the default, and `rasp.numerical`):

* a categorical SOp is a one-hot vector over its value set (all zero: None), a numerical
  SOp one number;
* Map / SequenceMap are tables over the input value sets, so every one is exact: a
  categorical input is a `tw.linear` (one-hot rows), a numerical one a `tw.piecewise_linear`
  through its value set, a pair of inputs one MLP with a neuron per value pair (inputs that
  are Maps of one SOp: a table over that SOp's values, `_root`);
* Select + Aggregate / SelectorWidth is one `tw.attn` whose logits are GAIN * [selected]
  between one-hot queries and keys (any predicate, and any And/Or/Not tree, is a table over
  the joint value sets); BOS is every query's fallback: it takes half the gain, so it wins
  only where nothing is selected (Aggregate's default), or the full gain for SelectorWidth,
  where its share 1 / (width + 1) gives the width through a table (a selector that picks
  every key counts positions instead: the length is one head reading the last position,
  a prefix's width the position itself, `_count_all`);
* the program's output, where categorical, is one number (`output_codes`: number values as
  themselves, others by rank; 0 is None) made by the op that would make its one-hot (a
  table through its points, an MLP's or a head's output matrix times the codes), so the
  residual holds one column, not one per value; `decode` reads the nearest code, the argmax
  of logits 2 c x - c^2, a linear read-out of [x, 1];
* every value at the BOS position is a compile-time constant (BOS attends only to itself),
  computed here by the oracle as the graph grows; heads subtract it from their keys and
  queries so a BOS column never looks selected, and Aggregate replaces it by the default.

Beyond tracr: numerical Select keys and queries, SequenceMap over numerical inputs, Map from
numerical to categorical, Aggregate defaults other than None/0, numerical tokens and
indices, `length` (full attention only), ConstantSOp and ConstantSelector are compiled (each
through an exact table). Refused, with the expression named: value sets too large to table
(MAX_TABLE entries; a SequenceMap's pairs MAX_PAIRS, one neuron each), `length` under a
causal mask (a causal model cannot see the sequence's end), values that are neither numbers
nor hashable, a numerical SOp holding a non-number.

The translation in files (one concern each; `docs/newcomer.md` walks through adding a construct):

| file | what it decides |
| --- | --- |
| `validate.py` | what the frontend takes: every refusal of a program named at once |
| `value_sets.py` | every SOp's value set before anything is built, and what only value sets decide (a selector picking one key, a SOp fixing another, a sum of two means) |
| `nodes.py` | the record per SOp (`Encoded`) and which stage writes each of its facts |
| `values.py`, `numbers.py` | the value-set functions both stages use (no op built) |
| `float32.py`, `tables.py`, `keys.py` | the float32 rules, tables through points, key comparisons |
| `build.py` | the graph, BOS constants, the dispatch of each SOp (`_Graph.sop`) |
| `maps.py`, `sums.py` | Map / SequenceMap as tables, linear maps and sums of numbers |
| `heads.py`, `aggregate.py` | Select's heads, Aggregate and SelectorWidth |
| `reads.py`, `built.py` | how one op reads another's value narrowly |
| `graph.py` | the translated program (`RaspGraph`) and how its output is coded |
| `plan.py` | what a translation tries (`Plan`) and what the next tries where it does not stand |
| this file | `translate`: the stages in order (validate, value sets, plan, build), re-planned until one stands, then pruned to what its output reads |
"""

from __future__ import annotations

from typing import Any

from tw_frontends.rasp.limits import ATOL, RaspError, _FeaturesNoNarrower, _need_tracr
from tw_frontends.rasp.built import _is_read, _prune, _unread
from tw_frontends.rasp.graph import RaspGraph, output_codes
from tw_frontends.rasp.aggregate import _Aggregates
from tw_frontends.rasp.build import _Graph, checked_arguments
from tw_frontends.rasp.heads import _HeadReads, _Heads
from tw_frontends.rasp.maps import _Maps, _Tables
from tw_frontends.rasp.reads import _Reads
from tw_frontends.rasp.sums import _SumsOfMeans
from tw_frontends.rasp.validate import validate
from tw_frontends.rasp.value_sets import ValueSets
from tw_frontends.rasp.plan import FEATURES, INDICES, SUMS, Plan

__all__ = ["RaspError", "RaspGraph", "output_codes", "translate"]


class _Translator(_Graph, _Reads, _Maps, _Tables, _SumsOfMeans, _Heads, _HeadReads, _Aggregates):
    """One program's translation: a memo of translated expressions and the graph it grows
    (`_Graph`), each part of RASP translated by its own class (their files: the table
    above), all reading one state."""


def translate(program, vocab, max_seq_len: int, causal: bool = False,
              compiler_bos: Any = "compiler_bos", compiler_pad: Any = "compiler_pad", *,
              atol: float | None = None) -> RaspGraph:
    """The tw graph of a RASP program (tracr's arguments: the input vocabulary, the longest
    input, causal or full attention, the BOS and pad tokens; `atol`: how far a numerical
    output may be from RASP's value, else it is refused; None: ATOL)."""
    _need_tracr()
    arguments = checked_arguments(vocab, max_seq_len, causal, compiler_bos, compiler_pad,
                                  ATOL if atol is None else atol)
    analyses: dict = {}  # (the program's functions, asked once across the translations)
    sets = ValueSets(*arguments[:3])  # (one for every plan)
    validate(program, *arguments[:3], sets)
    effort: dict = {"graphs": 0, "ops": 0, "replans": [], "in_place": []}
    plan = Plan()
    while True:
        t = _Translator(arguments, compiler_bos, compiler_pad, plan, sets, analyses)
        effort["graphs"] += 1
        reason, refusal = None, None
        try:
            rg = t.build(program)
            if t.narrowed_indices and _is_read(t.indices_onehot):
                reason = INDICES
        except _FeaturesNoNarrower:
            reason = FEATURES
        except RaspError as e:
            reason, refusal = SUMS, e
        finally:
            effort["ops"] += len(t.graph.ops) if hasattr(t, "graph") else 0
            effort["replans"] += t.replanned
            effort["in_place"] += t.replanned
        if reason is None:
            break
        following = t.plan.after(reason, frozenset(t.numbered_sums))
        if following is None:  # (nothing left to change)
            if reason == INDICES:
                break  # (the translation stands as it is)
            raise refusal or AssertionError("token features given up without features")
        effort["replans"].append(reason)
        plan = following
    rg.effort = {**effort, "unread": _unread(t.graph)}
    _prune(t.graph.op.body.block)
    return _verified(rg)


def _verified(rg: RaspGraph) -> RaspGraph:
    rg.module.verify()
    return rg

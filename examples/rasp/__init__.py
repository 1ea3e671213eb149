"""tracr's own RASP program library (`tracr.compiler.lib`), each with the vocabulary its tests
use: what the RASP frontend's tests and `bench/frontends.py` compile at several lengths.

    from tw_examples.rasp import LIB_PROGRAMS
    program, vocab = LIB_PROGRAMS["sort"](max_seq_len=10)

Every entry builds the program for a given max_seq_len (some programs, such as sort, take it
as an argument). `reverse.py` in this folder is a program file for `tw-rasp`.
"""

from __future__ import annotations

from typing import Callable


def _lib():
    from tracr.compiler import lib
    from tracr.rasp import rasp

    return lib, rasp


# name -> (lib, rasp, max_seq_len) -> (program, vocab); tracr's lib.py, in its order.
_SPECS: dict[str, Callable] = {
    "length": lambda lib, rasp, n: (rasp.categorical(lib.make_length()), {"a", "b", "c"}),
    "reverse": lambda lib, rasp, n: (lib.make_reverse(rasp.tokens), {"a", "b", "c"}),
    "hist": lambda lib, rasp, n: (lib.make_hist(), {"a", "b", "c"}),
    "sort_unique": lambda lib, rasp, n: (lib.make_sort_unique(rasp.tokens, rasp.tokens),
                                         {1, 2, 3}),
    "sort": lambda lib, rasp, n: (lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=n,
                                                min_key=1), {1, 2, 3}),
    "sort_freq": lambda lib, rasp, n: (lib.make_sort_freq(max_seq_len=n), {1, 2, 3}),
    "frac_prevs": lambda lib, rasp, n: (lib.make_frac_prevs(rasp.tokens == "x"),
                                        {"x", "y", "z"}),
    "pair_balance": lambda lib, rasp, n: (lib.make_pair_balance(rasp.tokens, "(", ")"),
                                          {"(", ")", "a"}),
    "shuffle_dyck": lambda lib, rasp, n: (lib.make_shuffle_dyck(pairs=["()"]), {"(", ")", "a"}),
    "shuffle_dyck2": lambda lib, rasp, n: (lib.make_shuffle_dyck2(), {"(", ")", "{", "}"}),
    "count_less_freq": lambda lib, rasp, n: (lib.make_count_less_freq(2), {"a", "b", "c"}),
    "count": lambda lib, rasp, n: (lib.make_count(rasp.tokens, "a"), {"a", "b", "c"}),
    "nary_sequencemap": lambda lib, rasp, n: (lib.make_nary_sequencemap(
        lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens, rasp.indices), {1, 2, 3}),
    "shift_by": lambda lib, rasp, n: (lib.shift_by(2, rasp.tokens), {"a", "b", "c"}),
    "detect_pattern": lambda lib, rasp, n: (lib.detect_pattern(rasp.tokens, "ab"),
                                            {"a", "b", "c"}),
}


def _builder(spec: Callable) -> Callable[[int], tuple]:
    return lambda n: spec(*_lib(), n)


# name -> (max_seq_len -> (program, vocab)): tracr is imported only when a program is built.
LIB_PROGRAMS: dict[str, Callable[[int], tuple]] = {name: _builder(spec)
                                                   for name, spec in _SPECS.items()}

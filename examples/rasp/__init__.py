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


def _length(n):
    lib, rasp = _lib()
    return rasp.categorical(lib.make_length()), {"a", "b", "c"}


def _reverse(n):
    lib, rasp = _lib()
    return lib.make_reverse(rasp.tokens), {"a", "b", "c"}


def _hist(n):
    lib, rasp = _lib()
    return lib.make_hist(), {"a", "b", "c"}


def _sort_unique(n):
    lib, rasp = _lib()
    return lib.make_sort_unique(rasp.tokens, rasp.tokens), {1, 2, 3}


def _sort(n):
    lib, rasp = _lib()
    return lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=n, min_key=1), {1, 2, 3}


def _sort_freq(n):
    lib, rasp = _lib()
    return lib.make_sort_freq(max_seq_len=n), {1, 2, 3}


def _frac_prevs(n):
    lib, rasp = _lib()
    return lib.make_frac_prevs(rasp.tokens == "x"), {"x", "y", "z"}


def _pair_balance(n):
    lib, rasp = _lib()
    return lib.make_pair_balance(rasp.tokens, "(", ")"), {"(", ")", "a"}


def _shuffle_dyck(n):
    lib, rasp = _lib()
    return lib.make_shuffle_dyck(pairs=["()"]), {"(", ")", "a"}


def _shuffle_dyck2(n):
    lib, rasp = _lib()
    return lib.make_shuffle_dyck2(), {"(", ")", "{", "}"}


def _count_less_freq(n):
    lib, rasp = _lib()
    return lib.make_count_less_freq(2), {"a", "b", "c"}


def _count(n):
    lib, rasp = _lib()
    return lib.make_count(rasp.tokens, "a"), {"a", "b", "c"}


def _nary_sequencemap(n):
    lib, rasp = _lib()
    return lib.make_nary_sequencemap(lambda x, y, z: x + y - z, rasp.tokens, rasp.tokens,
                                     rasp.indices), {1, 2, 3}


def _shift_by(n):
    lib, rasp = _lib()
    return lib.shift_by(2, rasp.tokens), {"a", "b", "c"}


def _detect_pattern(n):
    lib, rasp = _lib()
    return lib.detect_pattern(rasp.tokens, "ab"), {"a", "b", "c"}


# name -> (max_seq_len -> (program, vocab)); tracr's lib.py, in its order.
LIB_PROGRAMS: dict[str, Callable[[int], tuple]] = {
    "length": _length,
    "reverse": _reverse,
    "hist": _hist,
    "sort_unique": _sort_unique,
    "sort": _sort,
    "sort_freq": _sort_freq,
    "frac_prevs": _frac_prevs,
    "pair_balance": _pair_balance,
    "shuffle_dyck": _shuffle_dyck,
    "shuffle_dyck2": _shuffle_dyck2,
    "count_less_freq": _count_less_freq,
    "count": _count,
    "nary_sequencemap": _nary_sequencemap,
    "shift_by": _shift_by,
    "detect_pattern": _detect_pattern,
}

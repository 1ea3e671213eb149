"""What the RASP frontend's translation costs, as JSON: graphs built per program (the retries:
token features that did not pay, index reads that were not narrower, sums tabled after a
refusal: `replans`, by the reason `frontends/rasp/plan.py` names), ops built over all of
them (`replanned_in_place`: re-plans that built nothing again), ops of the kept graph its
output does not read (built, then read through or replaced; `translate` erases them before
it returns), and translation CPU time beside the whole compile's.

    python3 bench/rasp_translation.py                      # tracr's library at 5, 10, 20 and
                                                           # the fuzz campaign's seeds 0..599
    python3 bench/rasp_translation.py --fuzz-seeds 100 --sizes 5,10

A staged translation (value sets, then a plan, then building only what the plan names) should
bring `graphs_per_program` towards 1 and `unread_in_kept_graph` towards 0 with the same weights
(`bench/weights_digest.py`). One line a set, then the totals; the slowest programs last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests"))


def _programs(sizes, seeds):
    """(set, name, build) for tracr's library at each size and each fuzz seed."""
    from tw_examples.rasp import LIB_PROGRAMS

    for n in sizes:
        for name in LIB_PROGRAMS:
            yield "tracr", f"{name} n={n}", lambda name=name, n=n: (*LIB_PROGRAMS[name](n), n,
                                                                     False)
    from test_rasp_fuzz import generate
    for seed in seeds:
        prog = generate(seed)
        yield "fuzz", f"fuzz/{seed}", lambda p=prog: (p.build(), set(p.vocab), p.max_seq_len,
                                                      p.causal)


def _one(build) -> dict:
    """One program translated (`effort`, CPU seconds) and compiled (CPU seconds), or refused."""
    from tw_frontends.rasp.limits import RaspError
    from tw_frontends.rasp.translator import translate
    from tw_lowering import compile_rasp_to_model
    from weights_digest import BOS, _fresh_ids, _quiet

    with _quiet():
        program, vocab, n, causal = build()
        _fresh_ids(program)
        start = time.process_time()
        try:
            rg = translate(program, vocab, n, causal, compiler_bos=BOS)
        except RaspError:
            return {"refused": True, "translate_s": time.process_time() - start}
        translated = time.process_time() - start
        _fresh_ids(program)
        start = time.process_time()
        compile_rasp_to_model(program, vocab, n, causal=causal, compiler_bos=BOS)
        compiled = time.process_time() - start
    return {**rg.effort, "translate_s": translated, "compile_s": compiled}


def _summary(rows: list[dict]) -> dict:
    done = [r for r in rows if not r.get("refused")]
    graphs = sum(r["graphs"] for r in done)
    ops = sum(r["ops"] for r in done)
    unread = sum(r["unread"] for r in done)
    reasons = Counter(reason for r in done for reason in r["replans"])
    return {"programs": len(rows), "refused": len(rows) - len(done),
            "graphs_per_program": round(graphs / max(1, len(done)), 3),
            "retried_programs": sum(r["graphs"] > 1 for r in done),
            "replans": dict(sorted(reasons.items())),
            "replanned_in_place": sum(len(r["in_place"]) for r in done),
            "ops_built": ops, "unread_in_kept_graph": unread,
            "translate_cpu_s": round(sum(r["translate_s"] for r in rows), 2),
            "compile_cpu_s": round(sum(r.get("compile_s", 0.0) for r in done), 2)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="5,10,20", help="tracr library lengths (comma list)")
    ap.add_argument("--fuzz-seeds", type=int, default=600, help="fuzz seeds 0..N-1")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    by_set: dict[str, list] = {}
    slow = []
    for kind, name, build in _programs(sizes, range(args.fuzz_seeds)):
        row = _one(build)
        by_set.setdefault(kind, []).append(row)
        slow.append((row["translate_s"], name))
    for kind, rows in by_set.items():
        print(json.dumps({"set": kind, **_summary(rows)}))
    print(json.dumps({"set": "all", **_summary([r for rows in by_set.values() for r in rows])}))
    print(json.dumps({"slowest_translations": [[name, round(s, 2)]
                                               for s, name in sorted(slow, reverse=True)[:5]]}))


if __name__ == "__main__":
    main()

"""sha256 of the compiled weights of the bundled programs and a few random graphs: a refactor
that claims "behaviour unchanged" must leave every line of this output as it was.

    python3 bench/weights_digest.py > before.txt   # ... change ...
    python3 bench/weights_digest.py | diff before.txt -
"""

from __future__ import annotations

import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def digest(ct) -> str:
    h = hashlib.sha256()
    for name, t in ct.named_buffers():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    import tw_examples as examples
    import tw_examples.library
    import tw_examples.primitive
    import tw_lowering as lowering
    from twdialect.random_graphs import layered_graph

    sets = (("", examples), ("library/", tw_examples.library), ("primitive/", tw_examples.primitive))
    for prefix, package in sets:
        for name in package.PROGRAMS:
            p = package.load(name)
            g = p.geometry
            for pipeline in (None, "default"):
                ct = lowering.compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden,
                                      pipeline=pipeline)
                print(f"{prefix + name:28s} {str(pipeline):8s} layers={ct.n_layers:3d} "
                      f"{digest(ct)}", flush=True)
    for n in (300, 3000):
        module, _ = layered_graph(n, seed=1)
        ct = lowering.compile(module, d=512, d_head=16, d_hidden=2048, pipeline="default")
        print(f"{'layered_' + str(n):28s} default  layers={ct.n_layers:3d} {digest(ct)}",
              flush=True)


if __name__ == "__main__":
    main()

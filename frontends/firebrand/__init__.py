"""firebrand's machines on tw: `translate` (firebrand's integer expression IR into a tw graph,
`translator.py`) and `compile_machine` (firebrand's own entry point: the graph compiled into a
`tw_lowering.machines.CompiledMachine` that generates to a halt value, `compiler.py`).

    from tw_frontends.firebrand import compile_machine
"""

from tw_frontends.firebrand.compiler import as_machine, compile_machine
from tw_frontends.firebrand.translator import (FirebrandError, intervals, needs_float64,
                                               score_magnitudes, translate)

__all__ = ["translate", "compile_machine", "as_machine", "FirebrandError", "intervals",
           "needs_float64", "score_magnitudes"]

"""tracr's RASP on tw: `translate` (a RASP program into a tw graph, `translator.py`) and
`compile_rasp_to_model` (tracr's own interface: the graph compiled into weights, `compiler.py`).

    from tracr.rasp import rasp
    from tw_frontends.rasp import compile_rasp_to_model
"""

from tw_frontends.rasp.compiler import (MAX_SEQ_LEN, MAX_VOCAB, RaspModel, RaspOutput,
                                        check_arguments, compile_rasp_to_model)
from tw_frontends.rasp.translator import RaspError, RaspGraph, output_codes, translate

__all__ = ["translate", "compile_rasp_to_model", "RaspError", "RaspGraph", "RaspModel",
           "RaspOutput", "check_arguments", "output_codes", "MAX_SEQ_LEN", "MAX_VOCAB"]

"""The bundled token programs written with the ops library only (`twdialect/library`).

Each module here mirrors the hand-tuned program of the same name in `examples/`: same vocabulary,
same prompts, same answers, but the graph is built from library ops (no hand-assembled MLP
matrices) and parses the variable-length prompt itself (no host-side normalisation such as
zero-padding operands). They are compiled through the default pipeline and reported beside the
hand-tuned versions (`bench/primitive_graphs.py`).
"""

PROGRAMS = ("adder", "calculator", "binary_increment", "sort_digits", "caesar", "fibonacci",
            "balanced_parens")


def load(name: str):
    """The TokenProgram of a library-only program, by name (KeyError for an unknown one)."""
    import importlib

    if name not in PROGRAMS:
        raise KeyError(f"unknown library program {name!r} (known: {', '.join(PROGRAMS)})")
    return importlib.import_module(f"tw_examples.library.{name}").build()

"""Token programs written in primitives, torchwright style (see `prims`): every nonlinear
step is a tw.linear -> tw.relu -> tw.linear sandwich, every attention helper one tw.attn
reading a positional source; no tw.mlp and no library op. Same vocabularies, prompts and
answers as the bundled programs of the same name (`examples/`), but each graph parses the
variable-length prompt itself. `synthetic` builds torchwright-style graphs by size and seed.
"""

PROGRAMS = ("adder", "binary_increment", "caesar", "fibonacci", "balanced_parens",
            "sort_digits", "calculator")


def available() -> tuple[str, ...]:
    """The programs whose module exists (the list grows as they are written)."""
    import importlib.util

    return tuple(n for n in PROGRAMS
                 if importlib.util.find_spec(f"tw_examples.primitive.{n}") is not None)


def load(name: str):
    """The TokenProgram of a primitive program, by name (KeyError for an unknown one)."""
    import importlib

    if name not in PROGRAMS:
        raise KeyError(f"unknown primitive program {name!r} (known: {', '.join(PROGRAMS)})")
    return importlib.import_module(f"tw_examples.primitive.{name}").build()

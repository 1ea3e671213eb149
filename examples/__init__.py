"""Bundled token programs (text in, text out), each a module with `build() -> TokenProgram`.

`PROGRAMS` compile to relu MLPs and unrotated heads, which every export format carries;
`ROTARY_PROGRAMS` are written for a Llama-family machine (every head rotary, no position
feature in the residual; rotary_adder's MLPs swish and gated, rotary_reverse's relu), which
the ONNX and Llama exports carry. `ALL_PROGRAMS` is both, the names `load` and `tw-run`
take."""

PROGRAMS = ("adder", "calculator", "binary_increment", "sort_digits", "caesar", "fibonacci",
            "balanced_parens")
ROTARY_PROGRAMS = ("rotary_adder", "rotary_reverse")
ALL_PROGRAMS = PROGRAMS + ROTARY_PROGRAMS


def load(name: str):
    """The TokenProgram of a bundled example, by name (KeyError for an unknown one)."""
    import importlib

    if name not in ALL_PROGRAMS:
        raise KeyError(f"unknown program {name!r} (known: {', '.join(ALL_PROGRAMS)})")
    return importlib.import_module(f"tw_examples.{name}").build()

"""Bundled token programs (text in, text out), each a module with `build() -> TokenProgram`."""

PROGRAMS = ("adder", "calculator", "binary_increment", "sort_digits", "caesar", "fibonacci",
            "balanced_parens")


def load(name: str):
    """The TokenProgram of a bundled example, by name (KeyError for an unknown one)."""
    import importlib

    if name not in PROGRAMS:
        raise KeyError(f"unknown program {name!r} (known: {', '.join(PROGRAMS)})")
    return importlib.import_module(f"tw_examples.{name}").build()

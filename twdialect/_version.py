"""tw's version: the one place it is written (pyproject.toml reads it, `twdialect.__version__`
and every tool's `--version` print it)."""

__version__ = "0.2.0"

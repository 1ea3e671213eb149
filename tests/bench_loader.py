"""A benchmark script (bench/NAME.py) imported as a module for a test, under a name of its
own in sys.modules while the test runs (its dataclasses look their module up while being
built), and removed after."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"


@contextmanager
def loaded_bench(script: str) -> Iterator[object]:
    """bench/<script> imported as `<stem>_under_test`."""
    path = BENCH_DIR / script
    name = f"{path.stem}_under_test"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(name, None)

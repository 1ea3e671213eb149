"""tw rewrite passes: one atomic rewrite per file, kebab-case pass name == file name.

The registry is lazy (as in xDSL): a pass module is imported only when a pipeline names it.
"""

from __future__ import annotations

from twdialect.errors import TwError
import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass, PassPipeline

# Pass name -> module that defines it. Passes live here; the lowering lives in lowering/.
TW_PASSES: dict[str, str] = {
    "decompose": "passes.decompose",
    "form-mlps": "passes.form_mlps",
    "fuse-linears": "passes.fuse_linears",
    "horizontal-fuse": "passes.horizontal_fuse",
    "select-tree-to-pwl2d": "passes.select_tree_to_pwl2d",
    "sequential-scope": "passes.sequential_scope",
    "balance-sums": "passes.balance_sums",
    "optimize": "passes.optimize",
    "lower-to-transformer": "lowering.lower_to_transformer",
}


def _loader(name: str, module: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        mod = importlib.import_module(module)
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, ModulePass) and obj is not ModulePass \
                    and getattr(obj, "name", None) == name:
                return obj
        raise ImportError(f"module {module} defines no pass named {name!r}")

    return load


def get_tw_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    return {name: _loader(name, module) for name, module in TW_PASSES.items()}


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Upstream xDSL passes (cse, dce, canonicalize, ...) plus tw's own."""
    from xdsl.transforms import get_all_passes as upstream

    passes = dict(upstream())
    passes.update(get_tw_passes())
    return passes


class PipelineError(TwError):
    """A pipeline string names an unknown pass or gives a bad option."""


def parse_pipeline(spec: str) -> PassPipeline:
    """`"decompose,cse,fuse-linears{max-params=0}"` -> a PassPipeline (xdsl-opt syntax)."""
    available = get_all_passes()
    try:
        return PassPipeline.parse_spec(available, spec)
    except Exception as e:  # noqa: BLE001 - xDSL raises bare ValueErrors for every spec problem
        raise PipelineError(f"bad pipeline {spec!r}: {e}") from None


def run_pipeline(module, spec: str):
    """Apply a pipeline string to `module` in place and return it."""
    from twdialect import make_context

    if not spec.strip():
        return module
    parse_pipeline(spec).apply(make_context(), module)
    return module

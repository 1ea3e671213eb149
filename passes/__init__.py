"""tw rewrite passes: one atomic rewrite per file, kebab-case pass name == file name.

The registry is lazy (as in xDSL): a pass module is imported only when a pipeline names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError

from twdialect.errors import TwError

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


# The upstream xDSL passes that make sense on tw IR (checked on the bundled programs: they
# verify, print and parse back). The other ~130 upstream passes rewrite other dialects: on tw IR
# they do nothing, fail, or (test-add-timers-to-top-level-funcs, convert-pdl-to-pdl-interp)
# write IR that tw cannot read back. Every pipeline entry point (run_pipeline, compile's
# pipeline=, optimize{pipeline=...}, tw-opt, tw-stats) takes only these and tw's own passes.
UPSTREAM_PASSES = ("canonicalize", "cse", "dce")


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Pass name -> factory: UPSTREAM_PASSES plus tw's own (nothing imported yet)."""
    from xdsl.transforms import get_all_passes as upstream

    available = upstream()
    passes = {name: available[name] for name in UPSTREAM_PASSES}
    passes.update(get_tw_passes())
    return passes


class PipelineError(TwError):
    """A pipeline string names an unknown pass or gives a bad option."""


class PassOptionError(TwError):
    """A pass option outside its domain (found when the pass runs, e.g. `batch-size=0`)."""


def parse_pipeline(spec: str) -> PassPipeline:
    """`"decompose,cse,fuse-linears{max-params=0}"` -> a PassPipeline (xdsl-opt syntax)."""
    if not isinstance(spec, str):
        raise PipelineError(f"a pipeline is a string such as \"canonicalize,cse\", got "
                            f"{type(spec).__name__}")
    available = get_all_passes()
    try:
        return PassPipeline.parse_spec(available, spec)
    except (Exception, ArgSpecParseError) as e:  # noqa: BLE001 - xDSL raises bare ValueErrors
        # for most spec problems, and ArgSpecParseError (a BaseException) for syntax errors.
        reason = _last_line(e)
        if reason.startswith("Unrecognized passes"):
            reason += f" (known: {', '.join(sorted(available))})"
        raise PipelineError(f"bad pipeline {spec!r}: {reason}") from None


def _last_line(e: BaseException) -> str:
    """xDSL's syntax errors span several lines (spec, caret, reason): keep the reason."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def run_pipeline(module, spec: str):
    """Apply a pipeline string to `module` in place and return it."""
    from twdialect import make_context

    if isinstance(spec, str) and not spec.strip():
        return module
    parse_pipeline(spec).apply(make_context(), module)
    return module

"""tw rewrite passes: one atomic rewrite per file, kebab-case pass name == file name.

The registry is lazy (as in xDSL): a pass module is imported only when a pipeline names it.
Per-graph passes derive from `passes.graph_pass.GraphPass` (it owns the loop over graphs).

A pipeline is a tuple of configured pass objects (`Pipeline`), e.g. `passes.optimize.
DEFAULT_PIPELINE`. Its text form, the spec string of xdsl-opt ("decompose,fuse-linears{fanout=
false}"), is for the command line only: `pipeline_passes` reads one (the one place a spec is
split), `pipeline_spec` writes one, and `run_pipeline`, the one entry point, runs either.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError

from twdialect.errors import TwError

# Pass name -> module that defines it. Passes live here; the lowering lives in lowering/, and so
# do the passes that need its scheduler's model (sequential-scope, rematerialize): named here by
# module, imported when a pipeline names them, so nothing in passes/ imports the lowering.
TW_PASSES: dict[str, str] = {
    "decompose": "tw_passes.decompose",
    "form-mlps": "tw_passes.form_mlps",
    "fuse-linears": "tw_passes.fuse_linears",
    "fuse-select-trees": "tw_passes.fuse_select_trees",
    "horizontal-fuse": "tw_passes.horizontal_fuse",
    "select-tree-to-pwl2d": "tw_passes.select_tree_to_pwl2d",
    "sequential-scope": "tw_lowering.sequential_scope",
    "balance-sums": "tw_passes.balance_sums",
    "rematerialize": "tw_lowering.rematerialize",
    "optimize": "tw_passes.optimize",
    "lower-to-transformer": "tw_lowering.lower_to_transformer",
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
    """A pipeline names an unknown pass or gives a bad option, or is not a pipeline at all."""


class PassOptionError(TwError):
    """A pass option outside its domain (found when the pass runs, e.g. `batch-size=0`)."""


# A pipeline: the passes, run in order. Strings name pipelines only where text comes in.
Pipeline = tuple[ModulePass, ...]


def pipeline_passes(pipeline: str | Sequence[ModulePass]) -> Pipeline:
    """The passes of `pipeline`: a spec string is parsed (naming only `get_all_passes()`), a
    tuple (or list) of pass objects is checked; anything else is a PipelineError."""
    if isinstance(pipeline, str):
        return _parse_spec(pipeline)
    if isinstance(pipeline, (tuple, list)):
        return _checked_passes(pipeline)
    raise PipelineError(f"a pipeline is a string such as \"canonicalize,cse\" or a tuple of "
                        f"passes, got {type(pipeline).__name__}")


def _parse_spec(spec: str) -> Pipeline:
    if not spec.strip():
        return ()
    available = get_all_passes()
    try:
        return PassPipeline.parse_spec(available, spec).passes
    except (Exception, ArgSpecParseError) as e:  # noqa: BLE001 - xDSL raises bare ValueErrors
        # for most spec problems, and ArgSpecParseError (a BaseException) for syntax errors.
        reason = _last_line(e)
        if reason.startswith("Unrecognized passes"):
            reason += f" (known: {', '.join(sorted(available))})"
        raise PipelineError(f"bad pipeline {spec!r}: {reason}") from None


def _checked_passes(passes: Sequence[ModulePass]) -> Pipeline:
    """Pass objects as given (any ModulePass: the caller chose it, no name look-up)."""
    for i, p in enumerate(passes):
        if isinstance(p, type) and issubclass(p, ModulePass):
            raise PipelineError(f"pipeline item {i} is the class {p.__name__}: give a pass "
                                f"object, {p.__name__}()")
        if not isinstance(p, ModulePass):
            raise PipelineError(f"pipeline item {i} is a {type(p).__name__}, not a pass object "
                                "(a pipeline is a tuple of passes, or one spec string)")
    return tuple(passes)


def _last_line(e: BaseException) -> str:
    """xDSL's syntax errors span several lines (spec, caret, reason): keep the reason."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def pipeline_spec(pipeline: Sequence[ModulePass]) -> str:
    """The spec string of a pipeline (what `tw-opt -p` takes): options that differ from their
    defaults, in kebab-case. `pipeline_passes` reads it back to equal pass objects."""
    return ",".join(pass_spec(p) for p in _checked_passes(pipeline))


def pass_spec(module_pass: ModulePass) -> str:
    """One pass as spec text: `fuse-linears{fanout=false max-duplicate-params=8}`."""
    spec = module_pass.spec()
    options = " ".join(_option_spec(module_pass, name, values)
                       for name, values in spec.parameters.items())
    return f"{spec.name}{{{options}}}" if options else spec.name


def _option_spec(module_pass: ModulePass, name: str, values) -> str:
    key = name.replace("_", "-")
    if not values:
        return key
    return f"{key}={','.join(_value_spec(module_pass, key, v) for v in values)}"


def _value_spec(module_pass: ModulePass, key: str, value) -> str:
    """A value as xDSL's spec lexer reads it back (a float needs a '.' in its mantissa)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        mantissa, e, exponent = repr(value).partition("e")
        return (mantissa if "." in mantissa else mantissa + ".0") + e + exponent
    if isinstance(value, str):
        if '"' in value:
            raise PipelineError(f"{module_pass.name}: option {key}={value!r} holds a '\"', which "
                                "a spec string cannot quote")
        return f'"{value}"'
    return str(value)


def parse_pipeline(spec: str | Sequence[ModulePass]) -> PassPipeline:
    """`"decompose,cse,fuse-linears{max-params=0}"` (or a tuple of passes) -> an xDSL
    PassPipeline, for code that drives the passes one at a time (tw-opt, the fuzz harness)."""
    return PassPipeline(pipeline_passes(spec))


def run_pipeline(module, pipeline: str | Sequence[ModulePass], after_each=None):
    """Apply `pipeline` (a tuple of passes, or a spec string) to `module` in place and return
    it: the one way Python code runs a pipeline (`lowering.prepare` too). `after_each(pass,
    module)`, if given, is called after every pass (the compile report's per-pass record)."""
    from twdialect import make_context

    passes = pipeline_passes(pipeline)
    if passes:
        callback = None if after_each is None else \
            (lambda done, mod, _next: done is not None and after_each(done, mod))
        PassPipeline(passes, callback).apply(make_context(), module)
    return module


def needs_decompose(module) -> bool:
    """Whether `decompose` has work in `module` (a ModuleOp or a GraphOp): the lowering reads
    primitives only, so library ops left after a pipeline are decomposed, and a pipeline may
    skip its `decompose` where no library op is left (it would change nothing)."""
    from twdialect.dialect import LIBRARY_OPS

    return any(isinstance(op, LIBRARY_OPS) for op in module.walk())

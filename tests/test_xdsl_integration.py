"""tw inside xDSL: stock `xdsl-opt` finds the tw dialect and tw's passes through the
`xdsl.universe` entry point (pyproject.toml -> tools.tw_opt.TW_UNIVERSE), and tw's patches of
xDSL (twdialect/xdsl_compat.py) are applied once, for xDSL 0.74 only."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from xdsl.pattern_rewriter import (PatternRewriter, PatternRewriteWalker, RewritePattern,
                                   op_type_rewrite_pattern)

from twdialect import parse_module, print_module
from twdialect.dialect import ReluOp

from cli_checks import BIN_DIR, GOOD, REPO  # noqa: E402

# Two linears in a chain: fuse-linears folds them into one (weights multiplied).
CHAIN = GOOD.replace(
    "%r = tw.relu %x : !tw.vec<2>",
    "%a = tw.linear %x weight dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32> : "
    "!tw.vec<2> -> !tw.vec<2>\n"
    "    %r = tw.linear %a weight dense<[[1.0, 0.0], [0.0, 2.0]]> : tensor<2x2xf32> : "
    "!tw.vec<2> -> !tw.vec<2>")


def _xdsl_opt(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "graph.mlir").write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO),
                                                       os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([os.path.join(BIN_DIR, "xdsl-opt"), "graph.mlir", *args],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_stock_xdsl_opt_reads_and_prints_tw(tmp_path: Path) -> None:
    result = _xdsl_opt(tmp_path, GOOD)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == GOOD.strip()


def test_stock_xdsl_opt_runs_tw_passes(tmp_path: Path) -> None:
    result = _xdsl_opt(tmp_path, CHAIN, "-p", "canonicalize,fuse-linears")
    assert result.returncode == 0, result.stderr
    fused = parse_module(result.stdout)
    linears = [op for op in fused.walk() if op.name == "tw.linear"]
    assert len(linears) == 1, result.stdout
    assert "[[1.000000e+00, 4.000000e+00], [3.000000e+00, 8.000000e+00]]" in result.stdout


def test_the_universe_holds_tw_and_its_own_passes_only() -> None:
    """Upstream passes stay xDSL's: a second definition would stop xdsl-opt from starting."""
    from xdsl.universe import Universe

    from tw_passes import TW_PASSES, UPSTREAM_PASSES
    from tw_tools.tw_opt import TW_UNIVERSE

    assert set(TW_UNIVERSE.all_dialects) == {"tw"}
    assert set(TW_UNIVERSE.all_passes) == set(TW_PASSES)
    assert not set(TW_UNIVERSE.all_passes) & set(UPSTREAM_PASSES)
    multiverse = Universe.get_multiverse()
    assert "tw" in multiverse.all_dialects and set(TW_PASSES) <= set(multiverse.all_passes)


def test_another_xdsl_series_is_refused_naming_the_pinned_one() -> None:
    from twdialect.errors import TwError
    from twdialect.xdsl_compat import XdslVersionError, check_xdsl_version

    check_xdsl_version("0.74.0")
    check_xdsl_version("0.74.3")
    for found in ("0.75.0", "0.7.4", "1.0"):
        with pytest.raises(XdslVersionError, match=r"tw needs xdsl 0\.74\.x .* found xdsl "):
            check_xdsl_version(found)
    assert issubclass(XdslVersionError, ImportError) and issubclass(XdslVersionError, TwError)


def test_patches_are_applied_once() -> None:
    from twdialect.xdsl_compat import install, patches

    before = [getattr(owner, name) for owner, name, _ in patches()]
    install()
    assert [getattr(owner, name) for owner, name, _ in patches()] == before


class RefuseRelu(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: ReluOp, rewriter: PatternRewriter, /) -> None:
        raise RuntimeError("no relu here")


def test_an_error_inside_a_pattern_records_its_op() -> None:
    """The pattern driver reports an exception at its op through `emit_error`: the error keeps
    the op, so tools locate it (tw-opt's `pass ... failed` line)."""
    module = parse_module(GOOD)
    with pytest.raises(RuntimeError) as info:
        PatternRewriteWalker(RefuseRelu()).rewrite_module(module)
    assert isinstance(info.value.op, ReluOp)
    assert print_module(module).strip() == GOOD.strip()

"""tw installed beside the frontends' packages (tracr-pypi, which brings dm-haiku and its
top-level `examples`, and torchwright): every import name tw installs is its own, and every
console script runs from an unrelated directory."""

from __future__ import annotations

import importlib.metadata as metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TW_NAMES = {"twdialect", "tw_passes", "tw_lowering", "tw_frontends", "tw_tools", "tw_examples"}
DIST = "tw-compiler"  # the distribution's name (pyproject.toml); `tw` is another project's


def test_tw_installs_only_its_own_import_names():
    mine = {name for name, dists in metadata.packages_distributions().items() if DIST in dists}
    assert mine == TW_NAMES


def test_frontend_packages_are_installed_beside_tw():
    """The test extra installs both frontends' packages, so this environment is the one the
    issue describes (a top-level `examples` from dm-haiku included)."""
    pytest.importorskip("tracr.rasp.rasp")
    pytest.importorskip("torchwright")
    owners = metadata.packages_distributions().get("examples", [])
    assert DIST not in owners


def _run(args, tmp_path, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp_path, **kw)


@pytest.mark.parametrize("script", ["tw-opt", "tw-run", "tw-stats", "tw-export", "tw-rasp"])
def test_console_script_help(script, tmp_path):
    exe = shutil.which(script)
    assert exe is not None, f"{script} is not on PATH"
    r = _run([exe, "--help"], tmp_path)
    assert r.returncode == 0 and "usage" in r.stdout.lower(), r.stderr


def test_console_scripts_run_beside_tracr_and_torchwright(tmp_path):
    pytest.importorskip("tracr.rasp.rasp")
    pytest.importorskip("torchwright")
    r = _run([shutil.which("tw-run"), "adder", "123+456="], tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "579", r.stderr
    src = tmp_path / "g.mlir"
    src.write_text('builtin.module {\n  tw.graph @main {\n'
                   '    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>\n'
                   '    %y = tw.relu %x : !tw.vec<1>\n'
                   '    tw.output "y" %y : !tw.vec<1>\n  }\n}\n')
    r = _run([shutil.which("tw-opt"), str(src), "-p", "canonicalize"], tmp_path)
    assert r.returncode == 0 and "tw.relu" in r.stdout, r.stderr
    r = _run([shutil.which("tw-stats"), str(src), "--d", "16", "--d-head", "8"], tmp_path)
    assert r.returncode == 0 and "layers" in r.stdout, r.stderr
    r = _run([shutil.which("tw-rasp"), str(ROOT / "examples/rasp/reverse.py"), "1", "2"],
             tmp_path)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "['BOS', 2, 1]", r.stderr


def test_haiku_examples_do_not_shadow_tw(tmp_path):
    """With dm-haiku's `examples` importable, tw's bundled programs still load."""
    pytest.importorskip("haiku")
    code = ("import examples, tw_examples; "
            "assert examples.__file__ != tw_examples.__file__; "
            "print(tw_examples.load('adder').name)")
    r = _run([sys.executable, "-c", code], tmp_path)
    if "No module named 'examples'" in r.stderr:
        pytest.skip("this dm-haiku has no top-level examples package")
    assert r.returncode == 0 and r.stdout.strip() == "adder", r.stderr

"""One version, written once (twdialect/_version.py): the installed distribution's metadata,
`twdialect.__version__` and every console script's `--version` say the same."""

from __future__ import annotations

import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys

import pytest

import twdialect

# The distribution's name (pyproject.toml); `tw` is another project's.
DIST = "tw-compiler"
SCRIPTS = {"tw-opt": "tw_tools.tw_opt", "tw-run": "tw_tools.tw_run",
           "tw-stats": "tw_tools.tw_stats", "tw-export": "tw_tools.tw_export",
           "tw-rasp": "tw_tools.tw_rasp", "tw-machine": "tw_tools.tw_machine"}


def test_one_version_everywhere():
    assert re.fullmatch(r"\d+\.\d+\.\d+", twdialect.__version__), twdialect.__version__
    assert "__version__" in twdialect.__all__
    assert metadata.version(DIST) == twdialect.__version__


def test_the_distribution_declares_its_console_scripts():
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")
               if e.dist is not None and e.dist.name == DIST}
    assert scripts == {name: f"{module}:main" for name, module in SCRIPTS.items()}


def _check(result: subprocess.CompletedProcess, script: str) -> None:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    words = lines[0].split()
    assert words[:2] == [script, twdialect.__version__], lines[0]


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_console_script_version(script, tmp_path):
    """The installed entry point, from an unrelated directory, needs no other argument (tw-export
    and tw-stats have required ones)."""
    exe = shutil.which(script)
    assert exe is not None, f"{script} is not on PATH"
    _check(subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path), script)


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_module_version(script, tmp_path):
    """`python3 -m tw_tools.<tool> --version`, with other arguments around it."""
    args = ["--version", "--json"] if script != "tw-opt" else ["--version"]
    _check(subprocess.run([sys.executable, "-m", SCRIPTS[script], *args], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path), script)

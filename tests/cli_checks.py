"""Shared by the CLI and entry-point tests: where the tools live and a small valid graph."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN_DIR = os.path.dirname(sys.executable)

# A small valid graph; tests derive bad inputs from it by replacing its text.
GOOD = """\
builtin.module {
  tw.graph @main {
    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<2>
    %r = tw.relu %x : !tw.vec<2>
    tw.output "y" %r : !tw.vec<2>
  }
}
"""

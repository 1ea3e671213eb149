"""The floors import downwards only: no module of the dialect (`twdialect/`), the passes
(`passes/`) or the lowering (`lowering/`) imports a frontend (`tw_frontends`, `frontends/`),
at import time or inside a function. The one exception is named: `tw_lowering.__getattr__`
resolves the frontends' drivers under the names callers know (`compile_machine`,
`compile_rasp_to_model`) on first use."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOWER_FLOORS = ("twdialect", "passes", "lowering")
ALLOWED = {("lowering/__init__.py", "__getattr__")}


def _imports(path: Path):
    """(enclosing function or None, imported module name) of every import in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    scopes = [(None, tree)]
    while scopes:
        owner, node = scopes.pop()
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else owner
            if isinstance(child, ast.Import):
                yield from ((inner, a.name) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module:
                yield inner, child.module
            scopes.append((inner, child))


def test_no_lower_floor_imports_a_frontend():
    found = []
    for floor in LOWER_FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for owner, name in _imports(path):
                if name.split(".")[0] == "tw_frontends" and (rel, owner) not in ALLOWED:
                    found.append(f"{rel} ({owner or 'module'}): {name}")
    assert not found, found


def test_the_dialect_holds_no_translator():
    assert not (ROOT / "twdialect" / "frontends").exists()
    import tw_frontends.firebrand
    import tw_frontends.rasp
    import tw_frontends.torchwright  # noqa: F401

    from tw_lowering import compile_machine, compile_rasp_to_model

    assert compile_rasp_to_model is tw_frontends.rasp.compile_rasp_to_model
    assert compile_machine is tw_frontends.firebrand.compile_machine


def test_the_scan_sees_an_import_inside_a_function(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from tw_frontends.rasp import translate\n")
    assert ("f", "tw_frontends.rasp") in set(_imports(src))

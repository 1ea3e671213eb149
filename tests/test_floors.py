"""The floors import downwards only, at import time or inside a function: the dialect
(`twdialect/`) < the passes (`passes/`) < the lowering (`lowering/`) < the frontends
(`frontends/`). The one exception is named: `tw_lowering.__getattr__` resolves the frontends'
drivers under the names callers know (`compile_machine`, `compile_rasp_to_model`) on first
use. (The canonicalization patterns are the dialect's own, `twdialect/canonicalization.py`,
with the op-side helpers they share with the passes' folds, `twdialect/op_sides.py`.) A pass that needs the
scheduler's model lives in the lowering (`lowering/rematerialize.py`,
`lowering/sequential_scope.py`), named in the pass registry by module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = (("twdialect", "twdialect"), ("passes", "tw_passes"), ("lowering", "tw_lowering"),
          ("frontends", "tw_frontends"))
ALLOWED = {("lowering/__init__.py", "__getattr__", "tw_frontends")}


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


def test_no_floor_imports_one_above_it():
    found = []
    for level, (folder, _) in enumerate(FLOORS):
        above = {name for _, name in FLOORS[level + 1:]}
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for owner, name in _imports(path):
                top = name.split(".")[0]
                if top in above and (rel, owner, top) not in ALLOWED:
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


# The frontends' size limits: a file a reader takes in at once, a class one concern, a
# function one screen (a function's lines include its docstring).
MAX_FILE, MAX_CLASS, MAX_FUNCTION = 900, 300, 60


def _oversized(folder: Path, root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        src = path.read_text()
        rel = str(path.relative_to(root))
        lines = src.count("\n")
        if lines > MAX_FILE:
            found.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(src)):
            size = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
            if isinstance(node, ast.ClassDef) and size > MAX_CLASS:
                found.append(f"{rel}: class {node.name}, {size} lines")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and size > MAX_FUNCTION:
                found.append(f"{rel}: {node.name}, {size} lines")
    return found


def test_the_frontends_keep_their_size_limits():
    found = _oversized(ROOT / "frontends")
    assert not found, found


def test_the_size_check_sees_a_long_function(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION))
    (tmp_path / "m.py").write_text(f"def f():\n{body}")
    assert _oversized(tmp_path, root=tmp_path) == ["m.py: f, 61 lines"]

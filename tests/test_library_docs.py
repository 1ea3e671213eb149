"""docs/ops.md is generated from the library: it must list every exported op with its current
contract, and every op must state its contract and cost."""

import importlib.util
import re
from pathlib import Path

import pytest

import twdialect.library as lib
from twdialect import ops as tw

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ops.md"


def _bench():
    spec = importlib.util.spec_from_file_location("ops_error_table",
                                                  ROOT / "bench" / "ops_error_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_list_every_exported_op_in_the_table_and_contracts():
    text = DOC.read_text()
    documented = set(re.findall(r"^### `(\w+)`$", text, flags=re.M))
    in_table = set(re.findall(r"^\| `(\w+)` \|", text, flags=re.M))
    assert sorted(set(lib.__all__) - documented) == []
    assert sorted(set(lib.__all__) - in_table) == []
    assert documented <= set(lib.__all__)


def test_docs_contract_section_matches_the_docstrings():
    text = DOC.read_text()
    assert _bench().render_contracts() in text, \
        "docs/ops.md is stale: run python bench/ops_error_table.py"


def test_docs_table_reports_every_case_within_contract():
    text = DOC.read_text()
    assert "**NO**" not in text


@pytest.mark.parametrize("name", lib.__all__)
def test_every_op_states_contract_and_cost(name):
    doc = (getattr(lib, name).__doc__ or "").lower()
    assert "contract" in doc and "cost" in doc, f"{name}: docstring must state contract and cost"


@pytest.mark.parametrize("name", lib.__all__)
def test_ops_are_reexported_by_the_builder(name):
    assert getattr(tw, name) is getattr(lib, name)

"""Hostile text meets the parser (twdialect/parsing.py): no hang, no internal exception, one
clear located message; and names of every kind print in a form that parses back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from xdsl.utils.exceptions import ParseError

import twdialect
from twdialect import ops as tw
from twdialect import parse_module, print_module

REPO = Path(__file__).resolve().parent.parent

HEAD = 'builtin.module {\n  tw.graph @main {\n    %x = tw.input "x" <-1.0, 1.0> : !tw.vec<1>\n'
TAIL = '    tw.output "y" %x : !tw.vec<1>\n  }\n}\n'


def _graph(body: str) -> str:
    return HEAD + body + TAIL


def test_unterminated_string_does_not_hang() -> None:
    """10^4 characters after an unterminated quote backtracked for longer than the age of the
    universe with xDSL's regex; the subprocess timeout (not a timing assertion) catches a hang."""
    script = textwrap.dedent("""
        import twdialect
        from xdsl.utils.exceptions import ParseError
        for text in ['%0 = tw.input "x' + 'a b' * 3400 + ' <-8.0, 8.0> : !tw.vec<2>\\n}\\n',
                     '%0 = tw.input "' + 'a' * 10000]:
            try:
                twdialect.parse_module('builtin.module {\\n' + text)
            except ParseError as e:
                print(e.span.get_location().line, e.msg)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("2 unterminated string literal: the line ends"), lines
    assert lines[1].startswith("2 unterminated string literal: the input ends"), lines


# text -> (message fragment, line:col of the error)
HOSTILE = {
    "unterminated": (_graph('    %y = tw.input "y <-1.0, 1.0> : !tw.vec<1>\n'),
                     "unterminated string literal", "4:19"),
    "bad_escape": (_graph('    %y = tw.input "y\\q" <-1.0, 1.0> : !tw.vec<1>\n'),
                   "invalid escape sequence '\\q'", "4:21"),
    "percent_alone": (_graph('    % = tw.relu %x : !tw.vec<1>\n'),
                      "expected a name right after '%' (such as %x or %0)", "4:5"),
    "stray_character": (_graph('    %y = tw.relu %x : !tw.vec<1> \x00\n'),
                        "unexpected character U+0000", "4:34"),
    "not_an_op": (_graph('    5\n'), "expected an operation, a block label", "4:5"),
    "unclosed_region": (HEAD, "a region opened with '{' is not closed", "4:1"),
    "long_integer": (_graph('    %y = tw.input "y" <-1.0, 1.0> : !tw.vec<' + "9" * 5000 + '>\n'),
                     "integer literal with 5000 digits is too long", "4:45"),
    "huge_splat": (_graph('    %y = tw.linear %x weight dense<1.0> : tensor<1x9999999999xf32> '
                          ': !tw.vec<1> -> !tw.vec<1>\n'),
                   "holds 9999999999 numbers, above the limit", "4:43"),
    "overflowing_number": (_graph('    %y = tw.linear %x weight dense<[[' + "9" * 400 + ']]> : '
                                  'tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>\n'),
                           "too large for its element type", "4:35"),
    "deep_regions": ("builtin.module {" * 3000 + "}" * 3000, "nesting too deep", None),
    "deep_brackets": (_graph('    %y = tw.linear %x weight dense<' + "[" * 3000 + "1.0"
                             + "]" * 3000 + '> : tensor<1x1xf32> : !tw.vec<1> -> !tw.vec<1>\n'),
                      "nesting too deep", None),
    "deep_attribute": ('builtin.module attributes {a = ' + "[" * 3000 + "]" * 3000 + '} {}\n',
                       "nesting too deep", None),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_text_is_one_clear_parse_error(name: str) -> None:
    text, message, where = HOSTILE[name]
    with pytest.raises(ParseError) as info:
        parse_module(text)
    assert message in info.value.msg, info.value.msg
    assert "{" not in info.value.msg.replace("'{'", ""), info.value.msg  # no raw placeholder
    if where is not None:
        loc = info.value.span.get_location()
        assert f"{loc.line}:{loc.col}" == where, info.value.msg


def test_strings_keep_every_escape() -> None:
    """The linear regex accepts what xDSL's did: \\" \\\\ \\n \\t and two hex digits."""
    module = parse_module(_graph('    %y = tw.input "a\\"b\\\\c\\nd\\te\\41" <-1.0, 1.0> : '
                                 '!tw.vec<1>\n'))
    names = [op.input_name.data for op in module.walk() if op.name == "tw.input"]
    assert names[1] == 'a"b\\c\nd\teA'


ODD_NAMES = ["é", 'a"b', "back\\slash", "new\nline", "tab\there", "日本語", "emoji 😀",
             "nul\x00byte", "{}<>@%", " ", "\x7f\x01"]


@pytest.mark.parametrize("generic", [False, True])
def test_odd_names_round_trip(generic: bool) -> None:
    """Non-ASCII and escaped characters in input, output, graph and annotation names print in
    a form that parses back to the same IR (they printed as hex escapes xDSL read as bytes)."""
    with tw.Graph('grä ph"x') as g:
        for name in ODD_NAMES:
            with tw.annotate(f"ann {name}"):
                x = tw.relu(tw.input(name, 1, value_range=(-1, 1)))
            tw.output(f"out {name}", x)
    text = print_module(g.module, generic=generic)
    again = parse_module(text)
    assert print_module(again, generic=generic) == text
    assert print_module(again) == print_module(g.module)
    inputs = [op.input_name.data for op in again.walk() if op.name == "tw.input"]
    assert inputs == ODD_NAMES
    assert [op.sym_name.data for op in again.walk() if op.name == "tw.graph"] == ['grä ph"x']


def test_escaped_utf8_is_a_string_and_other_bytes_are_refused() -> None:
    module = parse_module(_graph('    %y = tw.input "\\C3\\A9" <-1.0, 1.0> : !tw.vec<1>\n'))
    assert [op.input_name.data for op in module.walk() if op.name == "tw.input"][1] == "é"
    with pytest.raises(Exception) as info:  # \FF is not UTF-8: bytes, not a name
        parse_module(_graph('    %y = tw.input "\\FF" <-1.0, 1.0> : !tw.vec<1>\n'))
    assert "Traceback" not in str(info.value)


@pytest.mark.parametrize("spec, message", [
    ("cse;dce", "cannot read ';dce' at column 4"),
    ("cse{foo=0}", "pass 'cse' has no option 'foo' (it takes no options)"),
    ("fuse-linears{max-params=1}", "pass 'fuse-linears' has no option 'max-params' (its options: "
                                   "allow-inflate"),
    ("fuse-linears{allow-inflate=0}", "option 'allow-inflate' must be true or false, got '0'"),
    ("fuse-linears{max-duplicate-params=x}", "option 'max-duplicate-params' must be an integer, "
                                             "got 'x'"),
])
def test_pipeline_errors_name_the_pass_and_option(spec: str, message: str) -> None:
    from passes import PipelineError, parse_pipeline

    with pytest.raises(PipelineError) as info:
        parse_pipeline(spec)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_install_is_idempotent() -> None:
    from xdsl.utils.mlir_lexer import MLIRLexer

    lex = MLIRLexer.lex
    twdialect.parsing.install()
    assert MLIRLexer.lex is lex

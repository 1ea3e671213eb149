"""Parsing hostile text safely: fixes to xDSL 0.74's lexer and parser.

Every way tw reads IR text (`twdialect.parse_module`, `tw-opt`, `tw-stats`) goes through xDSL's
`Parser` and `MLIRLexer`; patching those classes once fixes every entry point alike. This module
holds the fixes; `twdialect/xdsl_compat.py` applies them (with tw's other patches of xDSL, once,
at `import twdialect`, after checking xDSL's version). A `wrap_*` function takes xDSL's method
and returns the fixed one; the others replace xDSL's outright.

* **String literals in linear time.** xDSL lexes a string with
  `"(?:[^"\\\n]+|\\...)*"`: a `+` inside a `*`, which backtracks exponentially when the closing
  quote is missing (26 characters after an unterminated `"` took 12 s, 34 over a minute). The
  same language with possessive quantifiers cannot backtrack. A string that does not close says
  so ("unterminated string literal", at its opening quote), and a bad escape names itself.
* **Names round-trip.** xDSL prints a non-ASCII character of a string as hex byte escapes
  (`"é"` -> `"\\C3\\A9"`) but lexed such a literal as raw bytes unless the bytes were ASCII, so
  a non-ASCII input, output, graph or annotation name printed in a form that did not parse back.
  A literal whose bytes are valid UTF-8 is now a string (as xDSL's own docstring says it is).
* **Clear messages** where xDSL's are cryptic: `Expected suffix identifier after {first_char}`
  (an unformatted placeholder), `in block definition` (the whole message when a region is not
  closed or holds something that is not an op), `Unexpected character`, `Could not parse
  entire input!` (now: the input is empty, does not start with an op, or has text such as an
  extra `}` after the end of the module, naming it), the pass pipeline's `Unknown token` and
  `Incompatible types: given (0,), expected <class 'bool'>` (which option?).
* **ParseErrors, not internal exceptions**, for text xDSL accepts but cannot represent: an
  integer type wider than MLIR's MAX_INTEGER_WIDTH bits (`0 : i18446744073709551616` computed
  2**(width-1) until a MemoryError), a dense literal of an element type xDSL cannot pack (i128,
  f80: a NotImplementedError) or with a value outside its integer type, a plain number where a
  complex element type wants a pair (an AssertionError with no message), a hex literal with
  bytes left over after its last element (any message printing it failed), and a lone
  surrogate in a string literal of a Python str (a UnicodeEncodeError).
* **Token checks that are not asserts.** xDSL consumes a token of a kind it believes it has
  already checked with an `assert`; where that belief is wrong (a complex element
  `(1.0, 2.0:` with no closing ')') the user got "AssertionError: Unexpected token Token(...)".
  A complex element's parts and punctuation are now checked with located messages, and any
  other such mismatch is a ParseError naming the token expected and the one found.
* **Bounded work.** Nesting deep enough to exhaust Python's stack is a located ParseError, not a
  RecursionError; a decimal integer literal has at most MAX_INTEGER_DIGITS digits (Python
  refuses to convert longer ones with an unrelated message); a `dense<...>` literal's type holds
  at most MAX_DENSE_ELEMENTS numbers, checked before a splat is expanded (a splat of type
  `tensor<1x9999999999xf32>` used to allocate until a MemoryError).

Each fix keeps xDSL's behaviour on text it already accepted.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
from typing import Union, get_args, get_origin, get_type_hints

from xdsl.parser import Parser
from xdsl.parser.attribute_parser import AttrParser
from xdsl.parser.generic_parser import GenericParser
from xdsl.utils import arg_spec
from xdsl.utils.exceptions import ArgSpecParseError, ParseError
from xdsl.utils.lexer import Input, Span, Token
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind, StringLiteral

# The longest decimal integer literal accepted; Python itself refuses to convert more than
# 4300 digits (sys.int_info.default_max_str_digits) and no tw literal needs more than a few.
MAX_INTEGER_DIGITS = 1000
# The widest integer type, MLIR's own bound (IntegerType::kMaxWidth). xDSL has none, and an
# integer attribute of type i18446744073709551616 computed 2**(width-1) until a MemoryError.
MAX_INTEGER_WIDTH = (1 << 24) - 1
# The most numbers a dense literal's type may hold; the same bound as the tw verifier's
# MAX_DENSE_ELEMENTS (a weight attribute holds at most that many).
MAX_DENSE_ELEMENTS = 1 << 26

# A string body: runs of plain characters or escapes. The possessive `++`/`*+` forbid
# backtracking, so a literal that does not close fails in time linear in its length.
_STRING_BODY = r'(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+'
_STRING_LITERAL = re.compile('"' + _STRING_BODY + '"')
_STRING_PREFIX = re.compile('"' + _STRING_BODY)

# A lone surrogate (U+D800..U+DFFF) is not a character: a Python str may hold one, UTF-8 cannot.
_SURROGATE = re.compile("[\ud800-\udfff]")

_SIGIL_EXAMPLES = {"%": "%x or %0", "^": "^bb0", "#": "#name", "!": "!tw.vec<2>"}


def _describe_char(c: str | None) -> str:
    """A character for a message: printable ones quoted, others by code point."""
    if c is None:
        return "the end of the input"
    if c.isprintable() and not c.isspace():
        return f"'{c}'"
    return f"U+{ord(c):04X}" + (" (a space)" if c == " " else "")


def _quote(text: str, limit: int = 40) -> str:
    """Source text for a message, quoted; a very long token (10^4 digits) is abbreviated."""
    if len(text) <= limit:
        return f"'{text}'"
    return f"'{text[:limit // 2]}...{text[-8:]}' ({len(text)} characters)"


def _describe_token(token: Token) -> str:
    """A token found where another was expected, as the source shows it."""
    if token.kind is MLIRTokenKind.EOF:
        return "the end of the input"
    return _quote(token.text)


# Token kinds without a fixed spelling, in words (punctuation kinds are their own spelling).
_KIND_WORDS = {"BARE_IDENT": "a name", "AT_IDENT": "a symbol name such as @main",
               "HASH_IDENT": "an attribute alias such as #name",
               "PERCENT_IDENT": "a value name such as %x", "CARET_IDENT": "a block label",
               "EXCLAMATION_IDENT": "a type such as !tw.vec<2>", "FLOAT_LIT": "a float",
               "INTEGER_LIT": "an integer", "STRING_LIT": "a string literal",
               "BYTES_LIT": "a bytes literal", "EOF": "the end of the input"}


def _describe_kind(kind) -> str:
    """A token kind expected by the parser, in words: "')'", "an integer"."""
    if isinstance(kind.value, str):
        return f"'{kind.value}'"
    return _KIND_WORDS.get(kind.name, kind.name.lower().replace("_", " "))


# -- lexer ---------------------------------------------------------------------------------


def _string_literal_error(lexer: MLIRLexer, start: int) -> ParseError:
    """Why the string literal opened at `start` does not lex, located where it goes wrong."""
    content = lexer.input.content
    end = _STRING_PREFIX.match(content, start).end()
    if end >= len(content):
        return ParseError(Span(start, start + 1, lexer.input),
                          "unterminated string literal: the input ends before its closing '\"'")
    if content[end] == "\\":
        escape = content[end:end + 2]
        return ParseError(Span(end, min(end + 2, len(content)), lexer.input),
                          f"invalid escape sequence '{escape}' in a string literal (use \\n, "
                          "\\t, \\\\, \\\" or two hex digits such as \\0A)")
    return ParseError(Span(start, start + 1, lexer.input),
                      "unterminated string literal: the line ends before its closing '\"' "
                      "(a string cannot span lines; write \\n for a line break)")


def lex_string_literal(self: MLIRLexer, start_pos: int):
    """xDSL's string lexer with a linear regex, clear errors and UTF-8 strings (see module doc)."""
    match = _STRING_LITERAL.match(self.input.content, start_pos)
    if match is None:
        raise _string_literal_error(self, start_pos)
    surrogate = _SURROGATE.search(self.input.content, start_pos, match.end())
    if surrogate is not None:  # xDSL's byte conversion would raise a UnicodeEncodeError
        raise ParseError(Span(surrogate.start(), surrogate.end(), self.input),
                         f"string literal holds {_describe_char(surrogate.group())}, a lone "
                         "surrogate, which is not a character (the text is not valid Unicode; "
                         "decode it with errors='replace')")
    self.pos = match.end()
    literal = StringLiteral(start_pos, self.pos, self.input)
    if "\\" in literal.text:
        try:
            literal.bytes_contents.decode("utf-8")
        except UnicodeDecodeError:
            return Token(MLIRTokenKind.BYTES_LIT, literal)
    return Token(MLIRTokenKind.STRING_LIT, literal)


def wrap_string_contents(original: property) -> property:
    """xDSL's `StringLiteral.string_contents` (a property), refusing with a located ParseError
    the bytes that are no UTF-8 (hex escapes such as \\C1 alone), where xDSL raised a bare
    UnicodeDecodeError from wherever a name was read (a graph's symbol, an input's name)."""

    def string_contents(self: StringLiteral) -> str:
        try:
            return original.fget(self)
        except UnicodeDecodeError as e:
            raise ParseError(self, f"string literal is not valid UTF-8 text ({e.reason} at byte "
                                   f"{e.start} of its contents): names and strings are text; "
                                   "escape each byte of a UTF-8 sequence") from None

    return property(string_contents)


def wrap_lex(original):
    def lex(self: MLIRLexer):
        """xDSL's `lex`, with a readable message for a character no token starts with."""
        try:
            return original(self)
        except ParseError as e:
            if not e.msg.startswith("Unexpected character"):
                raise
            c = self.input.at(e.span.start)
            raise ParseError(e.span, f"unexpected character {_describe_char(c)}: no token "
                             "starts with it outside a string literal") from None
    return lex


def wrap_lex_prefixed_ident(original):
    def lex_prefixed_ident(self: MLIRLexer, start_pos: int):
        """xDSL's lexer of `%x`, `^bb`, `#a`, `!t`, whose error printed `{first_char}` raw."""
        try:
            return original(self, start_pos)
        except ParseError as e:
            if "{first_char}" not in e.msg:
                raise
            sigil = self.input.at(start_pos)
            raise ParseError(e.span, f"expected a name right after '{sigil}' (such as "
                             f"{_SIGIL_EXAMPLES.get(sigil, sigil + 'name')}), got "
                             f"{_describe_char(self.input.at(start_pos + 1))}") from None
    return lex_prefixed_ident


def wrap_lex_number(original):
    def lex_number(self: MLIRLexer, start_pos: int):
        """xDSL's number lexer, refusing decimal integers too long to convert."""
        token = original(self, start_pos)
        if (token.kind is MLIRTokenKind.INTEGER_LIT and len(token.span) > MAX_INTEGER_DIGITS
                and not token.text.startswith("0x")):
            raise ParseError(token.span, f"integer literal with {len(token.span)} digits is "
                             f"too long (at most {MAX_INTEGER_DIGITS})")
        return token
    return lex_number


# -- parser --------------------------------------------------------------------------------


def consume_token(self: GenericParser, expected_kind=None):
    """xDSL's `_consume_token`, with its `assert` on the token's kind a ParseError at the token.

    Callers are meant to have checked the kind already; one that did not (a complex element
    missing its ')') surfaced as an internal AssertionError, and under `python -O` the wrong
    token would have been consumed silently. Text xDSL accepted is consumed exactly as before."""
    consumed = self._current_token
    if expected_kind is not None and consumed.kind != expected_kind:
        raise ParseError(consumed.span, f"expected {_describe_kind(expected_kind)}, got "
                         f"{_describe_token(consumed)}")
    self._parser_state.current_token = self.lexer.lex()
    return consumed


def wrap_parse_block(original):
    def parse_block(self: Parser):
        """xDSL reports anything but a block label here as just ' in block definition'."""
        token = self._current_token
        if token.kind is MLIRTokenKind.EOF:
            self.raise_error("unexpected end of input: a region opened with '{' is not closed "
                             "(add the missing '}')", token.span)
        if token.kind is not MLIRTokenKind.CARET_IDENT:
            self.raise_error(f"expected an operation, a block label such as '^bb0:' or '}}' "
                             f"closing the region, got '{token.text}'", token.span)
        return original(self)
    return parse_block


def wrap_parse_module(original):
    def parse_module(self: Parser, allow_implicit_module: bool = True):
        """xDSL's `parse_module`, with nesting that exhausts the stack reported as a ParseError
        at the token where it happened (the parser recurses once per nesting level)."""
        try:
            return original(self, allow_implicit_module)
        except RecursionError:
            raise ParseError(self._current_token.span,
                             "nesting too deep to parse (regions, brackets or types nested "
                             "hundreds of levels; tw IR nests only a few)") from None
    return parse_module


def wrap_parse_integer_or_float_type(original):
    def parse_optional_integer_or_float_type(self: AttrParser):
        """xDSL's `i32` / `f32` / `index` parser, with integer widths bounded as in MLIR."""
        token = self._current_token
        match = (self._builtin_integer_type_regex.match(token.text)
                 if token.kind is MLIRTokenKind.BARE_IDENT else None)
        # Compare digit counts first: Python will not convert a 5000-digit string to an int.
        digits = match.group(1).lstrip("0") if match else ""
        too_many_digits = len(digits) > len(str(MAX_INTEGER_WIDTH))
        if too_many_digits or (digits and int(digits) > MAX_INTEGER_WIDTH):
            self.raise_error(f"integer type {_quote(token.text)} is too wide (at most "
                             f"{MAX_INTEGER_WIDTH} bits)", token.span)
        return original(self)
    return parse_optional_integer_or_float_type


def wrap_parse_top_level(original):
    """xDSL's `parse_module` ends with "Could not parse entire input!" wherever its top-level
    loop stops, saying neither what it found nor why; the wrapper counts the top-level ops
    parsed so far (through `parse_optional_operation`, at nesting depth 0) to say which."""

    def parse_module(self: Parser, allow_implicit_module: bool = True):
        self._tw_top_level_ops = 0
        self._tw_op_depth = 0
        try:
            module = original(self, allow_implicit_module)
        except ParseError as e:
            if e.msg != "Could not parse entire input!":
                raise
            _raise_top_level_error(self, allow_implicit_module)
        if self._current_token.kind is not MLIRTokenKind.EOF:
            # Without the implicit module xDSL ignores whatever follows the first op.
            _raise_top_level_error(self, allow_implicit_module)
        return module
    return parse_module


def wrap_parse_optional_operation(original):
    def parse_optional_operation(self: Parser):
        depth = getattr(self, "_tw_op_depth", 0)
        self._tw_op_depth = depth + 1
        try:
            op = original(self)
        finally:
            self._tw_op_depth = depth
        if op is not None and depth == 0:
            self._tw_top_level_ops = getattr(self, "_tw_top_level_ops", 0) + 1
        return op
    return parse_optional_operation


def _raise_top_level_error(parser: Parser, implicit_module: bool):
    """Say what stopped the top level: nothing at all, something that is not an operation, or
    text after the end of the module (an extra '}' is the usual case)."""
    token = parser._current_token
    found = "the end of the input" if token.kind is MLIRTokenKind.EOF else _quote(token.text)
    if not getattr(parser, "_tw_top_level_ops", 0):
        if token.kind is MLIRTokenKind.EOF:
            parser.raise_error("no operations in the input (it is empty or holds only "
                               "comments)", token.span)
        parser.raise_error(f"expected an operation such as builtin.module, got {found}",
                           token.span)
    if token.text == "}":
        hint = "an extra '}': the module is already closed"
    elif implicit_module:
        hint = "remove it: only operations may stand at the top level"
    else:
        hint = "remove it: the input is one builtin.module"
    parser.raise_error(f"unexpected {found} after the end of the module ({hint})", token.span)


def _dense_limit() -> int:
    try:  # the verifier's own bound, where the dialect defines one
        from twdialect.dialect import MAX_DENSE_ELEMENTS as limit
    except ImportError:
        limit = MAX_DENSE_ELEMENTS
    return limit


def _check_dense_type(parser: AttrParser, dense_type, start: int) -> None:
    n = math.prod(dense_type.get_shape())
    limit = _dense_limit()
    if n > limit:
        parser.raise_error(f"dense literal of type {dense_type} holds {n} numbers, above the "
                           f"limit of {limit} (MAX_DENSE_ELEMENTS)", start, parser.pos)


def wrap_parse_dense_literal_type(original):
    def parse_dense_literal_type(self: AttrParser):
        """The type of a `dense<...>` literal, refused before a splat is expanded to it."""
        start = self._current_token.span.start
        dense_type = original(self)
        _check_dense_type(self, dense_type, start)
        return dense_type
    return parse_dense_literal_type


def wrap_parse_dense_elements(original):
    def parse_dense_int_or_fp_elements_attr(self: AttrParser, type):
        """xDSL's dense literal parser, bounded, and with numbers too large for the element
        type (`dense<[[1000...0]]> : tensor<1x1xf32>`) a ParseError, not an OverflowError."""
        start = self._current_token.span.start
        if type is not None:  # typed from outside: check before the contents are expanded
            _check_dense_type(self, type, start)
        try:
            attr = original(self, type)
        except OverflowError:
            self.raise_error("dense literal holds a number too large for its element type "
                             "(f32 holds magnitudes up to about 3.4e38)", start, self.pos)
        except NotImplementedError:
            # xDSL packs integers of at most 64 bits and floats of 16, 32 or 64 bits; for
            # i128 or f80 its packing fails with a bare (sometimes empty) NotImplementedError.
            self.raise_error("dense literal of an element type xDSL cannot store (integers up "
                             "to 64 bits, f16/f32/f64 floats; tw weights are f32)", start,
                             self.pos)
        except ValueError as e:  # a value outside its integer type, e.g. 1 : i0
            self.raise_error(f"dense literal: {e}", start, self.pos)
        _check_whole_elements(self, attr, start)
        return attr
    return parse_dense_int_or_fp_elements_attr


def _check_whole_elements(parser: AttrParser, attr, start: int) -> None:
    """xDSL counts a hex literal's elements as bytes // element size, so two stray bytes
    (742 bytes for 185 f32s) passed, and printing the attribute (which every verifier error
    message does) then failed with "Buffer length 742 not product of f32 element size"."""
    size = getattr(attr.get_element_type(), "compile_time_size", None)
    n_bytes = len(attr.data.data)
    if isinstance(size, int) and size > 0 and n_bytes != len(attr) * size:
        parser.raise_error(f"hex dense literal holds {n_bytes} bytes, not a whole number of "
                           f"{attr.get_element_type()} elements of {size} bytes (its type needs "
                           f"{len(attr) * size})", start, parser.pos)


def wrap_to_complex(original):
    def to_complex(self, parser: AttrParser, type):
        """xDSL asserts (an AssertionError with no message) when a complex-typed dense literal
        holds a plain number instead of a (real, imaginary) pair."""
        if not isinstance(self.value, tuple):
            parser.raise_error(f"a dense literal of element type {type} holds (real, "
                               f"imaginary) pairs such as (1.0, 0.0), got a single number "
                               "(tw weights are f32 anyway)", at_position=self.span)
        return original(self, parser, type)
    return to_complex


_COMPLEX_FORM = "a complex element is (real, imaginary) such as (1.0, 0.0)"


def _expect_complex_punctuation(parser: AttrParser, kind: MLIRTokenKind, after: str) -> Token:
    token = parser._current_token
    if token.kind is not kind:
        parser.raise_error(f"{_COMPLEX_FORM}: expected '{kind.value}' after its {after}, got "
                           f"{_describe_token(token)}", token.span)
    return parser._consume_token()


def _parse_complex_part(parser: AttrParser, which: str):
    part = parser._parse_optional_bool_int_or_float()
    if part is None:
        parser.raise_error(f"{_COMPLEX_FORM}: expected its {which} part, a number, got "
                           f"{_describe_token(parser._current_token)}",
                           parser._current_token.span)
    return part


def parse_optional_complex(self: AttrParser):
    """xDSL's `(real, imaginary)` dense element, checked step by step: xDSL asserted (an
    internal AssertionError) when anything but ')' followed the imaginary part, and said only
    "either an int or float must be present" for a missing part. Same result otherwise."""
    if self._current_token.kind is not MLIRTokenKind.L_PAREN:
        return None
    start = self._consume_token().span.start
    real, _ = _parse_complex_part(self, "real")
    _expect_complex_punctuation(self, MLIRTokenKind.COMMA, "real part")
    imag, imag_span = _parse_complex_part(self, "imaginary")
    if type(real) is not type(imag):
        self.raise_error(f"{_COMPLEX_FORM}: its parts must both be floats or both integers, "
                         f"got ({real}, {imag})", start, imag_span.end)
    end = _expect_complex_punctuation(self, MLIRTokenKind.R_PAREN, "imaginary part").span.end
    return (real, imag), Span(start, end, self.lexer.input)


def wrap_parse_int_or_float_attr(original):
    def parse_optional_builtin_int_or_float_attr(self: AttrParser):
        """xDSL's number attribute parser, with a hexadecimal float literal wider than its
        type (`0xFFF18446744073709551616 : f64`) a ParseError, not an OverflowError."""
        start = self._current_token.span.start
        try:
            return original(self)
        except OverflowError:
            self.raise_error("hexadecimal float literal has more bits than its type holds "
                             "(f64 takes 16 hex digits, f32 8)", start, self.pos)
    return parse_optional_builtin_int_or_float_attr


# -- pass pipelines ------------------------------------------------------------------------


_TYPE_WORDS = {bool: ("true or false", "booleans"), int: ("an integer", "integers"),
               float: ("a number", "numbers"), str: ("a string", "strings")}


def _describe_option_type(hint) -> str:
    """A pass option's Python type in words (`int | None` -> "an integer")."""
    args = [a for a in get_args(hint) if a is not type(None)]
    if get_origin(hint) in (types.UnionType, Union):
        return " or ".join(_describe_option_type(a) for a in args)
    if get_origin(hint) is tuple:
        return "a comma-separated list of " + _TYPE_WORDS.get(args[0], ("", "values"))[1]
    return _TYPE_WORDS.get(hint, (getattr(hint, "__name__", str(hint)),))[0]


def _option_text(value) -> str:
    items = value if isinstance(value, (list, tuple)) else [value]
    return ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in items)


def _explain_spec_error(cls, spec, error: ValueError) -> str:
    """Name the pass and option an ArgSpec conversion failed on, and what it takes."""
    given = spec.normalize_parameter_names().parameters
    fields = [f for f in dataclasses.fields(cls) if f.init and f.name != "name"]
    known = {f.name for f in fields}
    options = ", ".join(f.name.replace("_", "-") for f in fields)
    unknown = [name for name in given if name not in known]
    if unknown:
        names = ", ".join(f"'{n.replace('_', '-')}'" for n in unknown)
        takes = f"its options: {options}" if options else "it takes no options"
        return f"pass '{cls.name}' has no option {names} ({takes})"
    hints = get_type_hints(cls)
    for name, value in given.items():
        try:
            arg_spec._convert_arg_to_type(value, hints[name])
        except ValueError:
            return (f"pass '{cls.name}': option '{name.replace('_', '-')}' must be "
                    f"{_describe_option_type(hints[name])}, got '{_option_text(value)}'")
    return f"pass '{cls.name}': {error}"


def wrap_from_spec(original):
    """xDSL's `ArgSpecConvertible.from_spec` (a classmethod, given bound), naming the pass and
    option a conversion failed on."""
    function = original.__func__

    def from_spec(cls, spec):
        try:
            return function(cls, spec)
        except ValueError as e:
            raise ValueError(_explain_spec_error(cls, spec, e)) from None
    return classmethod(from_spec)


def wrap_pipeline_lexer(original):
    def generator(input_str: str):
        """xDSL's pipeline lexer, saying which character it could not read ('Unknown token')."""
        tokens = original(input_str)
        pos = 0
        while True:
            try:
                token = next(tokens)
            except StopIteration:
                return
            except ArgSpecParseError:
                span = Span(pos, pos + 1, Input(input_str, "pass-pipeline"))
                raise ArgSpecParseError(
                    arg_spec.SpecToken(arg_spec.SpecTokenKind.IDENT, span),
                    f"cannot read {input_str[pos:pos + 12]!r} at column {pos + 1}: passes are "
                    "separated by ',' and take options as name{key=value other=value}") from None
            pos = token.span.end
            yield token
    return staticmethod(generator)

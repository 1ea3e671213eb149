"""Prompt rules: how a token program turns the prompt a user types into the text its model
reads, written once as data that tw-run and every export's tokenizer apply alike.

A rule is a pair (pattern, replacement): every match of `pattern` is replaced by the literal
`replacement` (no group references), the rules one after another, in order. A bundled program
lists its rules as `PROMPT_RULES` (e.g. the calculator's pad each operand to three digits and
add a missing "="); its `normalize(prompt)` validates the prompt and applies them with
Python's `re` (`apply_rules`), and the transformers and Llama exports put the same rules in
the tokenizer as a `tokenizers` normalizer (`tokenizer_normalizer`: one Replace per rule, run
by Oniguruma), so `AutoTokenizer.from_pretrained(path)("12*34=")` gives the ids tw-run feeds.
Every export records them as JSON in `tw.prompt_rules` (llama.cpp's tokenizer cannot rewrite
text: the GGUF loader applies them before llama.cpp tokenizes).

A pattern must mean the same in both engines, so it keeps to what they agree on: literals,
character classes such as `[0-9]`, lookarounds, counted repeats. The start and end of the text
are `(?<![\\s\\S])` and `(?![\\s\\S])`: `^` and `$` are line anchors in Oniguruma and `\\Z`
matches before a final newline there; `check_rules` refuses those, POSIX classes `[[:...:]]`
and a lone `\\s` / `\\S` (the engines disagree on a few control characters), and any pattern
one engine cannot compile.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable, Sequence

from tw_lowering.export.metadata import ExportError

Rule = tuple[str, str]

# The start and the end of the text, written alike for Python's re and Oniguruma.
START = r"(?<![\s\S])"
END = r"(?![\s\S])"


def pad_digits(width: int) -> tuple[Rule, ...]:
    """Rules that left-pad every run of 1..width-1 digits with zeros to `width` digits
    (`12*34=` -> `012*034=` for width 3); a longer run is left as it is."""
    return tuple((rf"(?<![0-9])(?=[0-9]{{{n}}}(?![0-9]))", "0" * (width - n))
                 for n in range(1, width))


def append_missing(text: str) -> Rule:
    """A rule that adds `text` at the end unless the prompt already ends with it."""
    return (rf"(?<!{re.escape(text)}){END}", text)


def prepend(text: str) -> Rule:
    """A rule that puts `text` at the start of the prompt."""
    return (START, text)


def apply_rules(rules: Iterable[Sequence[str]], text: str) -> str:
    """`text` rewritten by each (pattern, replacement) rule in turn (Python's re; the
    replacement is literal)."""
    for pattern, replacement in rules:
        text = re.sub(pattern, lambda _m, r=replacement: r, text)
    return text


def tokenizer_normalizer(rules: Iterable[Sequence[str]]):
    """The rules as a `tokenizers` normalizer (a Sequence of Replace, in order), or None for
    no rules."""
    from tokenizers import Regex, normalizers

    steps = [normalizers.Replace(Regex(p), r) for p, r in rules]
    return normalizers.Sequence(steps) if steps else None


def _engine_mismatch(pattern: str) -> str | None:
    """What in `pattern` Python's re and Oniguruma read differently, or None."""
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            e = pattern[i + 1: i + 2]
            if e in ("Z", "z"):
                return f"\\{e} (end of text: write {END})"
            if e in ("s", "S"):
                return f"a lone \\{e} (write [\\s\\S] for any character)"
            i += 2
        elif c == "[":
            j = i + 1
            if pattern[j: j + 1] == "^":
                j += 1
            if pattern[j: j + 1] == "]":
                j += 1
            escapes = set()
            while j < n and pattern[j] != "]":
                if pattern[j] == "\\":
                    escapes.add(pattern[j + 1: j + 2])
                    j += 2
                    continue
                if pattern[j: j + 2] == "[:":
                    return "a POSIX class [[:...:]]"
                j += 1
            if len({"s", "S"} & escapes) == 1:
                return "\\s or \\S in a class without the other"
            i = j + 1
        elif c in "^$":
            return f"{c!r} (a line anchor in Oniguruma: write {START} or {END})"
        else:
            i += 1
    return None


def check_rules(rules, tokens: Sequence[str] | None = None,
                where: str = "export") -> tuple[Rule, ...]:
    """The rules as a tuple of (pattern, replacement) pairs, or one ExportError line naming
    the first that is not a pair of strings, does not compile in Python's re or in the
    tokenizers' Oniguruma, or uses a construct the two read differently; with `tokens` (the
    export's token strings, all single characters), also a replacement that writes a
    character outside them."""
    if isinstance(rules, (str, bytes)) or not isinstance(rules, Iterable):
        raise ExportError(f"{where}: prompt_rules must be a sequence of (pattern, replacement) "
                          f"pairs, got {type(rules).__name__}")
    out = []
    for k, rule in enumerate(rules):
        if isinstance(rule, (str, bytes)) or not isinstance(rule, Sequence) or len(rule) != 2 \
                or not all(isinstance(x, str) for x in rule):
            raise ExportError(f"{where}: prompt rule {k} is {rule!r:.80}, not a (pattern, "
                              "replacement) pair of strings")
        pattern, replacement = rule
        why = _engine_mismatch(pattern)
        if why:
            raise ExportError(f"{where}: prompt rule {k} pattern {pattern!r:.80} uses {why}, "
                              "which Python's re and Oniguruma read differently")
        try:
            with warnings.catch_warnings():  # (re's FutureWarning: a meaning that may change)
                warnings.simplefilter("error", FutureWarning)
                re.compile(pattern)
        except (re.error, FutureWarning) as e:
            raise ExportError(f"{where}: prompt rule {k} pattern {pattern!r:.80} does not "
                              f"compile in Python's re ({e})") from None
        try:
            from tokenizers import Regex
        except ImportError:
            Regex = None  # noqa: N806 (only Python's side can be checked without tokenizers)
        if Regex is not None:
            try:
                Regex(pattern)
            except Exception as e:  # noqa: BLE001 (tokenizers raises a bare Exception)
                raise ExportError(f"{where}: prompt rule {k} pattern {pattern!r:.80} does not "
                                  f"compile in the tokenizers' Oniguruma ({e})") from None
        if tokens is not None and all(len(t) == 1 for t in tokens):
            bad = sorted(set(replacement) - set(tokens))
            if bad:
                raise ExportError(f"{where}: prompt rule {k} writes {''.join(bad)!r}, which is "
                                  "not in the vocabulary")
        out.append((pattern, replacement))
    return tuple(out)


def rules_json(rules: Iterable[Sequence[str]]) -> str:
    """The rules as the JSON text exports record (`tw.prompt_rules`): a list of pairs."""
    return json.dumps([[p, r] for p, r in rules])


def rules_metadata(rules, where: str, tokens: Sequence[str] | None = None) -> dict[str, str]:
    """{"tw.prompt_rules": the checked rules as JSON} for an export's metadata, or {} when
    there are none."""
    return {"tw.prompt_rules": rules_json(check_rules(rules, tokens, where))} if rules else {}

"""The RASP frontend's first stage: what can be known about a program before anything is
built, checked for every expression at once, so a program with several constructs the
frontend does not take is refused with all of them named (the translation that follows,
`translator.py`, meets only programs that pass; its own refusals are the ones that need the
value sets, tables and float32 bounds it computes).

The rules, one home each: a RASP class the frontend knows (`SOPS`, `SELECTORS`); numerical
tokens need a vocabulary of numbers; `length` needs the whole sequence (not causal); a
ConstantSOp holds at most max_seq_len values; a numerical constant (Full, ConstantSOp) holds
finite numbers. With the value sets (`ValueSets.problems`): a numerical SOp holds numbers
only; no selector reads a SOp that is None at every position."""

from __future__ import annotations

from collections import deque

from tw_frontends.rasp.limits import RaspError, _label
from tw_frontends.rasp.numbers import _is_number


def _known():
    from tracr.rasp import rasp

    sops = (rasp.TokensType, rasp.IndicesType, rasp.LengthType, rasp.Full, rasp.ConstantSOp,
            rasp.Map, rasp.SequenceMap, rasp.Aggregate, rasp.SelectorWidth)
    selectors = (rasp.Select, rasp.ConstantSelector, rasp.SelectorAnd, rasp.SelectorOr,
                 rasp.SelectorNot)
    return rasp, sops, selectors


def expressions(program) -> list:
    """Every expression the program reaches, once each, children before their readers (the
    order the translation meets them)."""
    order, seen, stack = [], set(), [(program, False)]
    while stack:
        expr, done = stack.pop()
        if done:
            order.append(expr)
            continue
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        stack.append((expr, True))
        stack.extend((c, False) for c in reversed(list(getattr(expr, "children", ()))))
    return order


def name(program) -> None:
    """Give every expression its label in the order tracr's compiler does (breadth first
    from the output, `rasp_to_graph`): an unnamed expression's label comes from an id drawn
    when it is first asked for, so the refusals and annotations name expressions as tracr
    would, whatever order the stages then read them in."""
    queue, seen = deque([program]), set()
    program.label  # noqa: B018 - drawn for its side effect
    while queue:
        expr = queue.popleft()
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        for child in getattr(expr, "children", ()):
            child.label  # noqa: B018
            queue.append(child)


def problem(expr, vocab, max_seq_len: int, causal: bool) -> str | None:
    """The first rule of this module that `expr` breaks, as its refusal line, or None."""
    rasp, sops, selectors = _known()
    if isinstance(expr, rasp.Selector):
        if not isinstance(expr, selectors):
            return f"{_label(expr)}: not a RASP selector the frontend knows"
        return None
    if not isinstance(expr, sops):
        return f"{_label(expr)}: not a RASP construct the frontend knows"
    numerical = rasp.is_numerical(expr)
    if isinstance(expr, rasp.TokensType) and numerical and not all(_is_number(t) for t in vocab):
        return f"{_label(expr)}: numerical tokens need a vocabulary of numbers"
    if isinstance(expr, rasp.LengthType) and causal:
        return (f"{_label(expr)}: `length` needs the whole sequence; a causal model cannot see "
                "its end (compile with causal=False)")
    values = [expr.fill] if isinstance(expr, rasp.Full) else (
        list(expr.value) if isinstance(expr, rasp.ConstantSOp) else [])
    if isinstance(expr, rasp.ConstantSOp) and len(values) > max_seq_len:
        return f"{_label(expr)}: {len(values)} values, more than max_seq_len={max_seq_len}"
    bad = next((v for v in values if numerical and not _is_number(v)), None)
    if bad is not None:
        return f"{_label(expr)}: a numerical SOp holds {bad!r}, not a finite number"
    return None


def validate(program, vocab, max_seq_len: int, causal: bool, sets=None) -> None:
    """Refuse the program (one RaspError line) with every expression that breaks a rule of
    this module or, given the program's value sets (`value_sets.ValueSets`), one they show
    (`ValueSets.problems`); one such expression is refused with its own line alone."""
    rasp, _, _ = _known()
    if not isinstance(program, rasp.SOp):
        raise RaspError(f"the program must be a RASP SOp, got {type(program).__name__}")
    name(program)
    found = []
    for e in expressions(program):
        static = problem(e, vocab, max_seq_len, causal)
        found += [static] if static is not None else [] if sets is None else sets.problems(e)
    if len(found) == 1:
        raise RaspError(found[0])
    if found:
        raise RaspError(f"{len(found)} expressions the RASP frontend does not take: "
                        + "; ".join(found))

"""Prompt rules (lowering/export/prompts.py): every bundled program's normalisation is data,
`PROMPT_RULES`, that tw-run (`normalize`) and the exports' tokenizers apply alike, so a prompt
typed as a user types it (`12*34=`) gives the ids tw-run feeds (`012*034=`) in transformers,
in a Llama checkpoint's tokenizer and through the GGUF loader; patterns the two regex engines
(Python's re, the tokenizers' Oniguruma) would read differently are refused."""

from __future__ import annotations

import json
import re
import string

import numpy as np
import pytest

import tw_examples as examples
from tw_examples.token_program import generate
from tw_lowering.export import ExportError
from tw_lowering.export.prompts import apply_rules, check_rules

# -- the normalisation each program had before its rules were data (the reference) ----------


def _old_normalize(name: str, q: str) -> str:
    """What each program's hand-written normalize returned for a valid prompt `q`."""
    if name == "adder":
        a, b = re.fullmatch(r"(\d{1,3})\+(\d{1,3})=?", q).groups()
        return f"{int(a):03d}+{int(b):03d}="
    if name == "calculator":
        a, op, b = re.fullmatch(r"(\d{1,3})([-+*])(\d{1,3})=?", q).groups()
        return f"{int(a):03d}{op}{int(b):03d}="
    if name == "rotary_adder":
        a, b = re.fullmatch(r"(\d{1,2})\+(\d{1,2})=?", q).groups()
        return f"{int(a):02d}+{int(b):02d}="
    if name == "rotary_reverse":
        return re.fullmatch(r"(\d{1,4})=?", q).group(1).zfill(4) + "="
    if name == "rotary_reverse":
        return re.fullmatch(r"(\d{1,4})=?", q).group(1).zfill(4) + "="
    if name == "caesar":
        key, text = re.fullmatch(r"(\d{1,2}):([a-z ]{1,40})=?", q.lower()).groups()
        return f"{int(key):02d}:{text}="
    if name == "fibonacci":
        a, b = re.fullmatch(r"(\d{1,4}),(\d{1,4}),?", q).groups()
        return f"^{a},{b},"
    body = {"balanced_parens": r"([\(\)\[\]\{\}]{1,40})=?", "binary_increment": r"([01]{1,24})=?",
            "sort_digits": r"(\d{1,24})=?"}[name]
    return re.fullmatch(body, q).group(1) + "="


def _digits(rng, lo: int, hi: int) -> str:
    return "".join(rng.choice(list("0123456789"), size=int(rng.integers(lo, hi + 1))))


def _typed(name: str, rng) -> str:
    """A valid prompt as a user might type it: operands of every digit count (leading zeros
    too), the trailing '=' (',' for fibonacci) there or not, upper-case letters for caesar."""
    tail = str(rng.choice(["", "="]))
    if name == "adder":
        return f"{_digits(rng, 1, 3)}+{_digits(rng, 1, 3)}{tail}"
    if name == "calculator":
        return f"{_digits(rng, 1, 3)}{rng.choice(list('+-*'))}{_digits(rng, 1, 3)}{tail}"
    if name == "rotary_adder":
        return f"{_digits(rng, 1, 2)}+{_digits(rng, 1, 2)}{tail}"
    if name == "rotary_reverse":
        return _digits(rng, 1, 4) + tail
    if name == "rotary_reverse":
        return _digits(rng, 1, 4) + tail
    if name == "caesar":
        key = str(int(rng.integers(0, 26)))
        key = key.zfill(2) if rng.random() < 0.3 else key
        text = "".join(rng.choice(list(string.ascii_letters + " "),
                                  size=int(rng.integers(1, 41))))
        return f"{key}:{text}{tail}"
    if name == "fibonacci":
        return f"{_digits(rng, 1, 4)},{_digits(rng, 1, 4)}{rng.choice(['', ','])}"
    if name == "balanced_parens":
        return "".join(rng.choice(list("()[]{}"), size=int(rng.integers(1, 41)))) + tail
    if name == "binary_increment":
        return "".join(rng.choice(list("01"), size=int(rng.integers(1, 25)))) + tail
    assert name == "sort_digits"
    return _digits(rng, 1, 24) + tail


FIXED = {"adder": ["7+5=", "12+34", "1+999=", "007+5"], "calculator": ["12*34=", "1-999=",
         "5-17", "0*0=", "999*99"], "rotary_adder": ["4+7", "47+85=", "0+9="],
         "rotary_reverse": ["123=", "7", "0042", "9999="],
         "rotary_reverse": ["123=", "7", "0123=", "9999"],
         "caesar": ["3:hello world=", "3:Hello World", "25:z", "07:ab c="],
         "fibonacci": ["0,1", "0,1,", "9999,12"], "balanced_parens": ["()", "([]{})="],
         "binary_increment": ["1", "1011="], "sort_digits": ["3141", "9="]}


@pytest.mark.parametrize("name", examples.ALL_PROGRAMS)
def test_rules_are_the_programs_normalisation(name):
    """normalize == the rules (Python re) == the old hand-written normalisation, and the
    tokenizers normalizer built from the rules gives the same text."""
    pytest.importorskip("tokenizers")
    from tw_lowering.export.prompts import tokenizer_normalizer

    p = examples.load(name)
    assert p.prompt_rules, f"{name} has no prompt rules"
    check_rules(p.prompt_rules, list(p.vocab))
    norm = tokenizer_normalizer(p.prompt_rules)
    rng = np.random.default_rng(sum(map(ord, name)))
    for q in FIXED[name] + [_typed(name, rng) for _ in range(400)]:
        want = _old_normalize(name, q)
        assert apply_rules(p.prompt_rules, q) == want, q
        assert p.normalize(q) == want, q
        assert norm.normalize_str(q) == want, q


def test_pad_rules():
    from tw_lowering.export.prompts import append_missing, pad_digits, prepend

    rules = pad_digits(3) + (append_missing("="), prepend("^"))
    assert apply_rules(rules, "12*34") == "^012*034="
    assert apply_rules(rules, "7-999=") == "^007-999="
    assert apply_rules(rules, "1234+5") == "^1234+005="  # a longer run is left alone


@pytest.mark.parametrize("rules, why", [
    ([("(", "x")], "does not compile in Python's re"),
    ([("(?<=a+)b", "")], "does not compile in Python's re"),
    ([("(?P<x>a)", "")], "Oniguruma"),
    ([("$", "=")], "line anchor"),
    ([("^", "^")], "line anchor"),
    ([(r"(?<!=)\Z", "=")], r"\Z"),
    ([("[[:digit:]]", "")], "POSIX"),
    ([(r"\s", "")], r"\s"),
    ([("a",)], "not a (pattern, replacement) pair"),
    ([(1, "x")], "not a (pattern, replacement) pair"),
    ("ab", "sequence of"),
])
def test_check_rules_refuses(rules, why):
    if why == "Oniguruma":
        pytest.importorskip("tokenizers")
    with pytest.raises(ExportError, match=re.escape(why)):
        check_rules(rules)


def test_check_rules_refuses_a_character_outside_the_vocabulary():
    with pytest.raises(ExportError, match="not in the vocabulary"):
        check_rules([("(?![\\s\\S])", "!")], list("0123456789="))
    assert check_rules([["(?![\\s\\S])", "="]], list("0123456789=")) == (("(?![\\s\\S])", "="),)


# -- the exports ----------------------------------------------------------------------------


def _compiled(name):
    from tw_lowering import compile  # noqa: A004

    p = examples.load(name)
    g = p.geometry
    return p, compile(p.module, d=g.d, d_head=g.d_head, d_hidden=g.d_hidden)


TYPED = ["12*34=", "5-17", "7+5="]


@pytest.fixture(scope="module")
def calculator_hf(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tw_lowering.export import export

    p, ct = _compiled("calculator")
    path = tmp_path_factory.mktemp("calc-hf")
    export(ct, path, "transformers", vocab=p.vocab, end=p.end, prompt_rules=p.prompt_rules)
    return p, ct, path


def test_transformers_tokenizer_takes_typed_prompts(calculator_hf):
    from transformers import AutoTokenizer

    p, _, path = calculator_hf
    tok = AutoTokenizer.from_pretrained(path)
    rng = np.random.default_rng(7)
    for q in TYPED + ["1-999=", "012*034="] + [_typed("calculator", rng) for _ in range(30)]:
        assert tok(q).input_ids == p.encode(q).tolist(), q
    config = json.loads((path / "config.json").read_text())
    assert [tuple(r) for r in json.loads(config["tw"]["prompt_rules"])] == list(p.prompt_rules)


def test_transformers_generates_tw_runs_answers_from_typed_prompts(calculator_hf):
    import torch

    from tw_lowering.export.hf import load_transformers

    p, ct, path = calculator_hf
    model, tok = load_transformers(path, graph=ct)  # (the recorded rules pass the checks)
    for q in TYPED:
        ids = tok(q, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=p.max_answer, do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
        got = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        assert got == generate(p, q, ct.run) == p.reference(q), q


def test_export_refuses_bad_rules(calculator_hf, tmp_path):
    from tw_lowering.export import export

    p, ct, _ = calculator_hf
    with pytest.raises(ExportError, match="line anchor"):
        export(ct, tmp_path / "bad", "transformers", vocab=p.vocab, end=p.end,
               prompt_rules=[("$", "=")])
    with pytest.raises(ExportError, match="not in the vocabulary"):
        export(ct, tmp_path / "bad2", "gguf", vocab=p.vocab, end=p.end,
               prompt_rules=[("(?![\\s\\S])", "?")])


def test_llama_tokenizer_takes_typed_prompts(tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from tw_lowering.export import export

    p, ct = _compiled("rotary_adder")
    export(ct, tmp_path, "llama", vocab=p.vocab, end=p.end, prompt_rules=p.prompt_rules)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    for q in ["4+7", "47+85=", "0+9=", "9+99"]:
        assert tok(q).input_ids == p.encode(q).tolist(), q


def test_gguf_loader_applies_the_rules(tmp_path):
    """llama.cpp's tokenizer cannot rewrite a prompt: the GGUF carries the rules
    (`tw.prompt_rules`) and load_gguf's model applies them to a prompt given as text."""
    pytest.importorskip("gguf")
    pytest.importorskip("llama_cpp",
                        reason="llama.cpp's binding is missing: pip install 'tw-compiler[llama]'")
    from tw_lowering.export import export
    from tw_lowering.export.gguf import load_gguf, read_gguf_metadata

    p, ct = _compiled("caesar")
    path = tmp_path / "caesar.gguf"
    export(ct, path, "gguf", vocab=p.vocab, end=p.end, prompt_rules=p.prompt_rules)
    meta, _ = read_gguf_metadata(path)
    assert [tuple(r) for r in json.loads(meta["tw.prompt_rules"])] == list(p.prompt_rules)
    m = load_gguf(path, graph=ct, n_threads=2)
    try:
        for q in ["3:Hello World", "25:abc xyz=", "7:z"]:
            assert m.tokenize(q) == p.encode(q).tolist(), q
            assert p.decode(m.generate(q, p.max_answer)) == generate(p, q, ct.run), q
    finally:
        m.close()


def test_id_level_exports_record_the_rules(tmp_path):
    """TransformerLens and ONNX take token ids: their metadata records the rules."""
    pytest.importorskip("safetensors")
    from tw_lowering.export import export

    p, ct = _compiled("sort_digits")
    export(ct, tmp_path / "tl", "tlens", prompt_rules=p.prompt_rules)
    config = json.loads((tmp_path / "tl" / "config.json").read_text())
    assert json.loads(config["tw"]["prompt_rules"]) == [list(r) for r in p.prompt_rules]
    onnx = pytest.importorskip("onnx")
    export(ct, tmp_path / "ox", "onnx", prompt_rules=p.prompt_rules)
    props = {q.key: q.value for q in onnx.load(str(tmp_path / "ox" / "model.onnx"),
                                                load_external_data=False).metadata_props}
    assert json.loads(props["tw.prompt_rules"]) == [list(r) for r in p.prompt_rules]

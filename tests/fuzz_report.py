"""The reliability harness's `report` surface (`fuzz_harness.py`): a small graph whose every
name (graph, inputs, token input, outputs, annotation, the source file of its ops' locations)
is drawn from hostile text (`<!--<script>`, `</script>`, `<!--`, `<script`, `{{DATA}}`, quotes,
U+2028, NUL, lone surrogates, long and non-ASCII text), compiled, and its HTML report written.

Outcomes: a name the builder refuses with a deliberate error is a clean refusal; any other
exception is a masked crash; a page that is not well-formed is a wrong answer: more or fewer
than the page's two <script> elements, a `<!--`, `<script` or `</script` inside one (which move
where the HTML tokenizer ends it), embedded JSON that does not parse back to the report's data,
a title that is not the graph's name, a name missing from the data. (Chromium draws such a page
in tests/test_report_browser.py.) Everything is drawn from the case's generator, so a case
replays exactly.
"""

from __future__ import annotations

import html
import json
import re

import numpy as np

PIECES = ("<!--<script>", "</script>", "<!--", "<script", "</SCRIPT", "<ScRiPt >", "-->",
          "<img src=x onerror=alert(1)>", "{{DATA}}", "{{GRAPH}}", "&amp;", "&#x3c;", "\"", "'",
          "`", "\\", "\\u003c", "\u2028", "\u2029", "\x00", "\x1f", "é", "😀",
          "\u202e", "]]>", "<![CDATA[", "</style>", "<title>", "x" * 300, " ", "\n", "%", "@")
SLOTS = ("graph", "input", "token", "output", "output2", "annotation", "file")


def make_payload(rng: np.random.Generator) -> dict:
    """A case: a hostile name per slot (each a few pieces and letters) and the graph's
    weights' seed."""
    names = {}
    for slot in SLOTS:
        parts = [PIECES[int(k)] for k in rng.integers(len(PIECES), size=int(rng.integers(1, 4)))]
        names[slot] = slot[0] + "".join(parts) if rng.random() < 0.8 else "".join(parts)
    if rng.random() < 0.05:  # names the builder refuses: a lone surrogate, a clash
        slot = SLOTS[int(rng.integers(len(SLOTS)))]
        names[slot] += "\ud800"
    if rng.random() < 0.05:
        names["output2"] = names["output"]
    return {"names": names, "seed": int(rng.integers(1 << 30))}


def run(payload: dict, classify) -> tuple[str, str, str]:
    """Build, compile and report; check the page (`page_problem`)."""
    try:
        ct, feeds, locations = _compiled(payload)
        from tw_lowering.report import render_report, report_data

        page = render_report(ct, feeds, locations=locations)
        data = report_data(ct, feeds, locations=locations)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt) or type(e).__name__ == "CaseTimeout":
            raise
        outcome, detail = classify(e)
        return outcome, "report", detail
    problem = page_problem(page, data, payload["names"])
    return ("wrong_answer", "report", problem) if problem else ("accepted", "report", "")


def _compiled(payload: dict):
    """(compiled model, feeds, locations) of the payload's graph."""
    import tw_lowering
    from tw_lowering.report import source_locations
    from twdialect import ops as tw

    names, rng = payload["names"], np.random.default_rng(payload["seed"])
    with tw.Graph(names["graph"]) as g:
        with tw.annotate(names["annotation"]):
            x = tw.input(names["input"], 2, (-1.0, 1.0))
            t = tw.embedding(names["token"], rng.normal(size=(3, 2)).round(3))
            h = tw.relu(tw.linear(tw.add(x, t), rng.normal(size=(2, 2)).round(3)))
        tw.output(names["output"], h)
        tw.output(names["output2"], tw.attn(h, h, h, np.eye(2), np.eye(2), np.eye(2),
                                            np.eye(2)))
    locations = source_locations({op: (k + 1, 5) for k, op in enumerate(g.op.block.ops)},
                                 names["file"])
    ct = tw_lowering.compile(g.module, d=32, d_head=4, trace_passes=True, pipeline="default")
    feeds = {names["input"]: rng.uniform(-1, 1, size=(3, 2)), names["token"]: np.array([0, 2, 1])}
    return ct, feeds, locations


def page_problem(page: str, data: dict, names: dict) -> str:
    """What is wrong with the page (empty where nothing is)."""
    starts = list(re.finditer(r"<script\b[^>]*>", page, re.I))
    if len(starts) != 2:
        return f"{len(starts)} <script start tags, not 2"
    lower = page.lower()
    texts = []
    for m in starts:
        end = lower.find("</script", m.end())
        if end < 0:
            return "a <script> element is never closed"
        text = page[m.end():end]
        for bad in ("<!--", "<script"):
            if bad in text.lower():
                return f"{bad!r} inside a <script> element"
        texts.append(text)
    try:
        embedded = json.loads(texts[0])
    except ValueError as e:
        return f"the embedded JSON does not parse: {e}"
    if embedded != json.loads(json.dumps(data)):
        return "the embedded JSON is not the report's data"
    if "window.twReport" not in texts[1] or not texts[1].rstrip().endswith("})();"):
        return "the page's script was cut"
    title = re.search(r"<title>(.*?)</title>", page, re.S)
    if title is None or html.unescape(title.group(1)) != "tw compile report: @" + names["graph"]:
        return "the title is not the graph's name"
    shown = " ".join(embedded["ops"]["name"] + embedded["ops"]["ann"] + embedded["ops"]["loc"])
    for slot in ("input", "token", "output", "output2", "annotation", "file"):
        if names[slot] not in shown:
            return f"the {slot} name is not in the page's data"
    return ""

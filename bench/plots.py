"""The benchmarks' JSON lines drawn as PNG plots for the docs (docs/plots.md, docs/images/).

    python3 bench/plots.py --run               # rerun the quick benchmarks and redraw (minutes)
    python3 bench/plots.py --run --full        # the full benchmarks (the 10^5-op compile,
                                               # every width sweep, tracr at every length: long)
    python3 bench/plots.py FILE.jsonl ...      # draw from saved JSON lines
    python3 bench/plots.py FILE.jsonl --out DIR

`--run` writes each benchmark's lines to docs/images/data/<benchmark>.jsonl (so the plots can
be redrawn from them: `python3 bench/plots.py docs/images/data/*.jsonl`), then draws. Each line
is recognised by its keys as a line of one benchmark (`read_line`), and feeds the plots that
benchmark measures:

| plot | from |
|---|---|
| `layers_vs_floor.png`: layers against the critical-path floor, per program | `suite.py`, `primitive_graphs.py` (programs) |
| `compile_time.png`: compile seconds against ops, log-log | `primitive_graphs.py`, `compile_scaling.py` |
| `depth_width.png`: layers against d, per graph | `width_sweep.py` |
| `vs_torchwright.png`: tw's layers beside the anchor compiler's on the same primitive graphs | `primitive_graphs.py` |
| `vs_tracr.png`: tw beside tracr on tracr's library programs (layers, parameters) | `frontends.py` |

A plot without lines to draw from is not written. The same lines give byte-identical PNGs
(no timestamp or version in the file). Error contract (tools/cli.py): an unreadable file, a
line that is not JSON or not a known benchmark's, nothing to plot, a benchmark that fails
under `--run`: one line on stderr, `plots: error: ...`, exit code 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tw_tools.cli import ArgumentParser, ToolError, run_tool  # noqa: E402

PROG = "plots"
IMAGES = ROOT / "docs" / "images"
BENCH = ROOT / "bench"

# The benchmarks `--run` reruns: (name, script, quick arguments, `--full` arguments). The quick
# ones finish in minutes on two cores; the full ones are the benchmarks' own defaults.
BENCHMARKS = (
    ("suite", "suite.py", ["--prompts", "20"], []),
    ("primitive_graphs", "primitive_graphs.py", ["--quick"], []),
    ("compile_scaling", "compile_scaling.py", ["--sizes", "1000", "10000"], []),
    ("width_sweep", "width_sweep.py",
     ["--programs", "primitive/adder,primitive/fibonacci,renderer_small", "--sizes", "1000"],
     []),
    ("frontends", "frontends.py", ["--lengths", "5"], []),
)


@dataclass
class Lines:
    """What the benchmarks' lines say, sorted by plot."""

    depth: list[tuple[str, int, int]] = field(default_factory=list)  # (label, layers, floor)
    compiles: list[tuple[str, int, float]] = field(default_factory=list)  # (source, ops, s)
    curves: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)  # (d, L, floor)
    torchwright: dict[str, dict] = field(default_factory=dict)  # program -> figures
    tracr: list[dict] = field(default_factory=list)  # {"tw": {...}, "tracr": {...}}

    def empty(self) -> bool:
        return not (self.depth or self.compiles or self.curves or self.torchwright or self.tracr)


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


def read_files(paths: list[str]) -> Lines:
    lines = Lines()
    for path in paths:
        for number, text in enumerate(_read(path).splitlines(), 1):
            if text.strip():
                read_line(_parse(text, f"{path}:{number}"), lines, f"{path}:{number}")
    if lines.empty():
        raise ToolError(f"nothing to plot in {', '.join(paths)}: no benchmark line with "
                        "figures (failed compiles, summaries and build errors are not drawn)")
    return lines


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror or type(e).__name__}") from None
    except UnicodeDecodeError:
        raise ToolError(f"cannot read {path}: not text (JSON lines expected)") from None


def _parse(text: str, where: str) -> dict:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        raise ToolError(f"{where}: not JSON ({e.msg})") from None
    if not isinstance(row, dict):
        raise ToolError(f"{where}: not a benchmark line (a JSON object expected)")
    return row


def read_line(row: dict, lines: Lines, where: str) -> None:
    """File one benchmark line under the plots it feeds, by the keys that say which benchmark
    wrote it; a line of none of them is an error naming `where`."""
    if row.get("summary") or "build_error" in row or "points" in row:
        return  # a summary (frontends.py, width_sweep.py) or a program that did not build
    if "program" in row and "tw" in row:
        _frontends(row, lines)
    elif "program" in row and "n_layers" in row:
        lines.depth.append((f"{row['program']} (hand-tuned)", row["n_layers"], row["floor"]))
    elif "case" in row and "kind" in row and "pipeline" in row:
        _primitive_graphs(row, lines)
    elif "n_ops" in row and isinstance(row.get("seconds"), dict):
        s = row["seconds"]
        lines.compiles.append(("layered graphs (compile_scaling)", row["n_ops"],
                               s["schedule"] + s["weights"] + s["module"]))
    elif "case" in row and "d" in row and "n_layers" in row:
        lines.curves.setdefault(row["case"], []).append((row["d"], row["n_layers"],
                                                         row["floor"]))
    else:
        raise ToolError(f"{where}: not a line of a known benchmark (suite, primitive_graphs, "
                        f"compile_scaling, width_sweep, frontends); keys: "
                        f"{', '.join(sorted(row)[:8])}")


def _primitive_graphs(row: dict, lines: Lines) -> None:
    if "layers" not in row:
        return  # refused at that geometry
    pipeline = row["pipeline"]
    if row["kind"] != "synthetic":
        lines.depth.append((f"{row['case']} ({pipeline})", row["layers"], row["floor"]))
    lines.compiles.append((f"primitive_graphs, pipeline {pipeline}", row["ops"],
                           row["compile_seconds"]))
    if row["kind"] == "primitive" and row.get("anchor_same_graph_greedy") is not None:
        figures = lines.torchwright.setdefault(row["case"].split("/", 1)[1], {
            "torchwright greedy": row["anchor_same_graph_greedy"],
            "torchwright CP-SAT": row["anchor_same_graph_cpsat"]})
        figures[f"tw, pipeline {pipeline}"] = row["layers"]


def _frontends(row: dict, lines: Lines) -> None:
    tracr = row.get("tracr") or {}
    if "layers" in row["tw"] and "layers" in tracr:
        lines.tracr.append({"program": row["program"], "n": row["max_seq_len"],
                            "tw": row["tw"], "tracr": tracr})


# --------------------------------------------------------------------------------------
# Drawing: one function a plot, each returns its figure (None: no lines for it)
# --------------------------------------------------------------------------------------


def layers_vs_floor(lines: Lines, plt):
    if not lines.depth:
        return None
    labels = [label for label, _, _ in lines.depth]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.28 * len(labels)))
    y = range(len(labels))
    ax.barh([i + 0.2 for i in y], [f for _, _, f in lines.depth], 0.4, label="floor",
            color="#9ecae1")
    ax.barh([i - 0.2 for i in y], [n for _, n, _ in lines.depth], 0.4, label="layers",
            color="#3182bd")
    ax.set_yticks(list(y), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("layers")
    ax.set_title("Layers against the critical-path floor")
    ax.legend(loc="lower right")
    return fig


def compile_time(lines: Lines, plt):
    if not lines.compiles:
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    for source in dict.fromkeys(s for s, _, _ in lines.compiles):
        pts = sorted((ops, sec) for s, ops, sec in lines.compiles if s == source)
        ax.scatter([p[0] for p in pts], [max(p[1], 1e-3) for p in pts], label=source, s=18)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ops in the graph")
    ax.set_ylabel("compile seconds (the compiler's stages)")
    ax.set_title("Compile time against graph size")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def depth_width(lines: Lines, plt):
    if not lines.curves:
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    for case, points in lines.curves.items():
        points = sorted(points)
        line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", ms=3,
                        label=case)
        ax.axhline(points[-1][2], color=line.get_color(), ls=":", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("residual width d")
    ax.set_ylabel("layers (dotted: the floor)")
    ax.set_title("Depth against width")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def vs_torchwright(lines: Lines, plt):
    if not lines.torchwright:
        return None
    programs = list(lines.torchwright)
    series = list(dict.fromkeys(k for figures in lines.torchwright.values() for k in figures))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / len(series)
    for k, name in enumerate(series):
        ax.bar([i + (k - (len(series) - 1) / 2) * width for i in range(len(programs))],
               [lines.torchwright[p].get(name) or 0 for p in programs], width, label=name)
    ax.set_xticks(range(len(programs)), programs, rotation=20, fontsize=8)
    ax.set_ylabel("layers")
    ax.set_title("The same primitive graphs: tw and the anchor compiler (torchwright)")
    ax.legend(fontsize=8)
    return fig


def vs_tracr(lines: Lines, plt):
    if not lines.tracr:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    pairs = [(r["tracr"]["layers"], r["tw"]["layers"]) for r in lines.tracr]
    counts = {p: pairs.count(p) for p in sorted(set(pairs))}
    left.scatter([p[0] for p in counts], [p[1] for p in counts], s=[30 * c for c in counts.values()],
                 alpha=0.6)
    for (x, y), c in counts.items():
        left.annotate(str(c), (x, y), ha="center", va="center", fontsize=7)
    _diagonal(left, [v for p in pairs for v in p])
    left.set_xlabel("tracr: layers")
    left.set_ylabel("tw: layers")
    left.set_title("Layers (programs x lengths per point; below the diagonal: tw shallower)",
                   fontsize=9)
    xs = [r["tracr"]["params_allocated"] for r in lines.tracr]
    ys = [r["tw"]["params_allocated"] for r in lines.tracr]
    points = right.scatter(xs, ys, s=16, c=[r["n"] for r in lines.tracr], cmap="viridis")
    _diagonal(right, xs + ys)
    right.set_xscale("log")
    right.set_yscale("log")
    right.minorticks_off()
    right.set_xlabel("tracr: parameters allocated")
    right.set_ylabel("tw: parameters allocated")
    right.set_title("Parameters (below the diagonal: tw smaller)", fontsize=9)
    fig.colorbar(points, ax=right, label="max_seq_len")
    return fig


def _diagonal(ax, values: list) -> None:
    """The y = x line across `values`' range: where tw and the other compiler agree."""
    lo, hi = min(values), max(values)
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")


PLOTS = {"layers_vs_floor.png": layers_vs_floor, "compile_time.png": compile_time,
         "depth_width.png": depth_width, "vs_torchwright.png": vs_torchwright,
         "vs_tracr.png": vs_tracr}


def draw(lines: Lines, out: Path) -> list[Path]:
    """Every plot the lines feed, as PNGs in `out`; the files written."""
    try:
        import matplotlib
    except ImportError:
        raise ToolError("matplotlib is not installed: pip install 'tw-compiler[plots]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context({"font.size": 9}):
        for name, plot in PLOTS.items():
            fig = plot(lines, plt)
            if fig is None:
                continue
            fig.tight_layout()
            fig.savefig(out / name, dpi=100, metadata={"Software": None})
            plt.close(fig)
            written.append(out / name)
    return written


# --------------------------------------------------------------------------------------
# Running the benchmarks
# --------------------------------------------------------------------------------------


def run_benchmarks(full: bool, data: Path) -> list[str]:
    """Each benchmark of BENCHMARKS (quick, or `full`), its lines saved under `data`."""
    from tw_lowering.progress import terminal_progress, track

    data.mkdir(parents=True, exist_ok=True)
    saved = []
    with terminal_progress():
        for name, script, quick, whole in track(BENCHMARKS, "benchmarks"):
            path = data / f"{name}.jsonl"
            args = [sys.executable, str(BENCH / script), *(whole if full else quick)]
            with open(path, "w") as f:
                done = subprocess.run(args, stdout=f, stderr=subprocess.PIPE, text=True)
            if done.returncode:
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                raise ToolError(f"bench/{script} failed (exit {done.returncode}): {last}")
            saved.append(str(path))
    return saved


def run(argv) -> int:
    ap = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="JSON lines written by the benchmarks")
    ap.add_argument("--run", action="store_true",
                    help="rerun the quick benchmarks first (their lines: OUT/data/*.jsonl)")
    ap.add_argument("--full", action="store_true", help="with --run: the full benchmarks")
    ap.add_argument("--out", default=str(IMAGES), help="where the PNGs go (docs/images)")
    args = ap.parse_args(argv)
    if args.run == bool(args.files):
        raise ToolError("give the benchmarks' JSON lines files, or --run (not both)")
    if args.full and not args.run:
        raise ToolError("--full goes with --run")
    out = Path(args.out)
    files = run_benchmarks(args.full, out / "data") if args.run else args.files
    for path in draw(read_files(files), out):
        print(path)
    return 0


def main(argv=None) -> int:
    return run_tool(PROG, lambda: run(argv))


if __name__ == "__main__":
    sys.exit(main())

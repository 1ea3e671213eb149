"""Progress of long work: compile stages, the sequential-scope search, exports, benchmarks.

Long work calls `report(stage, done, total)` as it goes ("passes", "schedule", "weights",
"module"; "sequential-scope search"; "export"; a benchmark's rows). Whoever asked for
progress receives it:

* the Python API: `compile(..., progress=callback)` calls `callback(stage, done, total)`;
* the command-line tools and benchmarks: a bar per stage on the terminal
  (`terminal_progress`), drawn by rich on stderr, only where stdout is a terminal, the
  user did not pass `--quiet`, and the work is long (a graph of at least `LONG_GRAPH_OPS`
  ops; a benchmark's rows).

The receiver lives in a context variable for the span of `reporting(callback)`, so the
scheduler's loop, the weight writer, an export writer or a pass report without every function
in between handing a callback along; with no receiver, `report` does nothing. Progress never
reaches an output: the bar draws on stderr (and only on a terminal), the callback sees counts,
and nothing the compile returns depends on whether anyone listened.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import TypeVar

from twdialect import ArgumentError

Progress = Callable[[str, int, int], None]  # (stage, done, total)

# Graphs at least this large get a bar on the terminal (a compile of 10^4 ops takes seconds;
# below, a bar would only flicker).
LONG_GRAPH_OPS = 10_000

BAR_STEPS = 200  # a bar redraws at most this often per stage

_receiver: ContextVar[Progress | None] = ContextVar("tw_progress", default=None)

T = TypeVar("T")


def report(stage: str, done: int, total: int) -> None:
    """Tell the current receiver, if any, that `done` of `total` steps of `stage` are done."""
    receiver = _receiver.get()
    if receiver is not None:
        receiver(stage, done, total)


@contextlib.contextmanager
def reporting(callback: Progress | None) -> Iterator[None]:
    """Within the block, `report` calls `callback` (None: the receiver already set, if any,
    keeps receiving)."""
    if callback is None:
        yield
        return
    token = _receiver.set(callback)
    try:
        yield
    finally:
        _receiver.reset(token)


def check_progress(fn: str, progress) -> None:
    """`progress` is None or a callable taking (stage, done, total)."""
    if progress is not None and not callable(progress):
        raise ArgumentError(f"{fn}: progress must be None or a callable (stage, done, total), "
                            f"got {type(progress).__name__}")


def on_terminal(quiet: bool = False) -> bool:
    """Whether a bar may be drawn: stdout and stderr are terminals and no --quiet."""
    return not quiet and sys.stdout.isatty() and sys.stderr.isatty()


def count_ops(module) -> int:
    """Ops in `module` (a ModuleOp or one graph), the size `LONG_GRAPH_OPS` is compared with."""
    return sum(1 for _ in module.walk())


@contextlib.contextmanager
def terminal_progress(quiet: bool = False, n_ops: int | None = None) -> Iterator[None]:
    """A rich bar per reported stage on stderr while the block runs, where `on_terminal` and
    the work is long (`n_ops`: the graph's size, None for work that is long by nature);
    otherwise nothing at all. The bars vanish when the block ends (the tool's output follows
    on a clean terminal)."""
    if not on_terminal(quiet) or (n_ops is not None and n_ops < LONG_GRAPH_OPS):
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bars, TextColumn
    from rich.progress import TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    # (stdout stays the program's own: what it prints goes where it was sent, bar or not)
    with Bars(*columns, console=Console(stderr=True), transient=True, redirect_stdout=False,
              redirect_stderr=False) as bars:
        stages: dict[str, int] = {}
        shown: dict[str, int] = {}

        def show(stage: str, done: int, total: int) -> None:
            if stage not in stages:
                stages[stage] = bars.add_task(stage, total=total)
            elif 0 < done - shown[stage] < max(1, total // BAR_STEPS) and done < total:
                return  # (a step of a 10^5-op stage: the bar moves in BAR_STEPS steps)
            shown[stage] = done
            bars.update(stages[stage], completed=done, total=total)

        with reporting(show):
            yield


def track(items: Iterable[T], stage: str, total: int | None = None) -> Iterator[T]:
    """`items`, reporting each one done under `stage` (a benchmark's rows)."""
    items = list(items) if total is None else items
    total = len(items) if total is None else total
    report(stage, 0, total)
    for done, item in enumerate(items, 1):
        yield item
        report(stage, done, total)


__all__ = ["Progress", "LONG_GRAPH_OPS", "report", "reporting", "check_progress",
           "on_terminal", "count_ops", "terminal_progress", "track"]

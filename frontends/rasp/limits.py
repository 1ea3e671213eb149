"""The RASP frontend's limits and tolerances (how large a table it builds, how far float32
may move a value it keeps), its error, and how it names an expression in one.

Every stage reads these; a test that shrinks a limit patches it in every module that reads
it (`tests/test_rasp.py`'s `_limit`)."""

from __future__ import annotations

from twdialect import point_tables
from twdialect.errors import TwError

try:
    from tracr.rasp import rasp
except ImportError:  # pragma: no cover - exercised where tracr is absent
    rasp = None

# Logit gap between a selected key and an unselected one: unselected keys weigh exp(-GAIN)
# (1e-26) of a selected one, BOS exp(-GAIN / 2) where anything is selected.
GAIN = 60.0
# Largest table (one-hot width, joint value set) the frontend builds.
MAX_TABLE = 4096
# Largest SequenceMap over value pairs (one neuron a pair, straight to the output's rows, as
# tracr's), and the most weights its MLP may hold (64 MiB of float32).
MAX_PAIRS = 1 << 16
MAX_PAIR_WEIGHTS = 1 << 24
# Most value pairs a SequenceMap is asked whether it is a function of a x + b y (its function
# run on every pair: some seconds at this many).
MAX_SUM_PAIRS = 1 << 20
# A table's float32 tolerance (CLEAN of its largest row) and how far off its points it is
# measured: `twdialect.point_tables`' (the home of a table through points).
CLEAN, PERTURB = point_tables.CLEAN, point_tables.PERTURB
# How far (absolute) each of a rank's two widths may stray where a table of their sum reads
# them (`_Translator._rank`): far inside the quarter unit that table's plateaus allow.
RANK_NOISE = 1e-3
# A numerical output's default tolerance (tracr's tests and tw's contract: 1e-4 absolute); a
# value float32 cannot keep within it is refused (`float32.check_output`).
ATOL = 1e-4
# Largest value set of a numerical SOp (an Aggregate's means, a LinearSequenceMap's sums) that
# is enumerated for a table.
MAX_MEANS = 1_000_000
# Most pairs of sums `ValueSets.means_of_sum` combines (some n^3 / 3 for two 0/1 means: length 370),
# each mean pair one float; their distinct values are again at most MAX_MEANS.
MAX_MEAN_PAIRS = 1 << 24
# Most additions `_sums` spends on one more key's sums (the sums so far times the values: a
# second or two of numpy at this many).
MAX_SUM_WORK = 1 << 26


class RaspError(TwError):
    """A RASP program (or one of its expressions, named) that tw cannot compile, and why."""


class _FeaturesNoNarrower(Exception):
    """A translation's token features reached the one-hot's width (`_token_columns`), a
    head's queries or keys read the one-hot itself (`_keys_one_hot`), or the finished graph
    reads it (`_embed_features`)."""


def _need_tracr() -> None:
    if rasp is None:
        raise RaspError("the RASP frontend needs tracr: pip install 'tw-compiler[rasp]' "
                        "(tracr-pypi)")


def _label(expr) -> str:
    try:
        return f"{type(expr).__name__} '{expr.label}'"
    except Exception:  # noqa: BLE001 - a label is only decoration
        return type(expr).__name__


"""What a translation of one program is asked to do (`Plan`), and what the next one is asked
after a translation that does not stand (`Plan.after`): the frontend's re-planning, one rule
per reason, in one place.

Three choices cannot be read off the value sets; each is tried, and given up where the built
graph shows it does not pay:

* `token_features`: narrow reads of the token one-hot go through feature columns of the
  embedding (`reads._token_columns`), which pays only where they are fewer than the one-hot's
  columns and nothing reads the one-hot itself (`FEATURES`: a translation found otherwise);
* `narrow_indices`: a head's value reads the indices through a position table of its own,
  which pays only where the indices one-hot is not in the residual anyway (`INDICES`);
* `tabled_sums`: SequenceMaps of numbers kept as tables of their value pairs, whose one-hots
  keep apart what a number may round together (RASP's a + 5/6 and b + 3/6, an ulp apart,
  that a Select compares): a translation refused after reading SequenceMaps as numbers or
  through a sum (`SUMS`) is tried again with those tabled, until a refusal reads none (then
  it stands).

`translate` runs the loop (`translator.py`); `RaspGraph.effort["replans"]` lists the reasons
met, in order. A re-plan for `FEATURES` met before any read has gone through the features is
made in place (`_Graph._without_features`: what was built so far is what the next plan would
build), listed in `effort["in_place"]` too; every other one builds the graph again."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

FEATURES = "token features no narrower"
INDICES = "indices one-hot read anyway"
SUMS = "refused after reading sums as numbers"


@dataclass(frozen=True)
class Plan:
    """One translation's choices (the first plan: every narrowing tried, no sum tabled)."""

    token_features: bool = True
    narrow_indices: bool = True
    tabled_sums: frozenset = field(default_factory=frozenset)

    def after(self, reason: str, numbered_sums: frozenset = frozenset()) -> Plan | None:
        """The plan to try after a translation under this one did not stand for `reason`
        (`numbered_sums`: the SequenceMaps it read as numbers), or None where there is
        nothing left to change (the refusal stands)."""
        if reason == FEATURES and self.token_features:
            return replace(self, token_features=False)
        if reason == INDICES and self.narrow_indices:
            return replace(self, narrow_indices=False)
        if reason == SUMS and numbered_sums - self.tabled_sums:
            return replace(self, tabled_sums=self.tabled_sums | numbered_sums)
        return None

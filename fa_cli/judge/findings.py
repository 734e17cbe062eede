"""What the search for a cause found: one finding, its kind and its lines.

The kinds are named once here (Kind, an enum whose values are the words results files keep);
every module that makes or reads a finding uses these names, and CAUSES says which kinds explain
a failure.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    RACE = "race"  # the output changes between runs
    INTERMITTENT = "intermittent"  # the verdict changes between runs
    HARMLESS = "harmless"  # tiny differences between runs: not a cause
    MEMCHECK = "memcheck"
    RACECHECK = "racecheck"
    SYNCCHECK = "synccheck"  # a barrier or a warp's mask not every thread it names reaches
    INITCHECK = "initcheck"  # device memory read before anything was written to it: a lead, not a cause alone
    CRASH = "crash"
    LIMIT = "limit"  # the sandbox ended the run at one of its limits
    ASAN = "asan"
    SIZE = "size"  # across cases: a 32-bit size
    SPLIT = "split"  # across cases: verdicts that change with a size or a split
    SUGGEST = "suggest"  # across cases: cases to run
    MEASURED = "measured"  # a mechanism pinned down by the probes' measurements
    OBSERVED = "observed"  # what the probes measured where it pins no mechanism down
    WARNING = "warning"  # a hazard in a program that passes (racecheck on a passing build)
    MISSING_TOOL = "missing-tool"  # a tool that is not here, or that stopped, and what it would tell
    CLEAN = "clean"  # the steps that ran and found nothing: said as observations, never an all-clear
    HYPOTHESIS = "hypothesis"  # what the output or the source looks like (the catalogue, the MI210 source hints):
    # a lead the measuring steps may refine, never a cause by itself


CAUSES = frozenset({Kind.RACE, Kind.INTERMITTENT, Kind.MEMCHECK, Kind.RACECHECK, Kind.SYNCCHECK, Kind.CRASH, Kind.ASAN,
                    Kind.LIMIT, Kind.SIZE, Kind.MEASURED})


@dataclass
class Finding:
    kind: Kind
    lines: list[str]
    fields: dict = field(default_factory=dict)

    def __post_init__(self):
        self.kind = Kind(self.kind)  # a word read back from a results file, or a typo: refused here

    @property
    def is_cause(self) -> bool:
        return self.kind in CAUSES

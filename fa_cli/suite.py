"""The test-case suites: a manifest, shipped small cases, the rest generated on demand.

Two suites of 30 cases each:
  t01..t30  fa's own: every N and d of the course, five value distributions (fa gen --dist);
  c01..c30  the course's own test shapes (2024 offering, as published in a student's report),
            values uniform in [-3, 3].
manifest.json names each case's shape, distribution, seed, time limit (the course's classes by
thirds: 01-10 2 s, 11-20 6 s, 21-30 10 s) and the sha256 of its input, so a generated file is
proven byte-identical to everyone else's; it also says where each suite comes from. The
manifest and the shipped cases (t01..t10, with their expected outputs) are in
locations.testcases(); generated cases in locations.cache_dir().
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from . import generate, locations
from .errors import ExitStatus, FaError
from .format import Shape, check_shape

NAME = re.compile(r"^[tc]\d\d$")
SUITES = ("t", "c")  # fa's own, the course's
DEFAULT_SUITE = "t"


@dataclass(frozen=True)
class Case:
    name: str
    shape: Shape
    dist: str
    seed: int
    time_limit: float
    shipped: bool
    sha256: str

    @property
    def input_path(self) -> Path:
        return (locations.testcases() if self.shipped else locations.cache_dir()) / f"{self.name}.in"

    @property
    def expected_path(self) -> Path | None:
        return locations.testcases() / f"{self.name}.out" if self.shipped else None


@dataclass(frozen=True)
class Target:
    """What a program runs on: a suite case or any input file (judge.target_for makes them)."""

    name: str
    input_path: Path
    shape: Shape
    time_limit: float | None
    expected_path: Path | None = None  # a shipped expected output (t01..t10)
    generated: bool = False  # its input was written into the cache directory just now
    sha256: str | None = None  # the input's, where known without reading it (a suite case's)


def time_limit_of(index: int) -> float:
    """The course's time limit of a suite's case by its position (0-based): 2, 6, 10 s by thirds."""
    return 2 if index < 10 else 6 if index < 20 else 10


@lru_cache(maxsize=1)
def manifest() -> dict:
    return json.loads((locations.testcases() / "manifest.json").read_text())


@lru_cache(maxsize=len(SUITES) + 1)
def cases(suite: str | None = DEFAULT_SUITE) -> dict[str, Case]:
    """The cases of one suite (t or c) by name, in order; suite=None: every suite's."""
    return {
        c["name"]: Case(c["name"], check_shape(c["B"], c["N"], c["d"], c["name"]), c["dist"], c["seed"],
                        c["time_limit"], c["shipped"], c["sha256"])
        for c in manifest()["cases"]
        if suite is None or c["name"][0] == suite
    }


def source(suite: str) -> str:
    """Where a suite's cases come from, as the manifest says."""
    return manifest().get("suites", {}).get(suite, "")


def is_case_name(text: str) -> bool:
    return bool(NAME.match(text))


def named_cases(names, suite_name: str | None = None) -> list[str]:
    """The cases named on the command line. With --suite given, a bare number is that suite's case
    (7 or 07: c07 with --suite c) and a case of the other suite is refused, never run in its place."""
    found = []
    for text in names:
        if suite_name and not Path(text).exists():
            if text.isdigit() and 1 <= int(text) <= len(cases(suite_name)):
                text = f"{suite_name}{int(text):02d}"
            elif is_case_name(text) and text[0] != suite_name:
                raise FaError(f"{text} is a case of suite {text[0]}, and --suite {suite_name} was given (it picks the "
                              f"suite of --all and of bare numbers): name {suite_name}{text[1:]}, or leave out --suite")
        found.append(text)
    return found


def case(name: str) -> Case:
    try:
        return cases(None)[name]
    except KeyError:
        ranges = ", ".join(f"{s}01..{s}{len(cases(s)):02d}" for s in SUITES)
        raise FaError(f"no test case named {name} (the suites have {ranges})") from None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def has_input(c: Case) -> bool:
    """The case's input is there and is the case's: shipped, or generated with a stamp that
    still holds (a file without one, from an older fa say, is hashed once against the manifest)."""
    path = c.input_path
    if not (path.exists() and path.stat().st_size == c.shape.input_bytes):
        return False
    if c.shipped or generate.stamp_holds(path, stamp_params(c)):
        return True
    if sha256_of(path) != c.sha256:
        return False
    generate.write_stamp(path, stamp_params(c), c.sha256)
    return True


def stamp_params(c: Case) -> dict:
    return dict(case=c.name, sha256=c.sha256)


def ensure_input(c: Case, progress: Callable[[int], None] | None = None) -> Path:
    """The case's input file, generated and checked against the manifest's sha256 if missing."""
    path = c.input_path
    if has_input(c):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_case(c, path, progress)


def write_case(c: Case, path: Path, progress: Callable[[int], None] | None = None) -> Path:
    """Generate the case's input at `path` and check it against the manifest's sha256."""
    generate.write_input(path, c.shape, c.seed, c.dist, progress)
    digest = sha256_of(path)
    if digest != c.sha256:
        path.unlink()
        raise FaError(f"{c.name}: generated input has sha256 {digest[:16]}..., the manifest says "
                      f"{c.sha256[:16]}...: this numpy draws different random numbers",
                      exit_code=ExitStatus.FAILED)
    if path.parent == locations.cache_dir():  # a case kept in the cache: stamped
        generate.write_stamp(path, stamp_params(c), digest)
    return path


COURSE_N = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def check_course_ranges(shape: Shape) -> None:
    """The official test cases' ranges (fa gen --strict)."""
    problems = []
    if not 2 <= shape.B <= 14000:
        problems.append(f"B = {shape.B} is outside 2..14000")
    if shape.N not in COURSE_N:
        problems.append(f"N = {shape.N} is not one of {', '.join(map(str, COURSE_N))}")
    if shape.elements >= 56_000_000:
        problems.append(f"B*N*d = {shape.elements} is not below 56,000,000")
    if problems:
        raise FaError("outside the course's ranges: " + "; ".join(problems))

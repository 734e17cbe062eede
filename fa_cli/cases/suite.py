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

import numpy

from .. import locations
from ..errors import ExitStatus, FaError
from ..files import atomic_file, remove_placed
from . import generate
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
    """The cases named on the command line. A bare number is a case of --suite's suite, else of the
    default one (7 or 07: t07; c07 with --suite c), where no file has that name; with --suite
    given, a case of the other suite is refused, never run in its place."""
    found = []
    for text in names:
        if not Path(text).exists():
            named = suite_name or DEFAULT_SUITE
            if text.isascii() and text.isdigit():
                if not 1 <= int(text) <= len(cases(named)):
                    raise FaError(f"{text}: suite {named} has cases 1 to {len(cases(named))} ({named}01..{named}"
                                  f"{len(cases(named)):02d}), and no file here has that name")
                text = f"{named}{int(text):02d}"
            elif suite_name and is_case_name(text) and text[0] != suite_name:
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


def suggestion(text: str) -> str | None:
    """The case a mistyped name most likely means (T01, t1, tO1, c7: t01, t01, t01, c07), if it is one."""
    m = re.match(r"^([tc])([0-9oil]{1,2})$", text.lower())
    if not m:
        return None
    number = int(m.group(2).translate(str.maketrans("oil", "011")))
    name = f"{m.group(1)}{number:02d}"
    return name if name != text and name in cases(None) else None


def cached_path(c: Case) -> Path:
    """Where a generated input of the case is kept in the cache directory."""
    return locations.cache_dir() / f"{c.name}.in"


def shipped_stamp(c: Case) -> Path:
    """The stamp of a shipped input's check against the manifest, kept in the cache directory
    (the shipped folder may be read-only: an installed package)."""
    return locations.cache_dir() / "stamps" / f"{c.name}.in.stamp"


def _holds(c: Case, path: Path, stamp: Path) -> bool:
    """path is the case's input as the manifest says: the size, then the stamp of an earlier check
    where it still holds (size, inode, mtime), else the sha256 (and the stamp written for next time)."""
    try:
        if not (path.is_file() and path.stat().st_size == c.shape.input_bytes):
            return False
    except OSError:
        return False
    if generate.stamp_holds(path, stamp_params(c), stamp):
        return True
    if sha256_of(path) != c.sha256:
        return False
    if locations.cache_dir().is_dir():  # a check never makes the cache: without one, hashed each time
        try:
            stamp.parent.mkdir(exist_ok=True)
            generate.write_stamp(path, stamp_params(c), c.sha256, stamp)
        except (OSError, FaError):  # a read-only cache: hashed each time
            pass
    return True


def input_here(c: Case) -> Path | None:
    """The case's input where one is here and is the manifest's: the shipped file (t01..t10), else
    one kept in the cache; None where it must be generated."""
    if c.shipped and _holds(c, c.input_path, shipped_stamp(c)):
        return c.input_path
    cached = cached_path(c)
    return cached if _holds(c, cached, generate.stamp_path(cached)) else None


def has_input(c: Case) -> bool:
    return input_here(c) is not None


def changed_shipped(c: Case) -> str | None:
    """One line where a shipped input is there but is not the manifest's (overwritten by fa gen, say)."""
    if not c.shipped or not c.input_path.exists() or _holds(c, c.input_path, shipped_stamp(c)):
        return None
    return (f"{c.input_path} is not {c.name}'s input (its sha256 is not the manifest's: changed since it was shipped); "
            f"{c.name} is judged on the manifest's input, generated into {cached_path(c)}")


def stamp_params(c: Case) -> dict:
    return dict(case=c.name, sha256=c.sha256)


def ensure_input(c: Case, progress: Callable[[int], None] | None = None,
                 say: Callable[[str], None] | None = None) -> Path:
    """The case's input file: the shipped or cached one where it is the manifest's, else generated
    into the cache and checked against the manifest's sha256 (a changed shipped one said first)."""
    path = input_here(c)
    if path is not None:
        return path
    if say and (line := changed_shipped(c)):
        say(line)
    path = cached_path(c)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_case(c, path, progress)


def write_case(c: Case, path: Path, progress: Callable[[int], None] | None = None, in_place: bool = False) -> Path:
    """Generate the case's input at `path` (in_place: a scratch file rewritten, generate.write_input),
    its sha256 computed as it is written and checked against the manifest's, unless this
    generator has made the manifest's bytes of this case before (generation_proven); one kept in
    the cache is stamped."""
    digest = None if generation_proven(c, in_place) else hashlib.sha256()
    placed = generate.write_input(path, c.shape, c.seed, c.dist, progress, digest=digest, in_place=in_place)
    if digest is not None:
        if digest.hexdigest() != c.sha256:
            remove_placed(path, placed)
            raise FaError(f"{c.name}: generated input has sha256 {digest.hexdigest()[:16]}..., the manifest says "
                          f"{c.sha256[:16]}...: this numpy draws different random numbers",
                          exit_code=ExitStatus.FAILED)
        record_proof(c, in_place)
    if path.parent == locations.cache_dir():  # a case kept in the cache: stamped
        generate.write_stamp(path, stamp_params(c), c.sha256)
    return path


# ---------------------------------------------------------------- generation proven once
# Hashing a generated input costs more than drawing it on many cores (one thread, 6.5 GB for suite
# c). Generation is deterministic: the same numpy and the same generator code draw the same bytes.
# So once an input's sha256 has been found to be the manifest's, the cache keeps that fact under
# the numpy version and the sha256 of the code that draws it (GENERATOR_FILES), for the way it was
# drawn (threads or processes); a later run with all of these unchanged generates the case without
# hashing it. Another numpy, an edited generator, another way, or no cache: hashed again.
def _proofs_path() -> Path:
    return locations.cache_dir() / "stamps" / "generation-proven.json"


# The files whose code makes an input's bytes: a change to any of them is a new generator.
GENERATOR_FILES = ("cases/generate.py", "cases/drawing_processes.py", "cases/format.py", "file_pages.py")


@lru_cache(maxsize=1)
def generator_key() -> str:
    code = hashlib.sha256(b"".join((locations.PACKAGE / f).read_bytes() for f in GENERATOR_FILES)).hexdigest()[:16]
    return f"numpy {numpy.__version__}, fa_cli's generator {code}"


def _proofs() -> dict:
    try:
        kept = json.loads(_proofs_path().read_bytes()[:1 << 20])
        return kept["proven"] if kept.get("generator") == generator_key() else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _drawn_as(c: Case, in_place: bool) -> str:
    """What a case's bytes follow from: its parameters, and the way they are drawn (threads or
    processes: each way is proven on its own)."""
    return (f"{c.name} B={c.shape.B} N={c.shape.N} d={c.shape.d} {c.dist} seed={c.seed} "
            f"{generate.drawing_way(c.shape.input_bytes, in_place)}")


def generation_proven(c: Case, in_place: bool = False) -> bool:
    return _proofs().get(_drawn_as(c, in_place)) == c.sha256


def record_proof(c: Case, in_place: bool = False) -> None:
    """Kept where the cache exists and can be written; elsewhere the next run hashes again."""
    if not locations.cache_dir().is_dir():
        return
    proven = {**_proofs(), _drawn_as(c, in_place): c.sha256}
    try:
        _proofs_path().parent.mkdir(exist_ok=True)
        with atomic_file(_proofs_path()) as f:
            f.write(json.dumps({"generator": generator_key(), "proven": proven}, indent=1).encode())
    except (OSError, FaError):
        pass


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

"""The kernel registry of fa's GPU programs, as `PROGRAM --kernels` prints it.

The one table is in C++ (src_common/registry.h): each row a kernel's name, its FA_KERNEL
family, what it needs, which inputs it takes, its tile parameters per d, its step on the
ladder and how fa sweep builds variants of it. fa ladder, fa sweep and the docs' kernel table
(tests/test_docs.py) read it from the program, so that a new kernel is its file and one row.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import FaError

COLUMNS = ["name", "FA_KERNEL", "needs", "takes", "tiles", "ladder", "sweep"]


@dataclass(frozen=True)
class Rung:
    step: int
    label: str
    idea: str
    env: dict[str, str]  # settings besides FA_KERNEL


@dataclass(frozen=True)
class SweepSpec:
    flags: str        # the -D flags of a variant, a template over {d} and the tile parameters
    kernel_name: str  # its kernel's name in resource reports, likewise
    rows: str         # Br as a product of parameters ("R*TM") or one of them
    keys: str         # Bc likewise


@dataclass(frozen=True)
class KernelRow:
    name: str
    family: str  # the FA_KERNEL value that asks for it
    needs: str
    takes: str
    tiles: dict[int, dict[str, int]]  # d -> parameter -> value
    rung: Rung | None
    sweep: SweepSpec | None


def parse_tiles(text: str) -> dict[int, dict[str, int]]:
    """'d=32: Br=16,Bc=32;d=64: Br=16,Bc=32' -> {32: {'Br': 16, 'Bc': 32}, 64: {...}}."""
    tiles = {}
    for part in text.split(";") if text != "-" else []:
        head, _, params = part.partition(":")
        tiles[int(head.strip().removeprefix("d="))] = {k: int(v) for k, v in
                                                       (p.split("=") for p in params.strip().split(","))}
    return tiles


def parse_rung(text: str) -> Rung | None:
    if text == "-":
        return None
    step, label, idea, env = text.split("|")
    return Rung(int(step), label, idea, dict(e.split("=", 1) for e in env.split() if "=" in e))


def parse_sweep(text: str) -> SweepSpec | None:
    return None if text == "-" else SweepSpec(*text.split("|"))


def parse(listing: str) -> list[KernelRow]:
    lines = listing.splitlines()
    if not lines or lines[0].split("\t") != COLUMNS:
        raise ValueError("not a kernel listing")
    rows = []
    for line in lines[1:]:
        name, family, needs, takes, tiles, rung, sweep = line.split("\t")
        rows.append(KernelRow(name, family, needs, takes, parse_tiles(tiles), parse_rung(rung), parse_sweep(sweep)))
    return rows


def kernels_of(binary: Path) -> list[KernelRow]:
    """The registry of a built program (none: it lists no kernels); no device is started."""
    try:
        proc = subprocess.run([str(binary), "--kernels"], capture_output=True, text=True, timeout=60)
        return parse(proc.stdout) if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []


def require(binary: Path, what: str) -> list[KernelRow]:
    rows = kernels_of(binary)
    if not rows:
        raise FaError(f"{what} lists no kernels (`{binary} --kernels`): fa ladder and fa sweep work on fa's own GPU "
                      "programs, --program cuda, hip or hip-cuda")
    return rows


def ladder(rows: list[KernelRow]) -> list[KernelRow]:
    """The rows on the ladder, in step order."""
    return sorted((r for r in rows if r.rung), key=lambda r: r.rung.step)


def sweepable(rows: list[KernelRow]) -> dict[str, KernelRow]:
    """Family -> its first row that fa sweep can build variants of."""
    found: dict[str, KernelRow] = {}
    for r in rows:
        if r.sweep and r.family not in found:
            found[r.family] = r
    return found


def homework_family(rows: list[KernelRow]) -> str | None:
    """The homework kernel's FA_KERNEL value: the first step of the ladder that fa sweep can
    build variants of (the steps before it are its history; fa sweep's default kernel)."""
    return next((r.family for r in ladder(rows) if r.sweep), None)


def measured_families(rows: list[KernelRow]) -> list[str]:
    """The FA_KERNEL values of the ladder's whole kernels (its steps with tiles), the last step
    first: each is measured under its own label besides a program's default (make results)."""
    return list(dict.fromkeys(r.family for r in reversed(ladder(rows)) if r.tiles))


# docs/kernels.md's table of the registry: one row per kernel, "| `name` | `family` | programs | ...".
DOCS_ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \| ([^|]+?) \|", re.MULTILINE)
PROGRAM_NAMES = {"cuda": "fa-cuda", "hip": "fa-hip", "hip-cuda": "fa-hip"}  # the HIP source's two builds: one name


def documented(text: str) -> dict[str, tuple[str, set[str]]]:
    """The docs table's rows: name -> (FA_KERNEL value, the programs that have it)."""
    return {m.group(1): (m.group(2), {p.strip() for p in m.group(3).split(",")}) for m in DOCS_ROW.finditer(text)}


def docs_disagreements(listings: dict[str, list[KernelRow]], text: str) -> list[str]:
    """Where the docs table and the programs' registries differ (none: they agree). `listings`:
    program name (cuda, hip, hip-cuda) -> its rows."""
    code: dict[str, tuple[str, set[str]]] = {}
    for program, rows in listings.items():
        for r in rows:
            family, programs = code.setdefault(r.name, (r.family, set()))
            programs.add(PROGRAM_NAMES[program])
    docs = documented(text)
    problems = [f"{name}: in the registry, not in the docs' table" for name in code if name not in docs]
    problems += [f"{name}: in the docs' table, not in any registry" for name in docs if name not in code]
    for name in code.keys() & docs.keys():
        if code[name][0] != docs[name][0]:
            problems.append(f"{name}: FA_KERNEL={code[name][0]} in the registry, {docs[name][0]} in the docs")
        if code[name][1] - docs[name][1]:
            problems.append(f"{name}: the docs do not say it is in {', '.join(sorted(code[name][1] - docs[name][1]))}")
    return problems

"""fa sweep --program hw4.cu --param BR=16,32: a student's own tile sizes.

Where the source takes them as -D macros (#ifndef BR / #define BR 32 / #endif), each
combination is built with the course's line plus its -D flags into the cache
(programs.from_source: one folder per source bytes and flags, reused), then judged and timed as
fa's own variants are (fa_cli/measure/sweep.py). A macro the source never tests with #ifndef,
#ifdef or defined() (fa_cli/measure/c_macros.py) is refused: -D of it would build the same
program. Every refusal comes before any work.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import locations
from ..cases.suite import Target
from ..errors import ExitStatus, FaError
from ..programs import programs, ready, student_build
from ..programs.programs import Program
from ..report.records import new_record
from . import bench, sweep
from .c_macros import IDENTIFIER, Macros, tested_macros
from .sweep import PROGRAMS, result_of

OWN_SUFFIXES = tuple(programs.SOURCE_COMPILERS)
# A value a -D flag can carry as one C token: a name, or a number (integer, hex or floating, with a suffix).
VALUE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[-+]?(0[xX][0-9a-fA-F]+|(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?)[uUlLfF]*")


def own_source(name: str) -> Path:
    """The student's source a sweep rebuilds; a binary, or a name that is neither, refused in one line."""
    path = Path(name)
    if path.suffix in OWN_SUFFIXES:
        if not path.is_file():
            raise FaError(f"--program {name}: no such source file", exit_code=ExitStatus.BAD_INPUT)
        return path
    sources = [s for s in (path.with_name(path.name + suffix) for suffix in (".cu", ".hip", ".cpp")) if s.is_file()]
    if path.exists():
        hint = f" (--program {sources[0]})" if sources else " (--program hw4.cu, hw4.hip or hw4.cpp)"
        raise FaError(f"--program {name}: a built program cannot be rebuilt with other tile sizes: give its source"
                      f"{hint}, which fa builds with the course's line and -D flags", exit_code=ExitStatus.BAD_INPUT)
    raise FaError(f"--program {name}: fa sweep builds {', '.join(PROGRAMS)}, or a source of yours "
                  "(hw4.cu, hw4.hip, hw4.cpp) that takes its tile sizes as -D macros", exit_code=ExitStatus.BAD_INPUT)


def parse_own_param(text: str, source: Path, macros: Macros) -> tuple[str, list[str]]:
    """'BR=16,32' -> ('BR', ['16', '32']) where the source tests BR; refused in one line otherwise."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not IDENTIFIER.fullmatch(name):
        raise FaError(f"--param {text!r}: expected NAME=V1,V2,... with NAME a macro of {source.name}",
                      exit_code=ExitStatus.BAD_INPUT)
    if name not in macros.tested:
        tested = ", ".join(sorted(macros.tested)) or "none"
        raise FaError(f"--param {name}: {source.name} never tests {name} with #ifndef/#ifdef, so -D{name}=... would "
                      f"build the same program (the macros it tests: {tested})", exit_code=ExitStatus.BAD_INPUT)
    chosen = list(dict.fromkeys(v.strip() for v in values.split(",")))
    bad = [v for v in chosen if not VALUE.fullmatch(v)]
    if not chosen or bad:
        raise FaError(f"--param {text!r}: {bad[0]!r} is not a C name or number" if bad and bad[0] else
                      f"--param {text!r}: give one value at least, comma-separated (a C name or number)",
                      exit_code=ExitStatus.BAD_INPUT)
    if all(re.fullmatch(r"\d+", v) for v in chosen):
        chosen.sort(key=int)
    return name, chosen


def own_grid(params: list[str], source: Path) -> list[dict[str, str]]:
    """Every combination of the --param values (a macro given twice is refused)."""
    macros = tested_macros(source)
    chosen: dict[str, list[str]] = {}
    for text in params:
        name, values = parse_own_param(text, source, macros)
        if name in chosen:
            raise FaError(f"--param {name}: given twice (give its values once, comma-separated)",
                          exit_code=ExitStatus.BAD_INPUT)
        chosen[name] = values
    if not chosen:
        tested = ", ".join(sorted(macros.tested))
        raise FaError(f"give --param NAME=V1,V2,... with a macro {source.name} tests with #ifndef "
                      f"({tested or 'it tests none: add #ifndef BR / #define BR 32 / #endif for each tile size'})",
                      exit_code=ExitStatus.BAD_INPUT)
    return [dict(zip(chosen, combo)) for combo in itertools.product(*chosen.values())]


def check_options(changed: list[str], with_profile: bool, case: str | None) -> None:
    """What a sweep of a source refuses, said first: --kernel and --arch (`changed`: those given)
    and --profile."""
    for option in ("kernel", "arch"):
        if option in changed:
            raise FaError(f"--{option}: not for a source of yours, which fa builds with the course's line for this "
                          f"machine's GPU and runs as it is (--param NAME=... names its macros)")
    if with_profile:
        raise FaError(f"--profile: not for a source of yours; profile the build you choose with "
                      f"fa profile {case or 'CASE'} --program ./hw4")


def check_params(params: list[str], source: Path) -> None:
    """Every bad --param refused before anything is built (none given: said later, after the case)."""
    if params:
        own_grid(params, source)


def check_runs_here(source: Path, params: list[str], name: str, launcher, run: bool) -> None:
    """No GPU for the source's build: said before what the command still lacks (--param)."""
    if run:
        ready.check_runs_here(programs.from_source(source), launcher, name, try_cpu=False)
    own_grid(params, source)


def title(records: list[dict], source: Path, target: Target) -> str:
    built = "the CPU" if records[0]["arch"] == "cpu" else records[0]["arch"]
    return f"fa sweep: {source.name} built for {built}, {target.name}"


def own_listing(source: Path) -> tuple[list[str], list[list[str]]]:
    """Header and rows of what a source can be swept over: the macros it tests, their defaults."""
    macros = tested_macros(source)
    body = [[name, macros.defaults.get(name, "-"), f"--param {name}=..."] for name in sorted(macros.tested)]
    return ["macro", "value as defined", "sweep it with"], body


def flags_of(combo: dict[str, str]) -> tuple[str, ...]:
    return tuple(f"-D{k}={v}" for k, v in combo.items())


def own_target(source: Path) -> str:
    """What a source is built for: the GPU target of the course's line here, or cpu."""
    return student_build.local_target(student_build.source_compiler(source)) or "cpu"  # hw4.hip: sm_XY where emulated


def build_own(source: Path, combo: dict[str, str], announce=None) -> tuple[Program, str | None]:
    """One combination built with the course's line and its -D flags (reused while the source and
    flags are the same): the program, and None, or the compiler's first error line."""
    flags = flags_of(combo)
    program = programs.from_source(source, flags)
    program = dataclasses.replace(program, name=" ".join([source.name, *flags]))
    if program.path.exists():
        return program, None
    if announce:
        announce(f"building {program.name}")
    return program, programs.build_error(program)


def run_own_sweep(source: Path, target: Target, params: list[str], plan_args: dict, run: bool = True,
                  workdir: Path | None = None, announce=None, progress=None) -> list[dict]:
    """One record per combination (kind "sweep") of a student's source: its values, its -D flags,
    and unless run is False its bench figures; one that does not build keeps the compiler's line."""
    combos = own_grid(params, source)
    programs.check_compiler(source)  # not installed: one line for the whole sweep, not one per build
    arch = own_target(source)
    with ThreadPoolExecutor(max_workers=max(1, min(len(combos), (os.cpu_count() or 2) // 2))) as pool:
        built = list(pool.map(lambda combo: build_own(source, combo, announce), combos))
    records = []
    for combo, (program, failed) in zip(combos, built):
        fields = {**combo, "sweep_params": list(combo), "sweep_source": source.name, "flags": " ".join(flags_of(combo)),
                  "arch": arch, "skipped": failed and failed.replace(f"{source.resolve().parent}/", ""),
                  "resources": None}
        plan = bench.BenchPlan([program], [target], kind="sweep", fields=fields, **plan_args)
        if fields["skipped"] or not run:
            record = new_record(program, target, plan.label, fields["skipped"] and f"skipped: {fields['skipped']}",
                                "sweep", plan.launcher, **fields)
        else:
            with locations.scratch("sweep", workdir) as work:
                record = bench.measure(plan, program, target, Path(work))
        records.append(record)
        if progress:
            progress(1)
    return records


def own_rows(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a sweep of a student's source: its macros' values, then the figures."""
    params = list(dict.fromkeys(p for r in records for p in r.get("sweep_params") or []))
    header = [*params, "process s", "kernel ms", "TFLOP/s", "max err", "result"]
    body = []
    for r in records:
        kernel = (r.get("timing") or {}).get("kernel")
        wall = (r.get("wall_s") or {}).get("median") if isinstance(r.get("wall_s"), dict) else None
        ok = not r.get("error")
        body.append([*(str(r.get(p, "-")) for p in params), f"{wall:.3f}" if ok and wall else "-",
                     f"{kernel * 1e3:.4g}" if ok and kernel else "-",
                     f"{r['tflops_kernel']:.3g}" if ok and r.get("tflops_kernel") else "-",
                     f"{r['max_err']:.1e}" if ok and r.get("max_err") is not None else "-", result_of(r)])
    return header, body


def rows(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of any sweep's records: a student's source's (its macros' values), else
    fa's variants' (sweep.rows)."""
    return own_rows(records) if records and records[0].get("sweep_source") else sweep.rows(records)


def key_columns(records: list[dict]) -> int:
    """How many of rows()' first columns name a variant (its parameters)."""
    if records and records[0].get("sweep_source"):
        return max(1, len(dict.fromkeys(p for r in records for p in r.get("sweep_params") or [])))
    return sweep.key_columns(records)


def base_program(record: dict) -> str:
    """The program a sweep record is a variant of: the student's source, or fa's program."""
    return record.get("sweep_source") or record["program"].split("-br")[0]

"""A program that passes can still race: the H100 may schedule its warps so that a missing barrier
never shows, where the judge's GTX 1080 or MI210 may not. So a CUDA or HIP program that passes
gets compute-sanitizer's racecheck, synccheck and initcheck on a small case, once per build (the
verdict is kept in fa's cache by the binary's bytes), built with -g -lineinfo where fa has its
source (the build the cause search uses), so that each hazard comes with its lines:

  passes here, but racecheck reports a shared-memory race: a write at hw4.cu:204 against a read
  at hw4.cu:151; the judge's GPU may schedule it otherwise
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from .. import locations
from ..cases import generate
from ..cases.format import Shape
from ..files import atomic_file
from ..programs import wave64
from ..programs.programs import Launcher, Program
from . import reference
from ..programs.timing import launches
from .cause import NOT_THE_PROGRAMS, emulations_own, with_lines
from .findings import Finding, Kind
from .launch_errors import base_name
from .probes.step import read_payload
from .report_readings import unwritten_output
from .reruns import TrialCase
from .steps import Context, Step
from .tool_logs import (LAYER_ONLY_SHOWN, NO_CUDA_CALL_SAID, TOOL_WORDS, Budget, SanitizerReport, find_tool,
                        gpu_kind, sanitize_side_by_side, sanitizer_lines)

RACE_N = 256  # keys and query rows: two whole tiles of 128 and more of 16, 32, 64; a size the course uses
# (a program written for the course's N, powers of 2 from 128, is checked where it is meant to run)
RACE_B = 1  # racecheck, synccheck: within a block; a block of the second batch runs the code a block of the
# first does, so one batch has their hazards, with half the blocks for each tool to watch
GLOBAL_B = 2  # initcheck, memcheck and the slowed check: global memory past the first batch's place (an
# offset, a scratch buffer's second part) is an access only a second batch makes
ON_ONE_BATCH = ("racecheck", "synccheck")
TOOL_TIMEOUT_S = 60.0
PASSING = "passes here, but "  # a hazard of a build that passed every case run
FAILING = "besides the cases it fails, "  # one of a build that fails some
THEN = {  # what the hazard may do elsewhere, where the build passed
    "memcheck": "an access outside its buffers that left this output right; on another GPU or run it may not",
    "initcheck": "what that memory held left this output right here; on another GPU or run it may hold other values",
    "racecheck": "the judge's GPU may schedule it otherwise",
}
TOOLS = {tool: TOOL_WORDS[tool] for tool in ("racecheck", "synccheck", "initcheck", "memcheck")}


def applies(program: Program) -> bool:
    """A student's GPU program (fa's own programs are checked by its tests)."""
    return program.make_target is None and program.interpreter == () and gpu_kind(program) in ("cuda", "hip")


def build_file(program: Program, folder: str, name: str) -> Path:
    """Where a check of this build keeps what it found (fa's cache, named by the binary's bytes)."""
    digest = hashlib.sha256(Path(program.path).read_bytes()).hexdigest()[:16]
    return locations.cache_dir() / folder / f"{digest}-{name}.json"


def cache_file(program: Program, d: int, memcheck_n: int = RACE_N, tools: tuple[str, ...] = tuple(TOOLS),
               race: tuple[int, int] = (RACE_B, RACE_N)) -> Path:
    """Named by the build, d, the tools, memcheck's N and racecheck's B and N where they are not the
    usual (a check of three tools, kept before memcheck joined them, is not taken for one of four)."""
    batches = f"b{RACE_B}-{GLOBAL_B}"
    name = f"d{d}-{batches}-memcheck-n{memcheck_n}" if tools == tuple(TOOLS) else \
        "-".join([f"d{d}", batches, *tools] + ([f"n{memcheck_n}"] if "memcheck" in tools else []))
    return build_file(program, "race-check", name + ("" if race == (RACE_B, RACE_N) else f"-race{race[0]}x{race[1]}"))


def kept_findings(path: Path) -> list[Finding] | None:
    """What keep() kept at path; None where nothing (readable) is kept."""
    try:
        return [Finding(f["kind"], f["lines"], f.get("fields", {})) for f in json.loads(path.read_text())]
    except (OSError, ValueError, KeyError):
        return None


def check_case(work: Path, d: int, N: int = RACE_N, B: int = RACE_B) -> TrialCase:
    """The checks' input (B x N x d, drawn once a folder) with its float64 output."""
    shape = Shape(B, N, d)
    path = work / f"race-{shape}.in"
    if not path.exists():
        generate.write_input(path, shape, seed=7)
    return TrialCase(str(shape), path, shape, reference.attention(*read_payload(path, shape, shape.B, shape.N)))


def check(program: Program, d: int, launcher: Launcher | None, work: Path, say: Callable[[str], None],
          budget: Budget, memcheck_n: int = RACE_N, tools: tuple[str, ...] = tuple(TOOLS),
          race: tuple[int, int] = (RACE_B, RACE_N)) -> list[Finding]:
    """The tools, side by side: racecheck and synccheck on RACE_B x RACE_N x d (race: B and N of
    their own), initcheck on GLOBAL_B x RACE_N x d, memcheck on GLOBAL_B x memcheck_n x d; or what
    was kept of an earlier check of the same build."""
    kept = cache_file(program, d, memcheck_n, tools, race)
    if (found := kept_findings(kept)) is not None:
        return found
    if find_tool("compute-sanitizer") is None:
        return [Finding(Kind.MISSING_TOOL, ["race check: compute-sanitizer is not installed here: its racecheck "
                                            "would show a shared-memory race that this GPU's schedule hides"])]
    lined = with_lines(program)
    if budget.left < 1:
        return [Finding(Kind.MISSING_TOOL, [f"race check: {', '.join(tools)} not run: {budget.left:.0f} s left of "
                                            f"fa run --why-budget's {budget.seconds:g} s"])]
    sizes = {tool: (race[1], race[0]) if tool in ON_ONE_BATCH else (memcheck_n if tool == "memcheck" else RACE_N,
                                                                       GLOBAL_B) for tool in tools}
    made = {size: check_case(work, d, *size) for size in set(sizes.values())}  # each input and output once
    cases = {tool: made[size] for tool, size in sizes.items()}
    where = on_shapes(cases)
    say(f"race check: compute-sanitizer's {where}" + (", side by side" if len(tools) > 1 else "")
        + " (once per build and d)")
    timeout = min(TOOL_TIMEOUT_S, budget.left)
    reports = sanitize_side_by_side(tools, lined.argv, cases[tools[0]].input_path, work, timeout,
                                    (launcher or Launcher()).wrap, inputs={t: c.input_path for t, c in cases.items()})
    if all(said.checked_nothing for said in reports):  # said once
        return [Finding(Kind.MISSING_TOOL, [f"race check: {where}: checked nothing: {NO_CUDA_CALL_SAID}"])]
    placed_in = program.source.name if wave64.emulates(program.source) else None
    found = [finding for said in reports for finding in told(said, cases[said.tool].shape, timeout, placed_in)]
    if not any(f.kind == Kind.MISSING_TOOL for f in found):
        keep(kept, found)
    return found


def on_shapes(cases: dict[str, TrialCase]) -> str:
    """"racecheck, synccheck on B=1, N=256, d=32 and initcheck, memcheck on B=2, ...": each shape once."""
    by_shape: dict[str, list[str]] = {}
    for tool, case in cases.items():
        by_shape.setdefault(str(case.shape), []).append(tool)
    return " and ".join(f"{', '.join(tools)} on {shape}" for shape, tools in by_shape.items())


def told(said: SanitizerReport, shape: Shape, timeout: float, placed_in: str | None = None) -> list[Finding]:
    """One tool's report as fa says it: a hazard as a warning with its lines, a tool stopped at its
    time limit with nothing reported, or nothing. placed_in: on the MI210 emulation, the student's
    file: a hazard with no line in it is not said as the program's (a wavefront's two warps meet
    through shared memory there, in the emulation's code inlined in the student's kernel; the
    reports whose lines name the emulation's header are dropped before, tool_logs.without_layer)."""
    if said.checked_nothing:
        return [Finding(Kind.MISSING_TOOL, [f"race check: {said.tool} checked nothing on {shape}: "
                                            f"{NO_CUDA_CALL_SAID}"])]
    if not said.first and said.shown_all:
        return [Finding(Kind.MISSING_TOOL, [f"race check: {said.tool} on {shape}: {LAYER_ONLY_SHOWN}"])]
    if not said.first:
        return [] if said.finished else [Finding(Kind.MISSING_TOOL, [f"race check: {said.tool} stopped after "
                                                                     f"{timeout:.0f} s with nothing reported"])]
    lines = sanitizer_lines(said.first)
    if emulations_own(said, placed_in):
        return [Finding(Kind.MISSING_TOOL, [f"race check: racecheck reports {lines[0].split(': ', 1)[-1]} on {shape} "
                                            f"{NOT_THE_PROGRAMS}"])]
    what = lines[0] if said.tool == "racecheck" else f"{TOOLS[said.tool]}: " + "; ".join(lines)
    if said.tool == "initcheck" and (where := unwritten_output(said.first, shape.B, shape.N, shape.d)):
        what += f" ({where})"
    counted = ([said.counted()] if said.counted() else []) + \
        ([] if said.finished else [f"the tool stopped at fa's {timeout:.0f} s limit after it"])  # its count unknown
    total = f" ({'; '.join(counted)})" if counted else ""
    then = THEN.get(said.tool, THEN["racecheck"])
    return [Finding(Kind.WARNING, [f"{PASSING}{said.tool} reports {what}{total} on {shape}; {then}"],
                    dict(tool=said.tool, report=said.first, count=said.count))]


def beside_failures(finding: Finding) -> Finding:
    """A hazard of a build that fails other cases: said as seen beside those failures, without the
    passing build's "left this output right" (the tool's run checks no output)."""
    if finding.kind != Kind.WARNING or not finding.lines[0].startswith(PASSING):
        return finding
    line = finding.lines[0][len(PASSING):]
    line = next((line[:-len(then) - 2] for then in THEN.values() if line.endswith("; " + then)), line)
    return Finding(finding.kind, [FAILING + line] + finding.lines[1:], finding.fields)


def keep(path: Path, found: list[Finding]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(json.dumps([dict(kind=x.kind, lines=x.lines, fields={k: v for k, v in x.fields.items()
                                                                      if k != "report"}) for x in found]).encode())


class PassingBuild(Step):
    """The check for a run's program where a case passed (or --why named one), once a build and d:
    the four tools at the d of the first such case (the --why case's first), then racecheck at each
    other d that passed, until one reports a hazard (a race may need d = 64's block or tile to
    show; the other tools' findings seldom depend on d, and each run of theirs costs a class's
    searches as much as a racecheck's); memcheck on a passing case's N where one is a multiple of no
    tile (a partial last tile), else on RACE_N, and at a later d too where it has such an N. Where
    nothing was reported and the launch logs show a grid fixed whatever the work (persistent blocks),
    racecheck again on PERSISTENT's input, where each block takes more than one item.
    Each tool gets TOOL_TIMEOUT_S at most, and no more than the investigation's budget has left."""

    name = "the race check of a passing build"

    def applies(self, ctx: Context) -> bool:
        return applies(ctx.program) and bool(self.passed(ctx))

    @staticmethod
    def passed(ctx: Context) -> list:
        return [r for r in ctx.results if r.target.name == ctx.case_label] + \
            [r for r in ctx.results if r.verdict == "PASS"]

    def run(self, ctx: Context) -> list[Finding]:
        found: list[Finding] = []
        passed = self.passed(ctx)
        for i, d in enumerate(dict.fromkeys(r.target.shape.d for r in passed)):
            # memcheck where a case of this d passed with a partial last tile (N a multiple of no tile of 16
            # or more), else at RACE_N: the course's N are powers of 2, and a program may rely on that
            n = next((r.target.shape.N for r in passed if r.target.shape.d == d and r.target.shape.N % 16), RACE_N)
            tools = tuple(TOOLS) if i == 0 else ("racecheck",) + (("memcheck",) if n != RACE_N else ())
            found += check(ctx.program, d, ctx.launcher, ctx.work, ctx.say, ctx.budget, n, tools)
            if any(f.kind in (Kind.WARNING, Kind.MISSING_TOOL) for f in found):
                break  # a hazard said, or a tool that could not say: the other d adds nothing sure
        else:
            if (fixed := fixed_grid(ctx.results)) is not None:  # a block meets a second item only past its grid
                ctx.say(f"race check: {fixed[0]}'s grid is {fixed[1]} blocks in every case, whatever its work: "
                        f"racecheck on {PERSISTENT[0]} batches of {PERSISTENT[1]} rows too, where its blocks take "
                        "items in turn")
                found += check(ctx.program, passed[0].target.shape.d, ctx.launcher, ctx.work, ctx.say, ctx.budget,
                               tools=("racecheck",), race=PERSISTENT)
        return [beside_failures(f) for f in found] if any(r.verdict != "PASS" for r in ctx.results) else found


PERSISTENT = (16, 128)  # racecheck's B and N for a fixed grid: 2048 rows, 256 items of 8, past a grid of SMs x 8


def fixed_grid(results: list) -> tuple[str, int] | None:
    """(a kernel, its blocks) where the launch logs of cases of different work (B * N) show that
    kernel with one grid every time, of fewer blocks than rows of the largest: a grid sized by the
    device (persistent blocks that take items in turn); None otherwise."""
    seen: dict[str, set] = {}
    for r in results:
        for launch in launches(getattr(getattr(r, "run", None), "stderr", "") or ""):
            seen.setdefault(base_name(launch.kernel), set()).add((launch.blocks, r.target.shape.B * r.target.shape.N))
    for kernel, pairs in seen.items():
        blocks, works = {b for b, _ in pairs}, {w for _, w in pairs}
        if len(blocks) == 1 and len(works) > 1 and next(iter(blocks)) < max(works) // 8:
            return kernel, next(iter(blocks))
    return None

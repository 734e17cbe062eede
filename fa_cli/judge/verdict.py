"""A judge like the course's: run a program on a test case, apply its time limit, verify.

Verdicts: PASS; WRONG (a value off by more than the tolerance, or non-finite); TLE (the whole
process reached the case's limit: it is stopped there, as the course's judge stops it, and its
output is not checked); ERROR (non-zero exit, no output or an output of the wrong size). Every
verdict but PASS comes with a diagnosis (diagnose.py): where and why, in a few lines.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import file_pages, locations, settings
from ..cases import cache, drawing_processes, generate, suite
from ..cases.format import AttentionInput, Shape, open_output, read_header
from ..cases.suite import Target
from ..errors import FaError
from ..programs import devices, ready
from ..measure import judge_column
from ..programs.programs import Launcher, Program, RunResult, run
from ..report import records
from . import diagnose, expected, verify


def target_for(text: str, progress=None, say=None) -> Target:
    """A suite name (t01..t30, c01..c30: its input checked against the manifest, generated if
    missing) or a path to an input file. A name that is both is refused: ./t01 is the file."""
    if suite.is_case_name(text):
        if os.path.lexists(text):
            raise FaError(f"{text} is both a test case and a file in this folder: ./{text} judges the file; rename "
                          f"the file to judge the case")
        c = suite.case(text)
        missing = not suite.has_input(c)
        path = suite.ensure_input(c, progress, say)
        return Target(c.name, path, c.shape, c.time_limit, c.expected_path, generated=missing, sha256=c.sha256)
    path = Path(text)
    if not os.path.lexists(text) and (near := suite.suggestion(text)):
        raise FaError(f"no test case or file named {text}: did you mean {near}?")
    return Target(path.name, path, read_header(path), None)


def shape_input(shape: Shape, seed: int = 0) -> tuple[Path, dict]:
    """Where a seeded uniform input of the shape is kept in the cache, and what its stamp says."""
    path = locations.cache_dir() / f"uniform-B{shape.B}-N{shape.N}-d{shape.d}-s{seed}.in"
    return path, dict(B=shape.B, N=shape.N, d=shape.d, seed=seed, dist="uniform")


def shape_target(shape: Shape, seed: int = 0, progress=None) -> Target:
    """A seeded uniform input of the given shape, generated once into the cache directory."""
    path, params = shape_input(shape, seed)
    missing = not generate.stamp_holds(path, params)
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        generate.write_input(path, shape, seed, progress=progress)
        generate.write_stamp(path, params, expected.sha256_of(path))
    return Target(f"{shape.B}x{shape.N}x{shape.d}", path, shape, None, generated=missing)


def scratch_target(item: Shape | str, folder: Path, progress=None, say=None) -> Target | None:
    """A suite case or a bench shape whose input is not here, generated into `folder` (a command's
    scratch, removed with it); None where its input is here (shipped, kept in the cache) or `item`
    is an input file."""
    if isinstance(item, Shape):
        cached, params = shape_input(item)
        if generate.stamp_holds(cached, params):
            return None
        generate.write_input(folder / cached.name, item, 0, progress=progress)
        return Target(f"{item.B}x{item.N}x{item.d}", folder / cached.name, item, None, generated=True)
    if not suite.is_case_name(item) or os.path.lexists(item) or suite.has_input(c := suite.case(item)):
        return None
    if say and (line := suite.changed_shipped(c)):
        say(line)
    path = suite.write_case(c, folder / f"{c.name}.in", progress)
    return Target(c.name, path, c.shape, c.time_limit, c.expected_path, generated=True, sha256=c.sha256)


@dataclass(frozen=True)
class JudgedOutput:
    """What the cause search needs of an output that failed, without keeping it: a digest of each
    batch (a rerun that writes other bytes changed) and the batches holding values over the
    tolerance (None where the output was not checked)."""

    digests: tuple[bytes, ...]
    wrong_batches: frozenset[int] | None

    def same_batches(self, out: np.ndarray) -> bool:
        """out (G, N, d) holds, bit for bit, what the judged output held in its first G batches."""
        return batch_digests(out) == self.digests[: len(out)]

    def failed_within(self, batches: int) -> bool | None:
        """Whether the judged output was wrong in its first `batches` batches (None: not known)."""
        if self.wrong_batches is None:
            return None
        return any(b < batches for b in self.wrong_batches)


def batch_digests(out: np.ndarray) -> tuple[bytes, ...]:
    return tuple(hashlib.blake2b(np.ascontiguousarray(batch).data, digest_size=16).digest() for batch in out)


def judged_output(out: np.ndarray, check: verify.VerifyResult | None) -> JudgedOutput:
    wrong = None
    if check is not None and check.wrong is not None:
        batches, _, bad = check.wrong.arrays()
        wrong = frozenset(int(b) for b in np.unique(batches[bad > 0]))
    return JudgedOutput(batch_digests(out), wrong)


@dataclass
class CaseResult:
    target: Target
    program: Program
    run: RunResult
    check: verify.VerifyResult | None
    time_limit: float | None
    output_problem: str | None = None  # an output file of the wrong size, say
    diagnosis: diagnose.Diagnosis | None = None  # why it did not pass
    judged: JudgedOutput | None = None  # the output of a case that did not pass, as digests

    @property
    def error(self) -> str | None:
        return self.run.error or self.output_problem

    @property
    def verdict(self) -> str:
        if self.run.timed_out:
            return "TLE"
        if self.error or self.check is None:
            return "ERROR"
        if not self.check.passed:
            return "WRONG"
        if self.time_limit is not None and self.run.wall_s > self.time_limit:
            return "TLE"
        return "PASS"

    @property
    def ok(self) -> bool:
        return self.verdict == "PASS"


@dataclass(frozen=True)
class JudgeOptions:
    """How fa run judges: the tolerance, the rows it checks (by default every value, against the
    input's expected output), the time limit, and where and how programs run."""

    tol: float = verify.COURSE_TOL
    check: verify.RowCheck = verify.RowCheck()
    time_limit: bool = True
    launcher: Launcher | None = None
    output_dir: Path | None = None  # for outputs: shared with compute nodes under Slurm
    env: dict[str, str] | None = None


def judge(program: Program, target: Target, options: JudgeOptions = JudgeOptions()) -> CaseResult:
    """Run one case and verify it: every value against its expected output (computed first if
    missing), or the rows options.check asks for against float64; diagnose it if it did not pass."""
    limit = target.time_limit if options.time_limit else None
    shape = target.shape
    with locations.scratch("run", options.output_dir) as tmp:
        out_path = Path(tmp) / f"{target.name}.out"
        result = run(program, target.input_path, out_path, options.launcher, timeout=limit, env=options.env)
        if result.timed_out:
            return CaseResult(target, program, result, None, limit, diagnosis=diagnose.of_tle(limit, result.wall_s))
        size = out_path.stat().st_size if out_path.exists() else None
        if result.error is not None or size != shape.output_bytes:
            why = diagnose.of_error(result.returncode, result.stderr, shape, size, input_path=target.input_path,
                                    output_path=out_path if size else None)
            own = result.returncode > 0 and diagnose.signal_name(result.returncode) is None and not result.launcher_says
            if size == shape.output_bytes and own:  # an exit status of the program's own, an output whole
                check = checked(out_path, target, options)[2]
                why.lines += written_before_exit(check, result.returncode, bool(why.fields.get("stderr_tail")))
                why.fields["right_before_exit"] = check.passed
            problem = None if result.error else "no output file" if size is None else diagnose.short_output(size, shape)
            return CaseResult(target, program, result, None, limit, problem, why)
        out, inp, check = checked(out_path, target, options)
        why = judged = None
        if not check.passed:
            why = diagnose.of_wrong(check, shape, inp, out, program.source)
            judged = judged_output(out, check)
        del out
    case = CaseResult(target, program, result, check, limit, diagnosis=why, judged=judged)
    if case.verdict == "TLE":  # finished, correct, but past its limit
        case.diagnosis = diagnose.of_tle(limit, result.wall_s)
    return case


def checked(out_path: Path, target: Target, options: JudgeOptions):
    """A whole output file and its check: every value against the expected output (computed first
    if missing), or the rows options.check asks for against float64. (output, input, check)."""
    out = open_output(out_path, target.shape)
    inp = AttentionInput(target.input_path)
    if options.check.is_default or options.check.sample and expected.is_ready(expected.path_of(target), target.shape):
        # A cached expected output is compared in full: at memory speed, it costs less than a
        # sample's float64 rows (--sample is for inputs that have none yet).
        check = verify.against_expected(out, expected.output_of(target), options.tol, target.shape)
    else:
        check = verify.against_reference(inp, out, options.tol, options.check)
    return out, inp, check


def written_before_exit(check: verify.VerifyResult, returncode: int, said: bool) -> list[str]:
    """What the output file of a run that ended with an exit status of its own holds, checked as a
    passing one would be: right, its failure is that status alone (as where a check of the
    program's own fails after the work: a write's count against another unit, say), else its error.
    said: the program wrote a line on stderr."""
    if not check.passed:
        return [f"its output file is whole (of the right size) but wrong too: max error {check.max_err:.3g}"]
    right = "the rows checked are right" if check.sampled else "the attention is right"
    words = "its stderr line above says which" if said else "it wrote nothing on stderr"
    return [f"its output file is whole and right ({check.mode}, max error {check.max_err:.2g}): {right}, and the "
            f"program ended with exit status {returncode} after writing it; as where a check of its own fails after "
            f"the work ({words}: a write checked against a count in another unit, fwrite's return being the items "
            "written, not the bytes, is one such)?"]


def as_record(result: CaseResult, options: JudgeOptions = JudgeOptions()) -> dict:
    """One results-file record (records.new_record, kind "run") of a judged case, for fa report."""
    run_ = result.run
    fields = dict(verdict=result.verdict, wall_s=run_.wall_s, time_limit=result.time_limit, tol=options.tol,
                  timing=run_.timing, build=run_.build, max_err=result.check.max_err if result.check else None,
                  verify_mode=result.check.mode if result.check else None, passed=result.ok,
                  diagnosis=result.diagnosis.fields if result.diagnosis else None,
                  diagnosis_text=result.diagnosis.lines if result.diagnosis else None)
    fields["device"] = devices.device_of_run(run_.build)
    fields.update(judge_column.record_fields(result.target.shape, run_.wall_s, run_.stderr, result.program)
                  if not result.error else {})
    return records.new_record(result.program, result.target, None, result.error, "run", options.launcher, **fields)


class CaseInputs:
    """fa run's inputs, made one case at a time. A suite case whose input is not here (shipped, or
    kept in the cache) is generated just before it is judged, into a scratch folder (in memory
    where it has room, else TMPDIR; node-local on a cluster; the shared work folder under Slurm);
    once judged, its file is the one the next input is drawn into (its pages reused: freeing them
    and zeroing new ones cost a suite c re-run more than drawing its values), so that the course
    suite never holds more than two inputs at once, the one judged and the next; with keep, it
    goes into the cache and stays, as fa gen --suite puts it. Expected outputs are always kept in
    the cache. The input of the smallest failing case so far stays until the end, for the search
    for its cause. While the expected output of one case is computed (on the GPU, for a first
    run), the next case's input is drawn beside it (make_ahead); settle() waits for it before a
    program runs, so that no input is drawn while a run is timed.
    Use as a context manager: target(name) before a case, judged(result) after it."""

    def __init__(self, names: list[str], keep: bool, with_expected: bool, say, scratch_parent: Path | None = None):
        self.names, self.keep, self.say = names, keep, say
        self.scratch_parent = scratch_parent
        self.cases = {n: suite.case(n) for n in names if suite.is_case_name(n)}
        self.to_make = {n: c for n, c in self.cases.items() if not suite.has_input(c)}
        self.needs = [expected.Need(c.input_path, c.shape, expected.path_for(c.input_path, c.sha256))
                      for c in {c.name: c for c in self.cases.values()}.values()
                      if with_expected and c.expected_path is None and
                      not expected.is_ready(expected.path_for(c.input_path, c.sha256), c.shape)]
        self.cache_before = cache.total(cache.usage())
        self.folder: Path | None = None
        self.ahead: tuple[str, Future] | None = None  # the next case's input, being drawn
        self.made: dict[str, Path] = {}  # inputs drawn ahead, not yet taken
        self.kept: tuple[CaseResult, Path] | None = None  # the smallest failure's input, in the scratch folder
        self.spare: list[Path] = []  # judged inputs' files, for the next inputs to be drawn into
        self.drawing = False  # some input is drawn by the drawing processes (generate.drawing_way)
        self.why: str | None = None  # the case fa run --why looks into, whatever its verdict: its input stays

    def __enter__(self) -> CaseInputs:
        self._check_and_say()
        self._scratch = contextlib.ExitStack()
        self.drawing = not self.keep and any(
            generate.drawing_way(c.shape.input_bytes, True) == "processes" for c in self.to_make.values())
        if self.drawing:  # the drawing processes started; no program runs until they are up (settle)
            drawing_processes.start(generate.workers())
        if self.to_make and not self.keep:
            self.folder = self._scratch.enter_context(locations.scratch("inputs", self.scratch_parent))
            # closed before the scratch folder goes: a draw in flight ends first (an interrupt waits for it)
            self._drawer = self._scratch.enter_context(ThreadPoolExecutor(1))
        return self

    def __exit__(self, *exc) -> None:
        self._scratch.close()

    def _check_and_say(self) -> None:
        """How inputs are made and what the cache keeps, said before any work; refused where it
        does not fit."""
        where = locations.cache_dir()
        expected_bytes = sum(n.shape.output_bytes for n in self.needs)
        inputs = [c.shape.input_bytes for c in self.to_make.values()]
        into_cache = expected_bytes + (sum(inputs) if self.keep else 0)
        free = ready.free_bytes(where)
        if into_cache > free:
            raise FaError(f"the cases named need {ready.human_bytes(into_cache)} in the cache {where}, and only "
                          f"{ready.human_bytes(free)} is free there: set FA_CACHE to a folder with room, or name "
                          f"fewer cases")
        if self.to_make and not self.keep:
            at_once = sum(sorted(inputs)[-2:])  # a case's input and the next one's, drawn ahead
            in_memory = self.scratch_parent is None and not settings.temporary_folder_named() and \
                file_pages.memory_folder_for(at_once)
            scratch = self.scratch_parent = self.scratch_parent or in_memory or Path(tempfile.gettempdir())
            room = ready.free_bytes(scratch)
            if max(inputs) > room:
                raise FaError(f"the largest input to generate needs {ready.human_bytes(max(inputs))} in {scratch}, "
                              f"and only {ready.human_bytes(room)} is free there: set TMPDIR to a folder with room")
            if at_once > room:
                raise FaError(f"the two largest inputs to generate need {ready.human_bytes(at_once)} in {scratch}, "
                              f"and only {ready.human_bytes(room)} is free there: set TMPDIR to a folder with room")
            where_from = "in memory; TMPDIR names another place" if in_memory else "TMPDIR"
            self.say(f"inputs: {ready.plural_files(len(inputs), 'input')} generated one at a time into {scratch} "
                     f"({where_from}; at most {ready.human_bytes(at_once)} at once, the next case's drawn ahead "
                     "into the file of one judged) and deleted at the end "
                     f"(--keep-inputs keeps them in the cache); the cache {where} keeps "
                     f"{ready.plural_files(len(self.needs), 'expected output')}, {ready.human_bytes(expected_bytes)}")
        elif into_cache >= ready.ANNOUNCE_BYTES:
            files = " and ".join(ready.plural_files(n, what) for n, what in
                                 ((len(inputs), "input"), (len(self.needs), "expected output")) if n)
            self.say(f"generating {files}, {ready.human_bytes(into_cache)} in all, into {where} "
                     f"({ready.human_bytes(free)} free there; kept for later runs; FA_CACHE moves it)")

    def target(self, name: str, progress=None) -> Target:
        """The case's target, its input generated now where it has to be."""
        c = self.to_make.get(name)
        if c is None or self.folder is None:
            target = target_for(name, progress, self.say)
            if target.generated:  # kept in the cache (--keep-inputs): where it went
                self.say(f"generated {target.name} ({target.shape}) into {target.input_path}")
            return target
        self.settle()
        path = self.made.pop(name, None) or self._draw(c, progress)
        return Target(c.name, path, c.shape, c.time_limit, c.expected_path, generated=True, sha256=c.sha256)

    def _draw(self, c: suite.Case, progress=None) -> Path:
        if line := suite.changed_shipped(c):
            self.say(line)
        path = self.folder / f"{c.name}.in"
        try:
            os.replace(self.spare.pop(), path)
        except IndexError:  # none judged yet: a new file
            pass
        return suite.write_case(c, path, progress, in_place=True)

    def make_ahead(self, name: str) -> None:
        """Start drawing this case's input beside the work in hand (an expected output computed)."""
        c = self.to_make.get(name)
        if c is not None and self.folder is not None and self.ahead is None and name not in self.made:
            self.ahead = (name, self._drawer.submit(self._draw, c))

    def settle(self) -> None:
        """Wait for an input drawn ahead, and for the drawing processes to be up: before a program
        runs, so that its time is its own."""
        if self.drawing and (processes := generate.drawers()) is not None:
            processes.wait_ready()
        if self.ahead is not None:
            name, drawing = self.ahead
            self.ahead = None
            self.made[name] = drawing.result()

    def drawn_ahead(self, name: str) -> bool:
        return name in self.made or (self.ahead is not None and self.ahead[0] == name)

    def judged(self, result: CaseResult) -> None:
        """The case's input file given to the next draw, unless it is the smallest failure so far
        (the one whose cause is looked for; the one it replaces goes)."""
        path = result.target.input_path
        if self.folder is None or path.parent != self.folder or result.target.name == self.why or \
                (self.kept is not None and path == self.kept[1]):  # a case named twice: its kept file stays
            return
        failed = result.verdict in ("WRONG", "ERROR")
        key = (result.target.shape.flops, result.target.shape.input_bytes)
        if failed and (self.kept is None or key < (self.kept[0].target.shape.flops,
                                                   self.kept[0].target.shape.input_bytes)):
            if self.kept is not None:
                self.spare.append(self.kept[1])
            self.kept = (result, path)
            return
        self.spare.append(path)

    def kept_line(self) -> str | None:
        """What the cache keeps now, where this run generated inputs or computed expected outputs."""
        if not (self.to_make or self.needs):
            return None
        now = cache.usage()
        if cache.total(now) == self.cache_before:
            return None
        return f"the cache {locations.cache_dir()} keeps {cache.summary(now)}: fa cache shows it, fa cache --clear " \
               "empties it"

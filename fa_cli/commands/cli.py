"""fa: the command line. Each command parses its options and calls the module that does the work."""
from __future__ import annotations

import dataclasses
import json
import signal
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from .. import __version__, locations, settings, starter
from ..measure import bench, compare, ladder, profile, resources, source_sweep, sweep
from ..cases import cache, generate, suite
from ..judge import cause, diagnose, expected, verdict, mistakes, verify
from ..report import charts, tables, writeup
from ..programs import programs, ready, slurm, system, wave64
from .options import SECONDS, SEED, TOLERANCE, OutputPath, Size, force_option
from ..programs.devices import describe_first, list_devices
from ..errors import ExitStatus, FaError
from ..cases.format import AttentionInput, Shape, check_shape, open_output, regular_size
from ..files import remove_placed
from ..report.records import append, by_kind, check_extendable


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where fa is, so that it unwinds like Ctrl-C: running programs
    are stopped and temporary files removed on the way out."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def raise_terminated(signum, frame):
    raise Terminated(signum)


class FaGroup(click.Group):
    """Turns FaError and OSError into one line on stderr and an exit status, never a traceback
    (unless --traceback or FA_DEBUG=1 asks for one); Ctrl-C and SIGTERM into one line too."""

    def invoke(self, ctx: click.Context):
        signal.signal(signal.SIGTERM, raise_terminated)
        if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(signal.SIGHUP, raise_terminated)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("fa: interrupted", err=True)
            sys.exit(ExitStatus.INTERRUPTED)
        except Terminated as e:
            click.echo(f"fa: stopped by {signal.Signals(e.signum).name}", err=True)
            sys.exit(128 + e.signum)
        except click.BadParameter as e:  # an option's value refused by its type: one line, as any error
            click.echo(f"fa: error: {e.format_message()}", err=True)
            sys.exit(ExitStatus.BAD_INPUT)
        except (FaError, OSError, MemoryError) as e:
            if ctx.params.get("traceback") or settings.debug():
                raise
            click.echo(f"fa: error: {one_line(e)}", err=True)
            sys.exit(e.exit_code if isinstance(e, FaError) else ExitStatus.FAILED if isinstance(e, MemoryError)
                     else ExitStatus.BAD_INPUT)


def one_line(e: Exception) -> str:
    """The error in one line: a name holding a newline or another control character is escaped."""
    if isinstance(e, MemoryError):
        text = "not enough memory for this command (" + " ".join(sys.argv[1:3]) + ")"
    elif isinstance(e, OSError):
        text = f"{e.filename}: {e.strerror}" if e.filename else str(e.strerror or e)
    else:
        text = str(e)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@click.group(cls=FaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="fa")
@click.option("--traceback", is_flag=True, help="Show the traceback of an error (as FA_DEBUG=1 does).")
def main(traceback: bool) -> None:
    """Generate, run, verify and compare FlashAttention homework programs.

    Generated inputs and programs built from an installed fa's sources go to the cache
    directory: FA_CACHE, else the user cache directory (~/.cache/fa on Linux). Exit status:
    0 ok, 1 something did not pass or a tool failed, 2 unusable input or arguments, 130 and
    143 interrupted (Ctrl-C, SIGTERM).
    """


def note(text: str) -> None:
    """A line on stderr about something fa did on the user's behalf."""
    click.echo(f"fa: {text}", err=True)


def built(prog: programs.Program) -> programs.Program:
    """programs.ensure_built, saying every 5 s how long a build has taken once it passes 10 s."""
    if prog.path.exists():
        return programs.ensure_built(prog, note)
    with tables.progress(f"building {prog.name}", None):
        return programs.ensure_built(prog, note)


def program_for(name: str) -> programs.Program:
    return built(programs.resolve(name))


def check_names(names) -> None:
    """Every case name and input file valid, before anything is built or generated: a name that
    is wrong is said before what this machine lacks (an input file's header is read, no more)."""
    for name in names:
        if suite.is_case_name(name) and not Path(name).exists():
            suite.case(name)
        else:
            verdict.target_for(name)


def runnable(name: str, runner, try_cpu: bool = True, check: bool = True) -> programs.Program:
    """The program NAME, refused in one line where it needs a GPU this machine lacks (before it is
    built and before any input is generated), then built if it has to be."""
    prog = programs.resolve(name)
    if check:
        ready.check_runs_here(prog, runner, name, try_cpu)
    return built(prog)


def targets_for(names, shapes=()) -> list[suite.Target]:
    """Suite cases, input files and bench shapes; says which inputs it had to generate."""
    found = []
    for item in [*names, *shapes]:
        # A bar only shows while an input is being generated (batches written, total unknown here).
        with tables.progress(f"input {item}", None) as advance:
            target = verdict.shape_target(item, progress=advance) if isinstance(item, Shape) else \
                verdict.target_for(item, advance, note)  # a changed shipped input is said
        if target.generated:
            note(f"generated {target.name} ({target.shape}) into {target.input_path}")
        found.append(target)
    return found


@main.command()
@click.option("-B", "batches", type=Size("B"), help="Batch size. Required unless --suite.")
@click.option("-N", "seq_len", type=Size("N"), help="Sequence length. Required unless --suite.")
@click.option("-d", "head_dim", type=int, help="Head dimension, 32 or 64. Required unless --suite.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the random values: the same arguments give the same bytes on every machine.")
@click.option("--dist", type=click.Choice(list(generate.DISTRIBUTIONS)), default="uniform", show_default=True,
              help="Distribution of the values in [-3, 3]; all but uniform stress the softmax.")
@click.option("-o", "--output", type=OutputPath(), help="Input file to write. Required unless --suite.")
@click.option("--expected", type=OutputPath(),
              help="Also write the float64 reference output (rounded to float32) here.")
@click.option("--suite", "case_name",
              help="Generate a suite case (t01..t30, c01..c30) instead, checked against its sha256; "
                   "to -o if given, else to the suite's place.")
@click.option("--strict", is_flag=True, help="Refuse shapes outside the course's ranges.")
@force_option
def gen(batches, seq_len, head_dim, seed, dist, output, expected, case_name, strict) -> None:
    """Write a seeded random input (byte-identical for the same arguments)."""
    if case_name:
        c = suite.case(case_name)
        if output:
            generate.check_replaceable(output)
        with tables.progress(f"generating {c.name}", c.shape.B) as advance:
            path = suite.write_case(c, output, advance) if output else suite.ensure_input(c, advance, note)
        click.echo(f"{path}: {c.shape}, {c.dist}, seed {c.seed}, sha256 matches the manifest")
        return
    if None in (batches, seq_len, head_dim) or output is None:
        raise click.UsageError("give -B, -N, -d and -o (or --suite NAME)")
    shape = check_shape(batches, seq_len, head_dim, "gen")
    if strict:
        suite.check_course_ranges(shape)
    generate.check_outputs(output, expected, shape)
    with tables.progress(f"writing {output}", shape.B) as advance:
        written = generate.write_input(output, shape, seed, dist, advance)
    click.echo(f"{output}: {shape}, {dist}, seed {seed}, {shape.input_bytes} bytes")
    if expected:
        try:
            with tables.progress(f"reference {expected}", shape.B) as advance:
                generate.write_expected(AttentionInput(output), expected, advance)
        except BaseException:  # both files or neither: the input just written goes too (the file, not a
            remove_placed(output, written)  # link to it; a device or FIFO written in place stays)
            raise
        click.echo(f"{expected}: float64 reference, {shape.output_bytes} bytes")


VERIFY_HELP = ("Check OUTPUT: max abs error, where it is, how many values exceed --tol; for a failed check "
               "with --input, where the wrong values are and which usual mistake explains them, if one "
               "does. Exit 0 pass, 1 fail.\n\nThe mistakes fa recognises:\n\n\b\n"
               + "\n".join(f"- {m.name}" for m in mistakes.MISTAKES))


@main.command(name="verify", help=VERIFY_HELP)
@click.argument("output", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The input, a file or a test case (t01, c17): the output is checked against float64 "
                   "attention of it.")
@click.option("--expected", "expected_file", type=click.Path(dir_okay=False, path_type=Path),
              help="An expected output to compare with instead.")
@click.option("--tol", type=TOLERANCE, default=verify.COURSE_TOL, show_default=True, help="Largest allowed abs error.")
@click.option("--sample", "sample_rows", type=click.IntRange(min=1),
              help="A quick look: this many random rows per batch against float64 (a sampled verdict, not the "
                   "course's).")
@click.option("--full", is_flag=True,
              help="Every row against float64 computed now, instead of the cached expected output.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the sampled rows.")
def verify_cmd(output, input_path, expected_file, tol, sample_rows, full, seed) -> None:
    if (input_path is None) == (expected_file is None):
        raise click.UsageError("give exactly one of --input or --expected")
    if sample_rows and full:
        raise click.UsageError("--sample and --full exclude each other")
    if input_path is not None:
        # A case name (t01, c17) as fa run takes it: its input, generated if missing.
        case = targets_for([str(input_path)])[0] if not input_path.exists() and \
            suite.is_case_name(str(input_path).lower()) else None
        input_path = case.input_path if case else input_path
        # Read, not mapped: a file cut short while fa reads it is one line, never a SIGBUS.
        inp = AttentionInput(input_path, in_memory=True)
        out = open_output(output, inp.shape, in_memory=True)
        check = verify.RowCheck(sample_rows, full, seed)
        if check.is_default:  # every value, as the course's judge: against the input's expected output
            target = case or suite.Target(input_path.name, input_path, inp.shape, None)
            ensure_expected([target])
            with tables.progress("verifying", inp.shape.elements) as advance:
                result = verify.against_expected(out, expected.output_of(target, in_memory=True), tol, inp.shape,
                                                 advance)
        else:
            with tables.progress("verifying", inp.shape.B) as advance:
                result = verify.against_reference(inp, out, tol, check, advance)
        if not result.passed and result.checked:
            click.echo(tables.verify_summary(result))
            click.echo(tables.verify_details(result, diagnose.of_wrong(result, inp.shape, inp, out)))
            sys.exit(ExitStatus.FAILED)
    else:
        size = regular_size(expected_file, "expected output")
        flat = Shape(1, size // 4, 1) if size % 4 == 0 else None
        if flat is None:
            raise FaError(f"{expected_file}: {size} bytes is not a whole number of float32 values")
        exp = open_output(expected_file, flat, "expected output", in_memory=True)
        got = regular_size(output)
        if got != size:
            raise FaError(f"{output}: output has {got} bytes, the expected output {expected_file} has {size} "
                          f"({size // 4} float32 values)", exit_code=ExitStatus.BAD_INPUT)
        out = open_output(output, flat, in_memory=True)
        result = verify.against_expected(out.reshape(-1), exp.reshape(-1), tol)
    click.echo(tables.verify_summary(result))
    sys.exit(ExitStatus.OK if result.passed else ExitStatus.FAILED)


def ensure_expected(targets: list[suite.Target]) -> None:
    """Compute the expected outputs still missing, saying first what that costs where it is long."""
    expected.ensure(expected.missing(targets), note, tables.progress)


def launcher_options(f):
    """--launcher direct|slurm and the options of srun, shared by run and bench."""
    for option in reversed([
        click.option("--launcher", type=click.Choice(["direct", "slurm"]), default="direct", show_default=True,
                     help="Run programs here, or on the cluster through srun."),
        click.option("--partition", help="Slurm partition (with --launcher slurm), e.g. nvidia or amd."),
        click.option("--gres", help="Slurm generic resources, e.g. gpu:1."),
        click.option("--srun-arg", "srun_args", multiple=True, help="Extra srun/sbatch option; repeatable."),
    ]):
        f = option(f)
    return f


def make_launcher(launcher: str, partition: str | None, gres: str | None,
                  srun_args: tuple[str, ...]) -> slurm.SlurmLauncher | None:
    """The launcher programs run through: None to run them here. Where it is one, outputs go to
    a work directory the nodes share (locations.shared_workdir)."""
    if launcher == "direct":
        if partition or gres or srun_args:
            raise click.UsageError("--partition, --gres and --srun-arg need --launcher slurm")
        return None
    if not partition:
        raise click.UsageError("--launcher slurm needs --partition")
    return slurm.SlurmLauncher(partition, gres, srun_args)


@main.command()
@click.argument("cases", nargs=-1)
@click.option("--all", "all_cases", is_flag=True,
              help="Every case of a suite: t01..t30, or c01..c30 with --suite c.")
@click.option("--suite", "suite_name", type=click.Choice(suite.SUITES), default=suite.DEFAULT_SUITE, show_default=True,
              help="The suite --all runs: t (fa's own cases) or c (the course's 30 test shapes).")
@click.option("--program", default="best", show_default=True, help=programs.CHOICES + ".")
@click.option("--tol", type=TOLERANCE, default=verify.COURSE_TOL, show_default=True,
              help="Largest abs error a PASS allows (the course's).")
@click.option("--sample", "sample_rows", type=click.IntRange(min=1),
              help="A quick look where no expected output is cached yet: this many random rows per batch against "
                   "float64 (a sampled verdict, not the course's). A case whose expected output is cached is "
                   "compared in full, which costs less.")
@click.option("--full", is_flag=True,
              help="Verify every row against float64 computed now, instead of the cached expected output.")
@click.option("--time-limit", type=SECONDS,
              help="Seconds allowed per case, input files included (default: the course's, suite cases only).")
@click.option("--no-time-limit", is_flag=True, help="Let every program finish, however long it takes.")
@click.option("--why", "why_case",
              help="Judge this case and look for the cause with the tools (run twice more, compute-sanitizer, a "
                   "debugger), whatever its verdict.")
@click.option("--why-budget", type=click.FloatRange(min=0), default=cause.BUDGET_S, show_default=True,
              help="Seconds the search for a cause may take (on the smallest failing case); 0: none.")
@click.option("-o", "--output", "results_file", type=OutputPath(),
              help="Also add the results to this file (JSON, for fa report); extended if it exists.")
@click.option("--without-gpu", is_flag=True,
              help="Run a CUDA or HIP program even where this machine has no GPU for it (to see its host code "
                   "fail: reading the input, a crash before its first GPU call).")
@click.option("--keep-inputs", is_flag=True,
              help="Keep the generated inputs in the cache for later runs (by default each is generated into "
                   "TMPDIR just before its case and deleted after it; expected outputs are kept either way).")
@force_option
@launcher_options
def run(cases, all_cases, suite_name, program, tol, sample_rows, full, time_limit, no_time_limit, why_case,
        why_budget, results_file, without_gpu, keep_inputs, launcher, partition, gres, srun_args) -> None:
    """Judge PROGRAM on test cases (t01..t30, c01..c30 or input files): time, verify, print a
    table, and for each case that did not pass, why: where the wrong values are and which usual
    mistake explains them, the signal that ended a program, how far a short output got.

    \b
    fa run t01 t17 --program ./hw4        two of fa's cases
    fa run c01 c30 --program ./hw4        two of the course's
    fa run --all --suite c --program ./hw4  all 30 course shapes"""
    suite_given = click.get_current_context().get_parameter_source("suite_name") != ParameterSource.DEFAULT
    names = list(suite.cases(suite_name)) if all_cases else \
        suite.named_cases(cases, suite_name if suite_given else None)
    if why_case:  # judged with the others (once, where it is also listed), then looked into
        why_case = suite.named_cases([why_case], suite_name if suite_given else None)[0]
        names += [] if why_case in names else [why_case]
    if not names:
        raise click.UsageError("name test cases (t01..t30, c01..c30 or input files), or give --all [--suite c]")
    if time_limit and no_time_limit:
        raise click.UsageError("--time-limit and --no-time-limit exclude each other")
    check_extendable(results_file)  # a results file that cannot take the records: said before any work
    runner = make_launcher(launcher, partition, gres, srun_args)
    check_names(names)
    prog = runnable(program, runner, check=not without_gpu)
    with_expected = not (sample_rows or full)
    results, stopped, across = [], None, []
    with locations.shared_workdir(runner is not None) as workdir, \
            verdict.CaseInputs(names, keep_inputs, with_expected, note, workdir) as inputs:
        inputs.why = why_case
        options = verdict.JudgeOptions(tol, verify.RowCheck(sample_rows, full), not no_time_limit, runner, workdir)
        try:
            expected.announce_cost(inputs.needs, note)
            judge_cases(prog, names, inputs, options, time_limit, with_expected, results)
        except (KeyboardInterrupt, Terminated) as e:  # what is done is kept: its table, its records
            stopped = e
        if not stopped:
            chosen = next(r for r, name in zip(results, names) if name == why_case) if why_case else None
            searching = why_budget > 0 and (chosen or any(r.verdict in ("WRONG", "ERROR") for r in results))
            with tables.progress(f"looking for the cause ({why_budget:g} s at most)", None, enabled=bool(searching)):
                across = cause.explain(results, options, note, why_budget, chosen=chosen)
    if results:
        tables.show(tables.judge_table(results, describe_first()))
    if any(r.check and r.check.sampled for r in results):
        click.echo(tables.SAMPLED_NOTE)
    if sample_rows and (full_instead := [r.target.name for r in results if r.check and not r.check.sampled]):
        click.echo(f"--sample: every value of {tables.case_ranges(full_instead)} compared instead: its expected "
                   "output was cached, and a full compare of it costs less than a sample")
    if any(not r.ok for r in results) or why_case:
        click.echo(tables.diagnoses(results, always=bool(why_case)) + "\n")
    emulation = wave64.run_notes(prog, results)  # hw4.hip on the NVIDIA GPU: what the emulation says
    named = any(line.startswith("looks like") for line in emulation)  # then no cases to run are suggested
    for finding in across:
        if not (named and finding.kind == "suggest"):
            click.echo("across the cases: " + " ".join(finding.lines) + "\n")
    for line in emulation:
        click.echo(line)
    if results_file and results:
        append(results_file, [verdict.as_record(r, options) for r in results])
        click.echo(f"{tables.plural(len(results), 'record')} added to {results_file}")
    if line := inputs.kept_line():
        note(line)
    if stopped:
        signum = stopped.signum if isinstance(stopped, Terminated) else signal.SIGINT
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        during = f" during {names[len(results)]}" if len(results) < len(names) else ""
        note(f"{how}{during}: {len(results)} of {len(names)} cases judged"
             + (" (the table above)" if results else ""))
        sys.exit(ExitStatus.INTERRUPTED if signum == signal.SIGINT else 128 + signum)
    click.echo(tables.run_summary(results))
    sys.exit(ExitStatus.OK if all(r.ok for r in results) else ExitStatus.FAILED)


def judge_cases(prog, names, inputs, options, time_limit, with_expected, results) -> None:
    """Each case in turn: its input made (verdict.CaseInputs), its expected output computed where
    missing, judged; results collected as they come, so that an interrupted run keeps them."""
    # a single case too: its run says every 5 s how long it has taken once it passes 10 s
    with tables.progress("judging", len(names), steps=len(names) > 1) as advance:
        for i, name in enumerate(names):
            made_now = None if inputs.drawn_ahead(name) else inputs.to_make.get(name)  # a bar while one is drawn
            with tables.progress(f"generating {name}", made_now.shape.B if made_now else None,
                                 enabled=made_now is not None) as made:
                t = inputs.target(name, made)
            if time_limit:
                t = dataclasses.replace(t, time_limit=time_limit)
            if with_expected and (needs := expected.missing([t])):
                if i + 1 < len(names):
                    inputs.make_ahead(names[i + 1])  # drawn on the CPU while this expected output is computed
                expected.ensure(needs, None if suite.is_case_name(name) else note, tables.progress)
            inputs.settle()  # nothing is drawn while the program runs: its time is its own
            results.append(verdict.judge(prog, t, options))
            inputs.judged(results[-1])
            advance()


@main.command(name="init")
@click.argument("folder", type=click.Path(path_type=Path))
def init_cmd(folder) -> None:
    """Start a homework in FOLDER: hw4.cu and hw4.hip with the course's input and output done and
    a plain, correct kernel to make fast (marked TODO(tiles)), the course's example Makefile and a
    short README. Overwrites nothing."""
    for path in starter.create(folder):
        click.echo(f"wrote {path}")
    click.echo(f"next: cd {folder} && make hw4 && fa run t01 --program ./hw4")


@main.command(name="cache")
@click.option("--clear", is_flag=True, help="Remove everything fa keeps there (files that are not fa's stay).")
def cache_cmd(clear) -> None:
    """What fa keeps in its cache directory (FA_CACHE, else ~/.cache/fa): generated inputs,
    expected outputs, student builds and fa's builds, each with its size; --clear removes them."""
    where = locations.cache_dir()
    kept = cache.clear(where) if clear else cache.usage(where)
    named = " (FA_CACHE)" if settings.cache_override() else ""
    click.echo(f"{'removed from' if clear else 'kept in'} {where}{named}")
    for k in kept:
        click.echo(f"  {k.kind:<17} {k.files:>6} files  {ready.human_bytes(k.bytes):>9}")
    click.echo(f"  {'in all':<17} {sum(k.files for k in kept):>6} files  {ready.human_bytes(cache.total(kept)):>9} "
               f"({cache.total(kept)} bytes)")
    if not clear and cache.total(kept):
        click.echo("fa cache --clear removes them (fa makes each again when a command needs it)")


@main.command(name="slurm-task", hidden=True)
@click.argument("plan", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("index", type=int)
def slurm_task_cmd(plan, index) -> None:
    """One task of `fa bench --slurm-array`, on a compute node: measure one (program, input)."""
    slurm.run_task(plan, index)


@main.command(name="devices")
def devices_cmd() -> None:
    """List GPUs (NVIDIA through the CUDA driver, AMD through hip-python, pip install .[amd]) and
    what can run here: CUDA and HIP programs, the compilers, the profilers."""
    found = list_devices()
    if not found:
        click.echo("no GPU found")
    else:
        tables.show(tables.devices_table(found))
    click.echo("\nwhat runs here:\n" + "\n".join(f"  {line}" for line in ready.here()))


def parse_shape(text: str) -> Shape:
    try:
        B, N, d = (int(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected B,N,d such as 26,32768,64") from None
    return check_shape(B, N, d, f"--shape {text}")


@main.command(name="bench")
@click.option("--program", "program_names", multiple=True, default=["best"], show_default=True,
              help="cpu, cuda, hip, hip-cuda, torch, best or a path; repeat to compare.")
@click.option("--suite", "suite_cases", is_flag=False, flag_value="all", default=None,
              help="Suite cases: --suite for all of t01..t30, --suite c for the course's c01..c30, "
                   "or a list such as --suite t01,c21.")
@click.option("--shape", "shapes", multiple=True, help="B,N,d of a seeded uniform input; repeatable.")
@click.option("--repeat", "repeats", type=click.IntRange(min=1), default=None,
              help="Timed whole-process runs per program and input, after one warm-up; the median counts. "
                   f"Default: as many as it takes ({bench.MIN_ROUNDS} to {bench.MAX_ROUNDS}) for every median to "
                   "be known within --precision.")
@click.option("--precision", type=click.FloatRange(min=0.001, max=0.5), default=bench.DEFAULT_PRECISION,
              show_default=True,
              help="Without --repeat: run until half the 95% interval of every whole-process median is at most "
                   "this fraction of it.")
@click.option("--against", type=click.Choice(["torch"]), help="Add PyTorch SDPA fp32 on the same inputs.")
@click.option("--label", help="Name these runs in comparisons (default: the program's name).")
@click.option("--control", is_flag=True,
              help="Also run the first program a second time, as one more program: an A/A row whose ratio to "
                   "the first shows the noise (a program given twice is one too).")
@click.option("-o", "--output", "results", type=OutputPath(), required=True,
              help="Results file (JSON); extended if it exists.")
@click.option("--wide", is_flag=True, help="Also the device, the runs and their spread (wider than 80 columns).")
@force_option
@launcher_options
@click.option("--slurm-array", is_flag=True, help="Submit one sbatch job array over the inputs and wait for it.")
def bench_cmd(program_names, suite_cases, shapes, repeats, precision, against, label, control, results, wide,
              launcher, partition, gres, srun_args, slurm_array) -> None:
    """Time programs on inputs: whole process (median of repeats, with its 95% interval), stages, TFLOP/s, error.

    Each input is flushed to disk first; the programs then take turns, one run each per round,
    each round starting one program later, so the order of --program options cannot change the
    table; each run starts with no output left by the run before and nothing left to write back."""
    if slurm_array and launcher != "slurm":
        raise click.UsageError("--slurm-array needs --launcher slurm --partition NAME")
    names = list(program_names) + (["torch"] if against == "torch" else [])
    if control:
        names.insert(1, names[0])
    wanted = ([] if not suite_cases else list(suite.cases()) if suite_cases == "all"
              else list(suite.cases(suite_cases)) if suite_cases in suite.SUITES else suite_cases.split(","))
    if not wanted and not shapes:
        raise click.UsageError("give --suite or --shape")
    sizes = [parse_shape(text) for text in shapes]
    check_extendable(results)
    runner = make_launcher(launcher, partition, gres, srun_args)
    check_names(wanted)
    progs = [runnable(n, runner) for n in names]
    ready.announce_disk(wanted, False, note)
    targets = targets_for(wanted, sizes)
    plan = bench.BenchPlan(progs, targets, repeats, precision=precision, launcher=None if slurm_array else runner,
                           label=label)
    with locations.shared_workdir(runner is not None) as workdir, \
            tables.progress("benchmarking", len(progs) * len(targets), steps=True) as advance:
        if slurm_array:
            records = slurm.bench_array(plan, runner, results, advance)
        else:
            records = bench.run_bench(plan, results, advance, workdir)
    tables.show(tables.bench_table(records, wide))
    for line in bench.control_ratios(records):
        click.echo(line)
    for line in wave64.emulated_sources(progs):  # hw4.hip timed on the NVIDIA GPU: said so
        click.echo(line)
    click.echo(f"{tables.plural(len(records), 'record')} added to {results}")
    sys.exit(ExitStatus.OK if all(not r.get("error") and r.get("passed") for r in records) else ExitStatus.FAILED)


@main.command(name="profile", help="Profile PROGRAM's kernels on test cases or inputs: time, TFLOP/s and the "
              "course's metrics (ncu on sm_70+, nvprof on Pascal, rocprof on AMD), per kernel over its launches."
              "\n\n" + profile.help_tables())
@click.argument("cases", nargs=-1, required=True)
@click.option("--program", default="best", show_default=True, help=programs.CHOICES + ".")
@click.option("--kernel", help="Only kernels whose name contains this (e.g. attention_tiled).")
@click.option("--set", "metric_set", type=click.Choice(["course", "full"]), default="course", show_default=True,
              help="course: the report's metrics; full: also ncu's full set of sections.")
@click.option("--profiler", type=click.Choice(["auto", *profile.PROFILERS]), default="auto", show_default=True,
              help="auto: rocprof for hip, else ncu (the GTX 1080, Pascal, needs nvprof).")
@click.option("--flops-kernel", help="The kernel that does the 4*B*N*N*d work (default: the one taking most time).")
@click.option("-o", "--output", "results", type=OutputPath(),
              help="Results file (JSON); extended if it exists.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print a markdown table for a tables.")
@force_option
@launcher_options
def profile_cmd(cases, program, kernel, metric_set, profiler, flops_kernel, results, as_markdown, launcher, partition,
                gres, srun_args) -> None:
    check_extendable(results)
    runner = make_launcher(launcher, partition, gres, srun_args)
    check_names(cases)
    prog = programs.resolve(program)
    ready.check_runs_here(prog, runner, program, try_cpu=False)
    tool = profile.choose(profiler, prog.name)
    ready.check_profiler(tool, runner, prog, program)  # both said before any input is generated
    prog = built(prog)
    targets = targets_for(cases)
    records = []
    with locations.shared_workdir(runner is not None) as workdir:
        for t in targets:
            kernels, argv = profile.profile(prog, t, tool, kernel, metric_set == "full", runner, workdir, flops_kernel)
            records += [profile.as_record(k, prog, t, tool, argv, runner) for k in kernels]
    if results:
        append(results, records)
    if as_markdown:
        click.echo(tables.profile_markdown(records), nl=False)
    else:
        tables.show(tables.profile_table(records))
    if results:
        click.echo(f"{tables.plural(len(records), 'record')} added to {results}")


@main.command(name="resources")
@click.option("--program", default="cuda", show_default=True,
              help="cuda, hip-cuda, hip, or a source file of your own (hw4.cu, hw4.hip).")
@click.option("--arch", "archs", help="Targets, comma-separated, from: " + ", ".join(resources.TARGETS)
              + " (default: sm_75,sm_80,sm_90 for CUDA, gfx908,gfx90a for HIP).")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
def resources_cmd(program, archs, as_json) -> None:
    """Registers, spills, shared memory, threads and theoretical occupancy of every kernel on
    every target, from nvcc's and hipcc's own reports (no GPU needed)."""
    source, hip_source, ours, targets = resources.what_to_compile(program, archs.split(",") if archs else None)
    kernels, commands = [], []
    with tables.progress("compiling", len(targets), steps=True) as advance:
        for t in targets:
            found, argv = resources.report(source, t, hip_source, ours)
            kernels += found
            commands.append(" ".join(argv))
            advance()
    if as_json:
        click.echo(json.dumps({"records": resources.as_records(kernels, program), "commands": commands,
                               "targets": {t: dataclasses.asdict(resources.TARGETS[t]) for t in targets}}, indent=1))
    else:
        tables.show(tables.resources_table(kernels))
        for line in tables.resources_notes(kernels):
            click.echo(line)


@main.command(name="compare")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--markdown", "as_markdown", is_flag=True, help="Print a markdown table for a tables.")
@click.option("--plot", type=OutputPath(),
              help="Write a chart (PNG) here: stage times per input and run, and time against N.")
@click.option("--wide", is_flag=True, help="One row per input, the runs side by side (wider than 80 columns).")
@force_option
def compare_cmd(files, as_markdown, plot, wide) -> None:
    """Runs from one or more bench results files, side by side."""
    records = compare.timed_records(by_kind(list(files)))
    if as_markdown:
        click.echo(compare.markdown(records), nl=False)
    else:
        header, body, about = compare.long_rows(records) if not wide else \
            (*compare.rows(records), " (whole-process medians)")
        tables.show(tables.compare_table(header, body, f"fa compare{about}"))
        if note := compare.amd_note(records):
            click.echo(tables.wrap_words(note, 80))
    for line in wave64.compare_findings(records):  # a student's hw4.cu and hw4.hip side by side
        click.echo(line)
    if plot:
        click.echo(f"wrote {compare.plot(records, plot)}")


def measure_options(f):
    """Repeats and tolerance, shared by ladder and sweep."""
    for option in reversed([
        click.option("--repeat", "repeats", type=click.IntRange(min=1), default=3, show_default=True,
                     help="Timed runs per step, after one warm-up run; the median counts."),
        click.option("--tol", type=TOLERANCE, default=1e-4, show_default=True,
                     help="Largest abs error a PASS allows (the course's is 5e-3)."),
        click.option("--profile", "with_profile", is_flag=True,
                     help="Also profile each run (fa profile's course metrics; ncu, or --profiler)."),
        click.option("--profiler", type=click.Choice(profile.PROFILERS), default="ncu", show_default=True,
                     help="The profiler --profile uses (nvprof on Pascal, rocprof on AMD)."),
        click.option("-o", "--output", "results", type=OutputPath(),
                     help="Add the records to this results file (JSON, for fa report); extended if it exists."),
        click.option("--plot", type=OutputPath(), help="Write a chart (PNG) here."),
        click.option("--markdown", "as_markdown", is_flag=True, help="Print a markdown table for a tables."),
        force_option,
    ]):
        f = option(f)
    return f


def show(header: list[str], body: list[list[str]], as_markdown: bool, title: str) -> None:
    if as_markdown:
        click.echo(tables.markdown_table(header, body), nl=False)
    else:
        tables.show(tables.compare_table(header, body, title))


def save_and_plot(records: list[dict], results: Path | None, plot: Path | None, chart) -> None:
    if results:
        append(results, records)
        click.echo(f"{tables.plural(len(records), 'record')} added to {results}")
    if plot:
        click.echo(f"wrote {chart(records, plot)}")


@main.command(name="ladder")
@click.argument("case", required=False)
@click.option("--program", default="cuda", show_default=True, help="cuda, hip-cuda or hip.")
@click.option("--list", "list_only", is_flag=True, help="Only list the steps (from the program's kernel registry).")
@measure_options
@launcher_options
def ladder_cmd(case, program, list_only, repeats, tol, with_profile, profiler, results, plot, as_markdown, launcher,
               partition, gres, srun_args) -> None:
    """Run the homework kernel's optimization steps on CASE, one by one: each verified, with its
    kernel time, TFLOP/s and speed-up over the step before (and the course's metrics with --profile)."""
    if not list_only and not case:
        raise click.UsageError("give a CASE (t27, a file, ...), or --list")
    check_extendable(results)
    if list_only:  # no GPU needed: the program's kernel registry
        prog = program_for(program)
        show(*ladder.listing(ladder.steps_for(prog)), as_markdown, f"fa ladder: the steps of {prog.name}")
        return
    runner = make_launcher(launcher, partition, gres, srun_args)
    check_names([case])
    prog = runnable(program, runner, try_cpu=False)
    steps = ladder.steps_for(prog)  # refused before any input is generated
    [target] = targets_for([case])
    plan_args = dict(repeats=repeats, tol=tol, launcher=runner)
    with locations.shared_workdir(runner is not None) as workdir, tables.progress("ladder steps", len(steps), steps=True) as advance:
        records = ladder.run_ladder(prog, target, plan_args, steps, with_profile, profiler, workdir, advance)
    show(*ladder.rows(records), as_markdown, f"fa ladder: {prog.name} on {records[0]['device']}, {target.name}")
    save_and_plot(records, results, plot, charts.ladder_chart)
    sys.exit(ExitStatus.OK if all(not r.get("error") and r.get("passed") for r in records) else ExitStatus.FAILED)


@main.command(name="sweep")
@click.argument("case", required=False)
@click.option("--kernel", default="tiled", show_default=True,
              help="The kernel (its FA_KERNEL value): tiled, the homework kernel; simt, the register-blocked "
                   "kernel, for CASE's d (--list shows each program's).")
@click.option("--param", "params", multiple=True, metavar="NAME=V1,V2,...",
              help="A tile parameter and its values; repeatable. tiled: Br (query rows per block), Bc (keys "
                   "per tile), default Br=16, Bc=32. simt: TM, TN (scores per thread), C (threads per row), R "
                   "(row groups), MB (blocks per SM), default the program's tile for d. A source of yours: a "
                   "macro it tests with #ifndef (BR=16,32 builds it with -DBR=16, then -DBR=32).")
@click.option("--program", default="cuda", show_default=True,
              help="cuda, hip-cuda or hip, or a source of yours (hw4.cu, hw4.hip) that takes its tile sizes "
                   "as -D macros.")
@click.option("--arch", help="The GPU target the variants are built for (default: this machine's GPU).")
@click.option("--no-run", is_flag=True, help="Only build the variants and report their resources (no GPU needed).")
@click.option("--list", "list_only", is_flag=True,
              help="Only list the kernels and tile parameters the program can be swept over (its kernel registry).")
@measure_options
@launcher_options
def sweep_cmd(case, kernel, params, program, arch, no_run, list_only, repeats, tol, with_profile, profiler, results,
              plot, as_markdown, launcher, partition, gres, srun_args) -> None:
    """Build a kernel with each combination of tile sizes (bin/variants/, reused while up to
    date), run each on CASE and verify it: kernel TFLOP/s and theoretical occupancy (achieved
    with --profile) against Br, one line per Bc. Combinations that cannot be built are listed as
    skipped, with the compiler's reason.

    \b
    Your own tile sizes, where your source takes them as -D macros (#ifndef BR / #define BR 32 /
    #endif), each combination built with the course's line:
    fa sweep t17 --program hw4.cu --param BR=16,32 --param BC=32,64 -o sweep.json"""
    if not list_only and not case:
        raise click.UsageError("give a CASE (t27, a file, ...), or --list")
    if no_run and with_profile:
        raise FaError("--no-run and --profile exclude each other")
    check_extendable(results)
    if program not in sweep.PROGRAMS:
        own_sweep(case, program, params, no_run, list_only, with_profile, repeats, tol, results, plot, as_markdown,
                  make_launcher(launcher, partition, gres, srun_args))
        return
    for text in params:  # what needs no build of the program first
        sweep.parse_values(text)
    if arch:
        sweep.check_arch(arch)
    families = sweep.families_of(program_for(program))
    if list_only:
        show(*sweep.listing(families), as_markdown, f"fa sweep: what {program} can be swept over")
        return
    if kernel not in families:
        raise FaError(f"--kernel {kernel}: {program} can be swept over {', '.join(families)}")
    family = families[kernel]
    for text in params:
        sweep.parse_param(text, family)  # every bad --param is refused before any variant is built
    [target] = targets_for([case])
    arch = arch or sweep.local_arch(program)
    runner = make_launcher(launcher, partition, gres, srun_args)
    plan_args = dict(repeats=repeats, tol=tol, launcher=runner)
    with locations.shared_workdir(runner is not None) as workdir, tables.progress("sweep variants", None, steps=True) as advance:
        records = sweep.run_sweep(program, target, list(params), arch, plan_args, not no_run, with_profile,
                                  profiler, workdir, note, advance, family)
    show(*sweep.rows(records), as_markdown, f"fa sweep: {program} {kernel} for {arch}, {target.name}")
    save_and_plot(records, results, plot, charts.sweep_chart)
    ran = [r for r in records if not r.get("skipped")]
    sys.exit(ExitStatus.OK if no_run or all(not r.get("error") and r.get("passed") for r in ran) else ExitStatus.FAILED)


def own_sweep(case, program, params, no_run, list_only, with_profile, repeats, tol, results, plot, as_markdown,
              runner) -> None:
    """fa sweep --program hw4.cu --param BR=16,32: the student's source built with each combination
    of -D values (course's line), each judged and timed; every refusal before any work."""
    source = source_sweep.own_source(program)
    ctx = click.get_current_context()
    source_sweep.check_options([o for o in ("kernel", "arch") if ctx.get_parameter_source(o) != ParameterSource.DEFAULT],
                               with_profile, case)
    if list_only:
        show(*source_sweep.own_listing(source), as_markdown,
             f"fa sweep: the macros {source.name} tests with #ifndef/#ifdef")
        return
    source_sweep.check_params(list(params), source)
    check_names([case])
    source_sweep.check_runs_here(source, list(params), program, runner, run=not no_run)
    [target] = targets_for([case])
    plan_args = dict(repeats=repeats, tol=tol, launcher=runner)
    with locations.shared_workdir(runner is not None) as workdir, \
            tables.progress("sweep variants", None, steps=True) as advance:
        records = source_sweep.run_own_sweep(source, target, list(params), plan_args, not no_run, workdir, note,
                                             advance)
    show(*source_sweep.rows(records), as_markdown, source_sweep.title(records, source, target))
    save_and_plot(records, results, plot, charts.sweep_chart)
    ran = [r for r in records if not r.get("skipped")]
    sys.exit(ExitStatus.OK if no_run or all(not r.get("error") and r.get("passed") for r in ran) else ExitStatus.FAILED)


@main.command(name="report")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for report.md and its charts (created if missing).")
@force_option
def report_cmd(files, out_dir) -> None:
    """Your report, in the course's sections, as markdown (and its PNG charts), from results files
    of fa run, bench, profile, resources (--json), ladder and sweep: your programs' records fill
    the sections, with a marked place in each for your own words; fa's own programs' records
    (cpu, cuda, ..., fa ladder) appear only in a last section, labelled as fa's."""
    click.echo(f"wrote {writeup.write(list(files), out_dir)}")


@main.command(name="system")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
def system_cmd(as_json) -> None:
    """This machine as the course's report asks for it (section 3a): CPU, cores, memory, disk,
    GPUs, driver, CUDA or ROCm version."""
    spec = system.describe()
    if as_json:
        click.echo(json.dumps(spec, indent=1))
        return
    tables.show(tables.system_table(spec))


if __name__ == "__main__":
    main()

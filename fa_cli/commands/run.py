"""fa run: a program judged on test cases, and why a case did not pass."""
from __future__ import annotations

import dataclasses
import sys

import click

from .. import locations, settings
from ..cases import suite
from ..errors import ExitStatus, Terminated, stopped_how
from ..judge import expected, investigation, judged_state, outlook, verdict, verify
from ..measure import gtx1080_report, judge_column
from ..programs import gtx1080, programs, sandbox, wave64
from ..report import lines, tables
from ..report.records import append, check_extendable
from .group import main
from .options import (SECONDS, TOLERANCE, OutputPath, case_options, force_option, launcher_options,
                      program_option)
from .shared import check_names, make_launcher, note, runnable, selected_cases


@main.command()
@case_options
@program_option("best", does="judges", help=programs.CHOICES + ".")
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
@click.option("--why-budget", type=click.FloatRange(min=0), default=investigation.BUDGET_S, show_default=True,
              help="Seconds the search for a cause may take, the race check of a passing build included (on "
                   "the smallest failing case of each kind, a crash first); 0: none.")
@click.option("-o", "--output", "results_file", type=OutputPath(),
              help="Also add the results to this file (JSON, for fa report); extended if it exists.")
@click.option("--without-gpu", is_flag=True,
              help="Run a CUDA or HIP program even where this machine has no GPU for it (to see its host code "
                   "fail: reading the input, a crash before its first GPU call).")
@click.option("--no-race-check", is_flag=True,
              help="Skip compute-sanitizer's racecheck, synccheck and initcheck of a passing CUDA or HIP program "
                   "(run once per build on a small case, a few seconds).")
@click.option("--no-gtx1080-rules", is_flag=True, expose_value=False, callback=lambda ctx, param, off: rules_off(off),
              help="Run a student's hw4.cu without the GTX 1080's rules (by default its launches are checked "
                   "against the judge's GPU: 1024 threads and 48 KB of shared memory a block, 64K registers an SM).")
@click.option("--keep-inputs", is_flag=True,
              help="Keep the generated inputs in the cache for later runs (by default each is generated into "
                   "TMPDIR just before its case and deleted after it; expected outputs are kept either way).")
@click.option("--sandbox", "sandboxed", is_flag=True,
              help="Build and run the program confined (bubblewrap): for code that is not your own. It sees "
                   "only the system, its input and its output's folder; no network, no home folder; limits on "
                   "processes, file size and memory (docs/sandbox.md).")
# fa class's two halves of one fa run (hidden: a class's own grammar): every program's cases timed first,
# each alone on the GPU, and looked into after, side by side (judge/judged_state.py)
@click.option("--save-judged", type=click.Path(dir_okay=False), hidden=True,
              help="Judge the cases, keep the results in this file and stop before the search for a cause.")
@click.option("--from-judged", type=click.Path(exists=True, dir_okay=False), hidden=True,
              help="Take the judged cases from this file (--save-judged) and go on from there.")
@force_option
@launcher_options
def run(cases, all_cases, suite_text, program, tol, sample_rows, full, time_limit, no_time_limit, why_case,
        why_budget, results_file, without_gpu, no_race_check, keep_inputs, sandboxed, launcher, partition, gres,
        srun_args, save_judged, from_judged) -> None:
    """Judge PROGRAM on test cases (t01..t30, c01..c30 or input files): time, verify, print a
    table, and for each case that did not pass, why: where the wrong values are and which usual
    mistake explains them, the signal that ended a program, how far a short output got.

    \b
    fa run t01 t17 --program ./hw4        two of fa's cases
    fa run c01 c30 --program ./hw4        two of the course's
    fa run --all --suite c --program ./hw4  all 30 course shapes"""
    names = selected_cases(cases, all_cases, suite_text)
    if why_case:  # judged with the others (once, where it is also listed), then looked into
        why_case = suite.named_cases([why_case], suite_text if suite_text in suite.SUITES else None)[0]
        names += [] if why_case in names else [why_case]
    if not names:
        raise click.UsageError("name test cases (t01..t30, c01..c30 or input files), or give --all [--suite c]")
    if time_limit and no_time_limit:
        raise click.UsageError("--time-limit and --no-time-limit exclude each other")
    check_extendable(results_file)  # a results file that cannot take the records: said before any work
    runner = make_launcher(launcher, partition, gres, srun_args)
    if sandboxed:
        runner = confined(runner, program)
    check_names(names)
    prog = runnable(program, runner, check=not without_gpu)
    with_expected = not (sample_rows or full)
    results, stopped, found = [], None, []
    with locations.shared_workdir(runner is not None and runner.remote) as workdir, \
            verdict.CaseInputs(names, keep_inputs, with_expected, note, workdir) as inputs:
        inputs.why = why_case
        options = verdict.JudgeOptions(tol, verify.RowCheck(sample_rows, full), not no_time_limit, runner, workdir)
        if from_judged:
            results = judged_state.load(from_judged, names)
        else:
            try:
                judge_cases(prog, names, inputs, options, time_limit, with_expected, results,
                            outlook_of(prog, names, inputs.needs))
            except (KeyboardInterrupt, Terminated) as e:  # what is done is kept: its table, its records
                stopped = e
        if save_judged and not stopped:
            judged_state.save(save_judged, names, results)
        elif not stopped:
            found = look_into(results, names, options, why_case, why_budget, prog, not no_race_check)
    if save_judged and not stopped:  # fa class's first half: the table and the rest are --from-judged's
        if line := inputs.kept_line():
            note(line)
        sys.exit(ExitStatus.OK if all(r.ok for r in results) else ExitStatus.FAILED)
    show_results(results, prog, found, why_case, sample_rows)
    if results_file and results:
        append(results_file, [verdict.as_record(r, options) for r in results])
        lines.echo(f"{tables.plural(len(results), 'record')} added to {results_file}")
    if line := inputs.kept_line():
        note(line)
    if stopped:
        end_stopped(stopped, names, results)
    lines.echo(tables.run_summary(results))
    sys.exit(ExitStatus.OK if all(r.ok for r in results) else ExitStatus.FAILED)


def end_stopped(stopped, names, results) -> None:
    """An interrupted or terminated run: how far it got, and the exit status of its signal."""
    how, status = stopped_how(stopped)
    during = f" during {names[len(results)]}" if len(results) < len(names) else ""
    note(f"{how}{during}: {len(results)} of {len(names)} cases judged" + (" (the table above)" if results else ""))
    sys.exit(status)


def look_into(results, names, options, why_case, why_budget, prog, race_check_too) -> list:
    """The search for a cause of the cases that did not pass (and of --why's case, whatever its
    verdict), with its progress line; what the investigation's steps on the whole run found."""
    chosen = next(r for r, name in zip(results, names) if name == why_case) if why_case else None
    searching = why_budget > 0 and (chosen or any(r.verdict in ("WRONG", "ERROR") for r in results))
    with tables.progress(f"looking for the cause ({why_budget:g} s at most)", None, enabled=bool(searching)):
        return investigation.explain(results, options, note, why_budget, chosen, prog, race_check_too, why_case)


def confined(runner, program: str):
    """fa run --sandbox: the sandbox in force for the build and every run of the program (the
    GPU's device nodes and /sys shown to a GPU program's runs only)."""
    if runner is not None:
        raise click.UsageError("--sandbox runs programs on this machine: not with --launcher slurm")
    name = programs.best_name() if program == "best" else program
    box = sandbox.Sandbox(gpu=name != "cpu" and not name.endswith((".cpp", ".c")))
    sandbox.use(box)
    return box


def show_results(results, prog, found, why_case, sample_rows) -> None:
    """The table, what sampling did, each case's diagnosis, what the cases say together and what
    the MI210 emulation says."""
    judge_gpu = judge_column.for_results(prog, results)  # the judge's GPU's time
    if results:
        tables.show(tables.judge_table(results, judge_gpu))
    if judge_gpu and (alike := tables.checked_alike(results)):
        lines.echo(f"checked: {alike}, in every case")
    for line in judge_gpu.words if judge_gpu else []:
        lines.echo(line)
    if own := judge_column.judges_own_line(prog, results):  # run on the judge's GPU itself: no estimate
        lines.echo(own)
    if any(r.check and r.check.sampled for r in results):
        lines.echo(tables.SAMPLED_NOTE)
    if sample_rows and (full_instead := [r.target.name for r in results if r.check and not r.check.sampled]):
        lines.echo(f"--sample: every value of {tables.case_ranges(full_instead)} compared instead: its expected "
                   "output was cached, and a full compare of it costs less than a sample")
    if any(not r.ok for r in results) or why_case:
        lines.echo(tables.diagnoses(results, always=bool(why_case)) + "\n")
    for finding in found:  # what the investigation's steps on the whole run found (investigation.RUN_STEPS)
        lines.echo(" ".join(finding.lines) + "\n")
    emulation = wave64.run_notes(prog, results)  # hw4.hip on the NVIDIA GPU: what the emulation says
    rules = gtx1080.run_notes(prog, results)  # the judge's GPUs' rules, where they applied
    sm61 = gtx1080_report.run_notes(prog) if rules else []  # and the GTX 1080's own compiler report
    for line in emulation + rules + sm61:
        lines.echo(line)


def rules_off(off: bool) -> None:
    if off:
        settings.turn_off_gtx1080_rules()


def outlook_of(prog, names, needs) -> outlook.Outlook:
    """What the run will take, said before it starts: the limits' GPUs where the program runs on
    the CPU, the expected outputs' cost."""
    ahead = outlook.Outlook(names, needs, prog)
    if line := ahead.up_front():
        note(line)
    expected.announce_cost(needs, note, ahead.reference_seconds())
    return ahead


def judge_cases(prog, names, inputs, options, time_limit, with_expected, results, ahead) -> None:
    """Each case in turn: its input made (verdict.CaseInputs), its expected output computed where
    missing, judged; results collected as they come, so that an interrupted run keeps them. The
    time left is the outlook's (outlook.Outlook: what remains, runs and expected outputs)."""
    # a single case too: its run says every 5 s how long it has taken once it passes 10 s
    with tables.progress("judging", len(names), steps=len(names) > 1, left=ahead.seconds_left) as advance:
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
            # The next input is drawn after this output is checked, not beside: each uses every core (suite c
            # on the H200: draws 1.56 s and checks 0.78 s side by side, 1.27 and 0.28 s one after the other).
            results.append(verdict.judge(prog, t, options))
            inputs.judged(results[-1])
            ahead.judged(name, results[-1].run.wall_s, results[-1].verdict == "TLE")
            advance()

"""One investigation (fa_cli/judge/investigation.py): its table is docs/diagnosis.md's, its steps
run in order where they apply, the catalogue is a lead and not a gate, one budget for all."""
import json
import re
import time
from types import SimpleNamespace

import pytest

from helpers import ROOT
from fa_cli.judge import investigation, probes, step_times
from fa_cli.judge.diagnose import Diagnosis
from fa_cli.judge.findings import Finding, Kind
from fa_cli.judge.probes.step import Probe
from fa_cli.judge.steps import Context, Step
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program


def doc_section(title: str) -> str:
    return (ROOT / "docs" / "diagnosis.md").read_text().split(f"## {title}", 1)[1].split("\n\n## ", 1)[0]


def test_docs_steps_table_is_the_codes_in_its_order():
    """docs/diagnosis.md's table of the steps, its PROBES row opened into the table of the probes,
    names every step of CASE_STEPS and RUN_STEPS in that order, and no other."""
    steps = re.findall(r"^\| ([A-Z]\w*) \| [\w/.]+ \|", doc_section("The steps"), re.M)
    probe_rows = re.findall(r"^\| ([A-Z][^|(]*)\(", doc_section("The probes"), re.M)
    named_probes = [name for row in probe_rows for name in re.findall(r"\w+", row)]
    opened = [name for step in steps for name in (named_probes if step == "PROBES" else [step])]
    assert opened == [type(s).__name__ for s in investigation.CASE_STEPS + investigation.RUN_STEPS]
    assert named_probes == [type(s).__name__ for s in probes.PROBES]


class Stub(Step):
    """A step that notes it ran and returns what it is given."""

    def __init__(self, name: str, found=(), named: bool = False, fails: bool = False):
        self.name, self.found, self.named, self.fails = name, list(found), named, fails

    def run(self, ctx):
        ctx.done.append(self.name)
        if self.fails:
            raise ValueError("a fault of fa's")
        ctx.facts.named = ctx.facts.named or self.named
        return list(self.found)


class ProbeStub(Stub, Probe):
    measures = True


def context(tmp_path, budget_s=60.0, **case) -> Context:
    return Context(Program("p", tmp_path / "p"), None, tmp_path, Budget(budget_s), lambda line: None, 5e-3,
                   object(), "t01", **case)


def test_the_catalogues_lead_is_kept_and_the_probes_still_measure(tmp_path):
    ctx = context(tmp_path, hypothesis=["no 1/sqrt(d) scale"])
    found = investigation.take((investigation.Catalogue(), ProbeStub("probe")), ctx)
    assert ctx.done == ["probe"]
    assert found[0].kind == Kind.HYPOTHESIS and found[0].fields["looks_like"] == ["no 1/sqrt(d) scale"]
    assert found[0].lines == []  # said once, under the case, by the quick look


def test_a_cause_found_by_a_tool_keeps_the_probes_out(tmp_path):
    ctx = context(tmp_path)
    found = [Finding(Kind.RACE, ["a race"]), Finding(Kind.RACECHECK, ["racecheck: a write against a read"])]
    investigation.take((Stub("reruns and racecheck", found), ProbeStub("probe"), Stub("after")), ctx)
    assert ctx.done == ["reruns and racecheck", "after"]


def test_runs_that_only_showed_timing_leave_the_probes_in(tmp_path):
    """An output that changes between runs, with no tool saying why, explains nothing by itself: a
    program that reads past its input reads what its own blocks write."""
    ctx = context(tmp_path)
    investigation.take((Stub("rerun", [Finding(Kind.RACE, ["a race"])]), ProbeStub("probe"), Stub("after")), ctx)
    assert ctx.done == ["rerun", "probe", "after"]


def test_a_racecheck_hazard_in_runs_alike_leaves_the_probes_in(tmp_path):
    """A wrong answer the same on every run with a racecheck hazard: the hazard names two lines, the
    probes still measure what the output is made of (which V rows a weight met)."""
    ctx = context(tmp_path)
    hazard = Finding(Kind.RACECHECK, ["racecheck: a write against a read"])
    investigation.take((Stub("reruns", []), Stub("racecheck", [hazard]), ProbeStub("probe"), Stub("after")), ctx)
    assert ctx.done == ["reruns", "racecheck", "probe", "after"]


def test_racechecks_warning_level_leaves_the_probes_in(tmp_path):
    """Lanes of a warp that rely on running in step (racecheck's warning level) are said, and the
    probes still measure the wrong answer: a scale off by 0.2 % hides behind no such hazard."""
    ctx = context(tmp_path)
    hazard = Finding(Kind.RACECHECK, ["racecheck: a hazard at its warning level"], dict(warning_level=True))
    investigation.take((Stub("racecheck", [hazard]), ProbeStub("probe"), Stub("after")), ctx)
    assert ctx.done == ["racecheck", "probe", "after"]


def test_after_a_probe_names_a_mechanism_the_later_probes_decide_for_themselves(tmp_path):
    ctx = context(tmp_path)
    named = ProbeStub("names", [Finding(Kind.MEASURED, ["measured: x"])], named=True)
    investigation.take((named, ProbeStub("reads on")), ctx)
    assert ctx.done == ["names", "reads on"]


class WeightStub(ProbeStub):
    from_right_scores = True


def test_scores_read_as_other_elements_are_left_out_once_a_reading_of_w_against_p_names_a_mechanism(tmp_path):
    """set40's s11: weights against a stale max read by the score probe as terms of no element of K;
    the softmax step's reading (the right scores, another step) names it: the scores' words go."""
    scores = Finding(Kind.OBSERVED, ["probe: the scores read back: 954 take no element of K"],
                     dict(scores_read_otherwise=True))
    other = Finding(Kind.OBSERVED, ["measured: wrong with 32-lane wavefronts too"])
    ctx = context(tmp_path)
    found = investigation.take((ProbeStub("before", [other, scores]), WeightStub("names", [
        Finding(Kind.MEASURED, ["measured: the p step"])], named=True)), ctx)
    assert [f.lines[0] for f in found] == ["measured: wrong with 32-lane wavefronts too", "measured: the p step"]
    ctx = context(tmp_path)  # a reading of W that names nothing, or a step of another kind: the words stay
    found = investigation.take((ProbeStub("before", [scores]), WeightStub("reads", [other]),
                                ProbeStub("names", [Finding(Kind.MEASURED, ["measured: y"])], named=True)), ctx)
    assert scores in found


@pytest.mark.parametrize("verdict, signal", [("PASS", None), ("TLE", None), ("ERROR", "SIGSEGV")])
def test_the_probes_measure_only_a_wrong_answer_or_an_error_without_a_crash(tmp_path, verdict, signal):
    ctx = context(tmp_path, verdict=verdict, signal=signal)
    investigation.take((ProbeStub("probe"), Stub("tool")), ctx)
    assert ctx.done == ["tool"]


def test_a_probe_past_the_budget_is_said_and_the_probes_stop(tmp_path):
    ctx = context(tmp_path, budget_s=0.0)
    found = investigation.take((ProbeStub("first"), ProbeStub("second")), ctx)
    assert ctx.done == [] and [f.lines for f in found] == [["probe: out of time before first"]]


def test_an_error_of_fas_own_in_a_probe_is_said_and_the_others_go_on(tmp_path):
    ctx = context(tmp_path)
    found = investigation.take((ProbeStub("broken", fails=True), ProbeStub("next")), ctx)
    assert ctx.done == ["broken", "next"]
    assert found[0].kind == Kind.MISSING_TOOL
    assert "broken stopped on an error of fa's own (ValueError" in found[0].lines[0]


def test_an_error_of_fas_own_in_a_tool_step_is_not_hidden(tmp_path):
    with pytest.raises(ValueError):
        investigation.take((Stub("broken", fails=True),), context(tmp_path))


def test_each_step_taken_writes_its_seconds_where_fa_class_asks(tmp_path, monkeypatch):
    """FA_STEP_TIMES: one line a step that ran (the skipped probe none), with its wall seconds and
    the case; nothing written where it is not set."""
    class Sleeps(Stub):
        def run(self, ctx):
            time.sleep(0.2)
            return super().run(ctx)

    investigation.take((Stub("before"),), context(tmp_path))
    assert not list(tmp_path.glob("*.steps"))
    monkeypatch.setenv("FA_STEP_TIMES", str(tmp_path / "case.steps"))
    investigation.take((Sleeps("slow tool"), ProbeStub("probe"), Stub("quick")), context(tmp_path, verdict="PASS"))
    lines = step_times.read(tmp_path / "case.steps")
    assert [(line["what"], line["case"]) for line in lines] == [("slow tool", "t01"), ("quick", "t01")]
    assert lines[0]["wall_s"] >= 0.2 > lines[1]["wall_s"] and lines[0]["counted_s"] >= 0.2
    assert step_times.longest(lines) == ""  # under a second: not said


def test_an_ended_case_takes_no_more_steps(tmp_path):
    class Ends(Stub):
        def run(self, ctx):
            ctx.ended = True
            return super().run(ctx)

    ctx = context(tmp_path)
    investigation.take((Ends("no gpu"), Stub("rerun"), ProbeStub("probe")), ctx)
    assert ctx.done == ["no gpu"]


def test_a_findings_kind_is_typed_and_kept_as_its_word():
    assert Finding("race", ["x"]).kind is Kind.RACE
    assert json.dumps(dict(kind=Finding(Kind.MEASURED, []).kind)) == '{"kind": "measured"}'
    with pytest.raises(ValueError):
        Finding("a kind nobody named", [])


def test_a_kernels_fault_in_the_launch_log_is_said_first_with_its_kernel(tmp_path):
    """The judged run's stderr holds a launch whose end read an error: KernelFault says it, as a
    cause, naming the kernel; a launch log without one (or a crash by a signal) leaves it out."""
    from fa_cli.judge.launch_errors import KernelFault
    ctx = context(tmp_path)
    ctx.run_stderr = ("fa-launch: launches=1 untimed=1 ms=0.000000 grid=2x1x1 block=128x1x1 smem=0 regs=32 "
                      "error=cudaErrorMisalignedAddress kernel=void flash(float *)\n")
    assert KernelFault().applies(ctx)
    [found] = KernelFault().run(ctx)
    assert found.is_cause and found.fields["kernels"] == "void flash(float *)"
    assert "read cudaErrorMisalignedAddress (a misaligned address" in found.lines[0]
    ctx.verdict = "ERROR"  # the program stopped on it: its own words say it
    assert not KernelFault().applies(ctx)
    ctx.verdict = "WRONG"
    reset = ctx.run_stderr.replace("cudaErrorMisalignedAddress", "cudaErrorInvalidResourceHandle")
    ctx.run_stderr = reset  # events a device reset destroyed: no kernel's fault
    assert not KernelFault().applies(ctx)
    ctx.run_stderr = ctx.run_stderr.replace("error=cudaErrorInvalidResourceHandle ", "")
    assert not KernelFault().applies(ctx)


def test_a_pass_with_an_error_no_float32_program_makes_is_warned_with_its_lines(tmp_path):
    """An error of 3e-3 on a case of N = 128 that passes (an fp16 copy of the input): a warning, with
    the source's __half line; 3e-4 at N = 32768 (float32's own there) or 1e-5 at N = 128: nothing."""
    from types import SimpleNamespace
    from fa_cli.cases.format import Shape
    from fa_cli.judge.error_size import ErrorOfAPass
    source = tmp_path / "hw4.cu"
    source.write_text("int main() {\n  __half* h = 0;\n}\n")
    (tmp_path / "hw4").write_bytes(b"ELF ... .nv_fatbin ...")  # a CUDA build, as its sections say

    def passed(err, N):
        return SimpleNamespace(verdict="PASS", check=SimpleNamespace(max_err=err),
                               target=SimpleNamespace(name=f"n{N}", shape=Shape(2, N, 32)))
    ctx = Context(Program("hw4.cu", tmp_path / "hw4", source=source), None, tmp_path, Budget(60.0),
                  lambda line: None, 5e-3, object(), "t01")
    ctx.results = [passed(1e-5, 128), passed(3e-4, 32768)]
    assert not ErrorOfAPass().applies(ctx)
    ctx.results.append(passed(3.1e-3, 256))
    assert ErrorOfAPass().applies(ctx)
    [found] = ErrorOfAPass().run(ctx)
    assert found.kind == Kind.WARNING and found.lines[0].startswith("passes n256, but its largest error there, 0.0031")
    assert "lines with a lower precision in hw4.cu: 2 `__half* h = 0;`" in found.lines[0], found.lines[0]
    ctx.findings = [Finding(Kind.MEASURED, ["measured: the scores scaled"], dict(logit_factor=0.998307))]
    [found] = ErrorOfAPass().run(ctx)  # a scale measured on a failing case: said beside it, no source lines
    assert found.lines[0].endswith("or a formula a little off; such an error grows with the rows, and a larger case "
                                   "may pass the limit; the scores of a failing case were measured scaled by 0.998307 "
                                   "times the right scale (above)"), found.lines[0]


def test_a_larger_input_a_passing_program_gets_wrong_is_looked_into_as_a_failing_case(tmp_path, monkeypatch):
    """LargerInput's warning with every value checked names its input: the case steps run on it
    as on a failing case (its own label, shape and float64 output), what they found said as the
    larger input's; a crash on it as an ERROR with its signal and stderr (no reference needed: the
    debugger ends it); not where a case failed (that one was looked into), nor where the input is gone
    (a warning kept from an earlier run of the build)."""
    from types import SimpleNamespace
    import numpy as np
    from fa_cli.cases import generate
    from fa_cli.cases.format import Shape
    shape = Shape(2, 64, 32)
    path = tmp_path / "larger-2x64x32.in"
    generate.write_input(path, shape, seed=1)
    warned = Finding(Kind.WARNING, ["passes the cases run, but ..."],
                     dict(larger_wrong=5, larger_input=str(path), larger_shape=[2, 64, 32]))
    seen = {}

    def take(steps, ctx):
        seen.update(label=ctx.case_label, shape=ctx.case_shape, verdict=ctx.verdict, trial=ctx.trial.input_path,
                    correct=None if ctx.correct is None else ctx.correct.shape, steps=steps,
                    judged_run=ctx.judged_run, signal=ctx.signal, stderr=ctx.run_stderr)
        return [Finding(Kind.OBSERVED, ["measured: something", "lines with it in hw4.cu: 3 `x`"]),
                Finding(Kind.HYPOTHESIS, [], {})]
    monkeypatch.setattr(investigation, "take", take)
    monkeypatch.setattr(investigation, "correct_output", lambda p, s, rows: np.zeros((s.B, s.N, s.d)))
    ctx = Context(Program("p", "p"), None, tmp_path, Budget(60.0), lambda line: None, 5e-3, None, "", kind="cuda",
                  results=[SimpleNamespace(verdict="PASS")], findings=[warned])
    step = investigation.LargerLookedInto()
    assert step.applies(ctx)
    [said] = step.run(ctx)
    assert said.lines == ["larger.in (the drawn B=2, N=64, d=32 input), looked into: measured: something; lines with it "
                          "in hw4.cu: 3 `x`"], said.lines
    assert seen == dict(label="larger.in", shape=shape, verdict="WRONG", correct=(2, 64, 32), trial=path,
                        steps=investigation.CASE_STEPS, judged_run=False, signal=None, stderr=""), seen
    # judged_run False: a drawn input has no judged run to count
    warned.fields.update(larger_failed=-11, larger_stderr="hw4: reading the input\n")  # killed by SIGSEGV on it
    step.run(ctx)
    assert (seen["verdict"], seen["correct"]) == ("ERROR", None) and (seen["signal"], seen["stderr"]) == \
        ("SIGSEGV", "hw4: reading the input\n")
    warned.fields.update(larger_failed=1, larger_stderr="hw4: hw4.cu:235: an illegal memory access\n")
    step.run(ctx)  # an error exit: no output to check, so no reference (a drawn input's may be too large to make)
    assert (seen["verdict"], seen["correct"], seen["signal"]) == ("ERROR", None, None)
    ctx.results = [SimpleNamespace(verdict="PASS"), SimpleNamespace(verdict="WRONG")]
    assert not step.applies(ctx)
    ctx.results = [SimpleNamespace(verdict="PASS")]
    path.unlink()
    assert not step.applies(ctx)


def judged(name: str, verdict: str, flops: int, nonfinite: int = 0):
    shape = SimpleNamespace(flops=flops, input_bytes=flops)
    return SimpleNamespace(verdict=verdict, target=SimpleNamespace(name=name, shape=shape),
                           diagnosis=Diagnosis([], {"nonfinite": nonfinite}) if verdict == "WRONG" else None)


def test_the_case_looked_into_is_a_wrong_output_with_nan_before_a_smaller_one_without():
    cases = [judged("small", "WRONG", 10), judged("nan", "WRONG", 100, nonfinite=5),
             judged("nan-larger", "WRONG", 1000, nonfinite=9), judged("passed", "PASS", 1)]
    assert investigation.smallest_failure(cases).target.name == "nan"
    assert investigation.smallest_failure(cases[:1] + cases[3:]).target.name == "small"
    assert investigation.smallest_failure(cases[3:]) is None
    far = [judged("small", "WRONG", 10), judged("huge-nan", "WRONG", 10 * investigation.NAN_FIRST_WORK + 1, 3)]
    assert investigation.smallest_failure(far).target.name == "small"  # NaN, but far more work: the small one


def test_the_case_looked_into_is_one_of_values_before_a_smaller_one_of_zeros():
    """set41's s06: zeros where N is whole tiles, values at N = 200; the values show its weights."""
    zeros, values = judged("zeros", "WRONG", 10), judged("values", "WRONG", 30)
    zeros.diagnosis.fields["looks_like"] = ["all zeros"]
    assert investigation.smallest_failure([zeros, values]).target.name == "values"
    far = judged("far", "WRONG", 10 * investigation.NAN_FIRST_WORK + 1)
    assert investigation.smallest_failure([zeros, far]).target.name == "zeros"  # far more work: the zeros

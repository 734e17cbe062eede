"""The order of host and device (fa_cli/judge/slow_device.py): which runs each step makes, and
what it claims from their outputs, with the runs stubbed (the GPU runs: test_cause_gpu.py)."""
import numpy as np
import pytest

from fa_cli.judge import slow_device
from fa_cli.judge.findings import Finding, Kind
from fa_cli.judge.reruns import TrialCase
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

RIGHT = np.zeros((1, 4, 2), np.float32)


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setattr(slow_device, "student_gpu_program", lambda program: True)
    source = tmp_path / "hw4.cu"
    source.write_text("cudaMemcpyAsync(out, d_out, n, cudaMemcpyDeviceToHost, s);\n")
    c = Context(Program("hw4", tmp_path / "hw4", source=source), None, tmp_path, Budget(60.0), lambda line: None,
                5e-3, None, "t01", kind="cuda", verdict="WRONG")
    c.trial = TrialCase("t01", tmp_path / "t01.in", None, RIGHT)
    return c


def runs_giving(monkeypatch, outputs, built=None):
    """outputs_of stubbed: each call's setting (its env assignment, () as built) and runs noted;
    runs with a setting give `outputs` in turn, runs as built `built` in turn."""
    called, given = [], {(): list(built or []), "set": list(outputs)}

    def outputs_of(ctx, program, case, runs, what, counted=True, first=1, of=None):
        setting = program.interpreter[1:]
        called.append((setting, runs))
        queue = given[() if not setting else "set"]
        return [None if o is None else o.copy() for o in (queue.pop(0) for _ in range(runs))]
    monkeypatch.setattr(slow_device, "outputs_of", outputs_of)
    return called


def test_right_with_every_launch_waited_for_and_wrong_alike_between_names_the_host_going_on_early(ctx, monkeypatch):
    ctx.done.append("failed 5 of 5 runs on t01: the same output in every run")
    called = runs_giving(monkeypatch, [RIGHT] * 4, built=[RIGHT + 1] * 3)
    step = slow_device.LaunchesWaited()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    waited = (("CUDA_LAUNCH_BLOCKING=1",), 1)
    assert called == [waited] + [((), 1), waited] * 3  # one waited first, then by turns: each pair under one load
    assert found.kind == Kind.MEASURED and "right in 3 of 3 runs on t01, and as built, run by turns" in found.lines[0]
    assert "1 `cudaMemcpyAsync(" in found.lines[0]  # the line that orders host and device


def test_right_waited_for_but_right_as_built_too_between_claims_nothing(ctx, monkeypatch):
    """A failure that depends on the load: the runs as built between the waited ones pass once."""
    ctx.done.append("failed 5 of 5 runs on t01")
    runs_giving(monkeypatch, [RIGHT] * 4, built=[RIGHT + 1, RIGHT, RIGHT + 1])
    [found] = slow_device.LaunchesWaited().run(ctx)
    assert found.kind == Kind.OBSERVED and "no claim" in found.lines[0] and "wrong values: 8, 0, 8" in found.lines[0]


@pytest.mark.parametrize("layered, said", [
    (True, "wrong with every launch and copy waited for (CUDA_LAUNCH_BLOCKING=1 FA_COPIES_WAITED=1) too"),
    (False, "wrong with every launch waited for (CUDA_LAUNCH_BLOCKING=1) too")])  # no layer: its copies not waited
def test_still_wrong_with_every_launch_waited_for_claims_nothing(ctx, monkeypatch, layered, said):
    """Wrong in the first run waited for: said, and no runs by turns; right there, wrong in a later
    one: the same."""
    monkeypatch.setattr(slow_device, "layered", lambda program: layered)
    ctx.done.append("failed 5 of 5 runs on t01")
    called = runs_giving(monkeypatch, [RIGHT + 1], built=[])
    assert slow_device.LaunchesWaited().run(ctx) == []
    assert ctx.done[-1] == said
    assert called == [(("CUDA_LAUNCH_BLOCKING=1", "FA_COPIES_WAITED=1") if layered else ("CUDA_LAUNCH_BLOCKING=1",), 1)]
    runs_giving(monkeypatch, [RIGHT, RIGHT, RIGHT + 1, RIGHT], built=[RIGHT + 1] * 3)
    assert slow_device.LaunchesWaited().run(ctx) == [] and ctx.done[-1] == said


def test_every_launch_waited_for_only_where_the_runs_again_agreed(ctx):
    step = slow_device.LaunchesWaited()
    assert not step.applies(ctx)  # the runs again did not end in agreement
    ctx.done.append("failed 5 of 5 runs on t01")
    ctx.findings.append(Finding(Kind.INTERMITTENT, ["intermittent: ..."]))
    assert not step.applies(ctx)  # timing shown: SlowerThanHost's
    ctx.findings.clear()
    ctx.kind = "hip"  # built for AMD: no CUDA runtime to wait
    assert not step.applies(ctx)


def test_slowed_runs_that_fail_alike_after_a_failure_that_came_and_went_are_named(ctx, monkeypatch):
    ctx.findings.append(Finding(Kind.INTERMITTENT, ["intermittent: ..."]))
    monkeypatch.setattr(slow_device, "layered", lambda program: True)
    called = runs_giving(monkeypatch, [RIGHT + 1] * 3 + [RIGHT] * 3)
    step = slow_device.SlowerThanHost()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert called == [((f"FA_DEVICE_DELAY_MS={slow_device.DELAY_MS}",), 3),
                      (("CUDA_LAUNCH_BLOCKING=1", "FA_COPIES_WAITED=1"), 3)]
    assert found.kind == Kind.MEASURED and "fails 3 of 3 runs on t01, the same output bit for bit" in found.lines[0]
    assert "with every launch and copy waited for it is right in 3 of 3" in found.lines[0]


def test_slowed_runs_that_fail_alike_but_stay_wrong_waited_for_claim_nothing(ctx, monkeypatch):
    """A kernel that reads memory other blocks write (past its input, into the output) changes from
    run to run and may settle slowed: waiting for the device does not make it right, so no claim."""
    ctx.findings.append(Finding(Kind.RACE, ["race: ..."]))
    monkeypatch.setattr(slow_device, "layered", lambda program: True)
    runs_giving(monkeypatch, [RIGHT + 1] * 3 + [RIGHT + 1, RIGHT + 1, RIGHT])
    [found] = slow_device.SlowerThanHost().run(ctx)
    assert found.kind == Kind.OBSERVED and "it is not right either (wrong values: 8, 8, 0)" in found.lines[0]
    assert "no claim" in found.lines[0]


def test_slowed_runs_that_differ_are_said_and_then_waited_for_by_turns(ctx, monkeypatch):
    """set39's s08 (a merge kernel on a stream that waits for no event of the partial kernels): slowed,
    it passes; waited for, right every time, and as built, by turns, wrong in most runs: launches that
    overlap. A race inside a kernel stays wrong waited for, and that is said instead."""
    ctx.findings.append(Finding(Kind.RACE, ["race: ..."]))
    ctx.source.write_text("partial<<<grid, 128, 0, s_part>>>(q, scratch);\nmerge<<<rows, 64, 0, s_merge>>>(scratch);\n")
    monkeypatch.setattr(slow_device, "layered", lambda program: True)
    called = runs_giving(monkeypatch, [RIGHT + 1, RIGHT + 2, RIGHT] + [RIGHT] * 3, built=[RIGHT + 1, RIGHT, RIGHT + 2])
    slowed, overlap = slow_device.SlowerThanHost().run(ctx)
    assert slowed.kind == Kind.OBSERVED and "outputs that differ" in slowed.lines[0]
    waited = (("CUDA_LAUNCH_BLOCKING=1", "FA_COPIES_WAITED=1"), 1)
    assert called[1:] == [((), 1), waited] * 3
    assert overlap.kind == Kind.MEASURED and overlap.lines[0].startswith(
        "measured: with every launch and copy waited for (CUDA_LAUNCH_BLOCKING=1 FA_COPIES_WAITED=1) it is right in 3 "
        "of 3 runs on t01, and as built, run by turns "
        "with them, it fails 2 of 3 (wrong values: 8, 0, 8): launches or copies that overlap"), overlap.lines
    assert "1 `partial<<<grid, 128, 0, s_part>>>(q, scratch);`, 2 `merge<<<" in overlap.lines[0]
    runs_giving(monkeypatch, [RIGHT + 1, RIGHT + 2, RIGHT] + [RIGHT, RIGHT + 1, RIGHT], built=[RIGHT + 1] * 3)
    _, inside = slow_device.SlowerThanHost().run(ctx)
    assert inside.kind == Kind.OBSERVED and "still fails 1 of 3 runs on t01: at least part of the timing is inside " \
        "the kernels" in inside.lines[0]
    runs_giving(monkeypatch, [RIGHT + 1, RIGHT + 2, RIGHT] + [RIGHT] * 3, built=[RIGHT + 1, RIGHT, RIGHT])
    _, unsure = slow_device.SlowerThanHost().run(ctx)
    assert unsure.kind == Kind.OBSERVED
    assert unsure.lines[0].endswith("failed only 1 of the 3 runs between them: no claim")


def passing(ctx, monkeypatch, tmp_path):
    """ctx as the run's step sees it: a case of d = 32 passed; the race check's input stubbed."""
    from types import SimpleNamespace
    from fa_cli.cases.format import Shape
    ctx.results = [SimpleNamespace(verdict="PASS", target=SimpleNamespace(name="t01", shape=Shape(1, 4, 2)))]
    monkeypatch.setattr(slow_device, "layered", lambda program: True)

    def check_case(work, d, B):
        assert B == 2  # two batches: a copy back or an offset past the first batch shows
        return TrialCase("B=2, N=4, d=2", tmp_path / "x.in", None, RIGHT)
    monkeypatch.setattr(slow_device, "check_case", check_case)
    return slow_device.SlowDevice()


def test_a_passing_build_right_slowed_takes_one_run(ctx, monkeypatch, tmp_path):
    """A class runs this for every passing program: right slowed is one run, no claim."""
    step = passing(ctx, monkeypatch, tmp_path)
    called = runs_giving(monkeypatch, [RIGHT], built=[])
    assert step.applies(ctx) and step.run(ctx) == []
    assert [(bool(setting), runs) for setting, runs in called] == [(True, 1)]  # slowed, once


def test_a_passing_build_wrong_slowed_is_run_as_built_and_again_slowed_before_the_warning(ctx, monkeypatch, tmp_path):
    step = passing(ctx, monkeypatch, tmp_path)
    called = runs_giving(monkeypatch, [RIGHT + 1, RIGHT + 1], built=[RIGHT, RIGHT])
    [found] = step.run(ctx)
    assert [(bool(setting), runs) for setting, runs in called] == [(True, 1), (False, 2), (True, 1)]
    assert found.kind == Kind.WARNING and "wrong in 2 of 2 runs" in found.lines[0]
    assert "as built it is right in 2 of 2" in found.lines[0]
    called = runs_giving(monkeypatch, [RIGHT + 1, RIGHT], built=[RIGHT, RIGHT])  # wrong once slowed, then right
    [found] = step.run(ctx)
    assert found.kind == Kind.OBSERVED and "in 1 of 2 runs" in found.lines[0] and len(called) == 3
    runs_giving(monkeypatch, [RIGHT + 1, RIGHT + 1], built=[RIGHT, RIGHT + 1])  # right as built once: by timing
    [found] = step.run(ctx)
    assert found.kind == Kind.WARNING and "wrong in 2 of 2 runs" in found.lines[0], found.lines
    assert "as built it is right in 1 of 2 (wrong values: 0, 8: it depends on timing)" in found.lines[0], found.lines
    runs_giving(monkeypatch, [RIGHT + 1, RIGHT + 1], built=[RIGHT + 1, RIGHT + 1])  # wrong as built every run
    [found] = step.run(ctx)
    assert found.kind == Kind.WARNING and found.lines[0].startswith(
        "passes the cases run, but as built it is wrong in 2 of 2 runs on B=2, N=4, d=2 (wrong values: 8, 8)")
    assert "made slower: not tried" in found.lines[0]
    from types import SimpleNamespace
    ctx.results.append(SimpleNamespace(verdict="WRONG", target=ctx.results[0].target))  # a case failed: said plainly
    runs_giving(monkeypatch, [RIGHT + 1, RIGHT + 1], built=[RIGHT + 1, RIGHT + 1])
    [found] = step.run(ctx)
    assert found.kind == Kind.OBSERVED and found.lines[0].startswith(
        "the device made slower: not tried: as built it is wrong in 2 of 2 runs on B=2, N=4, d=2"), found.lines


def test_the_copies_back_come_first_among_the_lines_that_order_host_and_device(ctx):
    """Copies in, a stream, a copy back in the loop, the last copy back and a synchronize: the two
    copies back and the synchronize are shown, the input copy and the stream not."""
    ctx.source.write_text("cudaStreamCreate(&s[0]);\n"
                          "cudaMemcpyAsync(d_in, h_in, n, cudaMemcpyHostToDevice, st);\n"
                          "cudaMemcpyAsync(h_out + pb, d_out + pb, n, cudaMemcpyDeviceToHost, st);\n"
                          "cudaMemcpyAsync(h_out + lb, d_out + lb, n, cudaMemcpyDeviceToHost, s[1]);\n"
                          "cudaDeviceSynchronize();\n")
    said = slow_device.ordering_lines(ctx)
    assert said.startswith("; lines that order host and device in hw4.cu: 3 `cudaMemcpyAsync(h_out + pb") and \
        "4 `cudaMemcpyAsync(h_out + lb" in said and "5 `cudaDeviceSynchronize();`" in said, said
    assert "HostToDevice" not in said and "StreamCreate" not in said, said


def test_a_non_blocking_stream_comes_first_among_the_lines_that_order_host_and_device(ctx):
    """set48's s06: copies on a stream made non-blocking, the kernel on the default stream: that
    stream's line first, said as not waiting for the default stream's kernels."""
    ctx.source.write_text("cudaStream_t s;\nCHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));\n"
                          "cudaMemcpyAsync(h_out, d_out, n, cudaMemcpyDeviceToHost, s);\ncudaStreamSynchronize(s);\n")
    said = slow_device.ordering_lines(ctx)
    assert said.startswith("; lines that order host and device in hw4.cu (a stream made non-blocking does not "
                           "wait for the default stream's kernels, nor they for its copies): 2 `CHECK(cudaStream"), said


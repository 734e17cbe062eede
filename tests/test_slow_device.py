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


def runs_giving(monkeypatch, outputs):
    """outputs_of stubbed: the settings each call ran with (its env assignment) noted."""
    called = []

    def outputs_of(ctx, program, case, runs, what):
        called.append((program.interpreter[1:2], runs))
        return [o.copy() if o is not None else None for o in outputs[:runs]]
    monkeypatch.setattr(slow_device, "outputs_of", outputs_of)
    return called


def test_right_with_every_launch_waited_for_names_the_host_going_on_early(ctx, monkeypatch):
    ctx.done.append("failed 5 of 5 runs on t01: the same output in every run")
    called = runs_giving(monkeypatch, [RIGHT] * 3)
    step = slow_device.LaunchesWaited()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert called == [(("CUDA_LAUNCH_BLOCKING=1",), 3)]
    assert found.kind == Kind.MEASURED and "right in 3 of 3 runs on t01" in found.lines[0]
    assert "1 `cudaMemcpyAsync(" in found.lines[0]  # the line that orders host and device


def test_still_wrong_with_every_launch_waited_for_claims_nothing(ctx, monkeypatch):
    ctx.done.append("failed 5 of 5 runs on t01")
    runs_giving(monkeypatch, [RIGHT, RIGHT + 1, RIGHT])
    assert slow_device.LaunchesWaited().run(ctx) == []
    assert ctx.done[-1] == "wrong with every launch waited for (CUDA_LAUNCH_BLOCKING=1) too"


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
    called = runs_giving(monkeypatch, [RIGHT + 1] * 3)
    step = slow_device.SlowerThanHost()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert called == [((f"FA_DEVICE_DELAY_MS={slow_device.DELAY_MS}",), 3)]
    assert found.kind == Kind.MEASURED and "fails 3 of 3 runs on t01, the same output bit for bit" in found.lines[0]


def test_slowed_runs_that_differ_are_said_without_a_claim(ctx, monkeypatch):
    ctx.findings.append(Finding(Kind.RACE, ["race: ..."]))
    monkeypatch.setattr(slow_device, "layered", lambda program: True)
    runs_giving(monkeypatch, [RIGHT + 1, RIGHT + 2, RIGHT + 1])
    [found] = slow_device.SlowerThanHost().run(ctx)
    assert found.kind == Kind.OBSERVED and "outputs that differ" in found.lines[0]

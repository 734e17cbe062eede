"""fa_cli/judge/batch_apart.py: a batch whose values changed between runs, run alone three times,
its runs stubbed with outputs: right and steady alone names the batches meeting; changing alone
too, a race within a batch; a case whose reruns agreed is not looked at."""
import numpy as np
import pytest

from fa_cli.cases.format import Shape, header_bytes
from fa_cli.judge import batch_apart
from fa_cli.judge.findings import Finding, Kind
from fa_cli.judge.reruns import TrialCase
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

RNG = np.random.default_rng(7)
SHAPE = Shape(3, 8, 4)


@pytest.fixture
def ctx(tmp_path):
    path = tmp_path / "case.in"
    qkv = RNG.uniform(-1, 1, (SHAPE.B, 3, SHAPE.N, SHAPE.d)).astype("<f4")
    path.write_bytes(header_bytes(SHAPE) + qkv.tobytes())
    expected = RNG.uniform(-1, 1, (SHAPE.B, SHAPE.N, SHAPE.d)).astype(np.float32)
    c = Context(Program("hw4", tmp_path / "hw4"), None, tmp_path, Budget(60.0), lambda line: None, 5e-3, None, "t01",
                kind="cuda")
    c.trial = TrialCase("t01", path, SHAPE, expected)
    c.findings.append(Finding(Kind.RACE, ["the output changes between runs ..."], dict(batches_differ=[1, 2])))
    return c


def alone_giving(monkeypatch, outputs):
    """run_once stubbed: each run's input noted (its batch's Q, K, V read back), outputs given in turn."""
    seen = []

    def run_once(program, case, out, launcher, timeout):
        seen.append(np.fromfile(case.input_path, dtype="<f4", offset=len(header_bytes(case.shape))))
        return None, outputs.pop(0)
    monkeypatch.setattr(batch_apart, "run_once", run_once)
    return seen


def test_the_first_changing_batch_right_and_steady_alone_names_the_batches_meeting(ctx, monkeypatch):
    right = ctx.trial.expected[1:2]
    seen = alone_giving(monkeypatch, [right.copy() for _ in range(3)])
    step = batch_apart.ChangingBatchAlone()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    whole = np.fromfile(ctx.trial.input_path, dtype="<f4", offset=len(header_bytes(SHAPE)))
    assert len(seen) == 3 and np.array_equal(seen[0], whole.reshape(SHAPE.B, -1)[1])  # batch 1's Q, K and V
    assert found.kind == Kind.OBSERVED and found.lines[0].startswith(  # an observation: the tools after still look
        "measured: batch 1 of t01, whose values changed between runs there, run as the only batch (batch 1 of t01 "
        "(1x8x4)) 3 times: right every time, the same bit for bit: its values change only where other batches run "
        "beside it"), found


def test_a_batch_that_changes_alone_too_is_a_race_within_its_blocks(ctx, monkeypatch):
    right = ctx.trial.expected[1:2]
    alone_giving(monkeypatch, [right.copy(), right + 0.5, right.copy()])
    [found] = batch_apart.ChangingBatchAlone().run(ctx)
    assert found.kind == Kind.OBSERVED and "its values change alone too (failed 1 of 3): a race within the batch's " \
        "own blocks, or memory past a buffer's end read there" in found.lines[0], found


def test_runs_alone_with_no_output_or_cut_by_the_budget_say_only_that(ctx, monkeypatch):
    right = ctx.trial.expected[1:2]
    alone_giving(monkeypatch, [None, right.copy(), None])
    [found] = batch_apart.ChangingBatchAlone().run(ctx)
    assert found.lines[0].endswith("3 times: no output of the right size in 2 of 3 runs"), found
    alone_giving(monkeypatch, [right.copy()] * 3)
    ctx.budget = Budget(0.5)  # less than a run's second: none starts
    [found] = batch_apart.ChangingBatchAlone().run(ctx)
    assert found.kind == Kind.MISSING_TOOL and found.lines[0].endswith(
        "(batch 1 of t01 (1x8x4)): 0 of 3 runs before the budget was spent: nothing said of them"), found


def test_a_case_whose_runs_agreed_or_of_one_batch_is_not_looked_at(ctx):
    ctx.findings = [Finding(Kind.RACE, ["..."], dict(batches_differ=[]))]
    assert not batch_apart.ChangingBatchAlone().applies(ctx)
    ctx.findings = [Finding(Kind.RACE, ["..."], dict(batches_differ=[0]))]
    ctx.trial = TrialCase("t01", ctx.trial.input_path, Shape(1, 8, 4), ctx.trial.expected[:1])
    assert not batch_apart.ChangingBatchAlone().applies(ctx)

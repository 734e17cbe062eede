"""fa_cli/judge/probes/cross_batch.py: one batch's Q, K or V drawn anew, each in a run of its own.
A stand-in program whose last batch reads its last K rows where batch 0's V begins (a K plane that
runs into the V plane) is named by the batch and tensor that move it; a right one moves nothing."""
import numpy as np
from helpers import stand_in_context

from fa_cli.judge.probes.cross_batch import InputsAcrossBatches
from fa_cli.judge.probes.step import ProbeInput

OVERLAP = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
q, k, v = x[:, 0], x[:, 1].copy(), x[:, 2]
if {overlap}:
    k[B - 1, -8:] = v[0, :8]  # the last batch's last K rows where batch 0's V begins
s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True))
((p / p.sum(axis=2, keepdims=True)) @ v).astype("<f4").tofile(sys.argv[2])
"""


def context(tmp_path, overlap: bool):
    rng = np.random.default_rng(6)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(3, 64, 32)).astype(np.float32) for _ in range(3)))
    ctx = stand_in_context(tmp_path, OVERLAP.replace("{overlap}", str(overlap)), "", inp)
    ctx.facts.wrong_batches = np.flatnonzero((np.abs(ctx.facts.out - ctx.facts.true) > 5e-3).any(axis=(1, 2)))
    return ctx


def test_a_last_batch_that_reads_batch_0s_v_as_its_k_is_named_by_the_batch_and_tensor(tmp_path):
    ctx = context(tmp_path, True)
    step = InputsAcrossBatches()
    assert list(ctx.facts.wrong_batches) == [2] and step.applies(ctx)
    [found] = step.run(ctx)
    assert not ctx.facts.named and found.kind == "observed", found  # the steps after it still look
    assert found.lines[0].startswith("measured: batch 0's V drawn anew moves the output of batch 2 (each in a run of "
                                     "its own on the probe input): what those batches compute depends on another "
                                     "batch's input: they read it where their own belongs"), found
    assert found.fields["inputs_across_batches"] == [[0, "V", [2]]]


def test_a_right_program_moves_no_other_batch_and_says_what_was_tried(tmp_path):
    ctx = context(tmp_path, False)
    assert not InputsAcrossBatches().applies(ctx)  # no batch is wrong
    [found] = InputsAcrossBatches().run(ctx)
    assert not ctx.facts.named and found.lines == ["measured: batch 0's and batch 2's Q, K and V drawn anew in turn "
                                                   "(6 runs on the probe input) move no other batch's output"]


def test_an_infinity_that_stays_the_same_infinity_has_not_moved():
    """Lanes that divide by a sum of 0 write inf in every run, whatever another batch holds: the
    same infinity is no move (inf - inf is NaN), a finite value turned infinite is."""
    from fa_cli.judge.probes.cross_batch import moved_batches
    base = np.ones((2, 4, 3), np.float32)
    base[:, :, 1:] = np.inf
    base[:, 0, 2] = -np.inf
    assert list(moved_batches(base.copy(), base)) == []
    got = base.copy()
    got[1, 2, 0] = np.inf
    assert list(moved_batches(got, base)) == [1]

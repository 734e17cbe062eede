"""fa_cli/judge/probes/lane_columns.py: an output right in one lane's columns and infinite or NaN in
the others is said as a row statistic only that lane holds; other non-finite patterns are not."""
import numpy as np

from fa_cli.judge.probes.lane_columns import one_lanes_columns
from fa_cli.judge.probes.step import ProbeInput


def outputs(d: int):
    rng = np.random.default_rng(4)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(2, 40, d)).astype(np.float32) for _ in range(3)))
    true = inp.output()
    return true.astype(np.float32), true


def test_lane_zeros_columns_right_and_the_rest_infinite_is_said_by_lane():
    out, true = outputs(64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out[:, :, np.arange(64) % 32 != 0] = out[:, :, np.arange(64) % 32 != 0] / 0.0  # inf, -inf; NaN where 0
    said = one_lanes_columns(out, true, 5e-3)
    assert said and said.startswith("only columns 0, 32 hold the right values (the dims c with c mod 32 = 0: lane "
                                    "0's"), said
    assert "never broadcast back" in said


def test_other_patterns_are_not_said():
    out, true = outputs(32)
    assert one_lanes_columns(out, true, 5e-3) is None  # right everywhere
    out[:, :, 1:3] = np.inf  # two columns lost, the others right: no one lane's
    assert one_lanes_columns(out, true, 5e-3) is None
    out, true = outputs(32)
    out[:, :, 1:] = np.inf
    out[0, 5, 0] += 1.0  # lane 0's column wrong in one row
    assert one_lanes_columns(out, true, 5e-3) is None
    out, true = outputs(32)
    out[:, :, np.arange(32) != 7] = np.inf  # column 7 alone: any lane's or none's, not said
    assert one_lanes_columns(out, true, 5e-3) is None
    out, true = outputs(32)
    out[:, :, 1:] = np.inf
    assert one_lanes_columns(out, true, 5e-3).startswith("only column 0 holds the right values")


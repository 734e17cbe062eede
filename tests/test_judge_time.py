"""The judge-time model (fa_cli/measure/judge_time.py): its parts, its fit and its check, on
made-up programs whose GTX 1080 times follow known parameters."""
import math

import numpy as np
import pytest

from fa_cli.measure import judge_time
from fa_cli.measure.floor import Floor
from fa_cli.programs.timing import Launch, SmLimits

H100 = SmLimits(sms=132, smem_sm=233472, regs_sm=65536, threads_sm=2048, blocks_sm=32)
FLOOR = Floor(startup_s=0.3, h2d_gbps=6.0, d2h_gbps=12.0)


def launch(blocks: int, ms: float) -> Launch:
    return Launch("flash", 1, 0, ms, (blocks, 1, 1), (128, 1, 1), 16384, 40)


def test_a_grid_smaller_than_the_sms_takes_as_long_per_sm_and_a_large_one_spreads_over_20():
    small = judge_time.parts((2, 32768, 64), 1.0, [launch(2, 100.0)], H100, FLOOR)
    large = judge_time.parts((2, 32768, 64), 1.0, [launch(132 * 20, 100.0)], H100, FLOOR)
    assert small.kernels_judge_here == pytest.approx(0.1)
    assert large.kernels_judge_here == pytest.approx(0.1 * 132 / 20)


def test_host_work_is_the_wall_time_less_floor_copies_and_kernels():
    B, N, d = 100, 1024, 64
    p = judge_time.parts((B, N, d), 2.0, [launch(500, 250.0)], H100, FLOOR)
    copies_here = 3 * B * N * d * 4 / 6e9 + B * N * d * 4 / 12e9
    assert p.host_here == pytest.approx(2.0 - 0.3 - copies_here - 0.25)
    assert p.copies_judge == pytest.approx(3 * B * N * d * 4 / 8.4e9 + B * N * d * 4 / 11.9e9)
    assert judge_time.parts((B, N, d), 0.1, [launch(500, 250.0)], H100, FLOOR).host_here == 0.0


def synthetic(truth: judge_time.Params, noise: float, seed: int = 0):
    """Five programs of eight cases each: random shapes, grids and kernel times, published times
    from `truth` with log-normal noise."""
    rng = np.random.default_rng(seed)
    names, points, published = [], [], []
    for program in range(5):
        for _ in range(8):
            B, N, d = int(rng.integers(2, 500)), int(rng.choice([128, 1024, 4096])), int(rng.choice([32, 64]))
            grid = int(rng.choice([B, B * 16, 3]))
            run = judge_time.parts((B, N, d), float(rng.uniform(0.35, 2.0)), [launch(grid, float(rng.uniform(1, 400)))],
                                   H100, FLOOR)
            names.append(f"p{program}")
            points.append([run])
            published.append(run.estimate(truth) * math.exp(rng.normal(0, noise)))
    return names, points, published


def test_the_fit_finds_the_parameters_that_made_the_times():
    truth = judge_time.Params(startup_s=0.12, host_ratio=1.5, sm_ratio=1.4)
    _, points, published = synthetic(truth, noise=0.0)
    found = judge_time.fit(points, published)
    assert found.startup_s == pytest.approx(truth.startup_s, abs=0.02)
    assert found.host_ratio == pytest.approx(truth.host_ratio, rel=0.15)
    assert found.sm_ratio == pytest.approx(truth.sm_ratio, rel=0.15)
    assert np.median(np.abs(judge_time.log_errors(points, published, found))) < 0.05


def test_leaving_each_program_out_measures_the_noise_and_ranges_cover_it():
    truth = judge_time.Params(startup_s=0.12, host_ratio=1.5, sm_ratio=1.4)
    names, points, published = synthetic(truth, noise=0.2, seed=1)
    check = judge_time.leave_one_program_out(names, points, published)
    assert check.points == 40
    assert 0.05 < check.median_abs_log < 0.3  # about the noise's median |error| (0.135)
    assert check.covered >= 0.7 and check.widest <= math.log(2.0) + 1e-12


def test_a_sum_over_cases_is_estimated_as_the_sum():
    truth = judge_time.Params(startup_s=0.1, host_ratio=1.0, sm_ratio=2.0)
    _, points, _ = synthetic(truth, noise=0.0)
    together = [[p[0] for p in points[:8]]]
    estimate = judge_time.log_errors(together, [1.0], truth)
    assert math.exp(estimate[0]) == pytest.approx(sum(p[0].estimate(truth) for p in points[:8]))


def test_the_range_is_never_wider_than_twice_either_way():
    assert judge_time.half_width(np.array([0.1, 2.0, 3.0])) == pytest.approx(math.log(2.0))
    assert judge_time.half_width(np.array([0.1] * 10)) == pytest.approx(0.1)


def test_the_fit_script_reads_the_published_times_and_observations_it_is_given(tmp_path):
    """scripts/fit_judge_time.py end to end, on observations made up from the published shapes
    with known parameters: every fit and check row found, the model's fit near the truth, its
    left-out error small, and the baseline (shape alone) reported beside it."""
    import csv
    import json
    import subprocess
    import sys

    from helpers import ROOT
    from fa_cli.cases import suite

    truth = judge_time.Params(startup_s=0.1, host_ratio=1.2, sm_ratio=1.6)
    rows = list(csv.DictReader((ROOT / "data" / "judge_time" / "published.csv").open()))
    rng = np.random.default_rng(3)
    observed = {"floor": {"startup_s": 0.3, "h2d_gbps": 6.0, "d2h_gbps": 12.0}, "programs": {}}
    made = []
    for row in rows:
        cases = [f"c{i:02d}" for i in range(1, 31)] if row["case"] == "all" else [row["case"]]
        parts = []
        for name in cases:
            s = suite.case(name).shape
            entry = {"case": name, "shape": [s.B, s.N, s.d], "wall_s": float(rng.uniform(0.4, 3.0)),
                     "launches": [{"kernel": "k", "launches": 1, "untimed": 0, "ms": float(rng.uniform(1, 900)),
                                   "grid": [int(rng.choice([s.B, s.B * 8])), 1, 1], "block": [128, 1, 1],
                                   "smem": 8192, "regs": 32}],
                     "gpu": H100.__dict__}
            observed["programs"].setdefault(row["program"], []).append(entry)
            launches = [Launch(**{**l, "grid": tuple(l["grid"]), "block": tuple(l["block"])}) for l in entry["launches"]]
            parts.append(judge_time.parts(tuple(entry["shape"]), entry["wall_s"], launches, H100, FLOOR))
        made.append(sum(p.estimate(truth) for p in parts))
    path = tmp_path / "observed.json"
    path.write_text(json.dumps(observed))
    published = tmp_path / "published.csv"
    with published.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([{**row, "seconds": f"{t:.6f}"} for row, t in zip(rows, made)])
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "fit_judge_time.py"), str(path), "--published",
                           str(published)], capture_output=True, text=True, check=True)
    found = json.loads(proc.stdout)
    model = found["model"]
    assert model["missing"] == [] and model["check"]["missing"] == []
    assert model["params"]["sm_ratio"] == pytest.approx(truth.sm_ratio, rel=0.15)
    assert model["left_out"]["points"] == sum(r["set"] == "fit" for r in rows)
    assert model["left_out"]["median_x"] < 1.1 and model["check"]["median_x"] < 1.1
    assert found["shape_only"]["left_out"]["points"] == model["left_out"]["points"]


CAL = judge_time.Calibration(judge_time.Params(0.1, 1.0, 1.5), half_width=math.log(1.5), points=43, median_x=1.3)


def test_the_words_say_estimate_basis_and_risk_and_where_none_was_made():
    estimates = {"c01": judge_time.Estimate(0.1, 0.15, 0.225), "c29": judge_time.Estimate(4.0, 6.0, 9.0),
                 "c30": None}
    said = judge_time.words(estimates, {"c01": 2.0, "c29": 6.0, "c30": 10.0}, CAL)
    assert "not a measurement" in said[0] and "43 published GTX 1080 times" in said[0] and "x1.30" in said[0]
    assert said[1] == "TLE risk on the GTX 1080 (the range reaches the limit): c29 (6 s)"
    assert said[2].startswith("no GTX 1080 estimate for c30 (")
    assert judge_time.cell(estimates["c01"], 2.0) == "0.10-0.23" and judge_time.cell(estimates["c29"], 6.0) == "4.00-9.00 !"
    assert judge_time.cell(None, 2.0) == "-"


def test_the_estimate_comes_from_the_runs_launch_log_and_none_without_it():
    stderr = ("fa-launch: launches=1 untimed=0 ms=500.0 grid=2x1x1 block=128x1x1 smem=0 regs=32 kernel=k\n"
              "fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32\n")
    e = judge_time.estimate((2, 32768, 64), 1.5, stderr, CAL, FLOOR)
    p = judge_time.parts((2, 32768, 64), 1.5, [launch(2, 500.0)], H100, FLOOR)
    assert e.mid == pytest.approx(p.estimate(CAL.params)) and e.high / e.mid == pytest.approx(1.5)
    assert judge_time.estimate((2, 32768, 64), 1.5, "hw4: done\n", CAL, FLOOR) is None


def test_without_a_fitted_model_fa_run_shows_no_estimate(monkeypatch, tmp_path):
    monkeypatch.setattr(judge_time, "CALIBRATION", tmp_path / "none.json")
    assert judge_time.calibration() is None
    assert judge_time.for_results(tmp_path / "hw4.cu", []) is None


def test_fa_runs_table_gets_the_column_and_the_words_under_it(monkeypatch, tmp_path):
    """for_results with a fitted model: a cell per case from its run's launch log, '!' where the
    range reaches the limit, the words; judge_table shows the column beside the time here."""
    import json

    from fa_cli.cases.format import Shape
    from fa_cli.cases.suite import Target
    from fa_cli.judge.verdict import CaseResult
    from fa_cli.programs.programs import Program, RunResult
    from fa_cli.report import tables

    model = {"model": {"params": {"startup_s": 0.1, "host_ratio": 1.0, "sm_ratio": 1.5}, "half_width_x": 1.5,
                       "left_out": {"points": 43, "median_x": 1.3}}}
    (tmp_path / "model.json").write_text(json.dumps(model))
    monkeypatch.setattr(judge_time, "CALIBRATION", tmp_path / "model.json")
    monkeypatch.setattr(judge_time.floor, "measure", lambda: FLOOR)
    log = ("fa-launch: launches=1 untimed=0 ms={ms} grid=2x1x1 block=128x1x1 smem=0 regs=32 kernel=k\n"
           "fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32\n")
    prog = Program("hw4.cu", tmp_path / "hw4", source=tmp_path / "hw4.cu")
    results = [CaseResult(Target(name, tmp_path / f"{name}.in", Shape(2, 32768, 64), limit), prog,
                          RunResult(["hw4"], 0, wall, log.format(ms=ms)), None, limit)
               for name, wall, ms, limit in (("c30", 1.0, 200.0, 10.0), ("c29", 5.0, 4000.0, 6.0))]
    cells, said = judge_time.for_results(prog.source, results)
    assert not cells["c30"].endswith("!") and cells["c29"].endswith(" !")
    assert said[1] == "TLE risk on the GTX 1080 (the range reaches the limit): c29 (6 s)"
    table = tables.judge_table(results, cells)
    assert [c.header for c in table.columns][2:4] == ["time s", "GTX 1080 s"]
    assert judge_time.for_results(None, results) is None

"""The judge-time model (fa_cli/measure/judge_time.py): its parts, its fit and its check, on
made-up programs whose GTX 1080 times follow known parameters."""
import math

import numpy as np
import pytest

from fa_cli.cases.format import Shape
from fa_cli.measure import judge_time
from fa_cli.measure.floor import Floor
from fa_cli.programs.timing import Launch, SmLimits

H100 = SmLimits(sms=132, smem_sm=233472, regs_sm=65536, threads_sm=2048, blocks_sm=32)
FLOOR = Floor(startup_s=0.3, h2d_gbps=6.0, d2h_gbps=12.0)


def launch(blocks: int, ms: float, smem: int = 16384) -> Launch:
    return Launch("flash", 1, 0, ms, (blocks, 1, 1), (128, 1, 1), smem, 40)


def test_a_grid_smaller_than_the_sms_takes_as_long_per_sm_and_a_large_one_spreads_over_20():
    small = judge_time.parts(Shape(2, 32768, 64), 1.0, [launch(2, 100.0)], H100, FLOOR)
    large = judge_time.parts(Shape(2, 32768, 64), 1.0, [launch(132 * 20, 100.0)], H100, FLOOR)
    assert small.kernels_judge_here(0.0) == pytest.approx(0.1) == small.kernels_judge_here(1.0)
    assert large.kernels_judge_here(0.0) == pytest.approx(0.1 * 132 / 20)


def test_an_sm_holds_blocks_as_each_gpus_limits_allow():
    """Registers in 256s a warp, shared memory, threads: a 1024-thread block of 46 registers is
    one an SM on either GPU; a 128-thread block with a 40 KB tile is five on an H100 and two on
    the GTX 1080 (96 KB an SM)."""
    big = Launch("k", 1, 0, 1.0, (640, 1, 1), (32, 32, 1), 33280, 46)
    tiled = Launch("k", 1, 0, 1.0, (1024, 1, 1), (128, 1, 1), 40960, 32)
    assert judge_time.blocks_held(big, H100) == 1 == judge_time.blocks_held(big, judge_time.GTX1080)
    assert judge_time.blocks_held(tiled, H100) == 5 and judge_time.blocks_held(tiled, judge_time.GTX1080) == 2
    assert judge_time.blocks_held(Launch("k", 1, 0, 1.0, (9, 1, 1), (32, 1, 1), 0, 255), H100) == 8


def test_holding_fewer_blocks_there_costs_as_the_occupancy_exponent_says():
    """The tiled launch: 1024 blocks are 8 an SM here, held 5 at once, and 52 there, held 2."""
    run = judge_time.kernel_run(Launch("k", 1, 0, 1000.0, (1024, 1, 1), (128, 1, 1), 40960, 32), H100)
    assert run.judge_factor(0.0) == pytest.approx(52 / 8)
    assert run.judge_factor(1.0) == pytest.approx((52 / 2) / (8 / 5))


def test_host_work_is_the_wall_time_less_floor_copies_and_kernels():
    B, N, d = 100, 1024, 64
    p = judge_time.parts(Shape(B, N, d), 2.0, [launch(500, 250.0)], H100, FLOOR)
    copies_here = 3 * B * N * d * 4 / 6e9 + B * N * d * 4 / 12e9
    assert p.host_here == pytest.approx(2.0 - 0.3 - copies_here - 0.25)
    assert p.copies_judge == pytest.approx(3 * B * N * d * 4 / 8.4e9 + B * N * d * 4 / 11.9e9)
    assert judge_time.parts(Shape(B, N, d), 0.1, [launch(500, 250.0)], H100, FLOOR).host_here == 0.0


def synthetic(truth: judge_time.Params, noise: float, seed: int = 0):
    """Five programs of eight cases each: random shapes, grids and kernel times, published times
    from `truth` with log-normal noise."""
    rng = np.random.default_rng(seed)
    names, points, published = [], [], []
    for program in range(5):
        for _ in range(8):
            B, N, d = int(rng.integers(2, 500)), int(rng.choice([128, 1024, 4096])), int(rng.choice([32, 64]))
            grid = int(rng.choice([B, B * 16, 3]))
            tile = int(rng.choice([0, 8192, 40960]))
            run = judge_time.parts(Shape(B, N, d), float(rng.uniform(0.35, 2.0)),
                                   [launch(grid, float(rng.uniform(1, 400)), tile)], H100, FLOOR)
            names.append(f"p{program}")
            points.append([run])
            published.append(run.estimate(truth) * math.exp(rng.normal(0, noise)))
    return names, points, published


def test_the_fit_finds_the_parameters_that_made_the_times():
    truth = judge_time.Params(startup_s=0.12, host_ratio=1.5, sm_ratio=1.4, occupancy_exponent=0.75)
    names, points, published = synthetic(truth, noise=0.0)
    found = judge_time.fit(points, published, names)
    assert found.occupancy_exponent == truth.occupancy_exponent
    assert found.startup_s == pytest.approx(truth.startup_s, abs=0.03)  # the grid: 0.01 s, ratios 12%
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
    assert sorted(check.by_program) == [f"p{i}" for i in range(5)]


def test_each_program_weighs_as_much_as_another_in_the_fit():
    """Forty cases of one program whose host is three times faster, eight each of five others:
    weighed by program the fit stays near the five (the one is a sixth of the weight); weighed
    by point it is pulled half way to the one."""
    truth = judge_time.Params(startup_s=0.1, host_ratio=1.0, sm_ratio=1.0)
    names, points, published = synthetic(truth, noise=0.0, seed=4)
    _, fast_points, fast_published = synthetic(judge_time.Params(0.1, 0.33, 1.0), noise=0.0, seed=5)
    names, points, published = names + ["fast"] * 40, points + fast_points, published + fast_published
    by_program = judge_time.fit(points, published, names)
    by_point = judge_time.fit(points, published)
    assert by_point.host_ratio < 0.75 < 0.8 < by_program.host_ratio < 1.1


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
            parts.append(judge_time.parts(Shape(*entry["shape"]), entry["wall_s"], launches, H100, FLOOR))
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


def test_the_shipped_fit_is_the_fit_of_the_shipped_observations():
    """fa_cli/measure/judge_time_gtx1080.json (what fa shows) is what scripts/fit_judge_time.py
    makes of data/judge_time/observed-h100.json (the students' programs run on an H100, with their
    sm_61 registers) and the published times: its figures in docs/judge-time.md can be made again."""
    import json
    import subprocess
    import sys

    from helpers import ROOT

    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "fit_judge_time.py"),
                           str(ROOT / "data" / "judge_time" / "observed-h100.json")],
                          capture_output=True, text=True, check=True)
    made = json.loads(proc.stdout)
    shipped = json.loads((ROOT / "fa_cli" / "measure" / "judge_time_gtx1080.json").read_text())
    assert made == shipped
    assert shipped["fitted_on"] == "NVIDIA H100 80GB HBM3" and shipped["model"]["left_out"]["points"] == 43

"""What fa shows of the judge's GPU's time (fa_cli/measure/judge_column.py): the estimate of a
run from its launch log, the column's cells and words in fa run, bench and compare, the record's
field, the MI210's uncalibrated model; the table with the column still in 80 columns."""
import math

import pytest

from fa_cli.cases.format import Shape
from fa_cli.measure import judge_column, judge_time
from fa_cli.measure.floor import Floor
from fa_cli.programs.programs import Program
from fa_cli.programs.timing import Launch, SmLimits

H100 = SmLimits(sms=132, smem_sm=233472, regs_sm=65536, threads_sm=2048, blocks_sm=32)
FLOOR = Floor(startup_s=0.3, h2d_gbps=6.0, d2h_gbps=12.0)


def launch(blocks: int, ms: float, smem: int = 16384) -> Launch:
    return Launch("flash", 1, 0, ms, (blocks, 1, 1), (128, 1, 1), smem, 40)


def built(tmp_path, name: str = "hw4.cu"):
    """A student's program as fa builds it (the source beside, the build in build/)."""
    from fa_cli.programs.programs import Program

    return Program(name, tmp_path / "build" / "hw4", source=tmp_path / name)


@pytest.fixture(autouse=True)
def no_sm61_report(monkeypatch):
    """The sm_61 registers come from CUDA 12's ptxas (tests/test_pascal.py): none here."""
    monkeypatch.setattr(judge_column.gtx1080_report, "registers", lambda program: {})


CAL = judge_column.Calibration(judge_time.Params(0.1, 1.0, 1.5), half_width=math.log(1.5), points=43, median_x=1.3,
                               p90_x=2.5, covered=0.8, fitted_on="NVIDIA H100 80GB HBM3")


def test_the_words_say_estimate_basis_and_risk_and_where_none_was_made():
    estimates = {"c01": judge_column.Estimate(0.1, 0.15, 0.225), "c29": judge_column.Estimate(4.0, 6.0, 9.0),
                 "c30": None}
    said = judge_column.words(estimates, {"c01": 2.0, "c29": 6.0, "c30": 10.0}, "GTX 1080", CAL)
    assert "not a measurement" in said[0] and "43 published GTX 1080 times" in said[0] and "x1.30" in said[0]
    assert "held 80% of them" in said[0] and "x2.50 at the 90th percentile" in said[0]
    assert "fitted on runs on an NVIDIA H100 80GB HBM3" in said[0]
    assert said[1] == "TLE risk on the GTX 1080 (the range reaches the limit): c29 (6 s)"
    assert said[2].startswith("no GTX 1080 estimate for c30 (")
    assert judge_column.cell(estimates["c01"], 2.0) == "0.10-0.23" and judge_column.cell(estimates["c29"], 6.0) == "4.00-9.00 !"
    assert judge_column.cell(None, 2.0) == "-"


def test_the_estimate_comes_from_the_runs_launch_log_and_none_without_it():
    stderr = ("fa-launch: launches=1 untimed=0 ms=500.0 grid=2x1x1 block=128x1x1 smem=0 regs=32 kernel=k\n"
              "fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32\n")
    e = judge_column.estimate(Shape(2, 32768, 64), 1.5, stderr, CAL, FLOOR)
    p = judge_time.parts(Shape(2, 32768, 64), 1.5, [launch(2, 500.0)], H100, FLOOR)
    assert e.mid == pytest.approx(p.estimate(CAL.params)) and e.high / e.mid == pytest.approx(1.5)
    assert judge_column.estimate(Shape(2, 32768, 64), 1.5, "hw4: done\n", CAL, FLOOR) is None


def test_without_a_fitted_model_fa_run_shows_no_estimate(monkeypatch, tmp_path):
    monkeypatch.setattr(judge_column, "CALIBRATION", tmp_path / "none.json")
    assert judge_column.calibration() is None
    monkeypatch.setattr(judge_column.floor, "measure", lambda: FLOOR)
    assert judge_column.record_fields(Shape(2, 32768, 64), 1.5, LOG, built(tmp_path)) == {}  # a launch log, no fit


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
                       "left_out": {"points": 43, "median_x": 1.3, "p90_x": 2.5, "covered": 0.8}},
             "fitted_on": "NVIDIA H100 80GB HBM3"}
    (tmp_path / "model.json").write_text(json.dumps(model))
    monkeypatch.setattr(judge_column, "CALIBRATION", tmp_path / "model.json")
    monkeypatch.setattr(judge_column.floor, "measure", lambda: FLOOR)
    log = ("fa-launch: launches=1 untimed=0 ms={ms} grid=2x1x1 block=128x1x1 smem=0 regs=32 kernel=k\n"
           "fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32\n")
    prog = Program("hw4.cu", tmp_path / "hw4", source=tmp_path / "hw4.cu")
    results = [CaseResult(Target(name, tmp_path / f"{name}.in", Shape(2, 32768, 64), limit), prog,
                          RunResult(["hw4"], 0, wall, log.format(ms=ms)), None, limit)
               for name, wall, ms, limit in (("c30", 1.0, 200.0, 10.0), ("c29", 5.0, 4000.0, 6.0))]
    column = judge_column.for_results(prog, results)
    assert not column.cells["c30"].endswith("!") and column.cells["c29"].endswith(" !")
    assert column.words[1] == "TLE risk on the GTX 1080 (the range reaches the limit): c29 (6 s)"
    table = tables.judge_table(results, column)
    assert [c.header for c in table.columns][2:4] == ["time s", "GTX 1080 s"]
    assert judge_column.for_results(Program("cuda", tmp_path / "fa-cuda"), results) is None


def test_with_the_column_the_table_still_fits_80_columns():
    """Every case checked alike: the checked column gives way to the estimate (said once under
    the table, sampled or not), so that the widest shape and a range marked '!' fit 80."""
    import io

    from rich.console import Console

    from fa_cli.cases.format import Shape
    from fa_cli.cases.suite import Target
    from fa_cli.judge.verdict import CaseResult
    from fa_cli.judge.verify import VerifyResult
    from fa_cli.programs.programs import Program, RunResult
    from fa_cli.report import tables

    prog = Program("hw4.cu", "/tmp/hw4")
    for mode in ("every value", "8 rows/batch, sampled"):
        check = VerifyResult(mode, 5e-3, checked=1, max_err=5.48e-06)
        results = [CaseResult(Target("c11", "/tmp/c11.in", Shape(13600, 128, 32), 6.0), prog,
                              RunResult(["hw4"], 0, 12.345, ""), check, 6.0)]
        out = io.StringIO()
        column = judge_column.Column("GTX 1080 s", {"c11": "10.00-40.00 !"}, [])
        Console(file=out, width=200).print(tables.judge_table(results, column))
        assert max(len(line) for line in out.getvalue().splitlines()) <= 80, out.getvalue()
        assert "checked" not in out.getvalue() and tables.checked_alike(results) == mode
        assert "checked" in [c.header for c in tables.judge_table(results, None).columns]


LOG = ("fa-launch: launches=1 untimed=0 ms=500.0 grid=2x1x1 block=128x1x1 smem=0 regs=32 kernel=k\n"
       "fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32\n")


def fitted(monkeypatch, tmp_path) -> None:
    import json

    model = {"model": {"params": {"startup_s": 0.1, "host_ratio": 1.0, "sm_ratio": 1.5, "occupancy_exponent": 0.5},
                       "half_width_x": 1.5, "left_out": {"points": 43, "median_x": 1.3, "p90_x": 2.5, "covered": 0.8}},
             "fitted_on": "NVIDIA H100 80GB HBM3"}
    (tmp_path / "model.json").write_text(json.dumps(model))
    monkeypatch.setattr(judge_column, "CALIBRATION", tmp_path / "model.json")
    monkeypatch.setattr(judge_column.floor, "measure", lambda: FLOOR)


def test_a_record_keeps_the_estimate_and_the_model_that_made_it(monkeypatch, tmp_path):
    """fa run -o and fa bench records: the estimate as fa run shows it, with the model's figures,
    read back by from_record; nothing for a run without a launch log."""
    fitted(monkeypatch, tmp_path)
    fields = judge_column.record_fields(Shape(2, 32768, 64), 1.5, LOG, built(tmp_path))
    gpu, e, cal = judge_column.from_record(fields)
    assert gpu == "GTX 1080" and e == judge_column.estimate(Shape(2, 32768, 64), 1.5, LOG, judge_column.calibration(), FLOOR)
    assert cal == judge_column.calibration() and cal.params.occupancy_exponent == 0.5
    assert judge_column.record_fields(Shape(2, 32768, 64), 1.5, "hw4: done\n", built(tmp_path)) == {}
    ours = Program("cuda", tmp_path / "fa-cuda")
    assert judge_column.record_fields(Shape(2, 32768, 64), 1.5, LOG, ours) == {}  # not a student's source: no judge
    assert judge_column.from_record({}) is None


def test_records_get_cells_and_words_and_a_dash_said_where_none_was_made(monkeypatch, tmp_path):
    fitted(monkeypatch, tmp_path)
    student = {"program": "hw4.cu", "input": "c29", "time_limit": 10.0,
               **judge_column.record_fields(Shape(4, 32768, 32), 1.0, LOG, built(tmp_path))}
    ours = {"program": "cuda", "input": "c29", "time_limit": 10.0}
    column = judge_column.for_records([student, ours], lambda r: f"{r['program']} on {r['input']}")
    assert column.header == "GTX 1080 s" and column.cells["cuda on c29"] == "-"
    assert column.cells["hw4.cu on c29"] == judge_column.cell(judge_column.from_record(student)[1], 10.0)
    said = column.words
    assert "from the runs here" in said[0] and "x1.30" in said[0] and said[-1].startswith('judge\'s GPU "-"')
    assert judge_column.for_records([ours], lambda r: r["input"]) is None


def test_a_hw4_hip_gets_the_mi210s_estimate_said_to_be_uncalibrated(monkeypatch, tmp_path):
    """hw4.hip's judge is the MI210: no fitted model (no published time to fit on), the GPUs'
    published figures instead, and the words say so; beside a hw4.cu record the column is
    "judge s", each GPU's words under it."""
    fitted(monkeypatch, tmp_path)
    assert judge_column.judge_of("x/hw4.hip") is judge_time.MI210_JUDGE
    assert judge_column.judge_of("hw4.cu") is judge_time.GTX1080_JUDGE and judge_column.judge_of(None) is None
    hip = {"program": "hw4.hip", "input": "c29", "time_limit": 10.0,
           **judge_column.record_fields(Shape(4, 32768, 32), 1.0, LOG, built(tmp_path, "hw4.hip"))}
    gpu, e, cal = judge_column.from_record(hip)
    assert gpu == "MI210" and cal.points == 0 and e.high / e.low == pytest.approx(4.0)
    # 2 blocks: one a CU there as one an SM here, each 2.33 times as slow (FP32 peaks)
    model = judge_column.mi210_model(FLOOR)
    m = 4 * 32768 * 32 * 4
    host = 1.0 - FLOOR.startup_s - (3 * m / 6e9 + m / 12e9) - 0.5  # the wall less floor, copies, kernels here
    assert e.mid == pytest.approx(FLOOR.startup_s + host + parts_copies(4, 32768, 32) + 0.5 * judge_column.MI210_SM_RATIO)
    assert model.params.startup_s == FLOOR.startup_s and model.params.host_ratio == 1.0
    cu = {"program": "hw4.cu", "input": "c29", "time_limit": 10.0,
          **judge_column.record_fields(Shape(4, 32768, 32), 1.0, LOG, built(tmp_path))}
    column = judge_column.for_records([cu, hip], lambda r: r["program"])
    assert column.header == "judge s" and set(column.cells) == {"hw4.cu", "hw4.hip"}
    text = " ".join(column.words)
    assert "MI210 s: an estimate" in text and "not calibrated on measured data" in text and "GTX 1080 s:" in text


def parts_copies(B: int, N: int, d: int) -> float:
    """A case's copies at the MI210's assumed 25 GB/s each way."""
    return 4 * B * N * d * 4 / 25e9


def test_the_gtx1080s_registers_come_from_its_sm61_report_where_there_is_one(monkeypatch, tmp_path):
    """A kernel of 128 threads, 40 registers here: 16 blocks an SM by registers, held 6 at once
    by its 16 KB of shared memory on the GTX 1080. Its sm_61 report says 168 registers: 3 blocks
    an SM there (5376 a warp), and the estimate grows as the fitted occupancy exponent (0.5) says."""
    fitted(monkeypatch, tmp_path)
    log = ("fa-launch: launches=1 untimed=0 ms=500.0 grid=2640x1x1 block=128x1x1 smem=16384 regs=40 kernel=void flash<64>\n"
           "fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32\n")
    without = judge_column.from_record(judge_column.record_fields(Shape(4, 32768, 32), 1.0, log, built(tmp_path)))[1]
    monkeypatch.setattr(judge_column.gtx1080_report, "registers", lambda program: {"flash<64>": 168})
    found = judge_column.from_record(judge_column.record_fields(Shape(4, 32768, 32), 1.0, log, built(tmp_path)))[1]
    sm = judge_column.calibration().params.sm_ratio
    run_there = judge_time.kernel_run(Launch("void flash<64>", 1, 0, 500.0, (2640, 1, 1), (128, 1, 1), 16384, 40), H100,
                                      judge_time.GTX1080, 168)
    assert run_there.held_judge == 3 and run_there.held_here == 12
    assert found.mid - without.mid == pytest.approx(
        sm * 0.5 * (run_there.judge_factor(0.5) - judge_time.kernel_run(
            Launch("k", 1, 0, 500.0, (2640, 1, 1), (128, 1, 1), 16384, 40), H100).judge_factor(0.5)))


def test_on_the_judges_own_gpu_fa_makes_no_estimate_and_says_why(monkeypatch, tmp_path):
    """A run whose launch log names the GTX 1080's SMs (20 of 96 KB: the course's own cluster)
    timed the judge's GPU itself: no column, no record field, one line saying so; the same run
    on an H100 gets the estimate."""
    from fa_cli.cases.suite import Target
    from fa_cli.judge.verdict import CaseResult
    from fa_cli.programs.programs import Program, RunResult

    monkeypatch.setattr(judge_column.floor, "measure", lambda: FLOOR)
    kernel = "fa-launch: launches=1 untimed=0 ms=200.0 grid=40x1x1 block=128x1x1 smem=0 regs=32 kernel=k\n"
    gtx1080 = kernel + "fa-launch: gpu sms=20 smem_sm=98304 regs_sm=65536 threads_sm=2048 blocks_sm=32\n"
    h100 = kernel + "fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32\n"
    prog = Program("hw4.cu", tmp_path / "hw4", source=tmp_path / "hw4.cu")

    def results(log):
        return [CaseResult(Target("c29", tmp_path / "c29.in", Shape(4, 32768, 32), 10.0), prog,
                           RunResult(["hw4"], 0, 1.0, log), None, 10.0)]

    assert judge_column.for_results(prog, results(gtx1080)) is None
    assert judge_column.record_fields(Shape(4, 32768, 32), 1.0, gtx1080, prog) == {}
    assert judge_column.judges_own_line(prog, results(gtx1080)).startswith("no GTX 1080 estimate: this GPU has")
    assert judge_column.for_results(prog, results(h100)) is not None
    assert judge_column.judges_own_line(prog, results(h100)) is None

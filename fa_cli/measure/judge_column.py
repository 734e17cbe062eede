"""What fa shows of the judge's GPU's time: the estimate of each case from its run here (the
model and its fit: judge_time.py), as a column of fa run's, fa bench's and fa compare's tables
with the lines under it that say what it is and how good it is, and as a record's field.

hw4.cu is judged on the GTX 1080, whose model is fitted on published times (judge_time_gtx1080.json,
written by scripts/fit_judge_time.py; its check's figures go into the words); hw4.hip on the
MI210, whose model is not fitted (no published MI210 time of a program with code exists) and is
said to be so.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..cases.format import Shape
from ..errors import FaError
from ..programs import timing
from . import floor, gtx1080_report
from .floor import Floor
from .judge_time import GTX1080_JUDGE, MI210_JUDGE, JudgeGpu, Params, parts

CALIBRATION = Path(__file__).with_name("judge_time_gtx1080.json")  # written by scripts/fit_judge_time.py


@dataclass(frozen=True)
class Calibration:
    params: Params
    half_width: float  # the range either way, as a log
    points: int        # published times of the check (each program left out of the fit in turn); 0: none
    median_x: float | None  # the check's median error, as a factor (None: not calibrated)
    p90_x: float | None     # its 90th percentile
    covered: float | None   # the share of those times inside their range
    fitted_on: str | None   # the GPU whose runs the fit used


@dataclass(frozen=True)
class Estimate:
    low: float
    mid: float
    high: float


def calibration() -> Calibration | None:
    """The GTX 1080's fitted model, or None where it has not been fitted on measured data."""
    if not CALIBRATION.is_file():
        return None
    found = json.loads(CALIBRATION.read_text())
    model = found["model"]
    return basis({**model["left_out"], "half_width_x": model["half_width_x"], "params": model["params"],
                  "fitted_on": found.get("fitted_on")})


# The MI210's model is not fitted: no published MI210 time of a program whose code is public
# exists. Its numbers come from the GPUs' published figures: a CU's FP32 (64 lanes at 1.7 GHz)
# against an SM here taken as Hopper's (128 lanes at 1.98 GHz), blocks spread over 104 CUs,
# start-up and host work as here, copies at PCIe 4.0's rate; the range is an assumption.
MI210_SM_RATIO = (128 * 1.98) / (64 * 1.7)
MI210_HALF_WIDTH = math.log(2.0)


def mi210_model(here: Floor) -> Calibration:
    return Calibration(Params(here.startup_s, 1.0, MI210_SM_RATIO, 0.0), MI210_HALF_WIDTH, 0, None, None, None, None)


def basis(fields: dict) -> Calibration:
    """A Calibration from the figures a record keeps of the model that made its estimate."""
    return Calibration(Params(**fields["params"]), math.log(fields["half_width_x"]), fields["points"],
                       fields.get("median_x"), fields.get("p90_x"), fields.get("covered"), fields.get("fitted_on"))


def judge_of(source: Path | str | None) -> JudgeGpu | None:
    """The GPU that judges a student's source: hw4.cu the GTX 1080, hw4.hip the MI210."""
    suffix = Path(source).suffix if source else ""
    return {".cu": GTX1080_JUDGE, ".hip": MI210_JUDGE}.get(suffix)


def on_the_judges_gpu(stderr: str, judge: JudgeGpu) -> bool:
    """The run's GPU (its launch log's) has the judge's SMs, as on the course's own cluster (a
    GPU of the same chip, a Tesla P4 say, looks the same): its times are taken as the judge's."""
    return timing.gpu_limits(stderr) == judge.limits


def judges_own_line(program, results) -> str | None:
    """The line fa run says, instead of the column, where every run was on the judge's GPU."""
    judge = judge_of(getattr(program, "source", None))
    logged = [r for r in results if timing.launches(r.run.stderr)]
    if judge is None or not logged or not all(on_the_judges_gpu(r.run.stderr, judge) for r in logged):
        return None
    return (f"no {judge.name} estimate: this GPU has the {judge.name}'s SMs ({judge.limits.sms} of "
            f"{judge.limits.smem_sm // 1024} KB, as the course's cluster has), so time s is taken as the "
            f"judge's GPU's own")


def floor_here() -> Floor | None:
    """The start-up floor and copy rates here, or None where they cannot be measured (no GPU or
    nvcc on this machine, as on a login node whose jobs run elsewhere): then no estimate."""
    try:
        return floor.measure()
    except FaError:
        return None


def model_for(judge: JudgeGpu, here: Floor) -> Calibration | None:
    return calibration() if judge is GTX1080_JUDGE else mi210_model(here)


def judge_registers(program, judge: JudgeGpu) -> dict[str, int]:
    """The kernels' registers a thread for the GTX 1080 from its sm_61 report (kept beside the
    build; none where CUDA 12's ptxas is missing: this build's counts stand in)."""
    return gtx1080_report.registers(program) if judge is GTX1080_JUDGE else {}


def estimate(shape: Shape, wall_s: float, stderr: str, cal: Calibration, floor: Floor,
             judge: JudgeGpu = GTX1080_JUDGE, registers: dict[str, int] | None = None) -> Estimate | None:
    """A case's time on the judge's GPU from its run here, or None where the run left no launch log."""
    launches, gpu = timing.launches(stderr), timing.gpu_limits(stderr)
    if not launches or gpu is None:
        return None
    mid = parts(shape, wall_s, launches, gpu, floor, judge, registers).estimate(cal.params)
    width = math.exp(cal.half_width)
    return Estimate(mid / width, mid, mid * width)


def record_fields(shape: Shape, wall_s: float, stderr: str, program) -> dict:
    """What a results record keeps (fa run -o, fa bench): the estimate, its GPU and the model's
    figures, so that fa compare can show and qualify it later; nothing where there is none."""
    judge = judge_of(getattr(program, "source", None))
    if judge is None or not timing.launches(stderr) or on_the_judges_gpu(stderr, judge):
        return {}
    if (here := floor_here()) is None:
        return {}
    if (cal := model_for(judge, here)) is None:
        return {}
    e = estimate(shape, wall_s, stderr, cal, here, judge, judge_registers(program, judge))
    if e is None:
        return {}
    model = {"params": cal.params.__dict__, "half_width_x": math.exp(cal.half_width), "points": cal.points,
             "median_x": cal.median_x, "p90_x": cal.p90_x, "covered": cal.covered, "fitted_on": cal.fitted_on}
    return {"judge_gpu_s": {"gpu": judge.name, "low": e.low, "mid": e.mid, "high": e.high, "model": model}}


def from_record(record: dict) -> tuple[str, Estimate, Calibration] | None:
    found = record.get("judge_gpu_s")
    if not found:
        return None
    return found["gpu"], Estimate(found["low"], found["mid"], found["high"]), basis(found["model"])


def cell(e: Estimate | None, limit: float | None) -> str:
    """The table's cell: the range, marked where it reaches the case's limit."""
    if e is None:
        return "-"
    return f"{e.low:.2f}-{e.high:.2f}" + (" !" if limit is not None and e.high >= limit else "")


def basis_line(gpu: str, cal: Calibration, runs: str) -> str:
    """What the column is and how good it is: measured against published times (the GTX 1080),
    or said to be uncalibrated (the MI210)."""
    what = (f"{gpu} s: an estimate of each case's time on the judge's {gpu} from {runs} (start-up, copies, "
            f"kernels and the rest, file I/O included, carried over apart), not a measurement")
    if cal.points:
        fitted = f", fitted on runs on an {cal.fitted_on}" if cal.fitted_on else ""
        p90 = f" and x{cal.p90_x:.2f} at the 90th percentile" if cal.p90_x else ""
        return (f"{what}: off by x{cal.median_x:.2f} at the median{p90} on "
                f"{cal.points} published {gpu} times, each program left out of the fit in turn{fitted}; the range, "
                f"x{math.exp(cal.half_width):.2f} either way (the most it may be), held {cal.covered:.0%} of them "
                f"(docs/judge-time.md)")
    return (f"{what}, and not calibrated on measured data (no published {gpu} time of a program whose code is "
            f"public): kernel times here (the emulation's) scaled by FP32 peaks, an SM here taken as an H100's and "
            f"a CU as the MI210's, spread over its {MI210_JUDGE.limits.sms} CUs; PCIe 4.0 copies; start-up and "
            f"file I/O as here; the range, x{math.exp(cal.half_width):.0f} either way, is assumed (docs/judge-time.md)")


def words(estimates: dict[str, Estimate | None], limits: dict[str, float | None], gpu: str, cal: Calibration,
          runs: str = "this run") -> list[str]:
    """The lines under a table with the column (fa run, bench, compare): what the column is, how
    good it is, and the risks; `estimates` and `limits` keyed by the row's name."""
    lines = [basis_line(gpu, cal, runs)]
    risky = [f"{name} ({limits[name]:g} s)" for name, e in estimates.items()
             if e is not None and limits.get(name) is not None and e.high >= limits[name]]
    if risky:
        lines.append(f"TLE risk on the {gpu} (the range reaches the limit): " + ", ".join(risky))
    missing = [name for name, e in estimates.items() if e is None]
    if missing:
        lines.append(f"no {gpu} estimate for " + ", ".join(missing) + " (its run failed, or left no launch log: "
                     "the log is printed at exit, so a run that ran no kernel, was killed or crashed leaves none)")
    return lines


@dataclass(frozen=True)
class Column:
    """The judge's GPU's column of a table: its header, a cell per row name, the lines under it."""
    header: str
    cells: dict[str, str]
    words: list[str]


def for_results(program, results) -> Column | None:
    """fa run's column for a student's hw4.cu (the GTX 1080, with a fitted model) or hw4.hip (the
    MI210, uncalibrated) whose runs left a launch log; None otherwise."""
    judge = judge_of(getattr(program, "source", None))
    if judge is None or not any(timing.launches(r.run.stderr) for r in results) or judges_own_line(program, results):
        return None
    if (here := floor_here()) is None:
        return None
    if (cal := model_for(judge, here)) is None:
        return None
    registers = judge_registers(program, judge)
    found = {r.target.name: None if r.error else estimate(r.target.shape, r.run.wall_s, r.run.stderr, cal, here,
                                                          judge, registers) for r in results}
    limits = {r.target.name: r.target.time_limit for r in results}  # the course's, whatever limit fa ran under
    return Column(f"{judge.name} s", {name: cell(e, limits[name]) for name, e in found.items()},
                  words(found, limits, judge.name, cal))


def for_records(records: list[dict], name_of) -> Column | None:
    """The column for results records (fa bench, fa compare), keyed by name_of(record); None
    where no record holds an estimate. A row without one shows "-": only a student's hw4.cu or
    hw4.hip run under its judge's layer logs its launches. Records of both judges' GPUs share
    one column, "judge s", each GPU's words under it."""
    found = {name_of(r): from_record(r) for r in records}
    made = {name: got for name, got in found.items() if got}
    if not made:
        return None
    limits = {name_of(r): r.get("time_limit") for r in records}
    gpus = list(dict.fromkeys(gpu for gpu, _, _ in made.values()))
    said = []
    for gpu in gpus:  # the model of each GPU's first estimate (one fit is shipped at a time)
        mine = {name: e for name, (g, e, _) in made.items() if g == gpu}
        cal = next(c for g, _, c in made.values() if g == gpu)
        said += words(mine, limits, gpu, cal, "the runs here")
    if len(made) < len(found):
        said.append("judge's GPU \"-\": no estimate; only a student's hw4.cu or hw4.hip run under its judge's "
                    "layer logs its launches")
    cells = {name: cell(made[name][1] if name in made else None, limits[name]) for name in found}
    return Column(f"{gpus[0]} s" if len(gpus) == 1 else "judge s", cells, said)

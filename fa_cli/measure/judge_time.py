"""The time a case would take on the judge's GTX 1080, estimated from a run on the GPU at hand.

A run's wall time here is split into parts that differ between machines, and each part is
carried to the judge on its own:

  start-up and exit   the floor here (floor.py) is taken out; the judge's is a fitted constant;
  host work           what is left of the wall time (reading and writing the files, the host's
                      own loops) times a fitted ratio of the judge's host to this one;
  copies              the case's bytes (three inputs in, one output back) at the copy rates
                      measured here, and at the judge's PCIe 3.0 rates (8.4 GB/s to the device,
                      11.9 back, measured on the course's hosts) there;
  kernels             each kernel's time here from the launch log (src_cuda/gtx1080/
                      launch_log.h), times a fitted ratio of a GTX 1080 SM to an SM here,
                      times how many blocks each SM runs there over here (20 SMs against this
                      GPU's): a grid of two blocks takes as long on either GPU's SMs, a grid
                      of thousands is spread over 20 SMs there.

The three fitted numbers (Params) come from published GTX 1080 times of students' programs
whose code is public, run here (scripts/observe_judge_time.py, scripts/fit_judge_time.py). The
range around an estimate is the spread of the fit's errors when each program is left out in
turn; `Calibration` holds both and says how well the model did.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..programs import timing
from ..programs.timing import Launch, SmLimits
from . import floor
from .floor import Floor

GTX1080 = SmLimits(sms=20, smem_sm=96 * 1024, regs_sm=65536, threads_sm=2048, blocks_sm=32)
JUDGE_H2D_GBPS, JUDGE_D2H_GBPS = 8.4, 11.9  # the course's hosts, measured (../course-gpu)
HEADER_BYTES = 12  # B, N, d as 32-bit integers


@dataclass(frozen=True)
class Params:
    startup_s: float   # the judge's start-up and exit of a CUDA process
    host_ratio: float  # the judge's host work per second of host work here
    sm_ratio: float    # a GTX 1080 SM's time for a block per an SM's time here


@dataclass(frozen=True)
class Parts:
    """A run here, split into the parts the model carries over (seconds)."""
    host_here: float          # wall time less floor, copies and kernels (never below 0)
    copies_judge: float       # the case's bytes at the judge's copy rates
    kernels_judge_here: float  # kernel time here, scaled by the blocks each SM runs there / here

    def estimate(self, p: Params) -> float:
        return p.startup_s + p.host_ratio * self.host_here + self.copies_judge + p.sm_ratio * self.kernels_judge_here


def case_bytes(B: int, N: int, d: int) -> tuple[int, int]:
    """Bytes a case copies to the device (Q, K, V) and back (O)."""
    matrix = B * N * d * 4
    return 3 * matrix, matrix


def blocks_per_sm(launch: Launch, gpu: SmLimits) -> int:
    """How many of the launch's blocks one SM runs, where the blocks are spread evenly."""
    return math.ceil(launch.blocks / gpu.sms)


def parts(shape: tuple[int, int, int], wall_s: float, launches: list[Launch], gpu: SmLimits, floor: Floor) -> Parts:
    to_device, back = case_bytes(*shape)
    copies_here = to_device / (floor.h2d_gbps * 1e9) + back / (floor.d2h_gbps * 1e9)
    kernels_here = sum(l.ms for l in launches) / 1e3
    scaled = sum(l.ms / 1e3 * blocks_per_sm(l, GTX1080) / blocks_per_sm(l, gpu) for l in launches if l.blocks)
    return Parts(host_here=max(0.0, wall_s - floor.startup_s - copies_here - kernels_here),
                 copies_judge=to_device / (JUDGE_H2D_GBPS * 1e9) + back / (JUDGE_D2H_GBPS * 1e9),
                 kernels_judge_here=scaled)


# --- fitting ---------------------------------------------------------------------------------
# Each published figure is a sum of parts (one case, or all 30 of a program), so a point is a
# list of Parts and its estimate the sum of theirs. The fit minimises the squared log error
# over a grid of the three parameters (the model is linear in them; the grid is small).

STARTUPS = np.linspace(0.0, 0.6, 61)
RATIOS = np.exp(np.linspace(math.log(0.03), math.log(30.0), 61))  # steps of about 12%


def estimates(points: list[list[Parts]], startup, host, sm) -> np.ndarray:
    """Estimates of every point (last axis) for arrays of parameters (broadcast)."""
    n = np.array([len(p) for p in points], dtype=float)
    h = np.array([sum(x.host_here for x in p) for p in points])
    c = np.array([sum(x.copies_judge for x in p) for p in points])
    k = np.array([sum(x.kernels_judge_here for x in p) for p in points])
    return startup[..., None] * n + host[..., None] * h + c + sm[..., None] * k


def fit(points: list[list[Parts]], published: list[float]) -> Params:
    target = np.log(np.asarray(published))
    s, h, k = np.meshgrid(STARTUPS, RATIOS, RATIOS, indexing="ij")
    est = estimates(points, s, h, k)
    loss = ((np.log(np.maximum(est, 1e-6)) - target) ** 2).sum(axis=-1)
    i = np.unravel_index(np.argmin(loss), loss.shape)
    return Params(float(s[i]), float(h[i]), float(k[i]))


def log_errors(points: list[list[Parts]], published: list[float], p: Params) -> np.ndarray:
    est = estimates(points, np.array(p.startup_s), np.array(p.host_ratio), np.array(p.sm_ratio))
    return np.log(est / np.asarray(published))


COVER = 0.85  # the range is this share of the fitted errors either way
WIDEST = math.log(2.0)  # and never wider than x2 either way


def half_width(errors: np.ndarray) -> float:
    return min(float(np.quantile(np.abs(errors), COVER)), WIDEST)


@dataclass(frozen=True)
class Check:
    """How the model did with each program left out in turn (every parameter refitted)."""
    points: int
    median_abs_log: float
    p90_abs_log: float
    covered: float  # share of the published figures inside their range
    widest: float   # the widest half-width used, as a log


def leave_one_program_out(programs: list[str], points: list[list[Parts]], published: list[float]) -> Check:
    errors, inside, widths = [], [], []
    for left in sorted(set(programs)):
        keep = [i for i, p in enumerate(programs) if p != left]
        out = [i for i, p in enumerate(programs) if p == left]
        params = fit([points[i] for i in keep], [published[i] for i in keep])
        q = half_width(log_errors([points[i] for i in keep], [published[i] for i in keep], params))
        e = log_errors([points[i] for i in out], [published[i] for i in out], params)
        errors.extend(np.abs(e)), inside.extend(np.abs(e) <= q), widths.append(q)
    a = np.array(errors)
    return Check(len(a), float(np.median(a)), float(np.quantile(a, 0.9)), float(np.mean(inside)), max(widths))


def shape_only(shape: tuple[int, int, int]) -> Parts:
    """The baseline's features of a case: its shape alone (gigabytes moved, teraflops of work), in
    the places of host work and kernels so that the same fit applies: start-up + a GB + b TFLOP."""
    B, N, d = shape
    to_device, back = case_bytes(B, N, d)
    return Parts(host_here=(to_device + back) / 1e9, copies_judge=0.0, kernels_judge_here=4.0 * B * N * N * d / 1e12)


# --- the estimate fa run shows ----------------------------------------------------------------

CALIBRATION = Path(__file__).with_name("judge_time_gtx1080.json")  # written by scripts/fit_judge_time.py


@dataclass(frozen=True)
class Calibration:
    params: Params
    half_width: float  # the range either way, as a log
    points: int        # published times of the check (each program left out of the fit in turn)
    median_x: float    # the check's median error, as a factor


@dataclass(frozen=True)
class Estimate:
    low: float
    mid: float
    high: float


def calibration() -> Calibration | None:
    """The fitted model, or None where it has not been fitted on measured data."""
    if not CALIBRATION.is_file():
        return None
    model = json.loads(CALIBRATION.read_text())["model"]
    return Calibration(Params(**model["params"]), math.log(model["half_width_x"]), model["left_out"]["points"],
                       model["left_out"]["median_x"])


def estimate(shape: tuple[int, int, int], wall_s: float, stderr: str, cal: Calibration, floor: Floor) -> Estimate | None:
    """A case's GTX 1080 time from its run here, or None where the run left no launch log."""
    launches, gpu = timing.launches(stderr), timing.gpu_limits(stderr)
    if not launches or gpu is None:
        return None
    mid = parts(shape, wall_s, launches, gpu, floor).estimate(cal.params)
    width = math.exp(cal.half_width)
    return Estimate(mid / width, mid, mid * width)


def cell(e: Estimate | None, limit: float | None) -> str:
    """The table's cell: the range, marked where it reaches the case's limit."""
    if e is None:
        return "-"
    return f"{e.low:.2f}-{e.high:.2f}" + (" !" if limit is not None and e.high >= limit else "")


def words(estimates: dict[str, Estimate | None], limits: dict[str, float | None], cal: Calibration) -> list[str]:
    """The lines under fa run's table: what the column is, how good it is, and the risks."""
    lines = [f"GTX 1080 s: an estimate of each case's time on the judge's GPU from this run (start-up, "
             f"file I/O, PCIe 3.0 copies and kernels carried over apart), not a measurement: about "
             f"x{cal.median_x:.2f} either way on {cal.points} published GTX 1080 times, each program left "
             f"out of the fit in turn; the range is x{math.exp(cal.half_width):.2f} either way "
             f"(docs/judge-time.md)"]
    risky = [f"{name} ({limits[name]:g} s)" for name, e in estimates.items()
             if e is not None and limits.get(name) is not None and e.high >= limits[name]]
    if risky:
        lines.append("TLE risk on the GTX 1080 (the range reaches the limit): " + ", ".join(risky))
    missing = [name for name, e in estimates.items() if e is None]
    if missing:
        lines.append("no GTX 1080 estimate for " + ", ".join(missing) + " (the run left no launch log: it "
                     "failed before its kernels ran, or ran none)")
    return lines


def for_results(source: Path | None, results) -> tuple[dict[str, str], list[str]] | None:
    """fa run's GTX 1080 column (cells by case) and the lines under its table, for a student's
    hw4.cu run under the GTX 1080's rules with a fitted model; None otherwise."""
    cal = calibration()
    if cal is None or source is None or not any(timing.launches(r.run.stderr) for r in results):
        return None
    here = floor.measure()
    found = {r.target.name: estimate((r.target.shape.B, r.target.shape.N, r.target.shape.d), r.run.wall_s,
                                     r.run.stderr, cal, here) for r in results}
    limits = {r.target.name: r.time_limit for r in results}
    return {name: cell(e, limits[name]) for name, e in found.items()}, words(found, limits, cal)

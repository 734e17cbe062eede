"""The time a case would take on the judge's GTX 1080, estimated from a run on the GPU at hand.

A run's wall time here is split into parts that differ between machines, and each part is
carried to the judge on its own:

  start-up and exit   the floor here (floor.py) is taken out; the judge's is a fitted constant;
  host work           what is left of the wall time (reading and writing the files, the host's
                      own loops) times a fitted ratio of the judge's host to this one;
  copies              the case's bytes (three inputs in, one output back) at the copy rates
                      measured here, and at the judge's PCIe 3.0 rates (8.4 GB/s to the device,
                      11.9 back, measured on the course's hosts) there;
  kernels             each kernel's time here from the launch log (src_cuda/
                      launch_log.h), times a fitted ratio of a GTX 1080 SM to an SM here, times
                      how much more each SM has to do there (KernelRun.judge_factor): its blocks
                      spread over 20 SMs there against this GPU's, and how many of them one SM
                      holds at once under each GPU's limits (threads, registers, shared memory:
                      Pascal's 96 KB an SM holds fewer blocks of a 40 KB tile than Hopper's 228).

The four fitted numbers (Params) come from published GTX 1080 times of students' programs
whose code is public, run here (scripts/observe_judge_time.py, scripts/fit_judge_time.py). The
range around an estimate is the spread of the fit's errors, and the check leaves each program
out of the fit in turn (docs/judge-time.md). What fa shows of it: judge_column.py.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..cases.format import Shape
from ..programs.timing import Launch, SmLimits
from .floor import Floor
from .resources import short_name



@dataclass(frozen=True)
class JudgeGpu:
    """A GPU the course judges on: what one SM (an MI210's CU) holds and how many it has, and
    the copy rates of its hosts."""
    name: str
    limits: SmLimits
    h2d_gbps: float
    d2h_gbps: float


GTX1080 = SmLimits(sms=20, smem_sm=96 * 1024, regs_sm=65536, threads_sm=2048, blocks_sm=32)
# The course's hosts measured 8.4 GB/s in and 11.9 back (nvprof logs of a student's runs).
GTX1080_JUDGE = JudgeGpu("GTX 1080", GTX1080, 8.4, 11.9)
# 104 CUs of 64 KB of LDS and 32 wavefronts of 64 (2048 work-items); registers are not compared
# (an NVIDIA build's counts say nothing of VGPRs); PCIe 4.0 x16 at about 25 GB/s in practice.
MI210_JUDGE = JudgeGpu("MI210", SmLimits(sms=104, smem_sm=64 * 1024, regs_sm=2**31 - 1, threads_sm=2048, blocks_sm=32),
                       25.0, 25.0)


@dataclass(frozen=True)
class Params:
    startup_s: float   # the judge's start-up and exit of a CUDA process
    host_ratio: float  # the judge's host work per second of host work here
    sm_ratio: float    # a GTX 1080 SM's time for a block per an SM's time here
    occupancy_exponent: float = 0.0  # 0: blocks held together share the SM (throughput);
    #                                  1: each runs as fast as alone (latency hidden)


@dataclass(frozen=True)
class KernelRun:
    """One kernel's launches of one shape: their time here, and how their blocks sit on an SM
    here and on the GTX 1080 (blocks each SM runs, blocks one SM holds at once)."""
    seconds: float
    per_sm_here: int
    held_here: int
    per_sm_judge: int
    held_judge: int

    def judge_factor(self, occupancy_exponent: float) -> float:
        """How much longer an SM there is busy than one here: the blocks it runs, over the
        blocks it holds at once to the power `occupancy_exponent`."""
        def busy(per_sm: int, held: int) -> float:
            return per_sm / min(held, per_sm) ** occupancy_exponent
        return busy(self.per_sm_judge, self.held_judge) / busy(self.per_sm_here, self.held_here)


@dataclass(frozen=True)
class Parts:
    """A run here, split into the parts the model carries over (seconds)."""
    host_here: float      # wall time less floor, copies and kernels (never below 0)
    copies_judge: float   # the case's bytes at the judge's copy rates
    kernels: tuple[KernelRun, ...]

    def kernels_judge_here(self, occupancy_exponent: float) -> float:
        """Kernel time here, scaled by how much more each SM has to do there."""
        return sum(k.seconds * k.judge_factor(occupancy_exponent) for k in self.kernels)

    def estimate(self, p: Params) -> float:
        return (p.startup_s + p.host_ratio * self.host_here + self.copies_judge
                + p.sm_ratio * self.kernels_judge_here(p.occupancy_exponent))


def case_bytes(shape: Shape) -> tuple[int, int]:
    """Bytes a case copies to the device (Q, K, V) and back (O)."""
    return 3 * shape.output_bytes, shape.output_bytes


def blocks_held(launch: Launch, gpu: SmLimits) -> int:
    """How many of the launch's blocks one SM holds at once (threads, registers allocated per
    warp in 256s, shared memory, the block limit); at least one, as the launch ran."""
    warps = math.ceil(launch.threads / 32)
    regs_per_warp = math.ceil(max(launch.regs, 1) * 32 / 256) * 256
    limits = [gpu.blocks_sm, gpu.threads_sm // (warps * 32), gpu.regs_sm // (regs_per_warp * warps)]
    if launch.smem:
        limits.append(gpu.smem_sm // launch.smem)
    return max(1, min(limits))


def kernel_run(launch: Launch, gpu: SmLimits, judge: SmLimits = GTX1080, judge_regs: int | None = None) -> KernelRun:
    """judge_regs: the kernel's registers a thread built for the judge's GPU (sm_61's report),
    where known; else this build's stand in."""
    there = dataclasses.replace(launch, regs=judge_regs) if judge_regs else launch
    return KernelRun(launch.ms / 1e3, math.ceil(launch.blocks / gpu.sms), blocks_held(launch, gpu),
                     math.ceil(launch.blocks / judge.sms), blocks_held(there, judge))


def parts(shape: Shape, wall_s: float, launches: list[Launch], gpu: SmLimits, floor: Floor,
          judge: JudgeGpu = GTX1080_JUDGE, judge_registers: Mapping[str, int] | None = None) -> Parts:
    """judge_registers: each kernel's registers for the judge's GPU by short name (resources)."""
    to_device, back = case_bytes(shape)
    copies_here = to_device / (floor.h2d_gbps * 1e9) + back / (floor.d2h_gbps * 1e9)
    kernels_here = sum(l.ms for l in launches) / 1e3
    return Parts(host_here=max(0.0, wall_s - floor.startup_s - copies_here - kernels_here),
                 copies_judge=to_device / (judge.h2d_gbps * 1e9) + back / (judge.d2h_gbps * 1e9),
                 kernels=tuple(kernel_run(l, gpu, judge.limits, (judge_registers or {}).get(short_name(l.kernel)))
                               for l in launches if l.blocks))


# --- fitting ---------------------------------------------------------------------------------
# Each published figure is a sum of parts (one case, or all 30 of a program), so a point is a
# list of Parts and its estimate the sum of theirs. The fit minimises the squared log error,
# each program weighing as much as any other (one program's 30 cases are one program's word,
# not 30), over a grid of the parameters (linear in three of them; the grid is small).

STARTUPS = np.linspace(0.0, 0.6, 61)
RATIOS = np.exp(np.linspace(math.log(0.03), math.log(30.0), 61))  # steps of about 12%
OCCUPANCY_EXPONENTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def estimates(points: list[list[Parts]], startup, host, sm, occupancy_exponent: float) -> np.ndarray:
    """Estimates of every point (last axis) for arrays of parameters (broadcast)."""
    n = np.array([len(p) for p in points], dtype=float)
    h = np.array([sum(x.host_here for x in p) for p in points])
    c = np.array([sum(x.copies_judge for x in p) for p in points])
    k = np.array([sum(x.kernels_judge_here(occupancy_exponent) for x in p) for p in points])
    return startup[..., None] * n + host[..., None] * h + c + sm[..., None] * k


def program_weights(programs: list[str]) -> np.ndarray:
    counts = Counter(programs)
    return np.array([1.0 / counts[p] for p in programs])


def fit(points: list[list[Parts]], published: list[float], programs: list[str] | None = None) -> Params:
    """The grid's best parameters: every fourth grid value first, then every value near the best
    until the best stays where it is (the loss is a valley, not a field of holes)."""
    target = np.log(np.asarray(published))
    weights = program_weights(programs) if programs else np.ones(len(points))

    def best_on(a: float, si, hi, ki):
        s, h, k = np.meshgrid(STARTUPS[si], RATIOS[hi], RATIOS[ki], indexing="ij")
        loss = (weights * (np.log(np.maximum(estimates(points, s, h, k, a), 1e-6)) - target) ** 2).sum(axis=-1)
        i = np.unravel_index(np.argmin(loss), loss.shape)
        return loss[i], (si[i[0]], hi[i[1]], ki[i[2]])

    def near(i: int, size: int) -> np.ndarray:
        return np.arange(max(0, i - 4), min(size, i + 5))

    best = None
    for a in OCCUPANCY_EXPONENTS:
        _, (s0, h0, k0) = best_on(a, np.arange(0, len(STARTUPS), 4), np.arange(0, len(RATIOS), 4),
                                  np.arange(0, len(RATIOS), 4))
        while True:
            loss, (s1, h1, k1) = best_on(a, near(s0, len(STARTUPS)), near(h0, len(RATIOS)), near(k0, len(RATIOS)))
            if (s1, h1, k1) == (s0, h0, k0):
                break
            s0, h0, k0 = s1, h1, k1
        if best is None or loss < best[0]:
            best = (loss, Params(float(STARTUPS[s1]), float(RATIOS[h1]), float(RATIOS[k1]), a))
    return best[1]


def log_errors(points: list[list[Parts]], published: list[float], p: Params) -> np.ndarray:
    est = estimates(points, np.array(p.startup_s), np.array(p.host_ratio), np.array(p.sm_ratio),
                    p.occupancy_exponent)
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
    by_program: dict[str, float]  # each left-out program's median |log error|


def leave_one_program_out(programs: list[str], points: list[list[Parts]], published: list[float]) -> Check:
    errors, inside, widths, by_program = [], [], [], {}
    for left in sorted(set(programs)):
        keep = [i for i, p in enumerate(programs) if p != left]
        out = [i for i, p in enumerate(programs) if p == left]
        params = fit([points[i] for i in keep], [published[i] for i in keep], [programs[i] for i in keep])
        q = half_width(log_errors([points[i] for i in keep], [published[i] for i in keep], params))
        e = log_errors([points[i] for i in out], [published[i] for i in out], params)
        errors.extend(np.abs(e)), inside.extend(np.abs(e) <= q), widths.append(q)
        by_program[left] = float(np.median(np.abs(e)))
    a = np.array(errors)
    return Check(len(a), float(np.median(a)), float(np.quantile(a, 0.9)), float(np.mean(inside)), max(widths),
                 by_program)


def shape_only(shape: Shape) -> Parts:
    """The baseline's features of a case: its shape alone (gigabytes moved, teraflops of work), in
    the places of host work and kernels so that the same fit applies: start-up + a GB + b TFLOP
    (the teraflops as one kernel whose blocks sit alike on either GPU)."""
    to_device, back = case_bytes(shape)
    work = KernelRun(shape.flops / 1e12, 1, 1, 1, 1)
    return Parts(host_here=(to_device + back) / 1e9, copies_judge=0.0, kernels=(work,))

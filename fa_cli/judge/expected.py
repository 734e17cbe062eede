"""Expected outputs: the float64 reference of an input, computed once, cached, compared at memory speed.

The course's judge compares every output value with the correct one, so fa's default verdict
does too. Computing float64 attention for a large input is the expensive part (all of the
course's suite c is about 4.4 TFLOP), so it is done once per input and kept as an ordinary
output file, the float64 result rounded once to float32:

  where     the shipped cases' own .out files (t01..t10); every other input's in
            cache_dir()/expected/SHA256.out, SHA256 being the input's (a suite case's from the
            manifest, any other file's hashed), so a copied or renamed input finds its file
            and an edited one gets a new one.
  margin    rounding to float32 moves a value by at most 2^-24 of itself, 1.8e-7 for outputs
            within the inputs' [-3, 3]: a verdict against the file differs from one against
            float64 only for an error within 1.8e-7 of the tolerance.
  how       float64 on the GPU with PyTorch where it is installed and sees a GPU (each case's
            result checked against numpy on sampled rows), else numpy on every core here.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from .. import locations, settings
from ..cases import suite
from ..cases.format import AttentionInput, Shape, as_f32_bytes, open_output
from ..cases.suite import Target
from ..errors import ExitStatus, FaError
from ..files import atomic_file, gigabytes
from . import reference

FLOAT32_MARGIN = 2.0**-24 * 3.0  # the most rounding to float32 moves an output in [-3, 3]
# Rows of each case a GPU result is checked on against numpy, per checked batch (first and last).
CROSS_CHECK_ROWS = 8
CROSS_CHECK_TOL = 1e-6  # float32 rounding of both sides, nothing more
# Work (4*B*N*N*d) above which fa says how long it expects the computation to take.
ANNOUNCE_FLOPS = 50e9

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Need:
    """One input whose expected output is missing: where it goes and what it costs."""

    input_path: Path
    shape: Shape
    path: Path


def cache_folder() -> Path:
    return locations.cache_dir() / "expected"


_HASHES: dict[tuple, str] = {}


def sha256_of(path: Path) -> str:
    """The input's sha256, remembered for this process by (device, inode, size, mtime)."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        _HASHES[key] = suite.sha256_of(path)
    return _HASHES[key]


def path_for(input_path: Path, sha256: str | None = None, shipped: Path | None = None) -> Path:
    """Where the expected output of this input is (or will be)."""
    if shipped is not None:
        return shipped
    return cache_folder() / f"{sha256 or sha256_of(input_path)}.out"


def path_of(target: Target) -> Path:
    """Where a target's expected output is: the shipped one, or the cache's by its input's sha256."""
    return path_for(target.input_path, target.sha256, target.expected_path)


def missing(targets: list[Target]) -> list[Need]:
    """The targets whose expected output is still to be computed, each input once."""
    needs = {}
    for t in targets:
        path = path_of(t)
        if not is_ready(path, t.shape):
            needs.setdefault(path, Need(t.input_path, t.shape, path))
    return list(needs.values())


def output_of(target: Target, in_memory: bool = False) -> np.ndarray:
    """A target's expected output as a (B, N, d) memmap (or a copy read now), computed here if no
    command did it before."""
    for need in missing([target]):
        write(need, backend())
    return open_output(path_of(target), target.shape, "expected output", in_memory)


def is_ready(path: Path, shape: Shape) -> bool:
    try:
        return path.stat().st_size == shape.output_bytes
    except OSError:
        return False


# ---------------------------------------------------------------- how it is computed
class NumpyBackend:
    """float64 attention with numpy, groups of batches (or of rows) on every core at once."""

    name = "numpy"
    SLICE_FLOPS = 4e9  # work per call: a progress update every fraction of a second on a few cores

    def __init__(self) -> None:
        self.workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        self.where = f"numpy, {self.workers} cores"

    def attention(self, inp: AttentionInput, b0: int, b1: int, r0: int = 0, r1: int | None = None) -> np.ndarray:
        """Batches b0..b1-1, query rows r0..r1-1 of each."""
        q, k, v = inp.qkv(b0, b1)
        q = q[:, r0:r1]
        if self.workers == 1:
            return reference.attention(q, k, v)
        # One BLAS thread per worker: a threaded BLAS under threaded workers is slower than either
        # (measured on 2 cores: 22 GFLOP/s against 8 to 19).
        with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(self.workers) as pool:
            G, R = q.shape[0], q.shape[1]
            if G >= self.workers:  # split the batches
                cuts = np.linspace(0, G, self.workers + 1).astype(int)
                parts = [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
                return np.concatenate(list(pool.map(lambda p: reference.attention(q[p[0]:p[1]], k[p[0]:p[1]],
                                                                                   v[p[0]:p[1]]), parts)))
            # few batches, long rows: split the query rows
            cuts = np.linspace(0, R, self.workers + 1).astype(int)
            rows = [np.broadcast_to(np.arange(a, b), (G, b - a)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
            return np.concatenate(list(pool.map(lambda r: reference.attention(q, k, v, r), rows)), axis=1)


class TorchBackend:
    """float64 attention on an NVIDIA or AMD GPU through PyTorch, in tiles of query rows."""

    name = "torch"
    SCORE_BYTES = 1 << 30  # float64 scores held on the GPU at once
    SLICE_FLOPS = 200e9  # work per call (each call copies the batches' K and V to the GPU)

    def __init__(self, torch) -> None:
        self.torch = torch
        self.device = torch.device("cuda")
        self.where = f"PyTorch float64 on {torch.cuda.get_device_name(0)}"

    def attention(self, inp: AttentionInput, b0: int, b1: int, r0: int = 0, r1: int | None = None) -> np.ndarray:
        """Batches b0..b1-1, query rows r0..r1-1 of each."""
        torch = self.torch
        q, k, v = inp.qkv(b0, b1)
        q, k, v = (torch.from_numpy(np.array(x)).to(self.device).double() for x in (q[:, r0:r1], k, v))  # copies
        G, N, d = q.shape
        out = torch.empty((G, N, d), dtype=torch.float64, device=self.device)
        tile = max(1, self.SCORE_BYTES // (8 * G * N))
        kt = k.transpose(1, 2)
        for r0 in range(0, N, tile):
            s = torch.matmul(q[:, r0 : r0 + tile], kt) * (1.0 / np.sqrt(d))
            s -= s.amax(dim=2, keepdim=True)
            s.exp_()
            out[:, r0 : r0 + tile] = torch.matmul(s, v) / s.sum(dim=2, keepdim=True)
        return out.float().cpu().numpy().astype(np.float64)


def backend():
    """The fastest way at hand: PyTorch on a GPU it sees, else numpy here."""
    if not settings.numpy_reference():
        try:
            import torch  # optional: pip install torch

            if torch.cuda.is_available():
                return TorchBackend(torch)
        except Exception:  # not installed, or no usable GPU: numpy does it
            pass
    return NumpyBackend()


def cross_check(inp: AttentionInput, values: np.ndarray, b0: int, b1: int, where: str) -> None:
    """A GPU's result against numpy on the first and last rows of the group's first and last batch."""
    N = inp.shape.N
    rows = np.unique(np.r_[np.arange(min(N, CROSS_CHECK_ROWS // 2)), np.arange(max(0, N - CROSS_CHECK_ROWS // 2), N)])
    for b in {b0, b1 - 1}:
        q, k, v = inp.qkv(b)
        ref = reference.attention(q, k, v, rows[None, :])[0]
        err = float(np.max(np.abs(values[b - b0][rows] - ref)))
        if not err <= CROSS_CHECK_TOL:
            raise FaError(f"{inp.path}: the expected output computed with {where} differs from numpy's by {err:.3g} "
                          f"at batch {b}: not used (FA_REFERENCE=numpy computes it here)", exit_code=ExitStatus.FAILED)


def write(need: Need, compute, progress: Progress | None = None) -> None:
    """Compute one input's expected output and put it in place atomically. Progress is counted in
    query rows (B*N in all), computed in slices of about compute.SLICE_FLOPS each."""
    inp = AttentionInput(need.input_path)
    s = inp.shape
    group = max(1, (64 << 20) // (12 * s.N * s.d))
    need.path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(need.path, inputs=(inp.path,), size=s.output_bytes) as f:
        for b0 in range(0, s.B, group):
            b1 = min(s.B, b0 + group)
            slices = max(1, int(np.ceil(4 * (b1 - b0) * s.N * s.N * s.d / compute.SLICE_FLOPS)))
            step = -(-s.N // slices)
            parts = []
            for r0 in range(0, s.N, step):
                r1 = min(s.N, r0 + step)
                parts.append(compute.attention(inp, b0, b1, r0, r1))
                if progress:
                    progress((b1 - b0) * (r1 - r0))
            values = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
            if compute.name != "numpy":
                cross_check(inp, values, b0, b1, compute.where)
            f.write(as_f32_bytes(values))


# Two probes of the computation: many short rows (moving data) and few long ones (arithmetic).
PROBES = (Shape(256, 128, 64), Shape(2, 4096, 64))


class RandomInput:
    """An AttentionInput's qkv over random values, for timing."""

    def __init__(self, shape: Shape):
        self.shape = shape
        self.values = np.random.default_rng(0).uniform(-3, 3, size=(shape.B, 3, shape.N, shape.d)).astype(np.float32)

    def qkv(self, b0: int, b1: int | None = None):
        block = self.values[b0 : b0 + 1 if b1 is None else b1]
        return block[:, 0], block[:, 1], block[:, 2]


def seconds_each(compute, needs: list[Need]) -> list[float]:
    """Time for each input's work: seconds = a * flops + b * bytes, a and b from two timed probes."""
    if not needs:
        return []
    rows = []
    compute.attention(RandomInput(PROBES[0]), 0, 1)  # warm-up (a GPU's first call starts its context)
    for shape in PROBES:
        probe = RandomInput(shape)
        start = time.perf_counter()
        compute.attention(probe, 0, shape.B)
        rows.append((shape.flops, shape.input_bytes + shape.output_bytes, time.perf_counter() - start))
    (f0, m0, t0), (f1, m1, t1) = rows
    det = f0 * m1 - f1 * m0
    a = max((t0 * m1 - t1 * m0) / det, 0.0)
    b = max((f0 * t1 - f1 * t0) / det, 0.0)
    if a == 0.0 and b == 0.0:
        a = t1 / f1
    return [a * n.shape.flops + b * (n.shape.input_bytes + n.shape.output_bytes) for n in needs]


def estimate_seconds(compute, needs: list[Need]) -> float:
    return sum(seconds_each(compute, needs))


def describe_work(needs: list[Need]) -> str:
    flops = sum(n.shape.flops for n in needs)
    size = sum(n.shape.output_bytes for n in needs)
    cases = f"{len(needs)} input" + ("s" if len(needs) != 1 else "")
    return f"{cases}: {flops / 1e12:.3g} TFLOP of float64, {gigabytes(size)} into {cache_folder()}"


def announce_cost(needs: list[Need], announce: Callable[[str], None], seconds: float | None = None) -> None:
    """Where the work is long (over ANNOUNCE_FLOPS), say what it will compute, where, and about how
    long (seconds: timed already)."""
    if needs and sum(n.shape.flops for n in needs) > ANNOUNCE_FLOPS:
        compute = backend()
        seconds = estimate_seconds(compute, needs) if seconds is None else seconds
        announce(f"computing expected outputs once for {describe_work(needs)}, with {compute.where}: "
                 f"about {seconds:.0f} s")


def ensure(needs: list[Need], announce: Callable[[str], None] | None, bar) -> None:
    """Compute every missing expected output, saying first what it costs where that is long (unless
    announce is None: said already). bar(description, total) is a context manager yielding a
    progress callback."""
    if not needs:
        return
    if announce is not None:
        announce_cost(needs, announce)
    compute = backend()
    for need in needs:
        with bar(f"expected output of {need.input_path.name}", need.shape.B * need.shape.N) as advance:
            write(need, compute, advance)

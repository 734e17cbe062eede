"""The floor of a CUDA process on this machine, and what a copy costs here per byte.

src_cuda/context_only.cu, built once per nvcc into fa's cache, creates the CUDA context and
exits; with --copies it also times a 64 MB copy from pageable memory each way. The median of a
few runs is the part of a student's wall time that is not its own work (start-up and exit), and
the copy rates turn the bytes its case moves into seconds: both are taken out of a run's wall
time before the rest is carried to the judge's GPU (judge_time.py).
"""
from __future__ import annotations

import functools
import hashlib
import re
import statistics
import subprocess
import time
from dataclasses import dataclass

from .. import locations
from ..errors import FaError
from ..settings import compiler_command

RUNS = 5
RATES = re.compile(r"context-only: h2d=([\d.]+) d2h=([\d.]+)")


@dataclass(frozen=True)
class Floor:
    startup_s: float  # a process that creates the context and exits: median wall time
    h2d_gbps: float   # pageable host memory to the device
    d2h_gbps: float


def source():
    root = locations.checkout() or locations.package_data("sources")
    return root / "src_cuda" / "context_only.cu"


def build() -> str:
    """The floor program for this nvcc, built once into the cache."""
    nvcc = compiler_command("nvcc")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256(source().read_bytes() + version.encode()).hexdigest()[:16]
    exe = locations.cache_dir() / "floor" / f"context_only-{digest}"
    if not exe.exists():
        exe.parent.mkdir(parents=True, exist_ok=True)
        partial = exe.with_name(exe.name + ".partial")
        proc = subprocess.run([nvcc, "-O3", "-arch=native", "-o", str(partial), str(source())],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            lines = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
            raise FaError(f"the start-up floor program does not build: {lines[-1] if lines else proc.returncode}")
        partial.rename(exe)
    return str(exe)


@functools.lru_cache(maxsize=1)
def measure() -> Floor:
    """Median start-up of RUNS processes (the first one also times the copies)."""
    exe = build()
    walls, rates = [], None
    for i in range(RUNS + 1):
        start = time.perf_counter()
        proc = subprocess.run([exe, *(["--copies"] if i == 0 else [])], capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise FaError(f"the start-up floor program failed: {proc.stderr.strip() or proc.returncode}")
        if i == 0:
            found = RATES.search(proc.stderr)
            rates = (float(found[1]), float(found[2])) if found else None
        else:
            walls.append(wall)
    if rates is None:
        raise FaError("the start-up floor program did not print its copy rates")
    return Floor(statistics.median(walls), *rates)

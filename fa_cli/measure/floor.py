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
import os
import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import locations
from ..errors import FaError
from ..programs import programs
from ..programs.programs import Program
from ..settings import compiler_command

RUNS = 5
RATES = re.compile(r"context-only: h2d=([\d.]+) d2h=([\d.]+)")


@dataclass(frozen=True)
class Floor:
    startup_s: float  # a process that creates the context and exits: median wall time
    h2d_gbps: float   # pageable host memory to the device
    d2h_gbps: float
    cpu_system_s: float = 0.0  # the start-up's CPU time in the kernel (rusage), median


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
    """The copy rates of one process, then the median start-up of RUNS more, each started and
    timed as fa runs a student's program (programs.run): what fa's own way of starting a
    process costs is then part of the floor, and comes out of a run's time with it."""
    exe = build()
    copies = subprocess.run([exe, "--copies"], capture_output=True, text=True)
    if copies.returncode != 0:
        raise FaError(f"the start-up floor program failed: {copies.stderr.strip() or copies.returncode}")
    found = RATES.search(copies.stderr)
    if found is None:
        raise FaError("the start-up floor program did not print its copy rates")
    program = Program("context-only", Path(exe))
    runs = [programs.run(program, Path(os.devnull), Path(os.devnull)) for _ in range(RUNS)]
    if failed := next((r for r in runs if r.returncode != 0), None):
        raise FaError(f"the start-up floor program failed: {failed.error}")
    return Floor(statistics.median(r.wall_s for r in runs), float(found[1]), float(found[2]),
                 cpu_system_s=statistics.median(r.cpu_system_s or 0.0 for r in runs))

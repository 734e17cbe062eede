"""The floor of a CUDA process on this machine, and what a copy costs here per byte.

src_cuda/context_only.cu, built once per nvcc into fa's cache, creates the CUDA context and
exits; with --copies it also times a 64 MB copy from pageable memory each way. The median of a
few runs is the part of a student's wall time that is not its own work (start-up and exit), and
the copy rates turn the bytes its case moves into seconds: both are taken out of a run's wall
time before the rest is carried to the judge's GPU (judge_time.py).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .. import locations, settings
from ..errors import FaError
from ..files import atomic_file
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
    root = locations.sources()
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


# Measuring takes six CUDA processes (3.0 s on the H200): a floor measured here is kept
# in the cache for KEEP_S, for the same build of the floor program, the same boot of the machine
# and the same visible GPUs, so that a student's re-run of a suite does not pay it again.
KEEP_S = 3600.0


def _this_machine() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = "unknown boot"
    return f"{boot} {settings.visible_gpus()}"


@functools.lru_cache(maxsize=1)
def measure() -> Floor:
    """The floor here: kept from a measurement of the last KEEP_S seconds on this boot (above),
    else measured now (measure_now) and kept."""
    exe = build()
    kept = Path(exe + ".measured.json")
    try:
        found = json.loads(kept.read_text())
        if found["machine"] == _this_machine() and 0 <= time.time() - found["at"] < KEEP_S:
            return Floor(**found["floor"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    measured = measure_now(exe)
    try:
        with atomic_file(kept) as f:
            f.write(json.dumps({"machine": _this_machine(), "at": time.time(),
                                "floor": dataclasses.asdict(measured)}).encode())
    except (OSError, FaError):
        pass  # a cache that cannot be written: measured again next time
    return measured


def measure_now(exe: str) -> Floor:
    """The copy rates of one process, then the median start-up of RUNS more, each started and
    timed as fa runs a student's program (programs.run): what fa's own way of starting a
    process costs is then part of the floor, and comes out of a run's time with it."""
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

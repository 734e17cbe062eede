"""The machine a measurement ran on, as the course's report asks for it (section 3a): CPU model,
cores, memory, disk, GPUs, driver, and the CUDA or ROCm version.

Read at run time by the commands that write results (run, bench, profile, ladder, sweep) and
stored in each record, so that `fa report` can describe every machine its results came from.
Where programs run on a cluster node (`--launcher slurm`), fa asks the node itself: `fa
system --json` started through the launcher. Every field is best effort: what cannot be read
is left out, never guessed.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from .. import settings
from .devices import list_devices


def _run(argv: list[str]) -> str:
    """A tool's standard output, or '' where it is missing or fails."""
    if not shutil.which(argv[0]):
        return ""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        kib = int(re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text()).group(1))
        return round(kib / 2**20, 1)
    except (OSError, AttributeError):
        return None


def disk(path: Path) -> dict:
    """Size and free space of the file system holding `path` (where inputs and outputs live)."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return {}
    return {"path": str(path), "total_gib": round(usage.total / 2**30, 1), "free_gib": round(usage.free / 2**30, 1)}


def nvidia_software() -> dict:
    """Driver and the CUDA version it supports (nvidia-smi), and the compiler's (nvcc)."""
    found = {}
    smi = _run(["nvidia-smi"])  # its banner: "Driver Version: 580.159.04   CUDA Version: 13.0"
    if m := re.search(r"Driver Version:\s*([\d.]+)", smi):
        found["driver"] = m.group(1)
    if m := re.search(r"CUDA Version:\s*([\d.]+)", smi):
        found["cuda_driver"] = m.group(1)
    if m := re.search(r"release ([\d.]+)", _run(["nvcc", "--version"])):
        found["nvcc"] = m.group(1)
    return found


def rocm_software() -> dict:
    """ROCm's version (its install's version file, else hipcc's report)."""
    try:
        return {"rocm": (Path(settings.rocm_path()) / ".info" / "version").read_text().strip()}
    except OSError:
        pass
    if m := re.search(r"HIP version:\s*(\S+)", _run(["hipcc", "--version"])):
        return {"hip": m.group(1)}
    return {}


@lru_cache(maxsize=1)
def describe() -> dict:
    """This machine, as one JSON-ready dictionary."""
    gpus = [{"vendor": d.vendor, "name": d.name, "arch": d.arch, "compute_units": d.compute_units,
             "memory_gib": round(d.memory_bytes / 2**30, 1)} for d in list_devices()]
    vendors = {g["vendor"] for g in gpus}
    software = {**(nvidia_software() if "nvidia" in vendors or shutil.which("nvcc") else {}),
                **(rocm_software() if "amd" in vendors or shutil.which("hipcc") else {})}
    return {
        "host": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        "disk": disk(Path.cwd()),
        "gpus": gpus,
        "software": software,
        "python": platform.python_version(),
    }


_remote: dict[tuple, dict] = {}


def describe_where(launcher) -> dict:
    """The machine programs run on: this one, or a node reached through `launcher` (asked once)."""
    if launcher is None or not launcher.remote:
        return describe()
    key = tuple(launcher.wrap([]))
    if key not in _remote:
        proc = subprocess.run(launcher.wrap([sys.executable, "-m", "fa_cli", "system", "--json"]),
                              capture_output=True, text=True)
        try:
            _remote[key] = json.loads(proc.stdout)
        except ValueError:
            _remote[key] = {**describe(), "note": "the node did not answer `fa system`: this is where fa ran"}
    return _remote[key]


def summary(spec: dict) -> str:
    """One line: host, CPU, memory, GPUs."""
    gpus = ", ".join(f"{g['name']} ({g['arch']})" for g in spec.get("gpus", [])) or "no GPU"
    return f"{spec.get('host', '?')}: {spec.get('cpu', '?')}, {spec.get('cores', '?')} cores, " \
           f"{spec.get('memory_gib', '?')} GiB; {gpus}"

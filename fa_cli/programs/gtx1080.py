"""A student's hw4.cu run on another NVIDIA GPU under the GTX 1080's rules (the course's judge,
sm_61): when they apply, the build flags that bring them (src_cuda/gtx1080/fa_gtx1080.h, with the
shared CUDA runtime), and the lines they print. On by default for a student's .cu where an NVIDIA
GPU is; FA_GTX1080_RULES=0 (fa run --no-gtx1080-rules) turns them off. Times measured under them
are the GPU's at hand, never a GTX 1080's.
"""
from __future__ import annotations

from pathlib import Path

from .. import locations, settings
from . import wave64
from .devices import list_devices

PREFIX = "fa-gtx1080: "
LABEL = ("under the GTX 1080's rules (the judge's GPU): its launch limits (1024 threads, 48 KB of shared memory "
         "a block, 64K registers an SM) and its device properties; times are this GPU's, not a GTX 1080's")


def header() -> Path:
    root = locations.sources()
    return root / "src_cuda" / "gtx1080" / "fa_gtx1080.h"


def applies(source: Path) -> bool:
    """A student's .cu, built here to run on an NVIDIA GPU, with the rules not turned off."""
    return source.suffix == ".cu" and settings.gtx1080_rules() and any(d.vendor == "nvidia" for d in list_devices())


def build_flags(nvcc: str) -> list[str]:
    """nvcc's flags that put the rules in: the header first, the shared runtime whose launch entry
    it takes over, and that runtime's folder for the program to find it."""
    return ["-cudart", "shared", "-include", str(header()),
            *[f"-Xlinker=-rpath,{folder}" for folder in wave64.runtime_dirs(nvcc)]]


def fault(stderr: str) -> str | None:
    """The rules' line for a refused launch or attribute, without its prefix."""
    found = [line for line in stderr.splitlines() if line.startswith(PREFIX)]
    return found[0][len(PREFIX):] if found else None


def run_notes(program, results) -> list[str]:
    """fa run's lines under its table for a hw4.cu under the rules: what they are, and each
    refusal seen (a refused launch need not end the program: its output is then wrong)."""
    source = getattr(program, "source", None)
    if source is None or not applies(source):
        return []
    lines, seen = [f"{source.name} ran {LABEL} (fa run --no-gtx1080-rules: without them)"], set()
    for r in results:
        line = fault(getattr(getattr(r, "run", None), "stderr", "") or "")
        if line and line not in seen:
            seen.add(line)
            lines.append(f"{r.target.name}: {line}")
    return lines

"""fa run's notes from the GTX 1080's own compiler report (sm_61) of a student's hw4.cu: said only
where something there exceeds what the GTX 1080 gives, or does not build for it at all.

The report is `fa resources --arch sm_61`'s (resources.report; pascal.py where nvcc has no
sm_61), made once per build and kept beside the built program. Its limits are sm_61's
(resources.TARGETS): 48 KB of shared memory a block, 65536 registers an SM; spills (registers
that do not fit a thread's 255) are said too: they cost local-memory traffic on the judge. The
registers of each kernel are kept with the notes: the estimate of the judge's time counts the
blocks a GTX 1080 SM holds with them (judge_column.py).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .. import locations
from ..errors import FaError
from . import pascal, resources

TARGET = "sm_61"
KEPT = "sm61-notes.json"  # beside the built program: the notes of that build
NO_PTXAS = "no GTX 1080 (sm_61) compiler report: CUDA 12's ptxas is not installed"


def report_for(source: Path) -> tuple[list[str], dict[str, int]]:
    """What the sm_61 report says that the GTX 1080 would not take, one line each (none: nothing),
    and each kernel's registers a thread by its short name (none where there is no report)."""
    source = Path(source).resolve()  # the compiler runs elsewhere
    if pascal.needs_old_ptxas(TARGET) and pascal.ptxas() is None:
        return [f"{source.name}: {NO_PTXAS}; {pascal.INSTALL} (said once)"], {}
    try:
        kernels, _, _ = resources.report(source, TARGET, hip_source=False, ours=False)
    except FaError as e:
        return ([f"{e}"] if "GTX 1080" in str(e) else [f"{source.name}: no GTX 1080 (sm_61) compiler report: {e}"]), {}
    limits = resources.TARGETS[TARGET]
    lines = []
    for u in kernels:
        if u.static_smem > limits.smem_per_block:
            lines.append(f"{u.kernel}: {u.static_smem} bytes of static shared memory a block for sm_61, over the "
                         f"GTX 1080's {limits.smem_per_block}: it does not launch on the judge")
        if u.threads and u.blocks == 0 and "registers" in u.limited_by:
            lines.append(f"{u.kernel}: {u.registers} registers a thread x {u.threads} threads for sm_61 do not fit "
                         f"a GTX 1080 SM: it does not launch on the judge")
        if u.spill_bytes:
            lines.append(f"{u.kernel}: spills {u.spill_bytes} bytes a thread to local memory for sm_61 "
                         f"({u.registers} registers): slower on the judge")
    return ([f"GTX 1080 (sm_61 report, fa resources --arch sm_61): {line}" for line in lines],
            {u.kernel: u.registers for u in kernels})


def kept_report(program) -> dict | None:
    """The report's notes and registers for a built hw4.cu: made once per build (kept beside
    it), None for a program without a .cu source."""
    source = getattr(program, "source", None)
    if source is None or source.suffix != ".cu":
        return None
    kept = Path(program.path).parent / KEPT
    if kept.is_file():
        found = json.loads(kept.read_text())
        if isinstance(found, dict):
            return found
    lines, registers = report_for(source)
    found = {"notes": lines, "registers": registers}
    if kept.parent.is_dir() and not no_ptxas(lines):  # kept once the report is made: two runs may race here
        partial = kept.with_name(f"{KEPT}.{os.getpid()}")
        partial.write_text(json.dumps(found))
        os.replace(partial, kept)
    return found


def no_ptxas(lines: list[str]) -> bool:
    """The report could not be made for want of CUDA 12's ptxas (installed later, it is made then)."""
    return any(NO_PTXAS in line for line in lines)


def run_notes(program) -> list[str]:
    """The notes for fa run's program (none for a program without a .cu source); the line that
    CUDA 12's ptxas is missing is said once per installation (fa's cache), not on every run."""
    found = kept_report(program)
    notes = found["notes"] if found else []
    return [line for line in notes if not (NO_PTXAS in line and said_before(NO_PTXAS))]


def said_before(key: str) -> bool:
    """Whether this installation (fa's cache) said the line of `key` already; from now on it has."""
    if not locations.cache_dir().is_dir():  # no cache made yet: said, and not recorded
        return False
    mark = locations.cache_dir() / "said" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if mark.exists():
        return True
    try:
        mark.parent.mkdir(exist_ok=True)
        mark.write_text(key + "\n")
    except OSError:
        pass
    return False


def registers(program) -> dict[str, int]:
    """Each kernel's sm_61 registers a thread by short name, where the report could be made."""
    found = kept_report(program)
    return found["registers"] if found else {}

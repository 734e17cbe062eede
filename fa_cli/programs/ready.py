"""What can run on this machine, said before any work is done.

A CUDA program needs an NVIDIA GPU that the CUDA driver sees, a HIP program an AMD GPU that
the ROCm driver sees (devices.nvidia_problem, devices.amd_problem: asked of the drivers, never
guessed from tools on PATH); a program's kind comes from its source's suffix or its binary's
sections (cause.gpu_kind). Without its GPU a command stops with one line, before any input is
generated or any expected output computed: what is missing and what to do (run on a GPU node
of the cluster, or try the judge here with --program cpu). A profiler is checked the same way,
and a run that generates suite inputs says first how much disk they take, and where.
"""
from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from .. import locations
from ..cases import suite
from ..errors import FaError
from ..judge import expected
from ..judge.tool_logs import gpu_kind
from . import wave64
from .devices import amd_problem, list_devices, nvidia_problem
from .programs import TORCH, Program

# What a program of each kind needs, the partition of the course's cluster that has it.
NEEDS = {"cuda": ("an NVIDIA GPU", "nvidia", nvidia_problem), "hip": ("an AMD GPU", "amd", amd_problem)}
KIND_NAMES = {"cuda": "a CUDA program", "hip": "a HIP program"}
# Generated files at least this large in all are announced before they are written.
ANNOUNCE_BYTES = 256 << 20


def kind_of(program: Program) -> str:
    """"cuda", "hip", "cpu" or "torch": what the program needs to run, known before it is built
    (a student's source by its suffix, our programs by name, a binary by its sections)."""
    if program is TORCH:
        return "torch"
    if program.source is not None:
        if wave64.emulates(program.source):  # the MI210 emulated on the NVIDIA GPU
            return "cuda"
        return {".cu": "cuda", ".hip": "hip"}.get(program.source.suffix, "cpu")
    return gpu_kind(program)


def this_command() -> str:
    """The fa command being run, as typed (for a line that says how to run it elsewhere)."""
    return " ".join(["fa", *map(shlex.quote, sys.argv[1:])])


def gpu_problem(program: Program, shown: str | None = None, try_cpu: bool = True) -> str | None:
    """One line where PROGRAM cannot run here for want of its GPU, else None."""
    kind = kind_of(program)
    if kind not in NEEDS:
        return None
    what, partition, problem = NEEDS[kind]
    why = problem()
    if why is None:
        return None
    name = shown or program.name
    line = (f"{name} is {KIND_NAMES[kind]}, and this machine has no {what.split()[-2]} GPU to run it ({why}): "
            f"run fa on a GPU node (srun -p {partition} --gres=gpu:1 {this_command()}, or add --launcher slurm "
            f"--partition {partition})")
    return line + (", or try fa here with our CPU program, --program cpu" if try_cpu else "")


def check_runs_here(program: Program, launcher=None, shown: str | None = None, try_cpu: bool = True) -> None:
    """Stop with one line where PROGRAM needs a GPU this machine lacks (nothing to check where a
    launcher runs it on another machine)."""
    if launcher is not None:
        return
    line = gpu_problem(program, shown, try_cpu)
    if line:
        raise FaError(line)


def pascal_here() -> bool:
    """An NVIDIA GPU of compute capability 6.x (the course's GTX 1080): what nvprof is for."""
    return any(d.vendor == "nvidia" and d.arch.startswith("sm_6") for d in list_devices())


def check_profiler(tool: str, launcher=None, program: Program | None = None, shown: str | None = None) -> None:
    """Stop with one line where the profiler is not installed (before any input is generated); for
    a program that runs on the CPU, the line says that this is what stands in the way."""
    if launcher is not None or shutil.which(tool):
        return
    if program is not None and kind_of(program) in ("cpu", "torch"):
        raise FaError(f"{shown or program.name} runs on the CPU: fa profile measures a GPU program's kernels "
                      f"with {tool} (give a CUDA or HIP program, such as ./hw4 built from hw4.cu)")
    hint = "; a Pascal GPU such as this one's is profiled with --profiler nvprof" \
        if tool == "ncu" and pascal_here() else ""
    where = "it comes with ROCm" if tool.startswith("rocprof") else \
        "it comes with the CUDA toolkit; on the cluster, profile on a GPU node"
    raise FaError(f"{tool} is not installed here ({where}{hint})")


def here() -> list[str]:
    """What can run on this machine, a line each: the GPUs the drivers see, the compilers and the
    profilers (fa devices)."""
    lines = []
    for vendor, (what, _, problem) in NEEDS.items():
        why = problem()
        lines.append(f"{vendor.upper()} programs: " + (f"no, {why}" if why else f"yes, {what} is here"))
    tools = [("nvcc", "builds CUDA programs"), ("hipcc", "builds HIP programs"), ("ncu", "profiles sm_70 and later"),
             ("nvprof", "profiles Pascal"), ("rocprof", "profiles AMD GPUs")]
    lines += [f"{tool}: {shutil.which(tool) or 'not installed'} ({does})" for tool, does in tools]
    lines.append("the cpu program: yes, everywhere (fa run --program cpu)")
    return lines


# ---------------------------------------------------------------- disk
def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def plural_files(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def to_generate(names: list[str], with_expected: bool) -> tuple[int, int, int]:
    """(inputs, expected outputs, bytes) that judging these suite cases will write into the cache."""
    inputs = outputs = size = 0
    for name in names:
        if not suite.is_case_name(name) or Path(name).exists():
            continue
        c = suite.case(name)
        if not suite.has_input(c):
            inputs += 1
            size += c.shape.input_bytes
        if with_expected and not c.shipped and not expected.is_ready(expected.path_for(c.input_path, c.sha256),
                                                                     c.shape):
            outputs += 1
            size += c.shape.output_bytes
    return inputs, outputs, size


def free_bytes(folder: Path) -> int:
    """Free bytes where folder is (or would be: its nearest existing parent)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def announce_disk(names: list[str], with_expected: bool, say) -> None:
    """Before suite inputs are generated: how much, and where; refused where it does not fit."""
    inputs, outputs, size = to_generate(names, with_expected)
    if not size:
        return
    where = locations.cache_dir()
    free = free_bytes(where)
    if size > free:
        raise FaError(f"the cases named need {human_bytes(size)} of generated files in {where}, and only "
                      f"{human_bytes(free)} is free there: set FA_CACHE to a folder with room, or name fewer cases")
    if size >= ANNOUNCE_BYTES:
        files = " and ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in
                             ((inputs, "input"), (outputs, "expected output")) if n)
        say(f"generating {files}, {human_bytes(size)} in all, into {where} ({human_bytes(free)} free there; "
            "kept for later runs; FA_CACHE moves it)")

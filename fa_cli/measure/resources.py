"""fa resources: what each kernel asks of a GPU, and the occupancy that allows, for every target,
with no GPU: the figures come from the compilers' own reports.

  NVIDIA  nvcc -Xptxas -v per target: registers, spill stores, static shared memory, stack;
          the PTX of the same compile (--keep): threads per block (.maxntid, the kernel's
          __launch_bounds__). Theoretical occupancy: blocks per SM limited by registers,
          shared memory, warps and the block limit, as CUDA's own calculator computes it
          (cuda_occupancy.h: registers allocated per warp in units of 256 and spread over 4
          sub-partitions; shared memory in units of 128 bytes, 256 before sm_80, plus the 1 KB
          the driver reserves per block from sm_80 on).
  AMD     hipcc -Rpass-analysis=kernel-resource-usage per target: SGPRs, VGPRs, AGPRs, scratch,
          LDS (and the occupancy the remark itself states, kept beside ours); the assembly
          (-save-temps) for threads per block (.max_flat_workgroup_size). Occupancy in waves
          per SIMD from the target's table below with LLVM's rules (VGPRs in granules, SGPRs,
          workgroups per CU, LDS). ROCm 5.2's remark can state more waves than the LDS allows
          (attention_tiled<32, 64>: 5, where one 37 KB workgroup of 16 waves fits a CU: 4).
Dynamic shared memory is a launch-time value no report holds: our programs print theirs
(`PROGRAM --launches`); for any other source it counts as 0.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import locations
from ..errors import ExitStatus, FaError
from ..programs import student_build
from ..programs.processes import run_tool
from ..settings import compiler_command
from ..report import records
from . import pascal


@dataclass(frozen=True)
class NvidiaTarget:
    """Per-SM limits (CUDA Programming Guide, compute capabilities; cuda_occupancy.h)."""

    name: str
    max_warps: int            # resident warps per SM
    max_blocks: int           # resident blocks per SM
    smem_per_sm: int          # bytes, largest carve-out
    smem_per_block: int       # bytes a block may opt in to
    smem_unit: int            # allocation granularity, bytes
    reserved_smem: int        # bytes the driver keeps per block
    regs_per_sm: int = 65536
    reg_unit: int = 256       # registers allocated per warp in units of this
    subpartitions: int = 4    # a warp's registers come from one of these quarters
    vendor: str = "nvidia"


@dataclass(frozen=True)
class AmdTarget:
    """Per-CU limits (LLVM AMDGPU backend: GCNSubtarget, AMDGPUUsage)."""

    name: str
    max_waves_per_simd: int
    vgprs: int                # per SIMD lane: 512 unified (VGPRs + AGPRs) on gfx90a/94x
    vgpr_granule: int
    unified_agprs: bool       # gfx908 has separate files of 256 VGPRs and 256 AGPRs
    simds: int = 4
    lds_per_cu: int = 65536
    max_barriers: int = 16    # workgroups of several waves per CU
    wave: int = 64
    vendor: str = "amd"


KiB = 1024
TARGETS: dict[str, NvidiaTarget | AmdTarget] = {t.name: t for t in (
    NvidiaTarget("sm_61", max_warps=64, max_blocks=32, smem_per_sm=96 * KiB, smem_per_block=48 * KiB,
                 smem_unit=256, reserved_smem=0),
    NvidiaTarget("sm_75", max_warps=32, max_blocks=16, smem_per_sm=64 * KiB, smem_per_block=64 * KiB,
                 smem_unit=256, reserved_smem=0),
    NvidiaTarget("sm_80", max_warps=64, max_blocks=32, smem_per_sm=164 * KiB, smem_per_block=163 * KiB,
                 smem_unit=128, reserved_smem=KiB),
    NvidiaTarget("sm_86", max_warps=48, max_blocks=16, smem_per_sm=100 * KiB, smem_per_block=99 * KiB,
                 smem_unit=128, reserved_smem=KiB),
    NvidiaTarget("sm_89", max_warps=48, max_blocks=24, smem_per_sm=100 * KiB, smem_per_block=99 * KiB,
                 smem_unit=128, reserved_smem=KiB),
    NvidiaTarget("sm_90", max_warps=64, max_blocks=32, smem_per_sm=228 * KiB, smem_per_block=227 * KiB,
                 smem_unit=128, reserved_smem=KiB),
    AmdTarget("gfx908", max_waves_per_simd=10, vgprs=256, vgpr_granule=4, unified_agprs=False),
    AmdTarget("gfx90a", max_waves_per_simd=8, vgprs=512, vgpr_granule=8, unified_agprs=True),
    AmdTarget("gfx942", max_waves_per_simd=8, vgprs=512, vgpr_granule=8, unified_agprs=True),
)}
DEFAULT_ARCHS = {"cuda": ("sm_75", "sm_80", "sm_90"), "hip-cuda": ("sm_75", "sm_80", "sm_90"),
                 "hip": ("gfx908", "gfx90a")}
# Our programs' main sources, by name (relative to locations.source_tree()).
SOURCES = {"cuda": "src_cuda/fa_cuda.cu", "hip-cuda": "src_hip/fa_hip.hip", "hip": "src_hip/fa_hip.hip"}


def what_to_compile(program: str, archs: list[str] | None) -> tuple[Path, bool, bool, list[str]]:
    """For `fa resources --program P --arch ...`: (source, is it HIP, is it ours, targets)."""
    if program in SOURCES:
        source, hip_source, ours = locations.source_tree() / SOURCES[program], program != "cuda", True
        default = DEFAULT_ARCHS[program]
    else:
        # absolute: the compilers run in a directory of their own
        source, hip_source, ours = Path(program).absolute(), program.endswith(".hip"), False
        if not source.is_file():
            raise FaError(f"{program}: no such source (give cuda, hip-cuda, hip, or a .cu or .hip file)")
        default = DEFAULT_ARCHS["hip" if hip_source else "cuda"]
    targets = archs or list(default)
    for t in targets:
        if t not in TARGETS:
            raise FaError(f"--arch {t}: not one of {', '.join(TARGETS)}")
        if hip_source and not ours and t.startswith("sm_"):
            raise FaError(f"--arch {t}: a .hip source of your own is built for AMD targets")
        if program in ("cuda", "hip-cuda") and t.startswith("gfx") or program == "hip" and t.startswith("sm_"):
            raise FaError(f"--arch {t}: not a target of {program}")
    return source, hip_source, ours, targets


@dataclass
class KernelUsage:
    """One kernel on one target: what it uses and the theoretical occupancy that allows."""

    target: str
    kernel: str
    threads: int | None = None
    registers: int = 0          # per thread; VGPRs on AMD
    agprs: int = 0
    sgprs: int = 0
    spill_bytes: int = 0        # stores to local memory (NVIDIA) / scratch per lane (AMD)
    static_smem: int = 0        # bytes per block (LDS on AMD)
    dynamic_smem: int = 0
    blocks: int | None = None   # per SM (workgroups per CU on AMD)
    warps: int | None = None    # per SM (waves per SIMD on AMD)
    occupancy: float | None = None  # of the target's maximum, 0..1
    limited_by: list[str] = field(default_factory=list)
    compiler_waves: int | None = None  # AMD: the occupancy hipcc's remark states, waves/SIMD
    note: str = ""


# ----------------------------------------------------------------------------- occupancy
def nvidia_occupancy(u: KernelUsage, t: NvidiaTarget) -> None:
    """Blocks and warps per SM, and what limits them, as cuda_occupancy.h computes them."""
    if not u.threads:
        u.note = "threads per block unknown (no __launch_bounds__): occupancy not computed"
        return
    warps_per_block = math.ceil(u.threads / 32)
    regs_per_warp = math.ceil(u.registers * 32 / t.reg_unit) * t.reg_unit
    by_regs = ((t.regs_per_sm // t.subpartitions) // regs_per_warp * t.subpartitions // warps_per_block
               if regs_per_warp else t.max_blocks)
    smem = math.ceil((u.static_smem + u.dynamic_smem + t.reserved_smem) / t.smem_unit) * t.smem_unit
    by_smem = 0 if smem > t.smem_per_block + t.reserved_smem else t.smem_per_sm // smem if smem else t.max_blocks
    limits = {"registers": by_regs, "shared memory": by_smem, "threads": t.max_warps // warps_per_block,
              "blocks": t.max_blocks}
    u.blocks = min(limits.values())
    u.warps = u.blocks * warps_per_block
    u.occupancy = u.warps / t.max_warps
    u.limited_by = [name for name, value in limits.items() if value == u.blocks]


def amd_occupancy(u: KernelUsage, t: AmdTarget) -> None:
    """Waves per SIMD and what limits them, with LLVM's rules (GCNSubtarget): VGPRs in granules
    (AGPRs after the VGPRs in gfx90a's unified file), SGPRs, workgroups per CU (barriers), LDS."""
    granule = lambda n, g: max(g, math.ceil(n / g) * g)  # noqa: E731
    if t.unified_agprs:
        by_vgprs = t.vgprs // granule(math.ceil(u.registers / 4) * 4 + u.agprs, t.vgpr_granule)
    else:
        by_vgprs = min(t.vgprs // granule(u.registers, t.vgpr_granule), t.vgprs // granule(u.agprs, t.vgpr_granule))
    limits = {"VGPRs": by_vgprs, "SGPRs": 10 if u.sgprs <= 80 else 9 if u.sgprs <= 88 else 8 if u.sgprs <= 100 else 7,
              "waves": t.max_waves_per_simd}
    if u.threads:
        waves_per_group = math.ceil(u.threads / t.wave)
        max_waves_cu = t.max_waves_per_simd * t.simds
        groups = max_waves_cu if waves_per_group == 1 else min(max_waves_cu // waves_per_group, t.max_barriers)
        limits["workgroups"] = math.ceil(groups * waves_per_group / t.simds)
        if lds := u.static_smem + u.dynamic_smem:
            groups = min(groups, t.lds_per_cu // lds)
            limits["LDS"] = math.ceil(groups * waves_per_group / t.simds)
        u.blocks = groups
    u.warps = min(limits.values())
    u.occupancy = u.warps / t.max_waves_per_simd
    u.limited_by = [name for name, value in limits.items() if value == u.warps]
    if u.compiler_waves is not None and u.compiler_waves != u.warps:
        u.note = f"the compiler's remark says {u.compiler_waves} waves/SIMD"


# ----------------------------------------------------------------------------- compiler reports
def short_name(demangled: str) -> str:
    """'void fa::attention_tiled<64, 32>(float const*, ...)' -> 'attention_tiled<64, 32>'."""
    head = demangled.split("(", 1)[0].strip()
    head = head[5:] if head.startswith("void ") else head
    depth, cut = 0, 0
    for i, ch in enumerate(head):
        depth += ch == "<"
        depth -= ch == ">"
        if depth == 0 and head.startswith("::", i):
            cut = i + 2
    return head[cut:]


def demangle(names: list[str]) -> dict[str, str]:
    """Each name (mangled or not) -> its short_name; mangled ones through c++filt where present."""
    out = names
    if names and shutil.which("c++filt"):
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return {n: short_name(d) for n, d in zip(names, out)}


def parse_ptxas(text: str, target: str) -> dict[str, KernelUsage]:
    """nvcc -Xptxas -v: one KernelUsage per entry function compiled for `target`."""
    found: dict[str, KernelUsage] = {}
    current = None
    for line in text.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)' for '([^']+)'", line):
            current = KernelUsage(m.group(2), m.group(1)) if m.group(2) == target else None
            if current:
                found[m.group(1)] = current
        elif current and (m := re.search(r"(\d+) bytes spill stores", line)):
            current.spill_bytes = int(m.group(1))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            current.registers = int(m.group(1))
            if s := re.search(r"(\d+) bytes smem", line):
                current.static_smem = int(s.group(1))
    return found


def parse_ptx_threads(text: str) -> dict[str, int]:
    """Each .entry's .maxntid (threads per block its __launch_bounds__ allows)."""
    threads, entry = {}, None
    for line in text.splitlines():
        if m := re.match(r"\s*\.(?:visible\s+|weak\s+)?\.entry\s+([\w$]+)", line):
            entry = m.group(1)
        elif entry and (m := re.match(r"\s*\.maxntid\s+(\d+),\s*(\d+),\s*(\d+)", line)):
            threads[entry] = int(m.group(1)) * int(m.group(2)) * int(m.group(3))
        elif line.startswith("{"):
            entry = None
    return threads


REMARK = re.compile(r"remark: .*?(Function Name|SGPRs|VGPRs|AGPRs|ScratchSize \[bytes/lane\]|Occupancy \[waves/SIMD\]|"
                    r"LDS Size \[bytes/block\]): (\S+) \[-Rpass-analysis=kernel-resource-usage\]")


def parse_amd_remarks(text: str, target: str) -> dict[str, KernelUsage]:
    """hipcc -Rpass-analysis=kernel-resource-usage: one KernelUsage per kernel."""
    found: dict[str, KernelUsage] = {}
    current = None
    fields = {"SGPRs": "sgprs", "VGPRs": "registers", "AGPRs": "agprs", "ScratchSize [bytes/lane]": "spill_bytes",
              "LDS Size [bytes/block]": "static_smem", "Occupancy [waves/SIMD]": "compiler_waves"}
    for m in REMARK.finditer(text):
        key, value = m.group(1), m.group(2)
        if key == "Function Name":
            current = found[value] = KernelUsage(target, value)
        elif current is not None:
            setattr(current, fields[key], int(value))
    return found


def parse_amd_threads(assembly: str) -> dict[str, int]:
    """.max_flat_workgroup_size of each kernel in the code object's metadata."""
    threads, size = {}, None
    for line in assembly.splitlines():
        if m := re.match(r"\s*\.max_flat_workgroup_size:\s*(\d+)", line):
            size = int(m.group(1))
        elif size is not None and (m := re.match(r"\s*\.name:\s*(\S+)", line)):
            threads[m.group(1)] = size
            size = None
    return threads


# ----------------------------------------------------------------------------- running the compilers
def compile_report(source: Path, target: str, hip_source: bool, work: Path,
                   std: str = "c++17") -> tuple[str, list[str]]:
    """Compile source for target in the folder `work`, as C++ `std`; (compiler output, command).
    The compiler's own temporary files (nvcc's tmpxft_*) go there too (TMPDIR), so that removing
    the folder, however fa ends, removes them."""
    if pascal.needs_old_ptxas(target):  # sm_61 where nvcc has it no more: CUDA 12's ptxas
        return pascal.compile_report(source, target, hip_source, work)
    if target.startswith("sm_"):
        nvcc = compiler_command("nvcc")
        argv = [nvcc, f"-std={std}", "-O3", f"-arch={target}", "-Xptxas", "-v", "--keep", "--keep-dir", str(work),
                "-Xcompiler", "-pthread", *(["-x", "cu"] if hip_source else []), "-o", str(work / "program"),
                str(source)]
        env = {**os.environ, "TMPDIR": str(work)}
    else:
        argv = [compiler_command("hipcc"), f"-std={std}", "-O3", f"--offload-arch={target}", "-save-temps",
                "-Rpass-analysis=kernel-resource-usage", "-pthread", "-o", str(work / "program"), str(source)]
        env = {**os.environ, "HIP_PLATFORM": "amd", "TMPDIR": str(work)}
    if not shutil.which(argv[0]):
        raise FaError(f"fa resources {target}: `{argv[0]}` is not installed here")
    proc = run_tool(argv, cwd=work, env=env)
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.splitlines() if "error" in l.lower()] or proc.stderr.splitlines() or ["?"]
        raise FaError(f"fa resources {target}: {argv[0]} failed: {lines[0].strip()}", exit_code=ExitStatus.FAILED)
    return proc.stdout + proc.stderr, argv


def launch_table(program: Path) -> dict[str, tuple[int, int]]:
    """`PROGRAM --launches` of our programs: kernel -> (threads, dynamic shared memory bytes)."""
    proc = run_tool([str(program), "--launches"])
    table = {}
    for line in proc.stdout.splitlines()[1:] if proc.returncode == 0 else []:
        kernel, threads, dynamic = line.split("\t")
        table[kernel] = (int(threads), int(dynamic))
    return table


def report(source: Path, target: str, hip_source: bool, ours: bool) -> tuple[list[KernelUsage], list[str], str | None]:
    """Every kernel of source on target, with its theoretical occupancy; the command used; and for
    a student's source that the course's C++ standard does not build, one line that says so (the
    report is then of the newest standard that builds it)."""
    work = Path(tempfile.mkdtemp(prefix="fa-resources-"))
    try:  # removed however this ends: an error, Ctrl-C, SIGTERM or SIGHUP (raised by the CLI)
        text, argv, note = compile_as_the_course(source, target, hip_source, work) if not ours else \
            (*compile_report(source, target, hip_source, work), None)
        launches = launch_table(work / "program") if ours and (work / "program").exists() else {}
        threads = {}
        for listing in work.glob("*.ptx" if target.startswith("sm_") else "*.s"):
            threads.update((parse_ptx_threads if target.startswith("sm_") else parse_amd_threads)(listing.read_text()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return usage_from(text, target, launches, threads, str(source)), argv, note


def compile_as_the_course(source: Path, target: str, hip_source: bool, work: Path) -> tuple[str, list[str], str | None]:
    """A student's source compiled under the C++ standard the course builds it with (its Makefile's,
    else the course's line's); where that fails and C++17 builds it, the report is C++17's and a
    line says what the course's build would say."""
    std = student_build.course_standard(source)
    try:
        return (*compile_report(source, target, hip_source, work, std), None)
    except FaError as e:
        if std in ("c++17", "c++20") or pascal.needs_old_ptxas(target):
            raise
        refused = e
    try:
        text, argv = compile_report(source, target, hip_source, work, "c++17")
    except FaError:
        raise refused from None
    why = str(refused).split(" failed: ", 1)[-1]
    if student_build.toolkit_standard(why, std):
        return text, argv, (f"{student_build.toolkit_words(std, why)}: this report is -std=c++17's; whether "
                            f"{source.name} itself needs C++17, this report does not tell")
    return text, argv, (f"{source.name} does not build as the course builds it (-std={std}): {why}; it builds with "
                        f"-std=c++17, whose report this is: the source needs C++17, and the course's build will fail "
                        f"unless a Makefile of yours sets -std=c++17")


def usage_from(text: str, target: str, launches: dict[str, tuple[int, int]], threads: dict[str, int] | None = None,
               what: str = "the build") -> list[KernelUsage]:
    """The kernels a compiler's report (`text`: ptxas -v, or hipcc's resource remarks) lists for
    target, with threads per block from the listings (`threads`, by mangled name) or from the
    program's launches, and the theoretical occupancy they allow."""
    limits = TARGETS[target]
    nvidia = isinstance(limits, NvidiaTarget)
    usage = parse_ptxas(text, target) if nvidia else parse_amd_remarks(text, target)
    if not usage:
        raise FaError(f"fa resources {target}: the compiler reported no kernels in {what}", exit_code=ExitStatus.FAILED)
    names = demangle(list(usage))
    for mangled, u in usage.items():
        u.kernel = names[mangled]
        launch_threads, u.dynamic_smem = launches.get(u.kernel, (None, 0))
        u.threads = (threads or {}).get(mangled) or launch_threads
        if nvidia:
            nvidia_occupancy(u, limits)
        else:
            amd_occupancy(u, limits)
    return sorted(usage.values(), key=lambda u: u.kernel)


def as_records(kernels: list[KernelUsage], program: str | None = None) -> list[dict]:
    """Results-file records; program: what --program named (cuda, hw4.cu), for fa report. Each
    names the commit of fa it was made with, as every other kind of record does."""
    source = records.source_revision()
    return [{"kind": "resources", **({"program": program} if program else {}), **asdict(u), "source": source}
            for u in kernels]

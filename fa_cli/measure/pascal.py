"""The GTX 1080's (sm_61) compiler report from a machine whose nvcc has no sm_61 (CUDA 13 dropped
Pascal): nvcc writes the PTX of the source for compute_75 (the oldest target it has), the PTX is
retargeted to sm_61 and assembled by CUDA 12's ptxas, which still has Pascal (pip package
nvidia-cuda-nvcc-cu12: `pip install 'fa-toolkit[gtx1080]'`). The report is ptxas's own: registers,
shared memory, spills for sm_61; what Pascal lacks (cp.async, tf32 or bf16 tensor-core
instructions, ...) is refused by the assembler in its words and placed on the source line the
PTX's line information names. Code under `#if __CUDA_ARCH__ >= 800` is not in a compute_75 PTX,
so a cp.async kept for sm_80 and later is, rightly, not refused; code written for exactly 7.5
(`__CUDA_ARCH__ == 750`) is compiled as 7.5's, which the report says.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
from functools import lru_cache
from pathlib import Path

from ..errors import ExitStatus, FaError
from ..programs.processes import run_tool
from ..settings import compiler_command, ptxas_sm61

PTX_TARGET = "compute_75"  # the oldest PTX nvcc 13 writes
PTX_ISA = "8.8"            # the newest PTX ISA CUDA 12.9's ptxas reads
INSTALL = "pip install 'fa-toolkit[gtx1080]' (or: pip install nvidia-cuda-nvcc-cu12), which ships CUDA 12's ptxas"
NOTE = ("sm_61 by CUDA 12's ptxas from nvcc's compute_75 PTX: code under #if __CUDA_ARCH__ is compiled as for 7.5 "
        "(a path for 8.0 and later is left out, as on the GTX 1080)")


@lru_cache(maxsize=None)
def nvcc_targets() -> frozenset[str]:
    """The sm_XY this nvcc builds."""
    try:
        listed = run_tool([compiler_command("nvcc"), "--list-gpu-arch"]).stdout.split()
    except OSError:
        return frozenset()
    return frozenset(a.replace("compute_", "sm_") for a in listed if a.startswith("compute_"))


def needs_old_ptxas(target: str) -> bool:
    """Whether target (sm_61) is one this nvcc cannot build, so that CUDA 12's ptxas must."""
    return target.startswith("sm_") and int(target[3:]) < 70 and target not in nvcc_targets()


def ptxas() -> Path | None:
    """CUDA 12's ptxas: FA_PTXAS_SM61 where set (None where it names no file), else the pip
    package's (nvidia/cuda_nvcc/bin/ptxas)."""
    if named := ptxas_sm61():
        return Path(named) if Path(named).is_file() else None
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        tool = Path(root) / "cuda_nvcc" / "bin" / "ptxas"
        if tool.is_file():
            if not os.access(tool, os.X_OK):  # some installers drop the wheel's execute bit
                tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            return tool
    return None


def retargeted(ptx: str, target: str) -> str:
    """PTX written for compute_75, as PTX for `target` of the ISA CUDA 12.9 reads."""
    ptx = re.sub(r"^\.target\s+sm_\d+", f".target {target}", ptx, count=1, flags=re.M)
    return re.sub(r"^\.version\s+\S+", f".version {PTX_ISA}", ptx, count=1, flags=re.M)


def source_line(ptx: str, line: int) -> str | None:
    """The source file:line the PTX's line information gives for PTX line `line` (1-based)."""
    files = dict(re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, flags=re.M))
    for text in reversed(ptx.splitlines()[:line]):
        if m := re.match(r"\s*\.loc\s+(\d+)\s+(\d+)", text):
            return f"{Path(files.get(m.group(1), '?')).name}:{m.group(2)}"
    return None


def refusals(ptxas_output: str, ptx: str) -> list[str]:
    """ptxas's errors, each with the source line it comes from: 'hw4.cu:15: Feature ...'."""
    found = []
    for m in re.finditer(r"ptxas \S+, line (\d+); error\s*:\s*(.+)", ptxas_output):
        where = source_line(ptx, int(m.group(1)))
        found.append(f"{where + ': ' if where else ''}{m.group(2).strip()}")
    return list(dict.fromkeys(found))


def compile_report(source: Path, target: str, hip_source: bool, work: Path) -> tuple[str, list[str]]:
    """ptxas -v's report of source for target (sm_61), as resources.compile_report gives nvcc's;
    the PTX is left in work for the threads per block (.maxntid)."""
    tool = ptxas()
    if tool is None:
        raise FaError(f"fa resources {target}: this nvcc has no {target}; the GTX 1080's report needs CUDA 12's "
                      f"ptxas: {INSTALL}")
    nvcc = compiler_command("nvcc")
    if not shutil.which(nvcc):
        raise FaError(f"fa resources {target}: `{nvcc}` is not installed here")
    ptx_path = work / "source.ptx"
    argv = [nvcc, "-std=c++17", "-O3", "-ptx", f"-arch={PTX_TARGET}", "-lineinfo", *(["-x", "cu"] if hip_source else []),
            "-o", str(ptx_path), str(source)]
    proc = run_tool(argv, cwd=work, env={**os.environ, "TMPDIR": str(work)})
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.splitlines() if "error" in l.lower()] or proc.stderr.splitlines() or ["?"]
        raise FaError(f"fa resources {target}: {nvcc} failed: {lines[0].strip()}", exit_code=ExitStatus.FAILED)
    ptx = retargeted(ptx_path.read_text(), target)
    (work / f"source-{target}.ptx").write_text(ptx)
    ptx_path.unlink()
    assemble = [str(tool), f"-arch={target}", "-v", str(work / f"source-{target}.ptx"), "-o", str(work / "x.cubin")]
    done = run_tool(assemble, cwd=work)
    text = done.stdout + done.stderr
    if done.returncode != 0:
        first = re.sub(r"^ptxas error\s*:\s*", "", text.strip().splitlines()[0]) if text.strip() else None
        refused = refusals(text, ptx) or [first or f"exit {done.returncode}"]
        raise FaError(f"{source.name} does not build for the GTX 1080 ({target}): " + "; ".join(refused),
                      exit_code=ExitStatus.FAILED)
    return text, [*argv, "&&", *assemble]

"""A student's hw4.hip on an NVIDIA GPU through fa's MI210 emulation (src_hip/wave64/): when it is
used, its build line, and the AMD-only mistakes it names, one line each.

Where an AMD GPU is, hw4.hip is built by hipcc for it; where only an NVIDIA GPU is, nvcc builds it
against our hip/hip_runtime.h, whose wavefronts are 64 lanes and whose launches obey the MI210's
limits. Verdicts then follow the MI210's rules; times are the NVIDIA GPU's, and said so.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from .. import locations
from ..settings import compiler_command
from .devices import list_devices

PREFIX = "fa-wave64: "  # the layer's lines on stderr (hip_runtime.h)
NOTE = PREFIX + "note: "
LABEL = ("an emulation of the MI210 on the NVIDIA GPU: verdicts follow the MI210's rules (64-lane wavefronts, "
         "64 KB of LDS); times are the NVIDIA GPU's, not an MI210's")


def layer_dir() -> Path:
    """The folder that goes first on the include path: its hip/hip_runtime.h is ours."""
    root = locations.sources()
    return root / "src_hip" / "wave64"


def emulated() -> bool:
    """Whether a .hip source runs here on the NVIDIA emulation: an NVIDIA GPU and no AMD one
    (with neither, hw4.hip is built for AMD as before: it compiles, nothing runs it here)."""
    vendors = {d.vendor for d in list_devices()}
    return "nvidia" in vendors and "amd" not in vendors


def emulates(source) -> bool:
    """Whether this source (a path, or None) is a student's hw4.hip that runs here on the NVIDIA
    emulation of the MI210: the one test of it, for builds, devices, probes and causes alike."""
    return source is not None and Path(source).suffix == ".hip" and emulated()


def build_line(nvcc: str, target: str) -> list[str]:
    """nvcc's line for hw4.hip, before the output and the source: C++14 as hipcc's course line,
    the .hip compiled as CUDA, our header first, and the shared CUDA runtime, whose launch entry
    the layer takes over (hip_runtime.h: __cudaLaunchKernel) to check the MI210's limits."""
    line = [nvcc, "-std=c++14", "-O3", f"-arch={target}", "-x", "cu", "-cudart", "shared", "-I", str(layer_dir())]
    return line + [f"-Xlinker=-rpath,{folder}" for folder in runtime_dirs(nvcc)]


def missing_header(error: str) -> str | None:
    """Where the emulation's build stopped on an AMD header this layer does not carry: one line
    that says so (the program is not judged here, which says nothing of its build on the MI210)."""
    m = re.search(r"fatal error: ((?:hip|rocm\w*|hipcub|rocprim)/[\w./]+): No such file", error or "")
    if m is None:
        return None
    return (f"it includes <{m.group(1)}>, a header fa's MI210 emulation (src_hip/wave64) does not carry (one of "
            "AMD's, or none at all): not built here, so not judged; that says nothing of its build with hipcc on the "
            "MI210")


@functools.cache
def runtime_dirs(nvcc: str) -> list[str]:
    """The folder of nvcc's own libcudart.so (from its -dryrun's library path), for the program to
    find it without LD_LIBRARY_PATH; none where nvcc does not say."""
    try:
        proc = subprocess.run([nvcc, "-dryrun", "-x", "cu", "/dev/null"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    folders = re.findall(r'-L"?([^"\s]+)', proc.stderr)
    return [str(Path(f)) for f in folders if (Path(f) / "libcudart.so").exists()][:1]


# ---------------------------------------------------------------- CUDA names left in the port
CUDA_NAME = re.compile(r"\bcuda[A-Z]\w*")
COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _code_lines(text: str) -> list[str]:
    """The source's lines with comments blanked (line numbers kept)."""
    return COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text).splitlines()


MARKER = re.compile(r'^# (\d+) "([^"]+)"')
# The layer's cross-lane macros pass the caller's line first (wave64_device.h): left out here, so
# that a call reads as the student wrote it.
CALLER_LINE = re.compile(r"\b(fa_wave64_\w+)\(\s*\d+\s*(?:,\s*|(?=\)))")


def student_lines(source: Path) -> tuple[tuple[str, int, str], ...]:
    """(file, line, text) of the code the compiler sees from the student's own files, #if's
    decided as nvcc decides them for the emulation (nvcc -E; headers of the system, CUDA and
    ours left out); the source's lines, comments blanked, where nvcc cannot preprocess it. Kept
    for the text it holds and the nvcc found (its hints, lane lines and dims per lane each read it)."""
    source = Path(source)
    return _student_lines(source, source.read_bytes(), shutil.which(compiler_command("nvcc")))


@functools.lru_cache(maxsize=16)
def _student_lines(source: Path, text: bytes, nvcc: str | None) -> tuple[tuple[str, int, str], ...]:
    proc = subprocess.run([nvcc, "-E", "-x", "cu", "-I", str(layer_dir()), str(source)], capture_output=True,
                          text=True) if nvcc else None
    if proc is None or proc.returncode != 0:
        code = _code_lines(text.decode(errors="replace"))
        return tuple((source.name, n, line) for n, line in enumerate(code, 1))
    theirs = (str(layer_dir()), "/usr/", str(Path(nvcc).resolve().parent.parent))
    found, name, number, keep = [], source.name, 0, True
    for line in proc.stdout.splitlines():
        if m := MARKER.match(line):
            path = m.group(2)
            number, name = int(m.group(1)), Path(path).name
            keep = not path.startswith(theirs) and not path.startswith("<")
            continue
        if keep and line.strip():
            found.append((name, number, CALLER_LINE.sub(r"\1(", line)))
        number += 1
    return tuple(found)


def cuda_leftover(source: Path) -> str | None:
    """One line where hw4.hip still uses a CUDA name, which the MI210's build (hipcc) rejects:
    hipcc's own first error naming it where hipcc is installed, else the first such name."""
    hipcc = shutil.which(compiler_command("hipcc"))
    if hipcc:
        proc = subprocess.run([hipcc, "-std=c++14", "--offload-arch=gfx90a", "-fsyntax-only", str(source)],
                              capture_output=True, text=True, env={**os.environ, "HIP_PLATFORM": "amd"})
        errors = [l.strip() for l in proc.stderr.splitlines() if "error" in l and CUDA_NAME.search(l)]
        return f"hipcc: {errors[0]}" if errors else None
    for name, number, line in student_lines(source):
        if "#include" not in line and (m := CUDA_NAME.search(line)):
            return (f"{name} line {number} uses {m.group()}, a CUDA name that hipcc does not know (left in the "
                    "port): the MI210's build stops there")
    return None


# ---------------------------------------------------------------- what the source says
# Patterns of AMD-only mistakes, each with what it means on the MI210: named where hw4.hip fails.
# Patterns over the preprocessed code, where our header has renamed HIP's __shfl... to fa_wave64_shfl...
# (pattern, what it means, a pattern elsewhere in the code that must also be there, or None).
THIRTY_TWO = re.compile(r"(?:threadIdx\.x|(?:__|fa_wave64_)lane_id\(\))\s*(?:%\s*32|&\s*31)\b")
HINTS = (
    (re.compile(r"\b(?:unsigned(?:\s+int)?|int|uint32_t)\s+\w+\s*=\s*(?:__|fa_wave64_)ballot\s*\("),
     "a ballot mask stored in 32 bits: __ballot returns 64 bits on the MI210, and lanes 32..63 are lost", None),
    (re.compile(r"\b(?:__|fa_wave64_)(?:popc|ffs|clz)\s*\(\s*(?:__|fa_wave64_)ballot\s*\("),
     "a ballot counted or searched with a 32-bit function (__popc, __ffs, __clz): __ballot returns 64 bits on the "
     "MI210, and lanes 32..63 are not counted (__popcll, __ffsll, __clzll take them)", None),
)
BALLOTS = HINTS[:2]  # a ballot's 64 bits cut to 32: where the lane lines start
HINTS += (
    (re.compile(r"(?:__|fa_wave64_)shfl(?:_up|_down)?\s*\(\s*[^,()]+,\s*[^,()]+\)"),
     "a 32-lane assumption (lanes counted modulo 32) with a shuffle at HIP's default width, 64: the upper half of "
     "each wavefront reads the lower half's lanes (give the width, 32)", THIRTY_TWO),
    (re.compile(r"for\s*\([^;]*=\s*16\s*;[^;]*>\s*0\s*;[^)]*\)[^\n]*(?:__|fa_wave64_)shfl"),
     "a reduction that starts at offset 16: over a 64-lane wavefront it misses offset 32", None),
)
# A mask of the first n lanes, (1ull << n) - 1: undefined in C++ at n = 64, a full wavefront's lanes,
# and the two GPUs differ there (NVIDIA's shift saturates: all ones; the MI210's takes the count mod
# 64: 0), so the emulation, right, cannot show it. Said of a passing program too.
FULL_MASK = (re.compile(r"\(\s*(?:1ull|1ULL|1llu|1LLU|\(\s*(?:uint64_t|unsigned long long)\s*\)\s*1)"
                        r"\s*<<\s*[A-Za-z_]\w*\s*\)\s*-\s*1\b"),
             "a mask of the first n lanes as (1ull << n) - 1: at n = 64, a full wavefront, the shift is undefined in "
             "C++; the MI210's shift takes the count mod 64 (the mask 0: no lane live), NVIDIA's gives 0 (the mask "
             "all ones), so this emulation, which ran it the NVIDIA way, cannot show it (write n >= 64 ? ~0ull : "
             "(1ull << n) - 1)", None)
# A reduction from offset 16 is right where the code counts lanes modulo 32: a row per 32-lane half of
# the wavefront, which offsets 16..1 never leave.
UNLESS = {HINTS[-1][1]: THIRTY_TWO}
HINTS += (FULL_MASK,)


def source_hints(source: Path, hints: tuple = HINTS) -> list[str]:
    """Each AMD-only pattern of hints in the student's code, at its first line: one line each."""
    lines = student_lines(source)
    found = []
    for pattern, meaning, needs in hints:
        if needs is not None and not any(needs.search(text) for _, _, text in lines):
            continue
        if meaning in UNLESS and any(UNLESS[meaning].search(text) for _, _, text in lines):
            continue
        hit = next(((name, n) for name, n, text in lines if pattern.search(text)), None)
        if hit:
            found.append(f"{hit[0]} line {hit[1]}: {meaning}")
    return found


LANES_MACRO = "FA_WAVE64_LANES"  # -DFA_WAVE64_LANES=32: the emulation with 32-lane wavefronts (an experiment)
LANE_CODE = re.compile(r"(?:__|fa_wave64_)shfl|warpSize|fa_wave64_warp_size|(?:__|fa_wave64_)lane_id|%\s*32\b|&\s*31\b")


# Where a 32-lane assumption is written out: a shuffle started at 16 or given a width of 32, then a
# lane count of 32 in arithmetic (a mask by 31, a division or a step by 32).
SHUFFLE_32 = re.compile(r"shfl\w*\s*\([^;]*,\s*(16|32)\s*\)|\boff\w*\s*=\s*16\b")
# (a row of 33: a warp's 32 lanes and a pad, which 64 lanes write past; a tile bound min(32, ...) or its
# ternary, n < 32 ? n : 32; a lane's second key or dim at lane + 32)
# (a count of 32 multiplied out: a size in bytes or elements for a 32-lane warp's tile, a macro expanded)
LANES_32 = re.compile(r"&\s*31\b|%\s*32\b|/\s*32\b|[+-]=\s*32\b|=\s*32\s*;|\*\s*33\b(?!\.)|(?<![.\w])33\s*\*"
                      r"|\bmin\s*\(\s*32\s*,|\?[^:;]*:\s*32\b|\blane\w*\s*\+\s*32\b|(?<![.\w])32\s*\*(?!\s*[*/])")
HEAD_DIM_NAMES = {"D", "d", "DIM", "HEAD_DIM", "HEADDIM", "HD", "DHEAD", "D_HEAD", "HDIM", "DK"}  # d = 32, not lanes
NAMED_32 = re.compile(r"\b(?:constexpr|const)\s+(?:unsigned\s+)?(?:int|size_t|unsigned)\s+(\w+)\s*=\s*32\s*;")


def uses_of_named_32(code) -> re.Pattern | None:
    """A constant named for 32 (`constexpr int BC = 32;`) multiplied or divided by in a line: the 32
    written out under a name; None where the source names none."""
    names = sorted({m.group(1) for _, _, text in code for m in NAMED_32.finditer(text)} - HEAD_DIM_NAMES)
    return re.compile(r"\b(?:%s)\s*[*/%%]|[*/%%]\s*(?:%s)\b" % ("|".join(names), "|".join(names))) if names else None


WARP_SIZE_TEST = re.compile(r"[%/]\s*(?:warpSize|fa_wave64_warp_size)\b|(?:warpSize|fa_wave64_warp_size)\s*-\s*1\b")
GROUPED_BY_32 = re.compile(r"&\s*31\b|%\s*32\b|>>\s*5\b|/\s*32\b")  # threads grouped in 32s


# The head dims shared out over a wavefront's lanes: d divided by a lane count, 0 in integer division
# where d = 32 meets 64 lanes (nothing accumulated or written).
DIMS_PER_LANE = re.compile(r"\b(?:D|d|dim|DIM|head_dim|HEAD_DIM|32)\s*/\s*(?:[A-Za-z_]\w*)\b(?!\s*[(.\[])")


def dims_per_lane_lines(source: Path) -> list[tuple[str, int, str]]:
    """The student's lines that divide the head dim by a name (a lane count, as warpSize)."""
    return [line for line in student_lines(source) if DIMS_PER_LANE.search(line[2])]


def lane_lines(source: Path) -> tuple[list[tuple[str, int, str]], bool]:
    """The student's lines that use lanes (shuffles, warpSize, lane ids, indices modulo 32), those
    that write a 32-lane assumption out first (where a 64-lane wavefront breaks one, the literal is
    where it is written; warpSize and shuffles of a computed width are right on either), and
    whether threads grouped in 32s are also tested by warpSize (a lane taken modulo warpSize, 64
    on the MI210): then those tests come right after the shuffles written for 32 lanes."""
    code = student_lines(source)
    hinted = [line for line in code if any(p.search(line[2]) for p, _, _ in BALLOTS)]
    named = uses_of_named_32(code)
    written = {line for line in code if LANES_32.search(line[2]) or named and named.search(line[2])}
    lines = [line for line in code if line in hinted or LANE_CODE.search(line[2]) or line in written or
             SHUFFLE_32.search(line[2])]
    mixed = any(GROUPED_BY_32.search(line[2]) for line in lines) and \
        any(WARP_SIZE_TEST.search(line[2]) for line in lines)
    return sorted(lines, key=lambda line: -1 if line in hinted else 0 if SHUFFLE_32.search(line[2]) else
                  1 if mixed and WARP_SIZE_TEST.search(line[2]) else 2 if line in written else 3), mixed


# ---------------------------------------------------------------- what the run said
def fault(stderr: str) -> str | None:
    """The layer's line for a refused launch or a wavefront it could not emulate, without its prefix."""
    lines = [l for l in stderr.splitlines() if l.startswith(PREFIX) and not l.startswith(NOTE)]
    return lines[0][len(PREFIX):] if lines else None


def notes(stderr: str) -> list[str]:
    """The layer's notes (blocks that leave part of a wavefront idle), without their prefix."""
    return [l[len(NOTE):] for l in stderr.splitlines() if l.startswith(NOTE)]


def emulated_sources(programs) -> list[str]:
    """One line per hw4.hip among the programs that ran through the emulation (fa bench)."""
    if not emulated():
        return []
    return [f"{p.source.name}: {LABEL}" for p in programs
            if getattr(p, "source", None) is not None and p.source.suffix == ".hip"]


def run_notes(program, results) -> list[str]:
    """fa run's lines under its table for hw4.hip run through the emulation: what it is and the
    layer's notes (the AMD-only patterns of a failing source are a step of the investigation)."""
    source = getattr(program, "source", None)
    if not emulates(source):
        return []
    lines = [f"{source.name} ran as {LABEL}"]
    seen = set()
    for r in results:
        for note in notes(getattr(r.run, "stderr", "") if getattr(r, "run", None) else ""):
            if note not in seen:
                seen.add(note)
                lines.append(f"note: {note}")
    return lines


def compare_findings(records: list[dict]) -> list[str]:
    """fa compare's lines where a student's hw4.cu and hw4.hip ran the same inputs: an input that
    passes as hw4.cu and fails as hw4.hip points at an AMD-only mistake, one line for them all."""
    def verdicts(suffix):
        return {r.get("input"): bool(r.get("passed")) and not r.get("error")
                for r in records if str(r.get("program", "")).endswith(suffix)}
    cuda, hip = verdicts(".cu"), verdicts(".hip")
    split = [name for name in cuda if name in hip and cuda[name] and not hip[name]]
    if not split:
        return []
    return [f"{', '.join(map(str, split))}: right as hw4.cu, wrong or failing as "
            f"hw4.hip: an AMD-only mistake (fa run {split[0]} --program hw4.hip names what it can: a 32-lane "
            "assumption, a 32-bit ballot mask, more than 64 KB of LDS)"]

#!/usr/bin/env python3
"""Instruction counts and resources of every kernel in built CUDA programs, side by side.

For each program (LABEL=PATH, e.g. before=old/fa-cuda after=bin/fa-cuda) and one GPU arch,
disassembles the kernels with cuobjdump and prints, per kernel, the registers, stack and spill
traffic, and the static count of each instruction class (all, tensor-core mma, ldmatrix,
shared/global/local memory, fp32 math, special functions, shuffles, branches).
With --docs the table is also written to docs/kernels.md.
    python3 scripts/sass_stats.py before=PATH after=bin/fa-cuda [--arch sm_90] [--kernels REGEX] [--docs]
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_docs  # noqa: E402

# instruction class -> SASS opcodes (the part before the first '.')
CLASSES = {
    "mma": {"HMMA"},
    "ldmatrix": {"LDSM"},
    "shared": {"LDS", "STS", "LDGSTS"},
    "global": {"LDG", "STG"},
    "local": {"LDL", "STL"},
    "fp32": {"FFMA", "FMUL", "FADD", "FMNMX", "FSETP", "FSEL"},
    "convert": {"F2F", "F2FP", "HADD2", "HFMA2", "HMUL2"},
    "mufu": {"MUFU"},
    "shfl": {"SHFL"},
    "branch": {"BRA", "BRX", "JMP", "CALL", "RET", "EXIT"},
}
INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def cuobjdump() -> str:
    for candidate in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if candidate and Path(candidate).exists():
            return candidate
    sys.exit("sass_stats: cuobjdump not found (CUDA toolkit's bin/ on PATH)")


def demangle(names: list[str]) -> dict[str, str]:
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        return {m: re.sub(r"^(\w+::)+", "", re.sub(r"\(.*\)$", "", d).removeprefix("void "))
                for m, d in zip(names, out.splitlines())}
    except (OSError, subprocess.CalledProcessError):
        return {m: m for m in names}


def count_instructions(sass: str) -> dict[str, collections.Counter]:
    """`cuobjdump -sass` text -> per (mangled) kernel, its count of each class and of 'all'."""
    stats: dict[str, collections.Counter] = {}
    current = None
    for line in sass.splitlines():
        if m := re.search(r"Function : (\S+)", line):
            current = stats.setdefault(m.group(1), collections.Counter())
        elif current is not None and (m := INSTRUCTION.search(line)):
            opcode = m.group(1).split(".")[0]
            if opcode == "NOP":  # alignment padding
                continue
            current["all"] += 1
            for name, opcodes in CLASSES.items():
                if opcode in opcodes:
                    current[name] += 1
    return stats


def resource_usage(text: str) -> dict[str, dict[str, int]]:
    """`cuobjdump -res-usage` text -> per (mangled) kernel, REG and STACK."""
    return {m.group(1): {"REG": int(m.group(2)), "STACK": int(m.group(3))}
            for m in re.finditer(r"Function (\S+):\s+REG:(\d+) STACK:(\d+)", text)}


def kernel_stats(program: Path, arch: str) -> dict[str, dict[str, int]]:
    """Per demangled kernel of `program`'s `arch` code: instruction classes, REG and STACK."""
    tool = cuobjdump()
    sass = subprocess.run([tool, "-sass", "-arch", arch, str(program)], capture_output=True, text=True)
    usage = subprocess.run([tool, "-res-usage", "-arch", arch, str(program)], capture_output=True, text=True)
    if sass.returncode or usage.returncode:
        sys.exit(f"sass_stats: cuobjdump failed on {program}: {(sass.stderr or usage.stderr).strip()}")
    stats = count_instructions(sass.stdout)
    for kernel, resources in resource_usage(usage.stdout).items():
        stats.setdefault(kernel, collections.Counter()).update(resources)
    if not stats:
        sys.exit(f"sass_stats: no {arch} kernels in {program} (built for another arch?)")
    names = demangle(list(stats))
    return {names[k]: dict(v) for k, v in stats.items()}


def table(programs: dict[str, dict[str, dict[str, int]]]) -> str:
    columns = ["REG", "STACK", "all", *CLASSES]
    labels = list(programs)
    kernels = sorted({k for stats in programs.values() for k in stats})
    lines = ["| kernel | program | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for kernel in kernels:
        for label in labels:
            row = programs[label].get(kernel)
            cells = [str(row.get(c, 0)) if row is not None else "-" for c in columns]
            lines.append(f"| {kernel} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("programs", nargs="+", metavar="LABEL=PATH")
    args.add_argument("--arch", default="sm_90")
    args.add_argument("--kernels", metavar="REGEX", help="only kernels whose name matches (re.search)")
    args.add_argument("--docs", action="store_true", help="also write the table to docs/kernels.md")
    a = args.parse_args()
    programs = {}
    for spec in a.programs:
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = Path(spec).name, spec
        if not Path(path).is_file():
            sys.exit(f"sass_stats: {path}: no such program")
        stats = kernel_stats(Path(path), a.arch)
        programs[label] = {k: v for k, v in stats.items() if not a.kernels or re.search(a.kernels, k)}
    text = (f"Static SASS instruction counts per kernel ({a.arch}); REG = registers per thread, STACK = "
            "bytes of stack (spills); classes as in scripts/sass_stats.py.\n\n" + table(programs))
    print(text)
    if a.docs:
        kernel_docs.write_section("sass", text, kernel_docs.nvidia_device())


if __name__ == "__main__":
    main()

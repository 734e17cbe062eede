"""fa sweep: the homework kernel built with other tile sizes, each run, verified and timed.

Parameters are compile-time: Br (query rows per block, FA_TILED_BR) and Bc (keys per tile,
FA_TILED_BC). Each combination is built with make into bin/variants/PROGRAM-brX-bcY/ (reused
while it is up to date), for one GPU target, with the compiler's resource report kept beside
it (build.log): registers, spills and shared memory per kernel, and the theoretical occupancy
they allow (as `fa resources` computes it). A combination the kernel cannot take (more than
1024 threads, more than 48 KB of static shared memory) fails its build on a static_assert that
says why: it is listed as skipped with that reason. Then each variant runs on the input like a
`fa bench` run (the homework kernel forced: FA_KERNEL=tiled), and with profiling `fa profile`
adds the achieved occupancy.
"""
from __future__ import annotations

import itertools
import os
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import bench, locations, profile, resources
from .devices import list_devices
from .errors import ExitStatus, FaError
from .programs import BUILT, Program
from .records import new_record
from .suite import Target

PARAMS = {"Br": "FA_TILED_BR", "Bc": "FA_TILED_BC"}
DEFAULTS = {"Br": [16], "Bc": [32]}
PROGRAMS = ("cuda", "hip-cuda", "hip")
# The compiler's resource report, per compiler.
REPORT_FLAGS = {"nvcc": "-Xptxas -v", "hipcc": "-Rpass-analysis=kernel-resource-usage"}


def parse_param(text: str) -> tuple[str, list[int]]:
    """'Br=8,16,32' -> ('Br', [8, 16, 32])."""
    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or name not in PARAMS:
        raise FaError(f"--param {text!r}: expected NAME=V1,V2,... with NAME one of {', '.join(PARAMS)}")
    try:
        numbers = [int(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise FaError(f"--param {text!r}: values must be whole numbers") from None
    if not numbers or any(n < 1 or n & (n - 1) for n in numbers):
        raise FaError(f"--param {text!r}: values must be powers of two (1, 2, 4, ...)")
    return name, sorted(set(numbers))


def grid(params: list[str]) -> list[dict[str, int]]:
    """Every combination of the given parameters, the others at the homework's values."""
    chosen = dict(DEFAULTS)
    for text in params:
        name, values = parse_param(text)
        chosen[name] = values
    return [dict(zip(chosen, combo)) for combo in itertools.product(*chosen.values())]


@dataclass
class Variant:
    params: dict[str, int]
    program: Program | None  # None: it could not be built
    skipped: str | None      # why not
    kernels: list[resources.KernelUsage]  # from the build's resource report, for `target`
    target: str


def variant_name(program_name: str, params: dict[str, int]) -> str:
    return program_name + "".join(f"-{k.lower()}{v}" for k, v in params.items())


def build(program_name: str, params: dict[str, int], target: str, announce=None) -> Variant:
    """Build (or reuse) one variant for target (sm_XX or gfxNNN) and read its resource report."""
    if program_name not in PROGRAMS:
        raise FaError(f"fa sweep builds the homework kernel of {', '.join(PROGRAMS)} (not {program_name})")
    tree = locations.source_tree()
    name = variant_name(program_name, params)
    folder = Path("bin") / "variants" / name
    compiler = "hipcc" if program_name == "hip" else "nvcc"
    flags = " ".join(f"-D{PARAMS[k]}={v}" for k, v in params.items()) + " " + REPORT_FLAGS[compiler]
    arch = f"HIP_ARCH={target}" if program_name == "hip" else f"CUDA_ARCH={target}"
    argv = ["make", "-C", str(tree), f"BIN={folder}", arch, f"EXTRA_FLAGS={flags}", program_name]
    binary, log = tree / folder / BUILT[program_name], tree / folder / "build.log"
    up_to_date = log.exists() and subprocess.run([*argv[:1], "-q", *argv[1:]], capture_output=True).returncode == 0
    if not up_to_date:
        if announce:
            announce(f"building {name} for {target} ({' '.join(f'{k}={v}' for k, v in params.items())})")
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            return Variant(params, None, skip_reason(proc.stdout + proc.stderr), [], target)
        log.write_text(proc.stdout + proc.stderr)
    try:
        kernels = resources.usage_from(log.read_text(), target, resources.launch_table(binary), what=name)
    except FaError:
        kernels = []
    return Variant(params, Program(name, binary), None, kernels, target)


def skip_reason(output: str) -> str:
    """The compiler's reason in one line: a static_assert's message where there is one."""
    if m := re.search(r'static assertion failed with "([^"]+)"', output) or \
            re.search(r"static_assert failed due to requirement .*?\"([^\"]+)\"", output) or \
            re.search(r"static assertion failed: (.+)", output):
        return m.group(1).strip()
    lines = [l.strip() for l in output.splitlines() if "error" in l.lower()]
    return lines[0] if lines else "the build failed"


def tiled_kernel(variant: Variant, d: int) -> resources.KernelUsage | None:
    return next((k for k in variant.kernels if k.kernel.startswith(f"attention_tiled<{d},")), None)


def run_sweep(program_name: str, target: Target, params: list[str], arch: str, plan_args: dict, run: bool = True,
              with_profile: bool = False, profiler: str = "ncu", workdir: Path | None = None, announce=None,
              progress=None) -> list[dict]:
    """One record per combination (kind "sweep"): the variant's resources, and unless run is
    False its bench figures (and achieved occupancy with profiling); skipped ones say why."""
    if arch not in resources.TARGETS:
        raise FaError(f"--arch {arch}: give one of {', '.join(resources.TARGETS)}")
    records = []
    env = {"FA_KERNEL": "tiled"}
    combos = grid(params)
    # Builds in parallel (each compiler mostly uses one core), runs one at a time.
    with ThreadPoolExecutor(max_workers=max(1, min(len(combos), (os.cpu_count() or 2) // 2))) as pool:
        variants = list(pool.map(lambda combo: build(program_name, combo, arch, announce), combos))
    for combo, variant in zip(combos, variants):
        kernel = tiled_kernel(variant, target.shape.d)
        fields = {**combo, "arch": arch, "skipped": variant.skipped,
                  "resources": resource_summary(kernel)}
        program = variant.program or Program(variant_name(program_name, combo), Path("-"))
        plan = bench.BenchPlan([program], [target], env=env, kind="sweep", fields=fields, **plan_args)
        if variant.skipped or not run:
            record = new_record(program, target, plan.label, variant.skipped and f"skipped: {variant.skipped}",
                                "sweep", plan.launcher, **fields)
        else:
            with tempfile.TemporaryDirectory(prefix="fa-sweep-", dir=workdir) as work:
                record = bench.measure(plan, program, target, Path(work))
            if with_profile and not record.get("error"):
                kernels, _ = profile.profile(program, target, profiler, kernel="attention_tiled",
                                             launcher=plan.launcher, workdir=workdir, env=env)
                record["profile"] = {"kernel": kernels[0].kernel, "metrics": kernels[0].metrics, "profiler": profiler}
        records.append(record)
        if progress:
            progress(1)
    return records


def resource_summary(kernel: resources.KernelUsage | None) -> dict | None:
    if kernel is None:
        return None
    return {"kernel": kernel.kernel, "registers": kernel.registers, "spill_bytes": kernel.spill_bytes,
            "static_smem": kernel.static_smem, "threads": kernel.threads, "occupancy": kernel.occupancy,
            "limited_by": kernel.limited_by}


def rows(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a sweep table: one row per (Br, Bc)."""
    header = ["Br", "Bc", "threads", "registers", "shared KB", "theoretical occ. %", "achieved occ. %",
              "kernel ms", "TFLOP/s", "max err", "result"]
    body = []
    for r in records:
        res = r.get("resources") or {}
        achieved = (r.get("profile") or {}).get("metrics", {}).get("achieved occupancy")
        kernel = (r.get("timing") or {}).get("kernel")
        ok = not r.get("error")
        result = f"skipped: {r['skipped']}" if r.get("skipped") else \
            (r["error"] if r.get("error") else "not run" if "wall_s" not in r else "PASS" if r.get("passed") else "WRONG")
        body.append([str(r["Br"]), str(r["Bc"]), str(res.get("threads") or "-"), str(res.get("registers") or "-"),
                     f"{res['static_smem'] / 1024:.1f}" if res.get("static_smem") else "-",
                     f"{100 * res['occupancy']:.0f}" if res.get("occupancy") is not None else "-",
                     f"{achieved:.1f}" if achieved is not None else "-",
                     f"{kernel * 1e3:.4g}" if ok and kernel else "-",
                     f"{r['tflops_kernel']:.3g}" if ok and r.get("tflops_kernel") else "-",
                     f"{r['max_err']:.1e}" if ok and r.get("max_err") is not None else "-", result])
    return header, body


def local_arch(program_name: str) -> str:
    """This machine's GPU target for the program's vendor (what the variants are built for)."""
    vendor = "amd" if program_name == "hip" else "nvidia"
    found = [d.arch for d in list_devices() if d.vendor == vendor]
    if not found:
        raise FaError(f"no {vendor.upper()} GPU here to build for: give --arch (e.g. "
                      f"{'gfx90a' if vendor == 'amd' else 'sm_90'}), with --no-run on a machine without one",
                      exit_code=ExitStatus.BAD_INPUT)
    return found[0]

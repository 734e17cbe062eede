"""fa sweep: a kernel built with other tile sizes, each run, verified and timed.

Parameters are compile-time, and each kernel's are its registry row's (`PROGRAM --kernels`,
src_common/registry.h: the tiles per d, the -D flags that build others, the kernel's name in
the resource report). The homework kernel (--kernel tiled): Br (query rows per block,
FA_TILED_BR) and Bc (keys per tile, FA_TILED_BC). The register-blocked kernel (--kernel simt),
for the input's d (FA_SIMT32_* or FA_SIMT64_*; NVIDIA builds): TM x TN (scores per thread), C
(threads per row), R (row groups: a block is R x C threads, Br = R TM rows, Bc = C TN keys) and
MB (blocks per SM its registers are budgeted for). Each combination is built with make into
bin/variants/PROGRAM-.../ (reused while it is up to date), for one GPU target, with the
compiler's resource report kept beside it (build.log): registers, spills and shared memory per
kernel, and the theoretical occupancy they allow (as `fa resources` computes it). A combination
the kernel cannot take (too many threads, too much static shared memory, a row wider than a
warp) fails its build on a static_assert that says why: it is listed as skipped with that
reason. Then each variant runs on the input like a `fa bench` run (its kernel forced with
FA_KERNEL), and with profiling `fa profile` adds the achieved occupancy. A student's own source
is swept over its macros instead (fa_cli/measure/source_sweep.py).
"""
from __future__ import annotations

import itertools
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import locations
from ..cases.suite import Target
from ..errors import ExitStatus, FaError
from ..programs import registry
from ..programs.devices import list_devices
from ..programs.programs import BUILT, Program
from ..report.records import new_record
from . import bench, profile, resources

PROGRAMS = ("cuda", "hip-cuda", "hip")


@dataclass(frozen=True)
class Family:
    """A kernel fa sweep can build variants of: its parameters and their values as built."""
    kernel: str                                # the FA_KERNEL value that runs it
    defaults: dict[int, dict[str, int]]        # d -> parameter -> the program's own value
    spec: registry.SweepSpec

    def flags(self, params: dict[str, int], d: int) -> str:
        """The -D flags of a combination, for d."""
        return self.spec.flags.format(d=d, **params)

    def kernel_name(self, params: dict[str, int], d: int) -> str:
        """Its kernel's name in resource reports."""
        return self.spec.kernel_name.format(d=d, **params)

    def tile(self, params: dict[str, int]) -> tuple[int, int]:
        """(Br, Bc) of a combination."""
        return product(self.spec.rows, params), product(self.spec.keys, params)

    @property
    def params(self) -> list[str]:
        return list(self.defaults[64])


def listing(families: dict[str, Family]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of what a program can be swept over (fa sweep --list)."""
    body = [[name, str(d), " ".join(f"{k}={v}" for k, v in params.items()), f.spec.flags.replace("|", " ")]
            for name, f in families.items() for d, params in sorted(f.defaults.items())]
    return ["kernel", "d", "parameters as built", "-D flags of a variant"], body


def product(expression: str, params: dict[str, int]) -> int:
    """'R*TM' -> params['R'] * params['TM']."""
    value = 1
    for name in expression.split("*"):
        value *= params[name.strip()]
    return value


def families_of(program: Program) -> dict[str, Family]:
    """The kernels of a built program that fa sweep can build variants of, by FA_KERNEL value."""
    rows = registry.sweepable(registry.require(program.path, program.name))
    return {name: Family(name, row.tiles, row.sweep) for name, row in rows.items()}


def homework_kernel(program: Program) -> str:
    """fa sweep's default --kernel: the homework kernel of a built program, from its registry."""
    family = registry.homework_family(registry.require(program.path, program.name))
    if family is None:
        raise FaError(f"{program.name}'s ladder has no kernel fa sweep can build variants of: give --kernel")
    return family


# The compiler's resource report, per compiler.
REPORT_FLAGS = {"nvcc": "-Xptxas -v", "hipcc": "-Rpass-analysis=kernel-resource-usage"}


def parse_values(text: str) -> tuple[str, list[int]]:
    """'Br=8,16,32' -> ('Br', [8, 16, 32]), the values checked (whatever kernel they are for)."""
    name, sep, values = text.partition("=")
    if not sep:
        return name.strip(), []  # parse_param names what is expected
    try:
        numbers = [int(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise FaError(f"--param {text!r}: values must be whole numbers") from None
    if not numbers or any(n < 1 or n & (n - 1) for n in numbers):
        raise FaError(f"--param {text!r}: values must be powers of two (1, 2, 4, ...)")
    return name.strip(), sorted(set(numbers))


def parse_param(text: str, family: Family) -> tuple[str, list[int]]:
    """'Br=8,16,32' -> ('Br', [8, 16, 32]): parse_values, and NAME one of the family's parameters."""
    name, numbers = parse_values(text)
    if not numbers or name not in family.params:
        raise FaError(f"--param {text!r}: expected NAME=V1,V2,... with NAME one of {', '.join(family.params)} "
                      f"(--kernel {family.kernel})")
    return name, numbers


def check_arch(arch: str) -> None:
    if arch not in resources.TARGETS:
        raise FaError(f"--arch {arch}: give one of {', '.join(resources.TARGETS)}")


def grid(params: list[str], family: Family, d: int = 64) -> list[dict[str, int]]:
    """Every combination of the given parameters, the others at the program's own values for d."""
    chosen = {name: [value] for name, value in family.defaults[d].items()}
    for text in params:
        name, values = parse_param(text, family)
        chosen[name] = values
    return [dict(zip(chosen, combo)) for combo in itertools.product(*chosen.values())]


@dataclass
class Variant:
    params: dict[str, int]
    program: Program | None  # None: it could not be built
    skipped: str | None      # why not
    kernels: list[resources.KernelUsage]  # from the build's resource report, for `target`
    target: str


def variant_name(program_name: str, params: dict[str, int], family: Family, d: int = 64) -> str:
    same_for_every_d = family.defaults.get(32) == family.defaults.get(64)
    kind = "" if family.kernel == "tiled" and same_for_every_d else f"-{family.kernel}-d{d}"  # one d's tile
    return program_name + kind + "".join(f"-{k.lower()}{v}" for k, v in params.items())


def build(program_name: str, params: dict[str, int], target: str, family: Family, announce=None,
          d: int = 64) -> Variant:
    """Build (or reuse) one variant for target (sm_XX or gfxNNN) and read its resource report."""
    if program_name not in PROGRAMS:
        raise FaError(f"fa sweep builds the kernels of {', '.join(PROGRAMS)} (not {program_name})")
    tree = locations.source_tree()
    name = variant_name(program_name, params, family, d)
    folder = Path("bin") / "variants" / name
    compiler = "hipcc" if program_name == "hip" else "nvcc"
    flags = family.flags(params, d)
    if compiler == "nvcc":  # nvcc splits option values at commas unless escaped (\,), and make's shell eats one \
        flags = flags.replace(",", "\\\\,")
    flags += " " + REPORT_FLAGS[compiler]
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


def swept_kernel(variant: Variant, family: Family, d: int) -> resources.KernelUsage | None:
    """The variant's kernel for d in its resource report."""
    name = family.kernel_name(variant.params, d)
    return next((k for k in variant.kernels if k.kernel == name), None)


def run_sweep(program_name: str, target: Target, params: list[str], arch: str, plan_args: dict, run: bool = True,
              with_profile: bool = False, profiler: str = "ncu", workdir: Path | None = None, announce=None,
              progress=None, family: Family | None = None) -> list[dict]:
    """One record per combination (kind "sweep"): the variant's resources, and unless run is
    False its bench figures (and achieved occupancy with profiling); skipped ones say why."""
    check_arch(arch)
    records = []
    env = {"FA_KERNEL": family.kernel}
    d = target.shape.d
    combos = grid(params, family, d)
    # Builds in parallel (each compiler mostly uses one core), runs one at a time.
    with ThreadPoolExecutor(max_workers=max(1, min(len(combos), (os.cpu_count() or 2) // 2))) as pool:
        variants = list(pool.map(lambda combo: build(program_name, combo, arch, family, announce, d), combos))
    for combo, variant in zip(combos, variants):
        kernel = swept_kernel(variant, family, d)
        br, bc = family.tile(combo)
        fields = {**combo, "Br": br, "Bc": bc, "sweep_kernel": family.kernel, "sweep_params": list(combo), "arch": arch,
                  "skipped": variant.skipped, "resources": resource_summary(kernel)}
        program = variant.program or Program(variant_name(program_name, combo, family, d), Path("-"))
        plan = bench.BenchPlan([program], [target], env=env, kind="sweep", fields=fields, **plan_args)
        if variant.skipped or not run:
            record = new_record(program, target, plan.label, variant.skipped and f"skipped: {variant.skipped}",
                                "sweep", plan.launcher, **fields)
        else:
            with locations.scratch("sweep", workdir) as work:
                record = bench.measure(plan, program, target, Path(work))
            if with_profile and not record.get("error"):
                kernels, _ = profile.profile(program, target, profiler, kernel=f"attention_{family.kernel}",
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
            "static_smem": kernel.static_smem, "dynamic_smem": kernel.dynamic_smem, "threads": kernel.threads, "occupancy": kernel.occupancy,
            "limited_by": kernel.limited_by}


def swept_params(records: list[dict]) -> list[str]:
    """The parameters a sweep's records vary besides Br and Bc (simt's tiles derive Br and Bc)."""
    return [p for p in (records[0].get("sweep_params") or ["Br", "Bc"] if records else []) if p not in ("Br", "Bc")]


def key_columns(records: list[dict]) -> int:
    """How many of rows()' first columns name a combination: its parameters, Br and Bc."""
    return len(swept_params(records)) + 2


def rows(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a sweep table: one row per combination (its parameters, then Br and Bc
    where they are derived, as for simt)."""
    params = swept_params(records)
    header = [*params, "Br", "Bc", "threads", "registers", "spill B", "shared KB", "theoretical occ. %",
              "achieved occ. %", "kernel ms", "TFLOP/s", "max err", "result"]
    body = []
    for r in records:
        res = r.get("resources") or {}
        achieved = (r.get("profile") or {}).get("metrics", {}).get("achieved occupancy")
        kernel = (r.get("timing") or {}).get("kernel")
        ok = not r.get("error")
        result = result_of(r)
        body.append([*(str(r.get(p, "-")) for p in params), str(r["Br"]), str(r["Bc"]),
                     str(res.get("threads") or "-"), str(res.get("registers") or "-"),
                     str(res["spill_bytes"]) if res.get("spill_bytes") is not None else "-",
                     f"{(res.get('static_smem') or 0) / 1024 + (res.get('dynamic_smem') or 0) / 1024:.1f}"
                     if res.get("static_smem") or res.get("dynamic_smem") else "-",
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


def result_of(r: dict) -> str:
    if r.get("skipped"):
        return f"not built: {r['skipped']}" if r.get("sweep_source") else f"skipped: {r['skipped']}"
    return r["error"] if r.get("error") else "not run" if "wall_s" not in r else "PASS" if r.get("passed") else "WRONG"

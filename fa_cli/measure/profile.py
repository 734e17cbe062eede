"""fa profile: the course report's measurements of a program's kernels, from the vendors' profilers.

The course asks for four figures per kernel (section 2, NVIDIA): achieved occupancy, SM
efficiency, shared-memory load/store throughput and global load/store throughput; fa adds
the kernel's time, shared-memory bank conflicts, registers per thread and, for the kernel
that does the attention (by default the one that takes the most time), its TFLOP/s
(4*B*N*N*d over its time). NVIDIA_METRICS maps each course figure to the tools' metrics;
`fa profile --help` prints that table.
(ncu counts shared-memory throughput in wavefronts per second, nvprof in bytes per second.)

AMD (section 4): rocprof's counters (AMD_COUNTERS) and the figures derived from them by
AMD_FORMULAS (64 lanes per wave, 4 bytes per lane and instruction), next to derive_amd below.
rocprof v1 (`rocprof -i input.txt`, `pmc:` lines) and rocprofv3 (`--pmc`) are understood.

Per kernel, over all its launches: times add up; rates and percentages are averaged weighted
by each launch's time; counts add up.
"""
from __future__ import annotations

import csv
import io
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .. import locations
from ..errors import ExitStatus, FaError
from ..programs import ready
from ..programs.devices import describe_first
from ..programs.programs import Program, run
from ..report.records import new_record
from .resources import demangle

# (course figure, ncu metric, nvprof metric)
NVIDIA_METRICS = [
    ("time", "gpu__time_duration.sum", None),
    ("achieved occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active", "achieved_occupancy"),
    ("SM efficiency", "smsp__cycles_active.avg.pct_of_peak_sustained_elapsed", "sm_efficiency"),
    ("shared load", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum.per_second", "shared_load_throughput"),
    ("shared store", "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum.per_second", "shared_store_throughput"),
    ("global load", "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum.per_second", "gld_throughput"),
    ("global store", "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum.per_second", "gst_throughput"),
    ("shared ld conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "shared_ld_bank_conflict"),
    ("shared st conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "shared_st_bank_conflict"),
    ("registers", "launch__registers_per_thread", None),
]
AMD_COUNTERS = ["SQ_WAVES", "SQ_INSTS_VALU", "SQ_INSTS_LDS", "SQ_INSTS_VMEM_RD", "SQ_INSTS_VMEM_WR",
                "SQ_LDS_BANK_CONFLICT", "SQ_BUSY_CYCLES", "GRBM_GUI_ACTIVE"]
COUNTS = {"shared ld conflicts", "shared st conflicts", "registers", *AMD_COUNTERS}
PROFILERS = ("ncu", "nvprof", "rocprof", "rocprofv3")


@dataclass
class KernelProfile:
    kernel: str
    launches: int = 0
    time_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)  # course figure (or counter) -> value
    tflops: float | None = None


@dataclass
class Launch:
    """One kernel launch as a profiler reported it: its time and its metric values."""

    kernel: str
    time_s: float
    values: dict[str, float]


# ----------------------------------------------------------------------------- command lines
def command(profiler: str, work: Path, kernel: str | None, full: bool) -> list[str]:
    """What goes before `PROGRAM INPUT OUTPUT`: the profiler and its options; results go to work."""
    if profiler == "ncu":
        metrics = ",".join(m for _, m, _ in NVIDIA_METRICS)
        # Clocks as the program runs them (ncu locks them at base by default): kernel times and
        # TFLOP/s comparable with fa bench's. Mangled names, demangled as fa resources does.
        return ["ncu", "--csv", "--page", "raw", "--print-units", "base", "--clock-control", "none",
                "--print-kernel-base", "mangled", "--metrics", metrics,
                *(["--set", "full"] if full else []), *(["--kernel-name", f"regex:{kernel}"] if kernel else []),
                "--log-file", str(work / "ncu.csv")]
    if profiler == "nvprof":
        metrics = ",".join(m for _, _, m in NVIDIA_METRICS if m)
        return ["nvprof", "--csv", "--print-gpu-trace", "--metrics", metrics, "--normalized-time-unit", "s",
                *(["--kernels", kernel] if kernel else []), "--log-file", str(work / "nvprof.csv")]
    if profiler == "rocprof":
        # Four counters per pass: what one pass of the SQ block can count at once.
        lines = [f"pmc: {' '.join(AMD_COUNTERS[i:i + 4])}" for i in range(0, len(AMD_COUNTERS), 4)]
        (work / "input.txt").write_text("\n".join(lines) + "\n")
        return ["rocprof", "-i", str(work / "input.txt"), "--timestamp", "on", "-o", str(work / "rocprof.csv")]
    if profiler == "rocprofv3":
        return ["rocprofv3", "--pmc", *AMD_COUNTERS, "--kernel-trace", "--output-format", "csv", "-d", str(work),
                "-o", "fa", "--"]
    raise FaError(f"no profiler named {profiler!r}: give one of {', '.join(PROFILERS)}")


def choose(profiler: str, program_name: str) -> str:
    """auto: rocprof (or rocprofv3) for the AMD program, else ncu (nvprof for Pascal: say so)."""
    if profiler != "auto":
        return profiler
    if program_name == "hip":
        return "rocprof" if shutil.which("rocprof") or not shutil.which("rocprofv3") else "rocprofv3"
    return "ncu" if shutil.which("ncu") or not shutil.which("nvprof") else "nvprof"


# ----------------------------------------------------------------------------- parsers
def number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def csv_rows(text: str) -> list[list[str]]:
    """The CSV part of a profiler's log: its own '==PROF==' / '==123==' lines left out."""
    lines = [l for l in text.splitlines() if l.strip() and not l.startswith("==")]
    return list(csv.reader(io.StringIO("\n".join(lines))))


TIME_UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
              "second": 1.0, "s": 1.0}


def parse_ncu(text: str) -> list[Launch]:
    """`ncu --csv --page raw`: a header of metric names, a row of units, a row per launch."""
    rows = csv_rows(text)
    if len(rows) < 2 or "Kernel Name" not in rows[0]:
        return []  # no kernel was profiled (a --kernel that matched nothing, say)
    header, units = rows[0], rows[1]
    col = {name: i for i, name in enumerate(header)}
    by_ncu = {m: figure for figure, m, _ in NVIDIA_METRICS}
    launches = []
    for row in rows[2:]:
        values = {}
        for metric, figure in by_ncu.items():
            if metric in col and (v := number(row[col[metric]])) is not None:
                values[figure] = v
        seconds = values.pop("time", 0.0) * TIME_UNITS.get(units[col["gpu__time_duration.sum"]], 1e-9) \
            if "gpu__time_duration.sum" in col else 0.0
        launches.append(Launch(row[col["Kernel Name"]], seconds, values))
    return named(launches)


def named(launches: list[Launch]) -> list[Launch]:
    """Kernel names as fa resources shows them (demangled, without namespace and parameters),
    whether a profiler wrote them mangled or demangled."""
    names = demangle(sorted({l.kernel for l in launches}))
    for l in launches:
        l.kernel = names[l.kernel]
    return launches


BYTE_RATE = {"B/s": 1, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}


def nvprof_value(text: str) -> float | None:
    """nvprof writes rates with their unit ('12.3GB/s') and ratios bare."""
    text = text.strip()
    for unit, scale in sorted(BYTE_RATE.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(unit):
            v = number(text[: -len(unit)])
            return None if v is None else v * scale
    return number(text.rstrip("%"))


def parse_nvprof(text: str) -> list[Launch]:
    """`nvprof --csv --print-gpu-trace --metrics ...`: a row per launch, a column per metric
    (after a row of units), the kernel in 'Name'; durations in 'Duration' when traced."""
    rows = csv_rows(text)
    if len(rows) < 2:
        return []
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    name_col = col.get("Name", col.get("Kernel"))
    by_nvprof = {m: figure for figure, _, m in NVIDIA_METRICS if m}
    unit_row = rows[1] if all(number(x) is None for x in rows[1]) else None
    launches = []
    for row in rows[2 if unit_row else 1:]:
        if name_col is None or not row[name_col] or row[name_col].startswith("[CUDA"):
            continue  # copies and API rows of the trace
        values = {figure: v for m, figure in by_nvprof.items() if m in col
                  and (v := nvprof_value(row[col[m]])) is not None}
        if "achieved occupancy" in values:
            values["achieved occupancy"] *= 100  # nvprof: a fraction; ncu and fa: percent
        seconds = 0.0
        if "Duration" in col and (d := number(row[col["Duration"]])) is not None:
            seconds = d * TIME_UNITS.get(unit_row[col["Duration"]] if unit_row else "s", 1.0)
        launches.append(Launch(row[name_col], seconds, values))
    return named(launches)


def parse_rocprof(text: str) -> list[Launch]:
    """rocprof v1's results CSV: a row per dispatch, counters as columns, BeginNs/EndNs."""
    rows = csv_rows(text)
    if not rows:
        return []
    col = {name: i for i, name in enumerate(rows[0])}
    launches = []
    for row in rows[1:]:
        values = {c: v for c in AMD_COUNTERS if c in col and (v := number(row[col[c]])) is not None}
        seconds = (number(row[col["EndNs"]]) - number(row[col["BeginNs"]])) * 1e-9 if "EndNs" in col else 0.0
        launches.append(Launch(row[col["KernelName"]], seconds, values))
    return named(launches)


def parse_rocprofv3(counters: str, trace: str) -> list[Launch]:
    """rocprofv3's counter_collection.csv (a row per dispatch and counter) joined with its
    kernel_trace.csv (a row per dispatch, with timestamps) on Dispatch_Id."""
    times = {}
    rows = csv_rows(trace)
    if rows:
        col = {name: i for i, name in enumerate(rows[0])}
        for row in rows[1:]:
            start, end = number(row[col["Start_Timestamp"]]), number(row[col["End_Timestamp"]])
            times[row[col["Dispatch_Id"]]] = (end - start) * 1e-9
    dispatches: dict[str, Launch] = {}
    rows = csv_rows(counters)
    if rows:
        col = {name: i for i, name in enumerate(rows[0])}
        for row in rows[1:]:
            d = row[col["Dispatch_Id"]]
            launch = dispatches.setdefault(d, Launch(row[col["Kernel_Name"]], times.get(d, 0.0), {}))
            if (v := number(row[col["Counter_Value"]])) is not None:
                launch.values[row[col["Counter_Name"]]] = launch.values.get(row[col["Counter_Name"]], 0.0) + v
    return named(list(dispatches.values()))


def read_results(profiler: str, work: Path) -> list[Launch]:
    if profiler == "ncu":
        return parse_ncu(_read(work / "ncu.csv"))
    if profiler == "nvprof":
        return parse_nvprof(_read(work / "nvprof.csv"))
    if profiler == "rocprof":
        return parse_rocprof(_read(work / "rocprof.csv"))
    counters = next(work.rglob("*counter_collection.csv"), None)
    trace = next(work.rglob("*kernel_trace.csv"), None)
    return parse_rocprofv3(_read(counters) if counters else "", _read(trace) if trace else "")


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


# ----------------------------------------------------------------------------- per kernel
def aggregate(launches: list[Launch], kernel: str | None, flops: int | None,
              flops_kernel: str | None) -> list[KernelProfile]:
    """One KernelProfile per kernel name; `kernel` keeps only names containing it."""
    kernels: dict[str, KernelProfile] = {}
    weights: dict[str, dict[str, float]] = {}
    for launch in launches:
        if kernel and kernel not in launch.kernel:
            continue
        k = kernels.setdefault(launch.kernel, KernelProfile(launch.kernel))
        w = weights.setdefault(launch.kernel, {})
        k.launches += 1
        k.time_s += launch.time_s
        for name, value in launch.values.items():
            if name in COUNTS:
                k.metrics[name] = k.metrics.get(name, 0.0) + value if name != "registers" else value
            else:  # a rate or a percentage: weighted by the launch's time (equally if none is known)
                weight = launch.time_s or 1.0
                k.metrics[name] = k.metrics.get(name, 0.0) + value * weight
                w[name] = w.get(name, 0.0) + weight
    for name, k in kernels.items():
        for metric, total_weight in weights[name].items():
            k.metrics[metric] /= total_weight
        derive_amd(k)
    if flops and kernels:
        target = flops_kernel or max(kernels.values(), key=lambda k: k.time_s).kernel
        for k in kernels.values():
            if target in k.kernel and k.time_s > 0:
                k.tflops = flops / k.time_s / 1e12
    return sorted(kernels.values(), key=lambda k: -k.time_s)


# The AMD figures, each from rocprof's counters (t: the kernel's time); derive_amd computes them.
AMD_FORMULAS = [
    ("VALU instructions/s", "SQ_INSTS_VALU / t"),
    ("LDS bytes/s", "SQ_INSTS_LDS * 64 lanes * 4 bytes / t"),
    ("global read bytes/s", "SQ_INSTS_VMEM_RD * 64 * 4 / t"),
    ("global write bytes/s", "SQ_INSTS_VMEM_WR * 64 * 4 / t"),
    ("bank conflict cycles per LDS instruction", "SQ_LDS_BANK_CONFLICT / SQ_INSTS_LDS"),
    ("SQ busy %", "100 * SQ_BUSY_CYCLES / GRBM_GUI_ACTIVE"),
]


def derive_amd(k: KernelProfile) -> None:
    """The AMD figures of AMD_FORMULAS, where rocprof counted what they need."""
    m, t = k.metrics, k.time_s
    if "SQ_INSTS_VALU" not in m or t <= 0:
        return
    m["VALU instructions/s"] = m["SQ_INSTS_VALU"] / t
    for counter, figure in (("SQ_INSTS_LDS", "LDS bytes/s"), ("SQ_INSTS_VMEM_RD", "global read bytes/s"),
                            ("SQ_INSTS_VMEM_WR", "global write bytes/s")):
        if counter in m:
            m[figure] = m[counter] * 64 * 4 / t
    if m.get("SQ_INSTS_LDS"):
        m["bank conflict cycles per LDS instruction"] = m.get("SQ_LDS_BANK_CONFLICT", 0.0) / m["SQ_INSTS_LDS"]
    if m.get("GRBM_GUI_ACTIVE"):
        m["SQ busy %"] = 100 * m.get("SQ_BUSY_CYCLES", 0.0) / m["GRBM_GUI_ACTIVE"]


def help_tables() -> str:
    """The metric table and the AMD formulas, for `fa profile --help` (click keeps \\b blocks as written)."""
    lines = ["\b", "course figure:", "    ncu metric (sm_70+)", "    nvprof metric (Pascal)"]
    instead = {"time": "Duration (--print-gpu-trace)", "registers": "fa resources"}
    lines += [f"  {figure}:\n      {ncu}\n      {nv or instead[figure]}" for figure, ncu, nv in NVIDIA_METRICS]
    lines += ["", "\b", "AMD (rocprof counters; t = kernel time):"]
    lines += [f"  {figure} =\n    {formula}" if len(figure) + len(formula) > 70 else f"  {figure} = {formula}"
              for figure, formula in AMD_FORMULAS]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- one profiled run
def profile(program, target, profiler: str, kernel: str | None = None, full: bool = False, launcher=None,
            workdir: Path | None = None, flops_kernel: str | None = None,
            env: dict[str, str] | None = None) -> tuple[list[KernelProfile], list[str]]:
    """Run program on target under the profiler (with `env` added to the environment); its
    kernels' figures and the command line."""
    ready.check_profiler(profiler, launcher)
    with locations.scratch("profile", workdir) as tmp:
        work = Path(tmp)
        prefix = command(profiler, work, kernel, full)
        profiled = Program(program.name, program.path, None, (*prefix, *program.interpreter))
        result = run(profiled, target.input_path, work / "out", launcher, env=env)
        if result.error:
            raise FaError(f"{program.name} under {profiler} on {target.name}: {result.error}",
                          exit_code=ExitStatus.FAILED)
        launches = read_results(profiler, work)
    if not launches and kernel:
        raise FaError(f"--kernel {kernel}: no kernel of that name ran in {program.name} on {target.name}")
    if not launches:
        raise FaError(f"{profiler} reported no kernel launches of {program.name} on {target.name}",
                      exit_code=ExitStatus.FAILED)
    kernels = aggregate(launches, kernel, target.shape.flops, flops_kernel)
    if not kernels:
        seen = ", ".join(sorted({l.kernel for l in launches}))
        raise FaError(f"--kernel {kernel}: matches none of the kernels that ran ({seen})")
    return kernels, [*prefix, *program.argv, str(target.input_path), "OUTPUT"]


def as_record(k: KernelProfile, program, target, profiler: str, argv: list[str], launcher=None) -> dict:
    """One results-file record (records.new_record): a kernel of a program on an input (run
    through `launcher`, whose machine the record describes)."""
    names = {figure: (ncu if profiler == "ncu" else nv) for figure, ncu, nv in NVIDIA_METRICS} \
        if profiler in ("ncu", "nvprof") else {c: c for c in AMD_COUNTERS}
    return new_record(program, target, None, None, "profile", launcher, device=describe_first(), profiler=profiler,
                      kernel=k.kernel, launches=k.launches, time_s=k.time_s, tflops=k.tflops, metrics=k.metrics,
                      metric_names={f: n for f, n in names.items() if n}, profiler_command=" ".join(argv))

"""fa compare: timed records side by side, as a rich or markdown table and as a PNG chart.

Records of every command that times whole runs are compared: fa bench, fa run (-o), fa ladder
and fa sweep; a fa run record's one wall time counts as its median. Runs are the (label or
program, device) pairs found in the records; the first run is the baseline of the speedup
column. Rows are inputs, in the order first seen.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from ..errors import FaError
from ..report import charts
from ..report.markdown import REPORT_WIDTH, markdown_table, paragraph
from . import judge_column

TIMED_KINDS = ("bench", "run", "ladder", "sweep")


@dataclass(frozen=True)
class RunKey:
    name: str  # the record's label, else its program
    device: str

    def __str__(self) -> str:
        return f"{self.name} on {self.device}"


def timed_records(found: dict[str, list[dict]]) -> list[dict]:
    """The records fa compare can put side by side, from records.by_kind's records by kind, each
    with wall_s as {median, min, max, all}; a file set with none is refused in one line."""
    timed = []
    for kind in TIMED_KINDS:
        for r in found.get(kind, []):
            if r.get("skipped"):
                continue  # a sweep variant that was never built: nothing ran
            wall = r.get("wall_s")
            if isinstance(wall, (int, float)):
                r = {**r, "wall_s": {"median": wall, "min": wall, "max": wall, "all": [wall]}}
            timed.append(r)
    if not timed:
        kinds = ", ".join(k for k, v in found.items() if v)
        raise FaError(f"nothing to compare: fa compare takes results of fa bench, run, ladder and sweep "
                      f"(these files hold {kinds} records; fa report shows those)")
    return timed


def run_key(record: dict) -> RunKey:
    return RunKey(record.get("label") or record["program"], record.get("device") or "unknown")


def arrange(records: list[dict]) -> tuple[list[RunKey], "OrderedDict[str, dict[RunKey, dict]]"]:
    """Runs in order of appearance, and per input the latest record of each run."""
    runs: list[RunKey] = []
    table: OrderedDict[str, dict[RunKey, dict]] = OrderedDict()
    for r in records:
        key = run_key(r)
        if key not in runs:
            runs.append(key)
        s = r["shape"]
        shape = f"{s['B']}x{s['N']}x{s['d']}"
        name = r["input"] if r["input"] == shape else f"{r['input']} ({shape})"
        table.setdefault(name, {})[key] = r
    return runs, table


def cell_time(record: dict | None) -> str:
    if record is None:
        return "-"
    if record.get("error"):
        return "error"
    return f"{record['wall_s']['median']:.3f}"


def judge_gpu_column(records: list[dict]) -> judge_column.Column | None:
    """The judge's GPU's estimated time of the records that hold one (fa run -o, fa bench of a
    student's hw4.cu or hw4.hip): the column's header and the lines that say what it is."""
    return judge_column.for_records(records, judge_row)


def judge_row(record: dict) -> str:
    """A record's name in the column's words: its input and run (program or label, and device)."""
    return f"{record['input']} ({run_key(record)})"


def judge_cell(column: judge_column.Column, record: dict | None) -> str:
    return column.cells.get(judge_row(record), "-") if record else "-"


def judge_words(records: list[dict]) -> list[str]:
    column = judge_gpu_column(records)
    return column.words if column else []


def rows(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: per input, each run's whole-process time, kernel TFLOP/s and max error
    (and its GTX 1080 estimate where a record has one), then each run's speedup over the first."""
    runs, table = arrange(records)
    judge = judge_gpu_column(records)
    header = ["input"]
    for k in runs:
        header += [f"{k} time s", *([f"{k} {judge.header}"] if judge else []), f"{k} kernel TFLOP/s", f"{k} max err"]
    header += [f"speedup {k.name} vs {runs[0].name}" for k in runs[1:]]
    body = []
    for name, by_run in table.items():
        row = [name]
        for k in runs:
            r = by_run.get(k)
            ok = r is not None and not r.get("error")
            row += [cell_time(r), *([judge_cell(judge, r)] if judge else []),
                    f"{r['tflops_kernel']:.3g}" if ok and r.get("tflops_kernel") else "-",
                    f"{r['max_err']:.1e}" if ok else "-"]
        base = by_run.get(runs[0])
        for k in runs[1:]:
            r = by_run.get(k)
            if base and r and not base.get("error") and not r.get("error"):
                row.append(f"{base['wall_s']['median'] / r['wall_s']['median']:.2f}x")
            else:
                row.append("-")
        body.append(row)
    return header, body


def long_rows(records: list[dict]) -> tuple[list[str], list[list[str]], str]:
    """The same figures one row per (input, run): six columns whatever the number of runs (the
    judge's GPU's estimate in place of kernel TFLOP/s where no run has a kernel stage); the
    device named once (" on X", the third value) where every run has the same one."""
    runs, table = arrange(records)
    devices = {k.device for k in runs}
    label = (lambda k: k.name) if len(devices) == 1 else str
    judge = judge_gpu_column(records)
    # a student's program prints no kernel stage: with the judge's column, an empty TFLOP/s one gives way
    flops = not judge or any(r.get("tflops_kernel") for r in records)
    header = ["input", "run", "time s", *([judge.header] if judge else []), *(["kernel TFLOP/s"] if flops else []),
              "max err", f"speed-up vs {label(runs[0])}"]
    body = []
    for name, by_run in table.items():
        base = by_run.get(runs[0])
        for k in runs:
            r = by_run.get(k)
            if r is None:
                continue
            ok = not r.get("error")
            fast = (f"{base['wall_s']['median'] / r['wall_s']['median']:.2f}x"
                    if base and ok and not base.get("error") else "-")
            body.append([name, label(k), cell_time(r), *([judge_cell(judge, r)] if judge else []),
                         *([f"{r['tflops_kernel']:.3g}" if ok and r.get("tflops_kernel") else "-"] if flops else []),
                         f"{r['max_err']:.1e}" if ok and r.get("max_err") is not None else "-", fast])
    return header, body, f" on {devices.pop()}" if len(devices) == 1 else ""


def markdown(records: list[dict], wide: bool = False) -> str:
    """A report's table: one row per input and run, in 80 columns, under a line naming the device
    where every run had the same; wide: one row per input, the runs side by side."""
    if wide:
        table = markdown_table(*rows(records), width=None)
    else:
        header, body, where = long_rows(records)
        against = header[-1].removeprefix("speed-up vs ")
        table = (paragraph(f"Whole-process medians{where}; the speed-up is over {against}:") + "\n\n"
                 + markdown_table([*header[:-1], "speed-up"], body, keys=2))
    notes = [n for n in (amd_note(records), *judge_words(records)) if n]
    return table + "".join(f"\n{paragraph(n, None if wide else REPORT_WIDTH)}\n" for n in notes)


AMD_WORDS = ("amd", "instinct", "radeon", "gfx")


def hip_off_amd(record: dict) -> bool:
    """A run of a HIP build (fa's hip-cuda, or a program named *hip*) on a GPU that is not AMD's."""
    names = f"{record.get('program', '')} {record.get('program_path', '')} {record.get('label') or ''}".lower()
    device = (record.get("device") or "").lower()
    return ("hip" in names or "amd" in names) and not any(w in device for w in AMD_WORDS)


def amd_note(records: list[dict]) -> str | None:
    """What the AMD side of a comparison is: figures of HIP builds run on NVIDIA are not AMD
    measurements, and without an AMD GPU the MI210's figures are estimates only."""
    if any(any(w in (r.get("device") or "").lower() for w in AMD_WORDS) for r in records):
        return None
    if not any(hip_off_amd(r) for r in records):
        return None
    return ("Note: no AMD GPU ran these. The HIP runs here ran on NVIDIA hardware (src_hip/hip_on_cuda.h; a "
            "student's hw4.hip through the MI210 emulation, src_hip/wave64): they are not AMD measurements; for an MI210 there are estimates only (docs/kernels.md, "
            "\"MI210 speed: an ESTIMATE\").")


def plot(records: list[dict], path: Path) -> Path:
    """One PNG at `path`: stage breakdown per input and run, and time against N (charts.bench_chart)."""
    return charts.bench_chart(*arrange(records), path)

"""Everything fa prints for people: rich tables and verification summaries (progress: progress_bars)."""
from __future__ import annotations

import re

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..cases import suite
from ..judge.verdict import CaseResult
from ..judge.verify import VerifyResult
from ..measure.bench import uncertainty
from ..programs import devices
from . import lines
from .progress_bars import progress  # noqa: F401 (commands reach progress here)

# Output to a file or a pipe (CI logs, reports) is never cut: show() widens it to each table.
console = Console(width=lines.fitting_width() or 132)
VERDICT_STYLE = {"PASS": "green", "WRONG": "red", "TLE": "yellow", "ERROR": "red"}


def show(table: Table, wide: bool = False) -> None:
    """Print a table on stdout. On a terminal (or with COLUMNS set: lines.fitting_width) rich fits
    it to the width: a column of figures is as wide as its widest figure, its header wrapped to
    it, and only text cells wrap at need (a figure is never cut). A table whose figures alone are
    wider is printed row by row, each row's columns as `header: value` folded to the width
    (stacked), unless the user asked for it wide (--wide), which is printed as wide as it needs,
    as any table in a file or a pipe."""
    for column in table.columns:
        column.overflow = "fold"
    width = lines.fitting_width() or (console.width if console.is_terminal else None)
    if width is not None:
        figures = []
        for column in table.columns:
            cells = [Text.from_markup(str(c)).plain for c in column.cells]
            if cells and all(NUMERIC.match(c) for c in cells):
                widest = max(map(len, cells))
                column.no_wrap = True  # not shrunk by rich: the text columns give way
                column.header = wrap_words(str(column.header), max(widest, 7))
                figures += cells
        with console.capture() as fitted:
            console.print(table, width=width)
        text = fitted.get()
        if all(f in text for f in figures) and max(map(len, text.splitlines() or [""])) <= width:
            console.file.write(text)  # every figure whole: it fits
            return
        if not wide:
            console.file.write(stacked(table, width) + "\n")
            return
    natural = console.measure(table, options=console.options.update(width=10_000)).maximum
    saved = console.width
    console.width = max(saved, natural)  # console.print's width= may only narrow
    try:
        console.print(table, crop=False)
    finally:
        console.width = saved


def stacked(table: Table, width: int) -> str:
    """A table too wide for the terminal, a row at a time: its first column, then every other
    column as `header: value`, folded to the width (nothing cut)."""
    def plain(value) -> str:
        return " ".join(Text.from_markup(str(value)).plain.split())
    headers = [plain(c.header) for c in table.columns]
    cells = [[plain(c) for c in column.cells] for column in table.columns]
    out = [lines.fold(plain(table.title), width)] if table.title else []
    for i in range(len(cells[0]) if cells else 0):
        pairs = [f"{h}: {col[i]}" for h, col in zip(headers[1:], cells[1:])]
        out.append(lines.fold(f"{headers[0]} {cells[0][i]}: " + "; ".join(pairs), width))
    return "\n".join(out)


def wrap_words(text: str, width: int) -> str:
    """text on lines of at most width characters, broken at spaces (a longer word stays whole)."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


# A cell holding one figure: 0.515, 5.8e-06, 1.01x, 61%, "2.083 ±1.2%", 26x32768x64, or "-" for none.
NUMERIC = re.compile(r"^(-|[-+]?\d[\d.,]*(e[-+]?\d+)?(x|%| ±[\d.]+%)?|\d+x\d+x\d+)$")


def fmt_err(x: float) -> str:
    return f"{x:.2e}"


def verify_summary(result: VerifyResult) -> str:
    verdict = "PASS" if result.passed else "FAIL"
    lines = [
        f"{verdict}: max abs error {fmt_err(result.max_err)} at {result.describe_where()} "
        f"(tolerance {result.tol:g}, {result.mode})",
        f"checked {result.checked} values, {result.bad} over tolerance",
    ]
    if result.nonfinite:
        lines.append(f"{result.nonfinite} values are NaN or infinite")
    if result.sampled:
        lines.append(SAMPLED_NOTE)
    return "\n".join(lines)


SAMPLED_NOTE = ("sampled: only some rows were compared, a quick look; the course compares every value "
                "(leave out --sample)")


def verify_details(result: VerifyResult, diagnosis) -> str:
    """The diagnosis of a failed fa verify, below its summary (which has the counts and the worst place)."""
    there = [f"wrote {result.got:.6g} there, expected {result.expected:.6g}"] if result.got is not None else []
    return "\n".join(there + diagnosis.lines[2:])


def plural(n: int, word: str, many: str | None = None) -> str:
    """"1 record", "2 records"."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def one_of(items) -> str:
    """"16", "16 or 32", "16, 32 or 64"."""
    words = [str(x) for x in items]
    return ", ".join(words[:-1]) + (" or " if len(words) > 1 else "") + words[-1]


NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")


def alike(result: CaseResult) -> tuple:
    """What two cases' diagnoses share when they differ only in the figures of their first line
    (counts, a time), their worst value and their stderr; where the wrong values are and which
    mistake explains them must be the same."""
    lines = result.diagnosis.lines
    return (result.verdict, NUMBER.sub("#", lines[0]),
            *(NUMBER.sub("#", l) if l.startswith(("worst:", "stderr:")) else l for l in lines[1:]))


def case_ranges(names: list[str]) -> str:
    """t11, t12, ..., t30 -> "t11..t30": runs of consecutive suite cases shortened."""
    order = {name: i for i, name in enumerate(suite.cases(None))}
    runs: list[list[str]] = []
    for name in sorted(names, key=lambda n: order.get(n, len(order))):
        last = runs[-1][-1] if runs else None
        if last in order and name in order and order[name] == order[last] + 1 and name[0] == last[0]:
            runs[-1].append(name)
        else:
            runs.append([name])
    return ", ".join(run[0] if len(run) == 1 else ", ".join(run) if len(run) == 2 else f"{run[0]}..{run[-1]}"
                     for run in runs)


def diagnoses(results: list[CaseResult], always: bool = False) -> str:
    """One short paragraph per case that did not pass (every case, with always): its verdict and
    why (diagnose.py, cause.py). Cases whose diagnoses differ only in their figures share one
    paragraph, the first case's, headed by all their names."""
    groups: dict[tuple, list[CaseResult]] = {}
    for r in results:
        if (r.ok and not always) or r.diagnosis is None or not r.diagnosis.lines:
            continue
        groups.setdefault(alike(r), []).append(r)
    paragraphs = []
    for group in groups.values():
        first, names = group[0], case_ranges([r.target.name for r in group])
        lines = list(first.diagnosis.lines)
        if len(group) > 1 and first.verdict == "TLE":
            limits = sorted({f"{r.time_limit:g} s" for r in group if r.time_limit}, key=lambda x: float(x[:-2]))
            at = f"their {limits[0]} time limit" if len(limits) == 1 else "their time limits, " + "/".join(limits)
            lines = [f"stopped at {at} (whole process); --no-time-limit lets them finish"]
        elif len(group) > 1 and any(r.diagnosis.lines != lines for r in group):
            lines[0] += f" (in {first.target.name}; the {plural(len(group) - 1, 'other')} alike)"
        head = f"{names} {first.verdict}" + (f" ({len(group)} cases)" if len(group) > 1 else "")
        paragraphs.append(f"{head}: {lines[0]}" + "".join(f"\n  {l}" for l in lines[1:]))
    return "\n\n".join(paragraphs)


VERDICTS = ("PASS", "WRONG", "TLE", "ERROR")


def run_summary(results: list[CaseResult]) -> str:
    """fa run's last line: counts by verdict, the time of all runs, the case nearest its limit."""
    counts = ", ".join(f"{n} {v}" for v in VERDICTS if (n := sum(r.verdict == v for r in results)))
    total = sum(r.run.wall_s for r in results)
    line = f"{plural(len(results), 'case')}: {counts}; {total:.2f} s of runs"
    limited = [r for r in results if r.time_limit]
    if limited:
        r = max(limited, key=lambda r: r.run.wall_s / r.time_limit)
        line += (f"; nearest its limit: {r.target.name}, {r.run.wall_s:.2f} s of {r.time_limit:g} s "
                 f"({r.run.wall_s / r.time_limit:.0%})")
    elif results:
        r = max(results, key=lambda r: r.run.wall_s)
        line += f"; slowest: {r.target.name}, {r.run.wall_s:.2f} s (no time limit)"
    return line


def judge_table(results: list[CaseResult], judge_gpu=None) -> Table:
    """fa run's table, in 80 columns: the program in the title where every case ran the same one,
    and the device the runs used (devices.device_of_run: one name in every table and record);
    judge_gpu: the estimated time of each case on the judge's GPU (measure/judge_column.Column:
    header, cells by case), a column of its own, for which the checked column gives way where
    every case was checked alike (checked_alike says how, under the table)."""
    names = {r.program.name for r in results}
    one = names.pop() if len(names) == 1 else None
    used = {devices.device_of_run(r.run.build) for r in results}
    device = used.pop() if len(used) == 1 else " and ".join(sorted(used)) or devices.describe_first()
    table = Table(title=f"fa run of {one} on {device}" if one else f"fa run on {device}", title_justify="left")
    checked = not (judge_gpu and checked_alike(results))
    columns = ["case", "B×N×d", *([] if one else ["program"]), "time s", *([judge_gpu.header] if judge_gpu else []),
               "limit s", "max err", *(["checked"] if checked else []), "verdict"]
    for column in columns:
        table.add_column(column, no_wrap=True, justify="right" if column in ("time s", "limit s", "max err") else "left")
    for r in results:
        s = r.target.shape
        verdict = r.verdict
        limit = f"{r.time_limit:g}" if r.time_limit else "-"
        err = fmt_err(r.check.max_err) if r.check else "-"
        check = r.check.mode if r.check else "-"
        label = f"{verdict}, sampled" if checked and r.check and r.check.sampled else verdict
        table.add_row(r.target.name, f"{s.B}×{s.N}×{s.d}", *([] if one else [r.program.name]), f"{r.run.wall_s:.3f}",
                      *([judge_gpu.cells.get(r.target.name, "-")] if judge_gpu else []),
                      limit, err, *([check] if checked else []), f"[{VERDICT_STYLE[verdict]}]{label}[/]")
    return table


def checked_alike(results: list[CaseResult]) -> str | None:
    """How every case was checked where they all were alike ("every value"), else None."""
    modes = {r.check.mode if r.check else "-" for r in results}
    return modes.pop() if len(modes) == 1 and "-" not in modes else None


def process_cell(wall: dict) -> str:
    """The whole-process median and half its 95% interval, in percent of it."""
    return f"{wall['median']:.3f} ±{uncertainty(wall['all']):.1%}"


def bench_table(records: list[dict], wide: bool = False, judge_gpu=None) -> Table:
    """fa bench's table: what fits 80 columns (the device in the title where every run has the
    same); wide adds the device, the runs and their spread; judge_gpu: the estimated time on the
    judge's GPU by bench_row (measure/judge_column.for_records), a column of its own."""
    devices = {r["device"] for r in records}
    wide = wide or len(devices) > 1
    where = "" if wide or not devices else f" on {devices.pop()}"
    table = Table(title=f"fa bench{where} (medians; TFLOP/s counts 4*B*N*N*d)", title_justify="left")
    columns = ["input", "program", *(["device"] if wide else []), "kernel impl", "process s",
               *([judge_gpu.header] if judge_gpu else []), *(["runs", "spread s"] if wide else []), "kernel ms",
               "kernel TFLOP/s", "max err"]
    for column in columns:
        table.add_column(column)
    for r in records:
        program = r["program"] + (" (A/A)" if r.get("control") else "")  # a program given twice
        device = [r["device"]] if wide else []
        judge = [judge_gpu.cells.get(bench_row(r), "-")] if judge_gpu else []
        if r.get("error"):
            table.add_row(r["input"], program, *device, "-", "[red]error[/]", *judge, *(["-", "-"] if wide else []),
                          "-", "-", r["error"][:40])
            continue
        w = r["wall_s"]
        kernel = r["timing"].get("kernel")
        table.add_row(r["input"], program, *device, r["build"].get("impl", "-"), process_cell(w), *judge,
                      *([str(len(w["all"])), f"{w['min']:.3f}-{w['max']:.3f}"] if wide else []),
                      f"{kernel * 1e3:.2f}" if kernel else "-",
                      f"{r['tflops_kernel']:.3g}" if r.get("tflops_kernel") else "-", fmt_err(r["max_err"]))
    return table


def bench_row(record: dict) -> str:
    """A benchmark row's name in the lines under its table: the program (an A/A row marked) on
    the input."""
    return f"{record['program']}{' (A/A)' if record.get('control') else ''} on {record['input']}"


def compare_table(header: list[str], rows: list[list[str]], title: str = "fa compare (whole-process medians)") -> Table:
    table = Table(title=title, title_justify="left")
    for i, column in enumerate(header):
        numeric = i > 0 and bool(rows) and all(NUMERIC.match(Text.from_markup(str(row[i])).plain) for row in rows)
        table.add_column(column, justify="right" if numeric else "left")
    for row in rows:
        table.add_row(*row)
    return table


def system_table(spec: dict) -> Table:
    """fa system: one row per item of the machine's spec, nested values spelled out."""
    table = Table(title="This machine", title_justify="left")
    table.add_column("item")
    table.add_column("value")
    disk = spec.get("disk") or {}
    gpus = spec.get("gpus") or []
    software = spec.get("software") or {}
    for key, value in spec.items():
        if key == "disk" and disk:
            value = f"{disk.get('free_gib', '?')} GiB free of {disk.get('total_gib', '?')} GiB ({disk.get('path', '?')})"
        elif key == "gpus":
            value = "; ".join(f"{g.get('name')} ({g.get('vendor')}, {g.get('arch')}, {g.get('compute_units')} compute "
                              f"units, {g.get('memory_gib')} GiB)" for g in gpus) or "none"
        elif key == "software":
            value = ", ".join(f"{k} {v}" for k, v in software.items()) or "none found"
        elif key == "memory_gib":
            key, value = "memory", f"{value} GiB"
        elif isinstance(value, (dict, list)):
            value = ", ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, dict) else ", ".join(map(str, value))
        table.add_row(key, str(value))
    return table


def devices_table(devices) -> Table:
    table = Table(title="GPUs", title_justify="left")
    for column in ("#", "vendor", "name", "arch", "compute units", "memory GiB"):
        table.add_column(column)
    for d in devices:
        table.add_row(str(d.index), d.vendor, d.name, d.arch, str(d.compute_units), f"{d.memory_bytes / 2**30:.1f}")
    return table


def resources_table(kernels) -> Table:
    """fa resources' table in 80 columns: the target in the title where there is one, the
    bytes of shared memory as spill/static/dynamic and the occupancy as blocks/warps/share, each in
    one column (units in the headers)."""
    targets = sorted({u.target for u in kernels})
    one = targets[0] if len(targets) == 1 else None
    table = Table(title=f"fa resources{f' on {one}' if one else ''}: theoretical occupancy from the compilers' "
                        "reports, no GPU used (per SM; on AMD per CU, waves per SIMD)", title_justify="left")
    columns = [*([] if one else ["target"]), "kernel", "threads", "regs", "spill/\nsmem/\ndyn B", "blocks/\nwarps/\nocc",
               "limited by"]
    for column in columns:
        table.add_column(column, no_wrap=column not in ("kernel", "limited by"))
    blank = lambda x: "-" if x is None else str(x)  # noqa: E731
    for u in kernels:
        regs = str(u.registers) if u.target.startswith("sm_") else f"{u.registers}V {u.agprs}A {u.sgprs}S"
        why = ", ".join(u.limited_by) + (" *" if u.note else "")
        occupancy = "-" if u.occupancy is None else f"{u.occupancy:.0%}"
        table.add_row(*([] if one else [u.target]), u.kernel, blank(u.threads), regs,
                      f"{u.spill_bytes}/{u.static_smem}/{u.dynamic_smem}",
                      f"{blank(u.blocks)}/{blank(u.warps)}/{occupancy}", why)
    return table


def resources_notes(kernels) -> list[str]:
    """The footnotes of resources_table: one line per kernel marked *."""
    return [f"* {u.target} {u.kernel}: {u.note}" for u in kernels if u.note]


# Columns of fa profile, in the course's order; a column shows where some kernel has the figure.
PROFILE_COLUMNS = [
    ("achieved occupancy", "occupancy %", "{:.1f}"), ("SM efficiency", "SM eff. %", "{:.1f}"),
    ("shared load", "shared ld /s", "{:.3g}"), ("shared store", "shared st /s", "{:.3g}"),
    ("global load", "global ld B/s", "{:.3g}"), ("global store", "global st B/s", "{:.3g}"),
    ("shared ld conflicts", "ld conflicts", "{:.0f}"), ("shared st conflicts", "st conflicts", "{:.0f}"),
    ("registers", "regs", "{:.0f}"), ("VALU instructions/s", "VALU inst/s", "{:.3g}"),
    ("LDS bytes/s", "LDS B/s", "{:.3g}"), ("global read bytes/s", "global rd B/s", "{:.3g}"),
    ("global write bytes/s", "global wr B/s", "{:.3g}"),
    ("bank conflict cycles per LDS instruction", "conflict cyc/LDS inst", "{:.3f}"),
    ("SQ busy %", "SQ busy %", "{:.1f}"), ("SQ_WAVES", "waves", "{:.0f}"),
]


def profile_rows(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of fa profile's table: one row per (input, kernel)."""
    present = [c for c in PROFILE_COLUMNS if any(c[0] in r["metrics"] for r in records)]
    header = ["input", "program", "kernel", "launches", "time ms", "TFLOP/s", *(title for _, title, _ in present)]
    rows = []
    for r in records:
        cells = [r["input"], r["program"], r["kernel"], str(r["launches"]), f"{r['time_s'] * 1e3:.3f}",
                 f"{r['tflops']:.1f}" if r.get("tflops") else "-"]
        cells += [fmt.format(r["metrics"][key]) if key in r["metrics"] else "-" for key, _, fmt in present]
        rows.append(cells)
    return header, rows


def profile_table(records: list[dict]) -> Table:
    header, rows = profile_rows(records)
    device = records[0].get("device", "") if records else ""
    table = Table(title=f"fa profile with {records[0]['profiler'] if records else '-'} on {device} (per kernel, "
                        "over its launches)", title_justify="left")
    for column in header:
        table.add_column(column, no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table

"""fa compare: bench records side by side, as a rich or markdown table and as PNG charts.

Runs are the (label or program, device) pairs found in the records; the first run is the
baseline of the speedup column. Rows are inputs, in the order first seen.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

STAGES = ("init", "read", "h2d", "kernel", "d2h", "write")


@dataclass(frozen=True)
class RunKey:
    name: str  # the record's label, else its program
    device: str

    def __str__(self) -> str:
        return f"{self.name} on {self.device}"


def run_key(record: dict) -> RunKey:
    return RunKey(record.get("label") or record["program"], record["device"])


def arrange(records: list[dict]) -> tuple[list[RunKey], "OrderedDict[str, dict[RunKey, dict]]"]:
    """Runs in order of appearance, and per input the latest record of each run."""
    runs: list[RunKey] = []
    table: OrderedDict[str, dict[RunKey, dict]] = OrderedDict()
    for r in records:
        key = run_key(r)
        if key not in runs:
            runs.append(key)
        s = r["shape"]
        table.setdefault(f"{r['input']} ({s['B']}×{s['N']}×{s['d']})", {})[key] = r
    return runs, table


def cell_time(record: dict | None) -> str:
    if record is None:
        return "-"
    if record.get("error"):
        return "error"
    return f"{record['wall_s']['median']:.3f}"


def rows(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: per input, each run's whole-process time, kernel TFLOP/s and max error,
    then each run's speedup over the first run."""
    runs, table = arrange(records)
    header = ["input"]
    for k in runs:
        header += [f"{k} time s", f"{k} kernel TFLOP/s", f"{k} max err"]
    header += [f"speedup {k.name} vs {runs[0].name}" for k in runs[1:]]
    body = []
    for name, by_run in table.items():
        row = [name]
        for k in runs:
            r = by_run.get(k)
            ok = r is not None and not r.get("error")
            row += [cell_time(r),
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


def markdown(records: list[dict]) -> str:
    header, body = rows(records)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines) + "\n"


def plot(records: list[dict], path: Path) -> list[Path]:
    """Two PNG charts: the stage breakdown per input and run (stacked bars), and whole-process
    time against N for each d (one line per run). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, table = arrange(records)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(table) * len(runs)), 4.5))
    width = 0.8 / max(1, len(runs))
    colors = plt.cm.tab10.colors
    for i, k in enumerate(runs):
        bottoms = [0.0] * len(table)
        for j, stage in enumerate(STAGES):
            values = [by_run.get(k, {}).get("timing", {}).get(stage, 0.0) for by_run in table.values()]
            xs = [x + i * width for x in range(len(table))]
            ax.bar(xs, values, width, bottom=bottoms, color=colors[j], label=stage if i == 0 else None,
                   edgecolor="black", linewidth=0.3)
            bottoms = [b + v for b, v in zip(bottoms, values)]
        for x, total in zip(range(len(table)), bottoms):
            ax.text(x + i * width, total, k.name, ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set_xticks([x + width * (len(runs) - 1) / 2 for x in range(len(table))])
    ax.set_xticklabels(list(table), rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("seconds (each stage's own time; stages overlap in streamed programs)")
    ax.set_title("Time per stage: " + ", ".join(str(k) for k in runs), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    breakdown = path.with_name(path.stem + "-breakdown" + path.suffix)
    fig.savefig(breakdown, dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for ax, d in zip(axes, (32, 64)):
        for k in runs:
            points = sorted((r["shape"]["N"], r["wall_s"]["median"]) for by_run in table.values()
                            if (r := by_run.get(k)) and r["shape"]["d"] == d and not r.get("error"))
            if points:
                ax.plot(*zip(*points), marker="o", label=str(k))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (sequence length)")
        ax.set_ylabel("whole process, seconds (median)")
        ax.set_title(f"d = {d}")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    by_n = path.with_name(path.stem + "-by-n" + path.suffix)
    fig.savefig(by_n, dpi=120)
    plt.close(fig)
    return [breakdown, by_n]

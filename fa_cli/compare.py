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
    colors = plt.cm.tab10.colors
    cols = min(5, len(table))
    rows_ = (len(table) + cols - 1) // cols
    fig, axes = plt.subplots(rows_, cols, figsize=(2.6 * cols + 1.5, 3.4 * rows_ + 0.8), squeeze=False)
    for ax, (name, by_run) in zip(axes.flat, table.items()):
        bottoms = [0.0] * len(runs)
        for j, stage in enumerate(STAGES):
            values = [by_run.get(k, {}).get("timing", {}).get(stage, 0.0) for k in runs]
            ax.bar(range(len(runs)), values, 0.7, bottom=bottoms, color=colors[j], label=stage, edgecolor="black",
                   linewidth=0.3)
            bottoms = [b + v for b, v in zip(bottoms, values)]
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels([k.name for k in runs], rotation=35, ha="right", fontsize=8)
        ax.tick_params(axis="y", labelsize=8)
    for ax in axes.flat[len(table):]:
        ax.axis("off")
    axes[0][0].set_ylabel("seconds")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=len(STAGES))
    devices = sorted({k.device for k in runs})
    fig.suptitle("Time per stage (each stage's own time; the GPU programs overlap them) on " + ", ".join(devices),
                 fontsize=9, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
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

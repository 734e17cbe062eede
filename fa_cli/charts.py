"""The charts fa draws for reports, each one PNG file at the path asked for (matplotlib, no
screen needed): benchmark stages and time against N (fa compare), the optimization ladder (fa
ladder) and tile-size sweeps (fa sweep). Each chart names its device in its title."""
from __future__ import annotations

import io
from pathlib import Path

from .format import atomic_file

STAGES = ("init", "read", "h2d", "kernel", "d2h", "write")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    """The chart as a PNG at path, written as every output of fa is (format.atomic_file)."""
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=120)
    _pyplot().close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(image.getvalue())
    return path


def _devices(records: list[dict]) -> str:
    """The devices the records ran on (records that never ran, such as skipped variants, left out)."""
    ran = {r["device"] for r in records if r.get("device") and r["device"] != "unknown" and not r.get("error")}
    return ", ".join(sorted(ran)) or "no device (nothing ran)"


def bench_chart(runs, table, path: Path) -> Path:
    """fa compare's chart: per input, each run's stage times stacked (top), and whole-process
    time against N for d = 32 and d = 64 (bottom). `runs` and `table` as compare.arrange gives them."""
    plt = _pyplot()
    colors = plt.cm.tab10.colors
    cols = max(2, min(5, len(table)))
    rows_ = (len(table) + cols - 1) // cols
    fig = plt.figure(figsize=(2.7 * cols + 1.5, 3.4 * rows_ + 4.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[3.4 * rows_ + 0.8, 3.8])
    axes = top.subplots(rows_, cols, squeeze=False)
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
    top.legend(handles, labels, loc="upper right", fontsize=8, ncol=len(STAGES))
    devices = sorted({k.device for k in runs})
    top.suptitle("Time per stage (each stage's own time; the GPU programs overlap them) on " + ", ".join(devices),
                 fontsize=9, x=0.01, ha="left")
    for ax, d in zip(bottom.subplots(1, 2), (32, 64)):
        for k in runs:
            points = sorted((r["shape"]["N"], r["wall_s"]["median"]) for by_run in table.values()
                            if (r := by_run.get(k)) and r["shape"]["d"] == d and not r.get("error"))
            if points:
                ax.plot(*zip(*points), marker="o", label=str(k))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (sequence length)")
        ax.set_ylabel("whole process, s (median)")
        ax.set_title(f"d = {d}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return _save(fig, path)


def ladder_chart(records: list[dict], path: Path) -> Path:
    """Kernel TFLOP/s of each step (log scale), labelled with the speed-up over the step before."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(7.0, 1.25 * len(records) + 2), 4.6))
    names = [f"{r['step']}. {r['step_name']}" for r in records]
    values = [r.get("tflops_kernel") or 0.0 for r in records]
    colors = ["tab:green" if r.get("passed") else "tab:red" for r in records]
    bars = ax.bar(range(len(records)), values, 0.65, color=colors, edgecolor="black", linewidth=0.4)
    for bar, r in zip(bars, records):
        label = f"{r['tflops_kernel']:.3g}" if r.get("tflops_kernel") else ("error" if r.get("error") else "-")
        if r.get("speedup"):
            label += f"\n{r['speedup']:.1f}x"
        ax.annotate(label, (bar.get_x() + bar.get_width() / 2, max(bar.get_height(), 1e-3)), ha="center",
                    va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_yscale("log")
    ax.set_ylim(top=max(values + [1.0]) * 4)
    ax.set_xticks(range(len(records)))
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("kernel TFLOP/s (4 B N² d / kernel time)")
    first = records[0]
    s = first["shape"]
    ax.set_title(f"Optimization ladder: {first['program']} on {_devices(records)}, "
                 f"input {first['input']} (B={s['B']}, N={s['N']}, d={s['d']}); label: TFLOP/s, speed-up over the "
                 "step before", fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def sweep_chart(records: list[dict], path: Path) -> Path:
    """Kernel TFLOP/s (left) and occupancy (right) against Br, one line per Bc."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, bc in enumerate(sorted({r["Bc"] for r in records})):
        line = sorted((r for r in records if r["Bc"] == bc), key=lambda r: r["Br"])
        color = plt.cm.tab10.colors[i % 10]
        ran = [(r["Br"], r["tflops_kernel"]) for r in line if not r.get("error") and r.get("tflops_kernel")]
        if ran:
            left.plot(*zip(*ran), marker="o", color=color, label=f"Bc = {bc}")
        theory = [(r["Br"], 100 * r["resources"]["occupancy"]) for r in line
                  if (r.get("resources") or {}).get("occupancy") is not None]
        if theory:
            right.plot(*zip(*theory), marker="o", linestyle="--", color=color, label=f"Bc = {bc}, theoretical")
        achieved = [(r["Br"], r["profile"]["metrics"]["achieved occupancy"]) for r in line
                    if "achieved occupancy" in (r.get("profile") or {}).get("metrics", {})]
        if achieved:
            right.plot(*zip(*achieved), marker="s", color=color, label=f"Bc = {bc}, achieved")
        for r in line:
            if r.get("skipped"):
                left.annotate("skipped", (r["Br"], 0), fontsize=7, color=color, rotation=90, va="bottom",
                              xycoords=("data", "axes fraction"))
    first = records[0]
    brs = sorted({r["Br"] for r in records})
    for ax, ylabel in ((left, "kernel TFLOP/s"), (right, "occupancy, % of the SM's warps")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(brs, [str(b) for b in brs])
        ax.minorticks_off()
        ax.set_xlabel("Br (query rows per block)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle(f"Tile sizes of the homework kernel: {first['program'].split('-br')[0]} on {_devices(records)}, "
                 f"input {first['input']}", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)

"""The charts fa draws for reports, each one PNG file at the path asked for (matplotlib, no
screen needed): benchmark stages and time against N (fa compare), the optimization ladder (fa
ladder) and tile-size sweeps (fa sweep). Each chart names its device in its title, and in its
lower right corner (and the PNG's metadata) the revision of fa its records were made from."""
from __future__ import annotations

import io
from pathlib import Path

from ..errors import FaError
from ..files import atomic_file, forced
from ..programs import timing
from .records import revision_text

STAGES = tuple(s for s in timing.STAGES if s != "total")  # the bars' parts


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path, records: list[dict]) -> Path:
    """The chart as a PNG at path, written as every output of fa is (files.atomic_file), stamped
    with the revision its records were made from."""
    made_from = "made from " + revision_text([r.get("source") or {} for r in records])
    fig.text(0.995, 0.002, made_from, ha="right", va="bottom", fontsize=6, color="gray")
    image = io.BytesIO()
    # constrained layout: nothing cut or overlapping
    fig.savefig(image, format="png", dpi=120, metadata={"Source": made_from})
    pyplot().close(fig)
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(image.getvalue())
    return path


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_replaceable(path: Path) -> None:
    """A chart replaces only an empty file or a PNG image (unless --force): anything else there is
    someone's."""
    if forced() or not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        if f.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
            raise FaError(f"{path}: exists and is not a PNG image: a chart replaces only one; name another file, or "
                          "give --force to replace it")


def _devices(records: list[dict]) -> str:
    """The devices the records ran on (records that never ran, such as skipped variants, left out)."""
    ran = {r["device"] for r in records if r.get("device") and r["device"] != "unknown" and not r.get("error")}
    return ", ".join(sorted(ran)) or "no device (nothing ran)"


def _plain_log_ticks(ax, axis: str = "y") -> None:
    """Log-scale tick labels as plain numbers (0.3, 1, 6), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def bench_chart(runs, table, path: Path) -> Path:
    """fa compare's chart: per input, each run's stage times stacked (top), with a black mark at
    its whole-process time, and whole-process time against N for each d that was run (bottom),
    each point labelled with its B (the inputs differ in B as well as N). `runs` and `table` as
    compare.arrange gives them. A run without stage times (no FA_TIMING line, such as a program
    of one's own) is marked so in place of its bar."""
    plt = pyplot()
    colors = plt.cm.tab10.colors
    devices = sorted({k.device for k in runs})
    one_device = len(devices) == 1
    run_names = [k.name if one_device else str(k) for k in runs]
    cols = max(1, min(5, len(table)))
    rows_ = (len(table) + cols - 1) // cols
    label_room = 0.09 * max(len(n) for n in run_names)  # inches under the bars for the rotated run names
    panel_h = 2.6 + label_room
    ds = sorted({r["shape"]["d"] for by_run in table.values() for r in by_run.values()})
    width = max(7.5, 3.1 * cols + 1.0)
    fig = plt.figure(figsize=(width, panel_h * rows_ + 4.4), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[panel_h * rows_ + 0.9, 3.5])
    axes = top.subplots(rows_, cols, squeeze=False)
    missing = []
    for ax, (name, by_run) in zip(axes.flat, table.items()):
        _stage_panel(ax, name, by_run, runs, run_names, colors, missing)
    for ax in axes.flat[len(table):]:
        ax.remove()
    handles, labels = axes[0][0].get_legend_handles_labels()
    top.legend(handles, labels, loc="outside upper center", fontsize=8, ncol=len(STAGES) + 1, frameon=False)
    # A stage is what the program's own fa-timing line reports; the whole process adds what comes
    # before its first stage and after its last (for a Python program, the interpreter and its
    # libraries starting: seconds), and the GPU programs run stages side by side.
    title = ("Time per stage as each program reports it (the GPU programs overlap them); black mark: whole "
             "process,\nwhich also counts the start-up before the first stage (for PyTorch, Python importing it)")
    if one_device:
        title += f", on {devices[0]}"
    if missing:
        title += f"\nno stage times from {', '.join(sorted(set(missing)))} (its bar is empty)"
    fig.suptitle(title, fontsize=10)
    _time_against_n(bottom, table, runs, run_names, ds)
    return save(fig, path, [r for by_run in table.values() for r in by_run.values()])



def _stage_panel(ax, name: str, by_run: dict, runs, run_names: list[str], colors, missing: list[str]) -> None:
    """One input's panel: each run's stage times stacked, a black mark at its whole-process time;
    runs without stage times are named in `missing`."""
    bottoms = [0.0] * len(runs)
    for j, stage in enumerate(STAGES):
        values = [(by_run.get(k) or {}).get("timing", {}).get(stage, 0.0) for k in runs]
        ax.bar(range(len(runs)), values, 0.7, bottom=bottoms, color=colors[j], label=stage, edgecolor="black",
               linewidth=0.3)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    walls = [(i, r["wall_s"]["median"]) for i, k in enumerate(runs)
             if (r := by_run.get(k)) and not r.get("error") and r.get("wall_s")]
    # The scale is the bars'; a whole process far above them (PyTorch's) is marked at the top
    # with its figure, so that it does not flatten every bar.
    top_y = max(bottoms + [w for _, w in walls if w <= 2 * max(bottoms + [0])] + [0]) * 1.15 or 1.0
    if walls:
        ax.scatter([i for i, _ in walls], [min(w, top_y * 0.97) for _, w in walls], marker="_", s=260,
                   linewidths=2.0, color="black", zorder=3, label="whole process")
        for i, w in walls:
            if w > top_y:
                ax.annotate(f"{w:.2g} s \u2191", (i, top_y * 0.97), xytext=(0, -10), textcoords="offset points",
                            ha="center", fontsize=7)
    for i, k in enumerate(runs):
        r = by_run.get(k)
        if not bottoms[i]:
            why = "not run" if r is None else "error" if r.get("error") else "no stage times"
            if why == "no stage times":
                missing.append(k.name)
            ax.text(i, 0.02, why, rotation=90, ha="center", va="bottom", fontsize=7, color="dimgray",
                    transform=ax.get_xaxis_transform())
    ax.set_title(name, fontsize=9)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels(run_names, rotation=35, ha="right", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_ylabel("seconds", fontsize=8)
    ax.set_ylim(top=top_y)


def _time_against_n(bottom, table: dict, runs, run_names: list[str], ds: list[int]) -> None:
    """The lower panels: whole-process time against N, one panel per d, each point labelled with its B."""
    line_axes = bottom.subplots(1, len(ds), squeeze=False)[0] if ds else []
    for ax, d in zip(line_axes, ds):
        for k, label in zip(runs, run_names):
            points = sorted((r["shape"]["N"], r["wall_s"]["median"], r["shape"]["B"]) for by_run in table.values()
                            if (r := by_run.get(k)) and r["shape"]["d"] == d and not r.get("error"))
            if points:
                ns_, walls_, bs = zip(*points)
                line, = ax.plot(ns_, walls_, marker="o", label=label)
                if k == runs[0]:  # each point's B, once per panel (every run has the same inputs)
                    for n, w, b in points:
                        ax.annotate(f"B={b}", (n, w), xytext=(3, 4), textcoords="offset points", fontsize=7,
                                    color=line.get_color())
        ns = sorted({r["shape"]["N"] for by_run in table.values() for r in by_run.values() if r["shape"]["d"] == d})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns, [str(n) for n in ns], fontsize=8)
        ax.minorticks_off()
        ax.set_yscale("log")
        _plain_log_ticks(ax)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("N, sequence length (log scale)", fontsize=8)
        ax.set_ylabel("whole process, seconds (median)", fontsize=8)
        ax.set_title(f"Whole-process time of each input, d = {d} (points labelled with B)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    if ds:
        handles, labels = line_axes[0].get_legend_handles_labels()
        bottom.legend(handles, labels, loc="outside right upper", fontsize=8, frameon=False)


def ladder_chart(records: list[dict], path: Path) -> Path:
    """Kernel TFLOP/s of each step (log scale), labelled with the speed-up over the step before."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(7.0, 1.25 * len(records) + 2), 4.6), layout="constrained")
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
    if any(values):
        ax.set_yscale("log")
        ax.set_ylim(min(v for v in values if v) / 2, max(values) * 4)
    else:
        ax.set_ylim(0.1, 10)  # nothing to draw: an empty log scale would warn
        ax.set_yscale("log")
    _plain_log_ticks(ax)
    ax.set_xticks(range(len(records)))
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("kernel TFLOP/s (4 B N² d / kernel time)")
    ax.set_xlabel("optimization step (green: passed, red: failed or error)")
    if not any(values):
        reason = next((str(r["error"]).strip().splitlines()[-1] for r in records if r.get("error")), "no kernel time")
        ax.text(0.5, 0.5, f"no step ran: {reason}", ha="center", va="center", transform=ax.transAxes,
                color="dimgray", fontsize=8, wrap=True)
    first = records[0]
    s = first["shape"]
    ax.set_title(f"Optimization ladder: {first['program']} on {_devices(records)}, "
                 f"input {first['input']} (B={s['B']}, N={s['N']}, d={s['d']})\n"
                 "above each bar: TFLOP/s and the speed-up over the step before", fontsize=9)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return save(fig, path, records)


def _sweep_axes(records: list[dict]) -> tuple[str, list[str]]:
    """A sweep chart's x parameter and those each line holds fixed: Br and Bc for fa's kernels,
    the first swept macro and the others for a student's source."""
    if records and records[0].get("sweep_source"):
        params = list(dict.fromkeys(p for r in records for p in r.get("sweep_params") or []))
        return params[0], params[1:]
    return "Br", ["Bc"]


def _positions(values: list) -> tuple[dict, bool]:
    """Where each x value goes: the value itself where all are positive numbers (log2 where all
    are powers of two), else its place in order; and whether the axis is log2."""
    numbers = {}
    for v in values:
        try:
            numbers[v] = float(str(v))
        except ValueError:
            return {v: i for i, v in enumerate(values)}, False
    if all(n > 0 for n in numbers.values()):
        return numbers, all(float(n).is_integer() and int(n) & (int(n) - 1) == 0 for n in numbers.values())
    return {v: i for i, v in enumerate(values)}, False


def sweep_chart(records: list[dict], path: Path) -> Path:
    """Kernel TFLOP/s (left) and occupancy (right; for a source of the student's, the whole
    process's time) against Br, one line per Bc; a student's source: against its first macro,
    one line per value of the others."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    x_name, others = _sweep_axes(records)
    own = bool(records and records[0].get("sweep_source"))
    xs = list(dict.fromkeys(sorted((r.get(x_name) for r in records), key=_order)))
    where, log2 = _positions(xs)
    _sweep_lines(left, right, records, x_name, others, where, own, plt.cm.tab10.colors)
    first = records[0]
    params = [x_name, *others]
    skipped = [" ".join(f"{p}={r.get(p)}" for p in params) for r in records if r.get("skipped")]
    failed = [" ".join(f"{p}={r.get(p)}" for p in params) for r in records if not r.get("skipped") and r.get("error")]
    x_label = f"{x_name} (-D{x_name}=...)" if own else "Br (query rows per block)"
    right_label = "whole process, s (median)" if own else "occupancy, % of the SM's warps"
    for ax, ylabel in ((left, "kernel TFLOP/s"), (right, right_label)):
        low, high = min(where.values()), max(where.values())
        if log2:
            ax.set_xscale("log", base=2)
            ax.set_xlim(low / 1.4, high * 1.4)  # the same range on both sides, drawn or empty
        else:
            pad = (high - low) * 0.1 or 0.5
            ax.set_xlim(low - pad, high + pad)
        ax.set_xticks([where[x] for x in xs], [str(x) for x in xs])
        ax.minorticks_off()
        ax.set_xlabel(x_label)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        else:
            empty = "no kernel time (no fa-timing line)" if own and not failed else "nothing measured"
            ax.text(0.5, 0.5, empty if ax is left else "nothing measured" if own else "no occupancy figures",
                    ha="center", va="center", transform=ax.transAxes, color="dimgray")
    left.set_ylim(bottom=0)
    if own:
        right.set_ylim(bottom=0)
    else:
        right.set_ylim(0, 105)
    what = f"Your tile sizes: {first['sweep_source']}" if own else \
        f"Tile sizes of the homework kernel: {first['program'].split('-br')[0]}"
    title = f"{what} on {_devices(records)}, input {first['input']}"
    if skipped:
        title += f"\nnot built ({'the compiler refused them' if own else 'the kernel cannot take them'}): " \
                 f"{', '.join(skipped)}"
    if failed:
        title += f"\nfailed to run: {', '.join(failed)}"
    fig.suptitle(title, fontsize=9)
    return save(fig, path, records)



def _sweep_lines(left, right, records: list[dict], x_name: str, others: list[str], where: dict, own: bool,
                 colors) -> None:
    """One line per value of the other parameters: kernel TFLOP/s on the left; occupancy
    (theoretical dashed, achieved solid) or, for a student's source, whole-process time on the right."""
    lines = list(dict.fromkeys(tuple(r.get(o) for o in others) for r in records))
    for i, fixed in enumerate(lines):
        line = sorted((r for r in records if tuple(r.get(o) for o in others) == fixed), key=lambda r: where[r[x_name]])
        color = colors[i % 10]
        label = ", ".join(f"{o} = {v}" for o, v in zip(others, fixed)) or x_name
        ran = [(where[r[x_name]], r["tflops_kernel"]) for r in line if not r.get("error") and r.get("tflops_kernel")]
        if ran:
            left.plot(*zip(*ran), marker="o", color=color, label=label)
        if own:
            wall = [(where[r[x_name]], r["wall_s"]["median"]) for r in line
                    if not r.get("error") and isinstance(r.get("wall_s"), dict)]
            if wall:
                right.plot(*zip(*wall), marker="o", color=color, label=label)
            continue
        theory = [(where[r[x_name]], 100 * r["resources"]["occupancy"]) for r in line
                  if (r.get("resources") or {}).get("occupancy") is not None]
        if theory:
            right.plot(*zip(*theory), marker="o", linestyle="--", color=color, label=f"{label}, theoretical")
        achieved = [(where[r[x_name]], r["profile"]["metrics"]["achieved occupancy"]) for r in line
                    if "achieved occupancy" in (r.get("profile") or {}).get("metrics", {})]
        if achieved:
            right.plot(*zip(*achieved), marker="s", color=color, label=f"{label}, achieved")


def _order(value):
    """Numbers in numeric order, before names in name order."""
    try:
        return (0, float(str(value)), "")
    except ValueError:
        return (1, 0.0, str(value))

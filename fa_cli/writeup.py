"""fa report: one markdown report, with its PNG charts, from the results files fa wrote.

Records are recognised by their `kind` (records.kind_of: run, bench, profile, ladder, sweep,
resources; older files without one by their fields) and laid out in the course report's order:
  system spec (3a)  every machine the results came from, as the commands recorded it at run time
  1 judge           fa run: every case, its time, error and verdict, per program and device
  2 profiling       fa profile: the course's metrics per kernel
  3 optimizations   fa ladder (table, chart), fa sweep (table, chart), fa resources
  4 NVIDIA and AMD  fa bench: runs side by side (fa compare's table and chart), and every AMD
                    result next to its NVIDIA counterpart where both are present
A section with no results says which command fills it.
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from . import charts, compare, ladder, sweep
from .errors import FaError
from .format import atomic_file
from .records import by_kind
from .report import markdown_table, profile_rows


def systems_section(found: dict[str, list[dict]]) -> str:
    machines: OrderedDict[str, dict] = OrderedDict()
    for records in found.values():
        for r in records:
            spec = r.get("system")
            if spec:
                gpus = ", ".join(f"{g['name']} ({g['arch']}, {g.get('memory_gib', '?')} GiB)"
                                 for g in spec.get("gpus", []))
                machines.setdefault(f"{spec.get('host')}|{gpus}", spec)
    out = ["## System (3a)\n"]
    if not machines:
        return out[0] + "\nThe results carry no system description (files from before fa recorded one).\n"
    body = []
    for spec in machines.values():
        sw = spec.get("software", {})
        disk = spec.get("disk", {})
        body.append([spec.get("host", "?"), spec.get("cpu", "?"), str(spec.get("cores", "?")),
                     f"{spec.get('memory_gib', '?')} GiB",
                     f"{disk.get('total_gib', '?')} GiB ({disk.get('free_gib', '?')} free)" if disk else "-",
                     ", ".join(f"{g['name']} ({g['arch']})" for g in spec.get("gpus", [])) or "none",
                     sw.get("driver", "-"),
                     ", ".join(f"{k} {v}" for k, v in sw.items() if k != "driver") or "-",
                     spec.get("os", "-")])
    out.append(markdown_table(["host", "CPU", "cores", "memory", "disk", "GPUs", "driver", "CUDA / ROCm", "OS"], body))
    out.append("As recorded by the commands that measured (`fa system` prints the same for this machine).\n")
    return "\n".join(out)


def judge_section(records: list[dict]) -> str:
    head = "## 1. Correctness and time: the judge (`fa run`)\n"
    if not records:
        return head + "\nNo results: `fa run --all --program cuda -o run.json` gives them.\n"
    body = [[r["input"], f"{r['shape']['B']}x{r['shape']['N']}x{r['shape']['d']}", r["program"], r.get("device", "?"),
             f"{r['wall_s']:.3f}" if isinstance(r.get("wall_s"), (int, float)) else "-",
             f"{r['time_limit']:g}" if r.get("time_limit") else "-",
             f"{r['max_err']:.2e}" if r.get("max_err") is not None else "-", f"{r['tol']:g}" if r.get("tol") else "-",
             r.get("verdict", "?")] for r in records]
    passed = sum(r.get("verdict") == "PASS" for r in records)
    return (head + f"\n{passed} of {len(records)} runs PASS (the course's tolerance is 5e-3).\n\n"
            + markdown_table(["case", "B x N x d", "program", "device", "time s", "limit s", "max err", "tolerance",
                              "verdict"], body))


def profile_section(records: list[dict]) -> str:
    head = "## 2. Profiling (`fa profile`)\n"
    if not records:
        return head + "\nNo results: `fa profile t17 t27 --program cuda -o profile.json` gives them.\n"
    return head + "\n" + markdown_table(*profile_rows(records))


def ladder_section(records: list[dict], out_dir: Path) -> str:
    head = "### 3.1 The optimization ladder (`fa ladder`)\n"
    if not records:
        return head + "\nNo results: `fa ladder t27 --program cuda -o ladder.json` gives them.\n"
    parts = [head]
    for key, group in _groups(records, lambda r: (r["program"], r.get("device"), r["input"])).items():
        png = _png(out_dir, "ladder", key)
        charts.ladder_chart(group, out_dir / png)
        parts.append(f"\n{group[0]['program']} on {group[0].get('device')}, input {group[0]['input']}:\n\n"
                     + markdown_table(*ladder.rows(group)) + f"\n![ladder]({png})\n")
    return "".join(parts)


def sweep_section(records: list[dict], out_dir: Path) -> str:
    head = "### 3.2 Tile sizes (`fa sweep`)\n"
    if not records:
        return head + "\nNo results: `fa sweep t27 --param Br=8,16,32 --param Bc=16,32,64 -o sweep.json` gives them.\n"
    parts = [head]
    for key, group in _groups(records, lambda r: (r["program"].split("-br")[0], r.get("arch"), r["input"])).items():
        png = _png(out_dir, "sweep", key)
        charts.sweep_chart(group, out_dir / png)
        parts.append(f"\n{key[0]} built for {key[1]}, input {key[2]}:\n\n" + markdown_table(*sweep.rows(group))
                     + f"\n![sweep]({png})\n")
    return "".join(parts)


def resources_section(records: list[dict]) -> str:
    head = "### 3.3 Registers, shared memory and occupancy (`fa resources`)\n"
    if not records:
        return head + "\nNo results: `fa resources --program cuda --json > resources.json` gives them.\n"
    body = [[r["target"], r["kernel"], str(r.get("threads") or "-"), str(r["registers"]), str(r.get("spill_bytes", 0)),
             str(r.get("static_smem", 0) + r.get("dynamic_smem", 0)),
             f"{100 * r['occupancy']:.0f}%" if r.get("occupancy") is not None else "-",
             ", ".join(r.get("limited_by", []))] for r in records]
    return head + "\n" + markdown_table(["target", "kernel", "threads", "registers", "spill bytes", "shared bytes",
                                "theoretical occupancy", "limited by"], body)


def bench_section(records: list[dict], out_dir: Path) -> str:
    head = "## 4. NVIDIA and AMD, side by side (`fa bench`, `fa compare`)\n"
    if not records:
        return head + "\nNo results: `fa bench --suite --program cuda -o bench.json` (and the same on the AMD " \
                      "partition with --program hip) gives them.\n"
    png = "bench.png"
    charts.bench_chart(*compare.arrange(records), out_dir / png)
    vendors = {_vendor(r) for r in records}
    note = ("Runs on NVIDIA and AMD GPUs are both present: the columns compare them input by input."
            if {"nvidia", "amd"} <= vendors else
            "Only " + " and ".join(sorted(v for v in vendors if v)) + " runs are present: add the other vendor's "
            "results file for the comparison." if any(vendors) else
            "The runs do not say which vendor's GPU they ran on (CPU runs, or records without a device): "
            "add NVIDIA and AMD results files for the comparison.")
    return head + f"\n{note}\n\n" + compare.markdown(records) + f"\n![bench]({png})\n"


def _vendor(record: dict) -> str | None:
    device = (record.get("device") or "").lower()
    gpus = (record.get("system") or {}).get("gpus", [])
    if any(word in device for word in ("nvidia", "geforce", "tesla", "sm_")):
        return "nvidia"
    if any(word in device for word in ("amd", "instinct", "radeon", "gfx")):
        return "amd"
    return gpus[0]["vendor"] if gpus else None


def _groups(records: list[dict], key) -> "OrderedDict[tuple, list[dict]]":
    groups: OrderedDict[tuple, list[dict]] = OrderedDict()
    for r in records:
        groups.setdefault(key(r), []).append(r)
    return groups


def _png(out_dir: Path, stem: str, key: tuple) -> str:
    name = "-".join(str(k) for k in key if k)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in name)
    return f"{stem}-{safe}.png"


def write(paths: list[Path], out_dir: Path) -> Path:
    """report.md and its charts in out_dir, from the results files; returns report.md's path."""
    found = by_kind(paths)
    if out_dir.exists() and not out_dir.is_dir():
        raise FaError(f"{out_dir}: exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = ", ".join(f"`{p.name}`" for p in paths)
    commands = dict.fromkeys(r["command"] for records in found.values() for r in records if r.get("command"))
    counts = ", ".join(f"{len(v)} {k}" for k, v in found.items() if v)
    text = "\n".join([
        "# FlashAttention homework: results\n",
        f"Written by `fa report` from {sources} ({counts} records). Figures are as measured; each table names "
        "the program and device it came from.\n",
        systems_section(found),
        judge_section(found["run"]),
        profile_section(found["profile"]),
        "## 3. Optimizations\n",
        ladder_section(found["ladder"], out_dir),
        sweep_section(found["sweep"], out_dir),
        resources_section(found["resources"]),
        bench_section(found["bench"], out_dir),
        "\n## Commands\n",
        "\n".join(f"- `{c}`" for c in commands) + "\n",
    ])
    report = out_dir / "report.md"
    with atomic_file(report) as f:
        f.write(text.encode())
    return report

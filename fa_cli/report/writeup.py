"""fa report: the student's report, in the course's sections, from the results files fa wrote.

Records are recognised by their `kind` (records.kind_of: run, bench, profile, ladder, sweep,
resources; older files without one by their fields). Those of the student's own programs (hw4,
hw4.cu, hw4-amd: any program that is not one of fa's) fill the course's sections; each section
also has a marked place for the student's own words (YOURS), which fa cannot write:
  1 implementation       the compilers' report of the kernels (fa resources)
  2 profiling results    fa profile: the course's metrics per kernel
  3 experiment, analysis (a) the spec of every machine the results came from, (b) optimization:
                         the student's sweeps, (c) others: fa run, every case judged
  4 NVIDIA and AMD       fa bench: runs side by side (fa compare's table and chart), every AMD
                         result next to its NVIDIA counterpart where both are present
  5 experience and conclusion
Records of fa's own programs (cpu, cuda, hip, hip-cuda, torch; fa ladder's steps) are shown
only at the end, under a heading that says they are fa's, as a yardstick. A section with no
results says which command fills it, for ./hw4.
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from ..errors import FaError
from ..files import atomic_file, forced
from ..measure import compare, ladder, source_sweep
from ..programs import programs
from . import charts
from .records import by_kind, revision_text
from .markdown import PROFILE_KEYS, markdown_table, paragraph
from .tables import profile_rows


def systems_section(found: dict[str, list[dict]]) -> str:
    machines: OrderedDict[str, dict] = OrderedDict()
    for records in found.values():
        for r in records:
            spec = r.get("system")
            if spec:
                gpus = ", ".join(f"{g['name']} ({g['arch']}, {g.get('memory_gib', '?')} GiB)"
                                 for g in spec.get("gpus", []))
                machines.setdefault(f"{spec.get('host')}|{gpus}", spec)
    out = ["### 3a. System spec\n"]
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


def judge_section(records: list[dict], head: str = "### 3c. Others: correctness and time on the test cases "
                                                    "(`fa run`)\n", out_dir: Path | None = None) -> str:
    if not records:
        return head + "\nNo results: `fa run --all --suite c --program ./hw4 -o run.json` gives them.\n"
    body = [[r["input"], f"{r['shape']['B']}x{r['shape']['N']}x{r['shape']['d']}", r["program"], r.get("device", "?"),
             f"{r['wall_s']:.3f}" if isinstance(r.get("wall_s"), (int, float)) else "-",
             f"{r['time_limit']:g}" if r.get("time_limit") else "-",
             f"{r['max_err']:.2e}" if r.get("max_err") is not None else "-", f"{r['tol']:g}" if r.get("tol") else "-",
             r.get("verdict", "?")] for r in records]
    counts = ", ".join(f"{n} {v}" for v in ("PASS", "WRONG", "TLE", "ERROR")
                       if (n := sum(r.get("verdict") == v for r in records)))
    passed = sum(r.get("verdict") == "PASS" for r in records)
    return (head + f"\n{passed} of {len(records)} runs PASS ({counts}; the course's tolerance is 5e-3).\n\n"
            + markdown_table(["case", "B x N x d", "program", "device", "time s", "limit s", "max err", "tolerance",
                              "verdict"], body, keys=4) + (weights_pictures(records, out_dir) if out_dir else ""))


def weights_pictures(records: list[dict], out_dir: Path) -> str:
    """The pictures of the weights fa measured for a failing case (judge/probes/picture.py), copied
    beside the report, each under what was measured."""
    parts = []
    for r in records:
        for found in ((r.get("diagnosis") or {}).get("causes") or []):
            source = Path(found.get("picture") or "")
            if not found.get("picture") or not source.is_file():
                continue
            name = f"weights-{Path(str(r.get('input', 'case'))).name}.png"
            with atomic_file(out_dir / name) as f:
                f.write(source.read_bytes())
            measured = [l for c in r["diagnosis"]["causes"] for l in c.get("lines", []) if l.startswith("measured")]
            said = (f"{r.get('input')}: the weights W its program applied, measured with one-hot V, against "
                    "P = softmax(Q K^T / sqrt(d)) (fa run's probes)" + (": " + " ".join(measured) if measured else "."))
            parts.append(paragraph(said) + f"\n\n![W against P]({name})\n")
    return "\n" + "\n".join(parts) if parts else ""


def profile_section(records: list[dict], head: str = "## 2. Profiling results (`fa profile`)\n") -> str:
    if not records:
        return head + "\nNo results: `fa profile t17 --program ./hw4 -o profile.json` gives them (the course " \
                      "asks for the kernel that takes the longest time).\n"
    return head + "\n" + markdown_table(*profile_rows(records), keys=PROFILE_KEYS)


def ladder_section(records: list[dict], out_dir: Path,
                   head: str = "### fa's optimization ladder of the homework kernel (`fa ladder`)\n") -> str:
    if not records:
        return ""
    parts = [head]
    for key, group in _groups(records, lambda r: (r["program"], r.get("device"), r["input"])).items():
        png = _png(out_dir, "ladder", key)
        charts.ladder_chart(group, out_dir / png)
        parts.append(f"\n{group[0]['program']} on {group[0].get('device')}, input {group[0]['input']}:\n\n"
                     + markdown_table(*ladder.rows(group)) + f"\n![ladder]({png})\n")
    return "".join(parts)


def sweep_section(records: list[dict], out_dir: Path, head: str = "#### Tile sizes (`fa sweep`)\n") -> str:
    if not records:
        return ""
    parts = [head]
    for key, group in _groups(records, lambda r: (source_sweep.base_program(r), r.get("arch"), r["input"])).items():
        png = _png(out_dir, "sweep", key)
        charts.sweep_chart(group, out_dir / png)
        built = "the CPU" if key[1] == "cpu" else key[1]
        parts.append(f"\n{key[0]} built for {built}, input {key[2]}:\n\n" + markdown_table(*source_sweep.rows(group), keys=source_sweep.key_columns(group))
                     + f"\n![sweep]({png})\n")
    return "".join(parts)


def resources_section(records: list[dict],
                      head: str = "#### Registers, shared memory and occupancy (`fa resources`)\n") -> str:
    if not records:
        return head + "\nNo results: `fa resources --program hw4.cu --json > resources.json` gives them (no GPU " \
                      "needed).\n"
    programs_named = len({r.get("program") for r in records}) > 1  # fa's programs share kernels: say whose
    body = [[*([r.get("program") or "-"] if programs_named else []), r["target"], r["kernel"],
             str(r.get("threads") or "-"), str(r["registers"]), str(r.get("spill_bytes", 0)),
             str(r.get("static_smem", 0) + r.get("dynamic_smem", 0)),
             f"{100 * r['occupancy']:.0f}%" if r.get("occupancy") is not None else "-",
             ", ".join(r.get("limited_by", [])) or "-"] for r in records]
    header = [*(["program"] if programs_named else []), "target", "kernel", "threads", "registers", "spill bytes",
              "shared bytes", "theoretical occupancy", "limited by"]
    return head + "\n" + markdown_table(header, body, keys=3 if programs_named else 2)


def bench_section(records: list[dict], out_dir: Path,
                  head: str = "## 4. NVIDIA and AMD, side by side (`fa bench`, `fa compare`)\n",
                  png: str = "bench.png") -> str:
    if not records:
        return head + "\nNo results: `fa bench --suite c --program ./hw4 -o bench.json` (and the same on the AMD " \
                      "partition with --program ./hw4-amd) gives them.\n"
    charts.bench_chart(*compare.arrange(records), out_dir / png)
    vendors = {_vendor(r) for r in records}
    note = ("Runs on NVIDIA and AMD GPUs are both present: the table compares them input by input."
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


# fa's own programs, and for resources records made before they named their program, fa's kernels.
FA_KERNELS = ("attention_tensorcore", "attention_wgmma", "attention_simt", "attention_tiled", "ladder", "split_kv")


def is_reference(record: dict, kind: str) -> bool:
    """A record of fa's own programs (a yardstick), not of the student's."""
    if kind == "ladder":
        return True
    program = record.get("program")
    if program is None:
        return kind == "resources" and str(record.get("kernel", "")).startswith(FA_KERNELS)
    return program in programs.NAMES or program.split("-br")[0] in programs.NAMES  # a sweep's variants too


def yours(what: str) -> str:
    """A marked place for the student's own words."""
    return f"\n> {YOURS} {what}\n"


YOURS = "**Yours to write (TODO):**"


def implementation_section(resources: list[dict]) -> str:
    return "\n".join([
        "## 1. Implementation\n",
        yours("how your kernel computes the forward pass: how Q, K and V are cut into tiles of Br and Bc rows and "
              "processed in parallel, what lives in shared memory, how m and l (the running max and sum of the "
              "online softmax) are kept; why you chose your Br and Bc; the launch configuration (threads per "
              "block, grid, shared memory) and how it follows from the tiles and the shared memory per SM."),
        resources_section(resources, "What the compilers report of your kernels (`fa resources`), for the "
                                     "launch configuration:\n"),
    ])


OWN_SWEEP_HINT = ("\nYour tile sizes (`fa sweep`): no results. Where hw4.cu takes its tile sizes as -D macros "
                  "(`#ifndef BR` / `#define BR 32` / `#endif`, as `fa init`'s starter does), `fa sweep t17 --program "
                  "hw4.cu --param BR=16,32 --param BC=32,64 -o sweep.json` builds it with each combination and times "
                  "each (on a GPU).\n")


def optimization_section(sweeps: list[dict], out_dir: Path, has_reference: bool) -> str:
    parts = ["### 3b. Optimization\n",
             yours("each optimization you made, in order, what it changes and what it gained (keep each version "
                   "and time them side by side: `fa bench --suite c --program ./hw4-v1 --program ./hw4 -o "
                   "steps.json`, then `fa compare steps.json --plot steps.png`).")]
    parts.append(sweep_section(sweeps, out_dir, "Your tile sizes (`fa sweep`):\n") or OWN_SWEEP_HINT)
    if not has_reference:
        parts.append("\nfa's own optimization ladder of the homework kernel, as a yardstick: `fa ladder t27 -o "
                     "ladder.json` (on a GPU), shown at the end of this report under fa's name.\n")
    return "\n".join(p for p in parts if p)


def reference_section(found: dict[str, list[dict]], out_dir: Path) -> str:
    """fa's own programs, under a heading that says so; empty where there are none."""
    if not any(found.values()):
        return ""
    parts = ["## For reference: fa's own programs (not your work)\n",
             "Measured with the same commands on fa's own programs, as a yardstick for yours; every figure "
             "below is fa's, not yours: leave this section out of the report you hand in, or cite it as fa's.\n",
             ladder_section(found["ladder"], out_dir),
             sweep_section(found["sweep"], out_dir, "### fa's tile sizes (`fa sweep`)\n")]
    if found["run"]:
        parts.append(judge_section(found["run"], "### fa's programs on the test cases (`fa run`)\n"))
    if found["profile"]:
        parts.append(profile_section(found["profile"], "### fa's kernels profiled (`fa profile`)\n"))
    if found["resources"]:
        parts.append(resources_section(found["resources"], "### fa's kernels' resources (`fa resources`)\n"))
    if found["bench"]:
        parts.append(bench_section(found["bench"], out_dir, "### fa's programs timed (`fa bench`)\n",
                                   "reference-bench.png"))
    return "\n".join(p for p in parts if p)


MADE_BY = "Made by `fa report`"


def check_own_report(path: Path) -> None:
    """fa report replaces only a report.md it made (unless --force): one a student wrote there, or
    filled in, stays. A report fa made starts with its title and says so in its first lines."""
    if forced() or not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head.startswith(b"# Homework 4: FlashAttention") or MADE_BY.encode() not in head:
        raise FaError(f"{path}: exists and is not a report fa report made: it is never replaced; name another folder "
                      "with -o, or give --force to replace it")


def write(paths: list[Path], out_dir: Path) -> Path:
    """report.md and its charts in out_dir, from the results files; returns report.md's path."""
    found = by_kind(paths)
    if out_dir.exists() and not out_dir.is_dir():
        raise FaError(f"{out_dir}: exists and is not a directory")
    check_own_report(out_dir / "report.md")
    out_dir.mkdir(parents=True, exist_ok=True)
    mine = {k: [r for r in v if not is_reference(r, k)] for k, v in found.items()}
    theirs = {k: [r for r in v if is_reference(r, k)] for k, v in found.items()}
    sources = ", ".join(f"`{p.name}`" for p in paths)
    commands = dict.fromkeys(r["command"] for records in found.values() for r in records if r.get("command"))
    counts = ", ".join(f"{len(v)} {k}" for k, v in found.items() if v)
    text = "\n".join([
        "# Homework 4: FlashAttention\n",
        yours("your name and student ID."),
        f"\nMade by `fa report` from {sources} ({counts} records, made from "
        f"{revision_text([r.get('source') or {} for v in found.values() for r in v])}): "
        + (f"the tables and charts are your program's records, as measured; the places marked {YOURS} are for "
           "your own words." if any(mine.values()) else
           "every record is of fa's own programs, so the course's sections below are empty and fa's figures are "
           "in the last section; `fa run ... --program ./hw4 -o run.json` gives your program's records.")
        + (" fa's own programs appear only in the last section, under their name."
           if any(theirs.values()) and any(mine.values()) else "")
        + "\n",
        implementation_section(mine["resources"]),
        profile_section(mine["profile"]),
        yours("what the metrics say about your kernel (what limits it: occupancy, shared or global memory)."),
        "## 3. Experiment and analysis\n",
        systems_section(found),
        optimization_section(mine["sweep"], out_dir, any(theirs.values())),
        judge_section(mine["run"], out_dir=out_dir),
        yours("anything else you measured (block sizes, input sizes, the time of each stage)."),
        bench_section(mine["bench"], out_dir),
        yours("how the NVIDIA and AMD runs differ, and why (warp of 32, wavefront of 64, memory, compilers)."),
        "## 5. Experience and conclusion\n",
        yours("what you learned from this homework; feedback (optional)."),
        reference_section(theirs, out_dir),
        "\n## Commands\n",
        "\n".join(f"- `{c}`" for c in commands) + "\n",
    ])
    report = out_dir / "report.md"
    with atomic_file(report) as f:
        f.write(text.encode())
    return report

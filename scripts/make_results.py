#!/usr/bin/env python3
"""make results: every file under docs/results/GPU/ and the README's chart, made again from this
checkout's build on this machine's NVIDIA GPU, in parts that each fit a 10-minute call:

    python3 scripts/make_results.py [PART ...] [--dir docs/results/h200] [--dry-run]

  bench    fa bench of fa-cuda (its default kernel, then each other kernel), fa-hip-cuda and
           PyTorch SDPA fp32 at the five usual shapes -> bench.json, compare.md and bench.png
           (the README's chart)
  judge    fa run of both suites (fa-cuda; fa-hip-cuda on t01..t30) -> run.json; what judging
           every value costs -> judge-cost.json; every row of t27 and t28 against float64 ->
           dense-error.txt (and docs/kernels.md's dense-error section)
  floor    the whole process against the start-up floor -> startup-floor.json
  report   fa profile, fa ladder, fa sweep and fa resources -> profile.json, ladder.json,
           ladder-profile.json, sweep.json, sweep-profile.json, resources-cuda.json and
           resources-hip-cuda.json; then fa report of these and the other parts' records ->
           report.md and its charts
  summary  (no GPU) docs/results.md's measured section, from the files above

Every part first removes the files it makes, so that no file outlives a run that failed, and
ends with the summary. Records carry the commit they were made from (fa_cli.report.records: git, or
the .source-revision file `make source-revision` writes where the copy has no history).
A part's command that fails stops the part with its exit status.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fa_cli.files import atomic_file  # noqa: E402
from fa_cli.measure import compare  # noqa: E402
from fa_cli.programs import registry  # noqa: E402
from fa_cli.programs.devices import list_devices  # noqa: E402
from fa_cli.report import records  # noqa: E402
from kernel_docs import replace_section  # noqa: E402

SHAPES = ["26,32768,64", "52,32768,32", "64,4096,64", "512,1024,32", "13000,128,32"]
PARTS = ["bench", "judge", "floor", "report", "summary"]  # report last: its fa report takes the others' records
RESULTS_DOC = ROOT / "docs" / "results.md"


def default_dir() -> Path:
    """docs/results/ and the GPU's model in lower case (NVIDIA H100 80GB HBM3 -> h100)."""
    name = next((d.name for d in list_devices() if d.vendor == "nvidia"), "")  # as fa asks the driver
    model = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Za-z]?)\b", name)
    return ROOT / "docs" / "results" / (model.group(1).lower() if model else "gpu")


@dataclass
class Step:
    """One command of a part: its argv, the settings it adds, and the file its output goes to."""
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdout: Path | None = None

    def __str__(self) -> str:
        text = " ".join([*(f"{k}={v}" for k, v in self.env.items()), shlex.join(self.argv)])
        return text + (f" > {self.stdout}" if self.stdout else "")

    def run(self) -> int:
        if self.stdout is None:
            return subprocess.run(self.argv, cwd=ROOT, env={**os.environ, **self.env}).returncode
        proc = subprocess.run(self.argv, cwd=ROOT, env={**os.environ, **self.env}, stdout=subprocess.PIPE)
        with atomic_file(self.stdout) as f:  # as every file fa writes: whole or not at all
            f.write(proc.stdout)
        sys.stdout.buffer.write(proc.stdout)
        return proc.returncode


def fa(*args: str, env: dict | None = None, stdout: Path | None = None) -> Step:
    return Step([sys.executable, "-m", "fa_cli", *args], env or {}, stdout)


def other_kernels() -> list[str]:
    """fa-cuda's kernels besides its default, each benchmarked under its own label (FA_KERNEL=...):
    its ladder's whole kernels, from its registry (`bin/fa-cuda --kernels`, built by make results)."""
    return registry.measured_families(registry.kernels_of(ROOT / "bin" / "fa-cuda"))


def script(name: str, *args: str, stdout: Path | None = None) -> Step:
    return Step([sys.executable, str(ROOT / "scripts" / name), *args], {}, stdout)


def plan(part: str, out: Path) -> tuple[list[str], list[Step]]:
    """The files a part makes (names in `out`) and its commands."""
    shapes = [a for s in SHAPES for a in ("--shape", s)]
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out  # commands run in ROOT
    o = lambda name: str(where / name)  # noqa: E731
    if part == "bench":
        timed = [*shapes, "--repeat", "3", "-o", o("bench.json")]
        steps = [fa("bench", "--program", "cuda", *timed)]
        steps += [fa("bench", "--program", "cuda", "--label", f"cuda-{k}", *timed, env={"FA_KERNEL": k})
                  for k in other_kernels()]
        steps += [fa("bench", "--program", p, *timed) for p in ("hip-cuda", "torch")]
        steps.append(fa("compare", o("bench.json"), "--markdown", "--plot", o("bench.png"), stdout=out / "compare.md"))
        return ["bench.json", "bench.png", "compare.md"], steps
    if part == "judge":
        steps = [fa("run", "--all", "--suite", suite, "--program", "cuda", "--tol", "1e-4", "-o", o("run.json"))
                 for suite in ("t", "c")]
        steps.append(fa("run", "--all", "--program", "hip-cuda", "--tol", "1e-4", "-o", o("run.json")))
        steps.append(script("judge_cost.py", "--suite", "c", "--program", "cuda", "-o", o("judge-cost.json")))
        steps.append(script("dense_error.py", "--cases", "t27", "t28", "--program", "bin/fa-cuda", "--docs",
                            stdout=out / "dense-error.txt"))
        return ["run.json", "judge-cost.json", "dense-error.txt"], steps
    if part == "report":
        steps = [fa("profile", "t17", "--program", p, "-o", o("profile.json"), env=env)
                 for p, env in (("cuda", {}), ("cuda", {"FA_KERNEL": "tiled"}), ("hip-cuda", {}))]
        steps += [fa("ladder", "t27", "--program", p, "-o", o("ladder.json")) for p in ("cuda", "hip-cuda")]
        steps.append(fa("ladder", "t17", "--program", "cuda", "--profile", "-o", o("ladder-profile.json")))
        steps += [fa("sweep", "t27", "--program", p, "--param", "Br=8,16,32", "--param", f"Bc={bc}", "-o", o("sweep.json"))
                  for p, bc in (("cuda", "16,32,64"), ("hip-cuda", "32,64"))]
        steps.append(fa("sweep", "t17", "--program", "cuda", "--param", "Br=8,16,32", "--param", "Bc=16,32,64",
                        "--profile", "-o", o("sweep-profile.json")))
        steps += [fa("resources", "--program", p, "--arch", "sm_90", "--json", stdout=out / f"resources-{p}.json")
                  for p in ("cuda", "hip-cuda")]
        made = ["profile.json", "ladder.json", "ladder-profile.json", "sweep.json", "sweep-profile.json",
                "resources-cuda.json", "resources-hip-cuda.json"]
        # fa report of these and of the other parts' records where they are there: its charts too
        others = [f for f in ("run.json", "bench.json") if (out / f).is_file()]
        steps.append(fa("report", *[o(f) for f in made + others], "-o", str(out)))
        return made + ["report.md", "ladder-*.png", "sweep-*.png", "reference-*.png"], steps
    if part == "floor":
        return ["startup-floor.json"], [script("startup_floor.py", "--program", "bin/fa-cuda", "--repeat", "15",
                                               "-o", o("startup-floor.json"))]
    return [], []


def run_part(part: str, out: Path, dry_run: bool) -> None:
    made, steps = plan(part, out)
    where = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"== make results: {part} -> {where}: {', '.join(made)}", flush=True)
    if dry_run:
        print("\n".join(map(str, steps)))
        return
    out.mkdir(parents=True, exist_ok=True)
    for pattern in made:
        for path in out.glob(pattern):
            path.unlink()
    start = time.monotonic()
    for step in steps:
        print(f"$ {step}", flush=True)
        if (status := step.run()) != 0:
            sys.exit(f"make results: {part}: exit {status} from {step}")
    print(f"== {part}: {time.monotonic() - start:.0f} s", flush=True)


# ---------------------------------------------------------------- docs/results.md's measured section

def _records(path: Path) -> list[dict]:
    try:
        return json.loads(path.read_text())["records"]
    except (OSError, ValueError, KeyError):
        return []


def bench_table(bench: list[dict]) -> list[str]:
    """Kernel TFLOP/s and whole-process seconds of every run at each shape, and fa-cuda against
    PyTorch SDPA fp32 on both."""
    runs, table = compare.arrange(bench)
    if not table:
        return []
    names = [k.name for k in runs]
    lines = ["| B, N, d | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for shape, by_run in table.items():
        cells = []
        for k in runs:
            r = by_run.get(k)
            if not r or r.get("error"):
                cells.append("-")
                continue
            tf = r.get("tflops_kernel")
            cells.append(f"{tf:.3g} / {r['wall_s']['median']:.2f}" if tf else f"- / {r['wall_s']['median']:.2f}")
        lines.append(f"| {shape.replace('x', ', ')} | " + " | ".join(cells) + " |")
    return lines


def run_summary(runs: list[dict]) -> list[str]:
    """Per program and suite: verdicts, the largest error and the total whole-process time."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["program"], "c" if r["input"].startswith("c") else "t"), []).append(r)
    lines = ["| program | suite | PASS | largest error | whole process, all cases | slowest case |",
             "|---|---|---|---|---|---|"]
    for (program, suite), rs in groups.items():
        passed = sum(r.get("verdict") == "PASS" for r in rs)
        worst = max((r.get("max_err") or 0.0) for r in rs)
        slow = max(rs, key=lambda r: r.get("wall_s") or 0.0)
        lines.append(f"| {program} | {suite}01..{suite}{len(rs):02d} | {passed} of {len(rs)} | {worst:.2g} | "
                     f"{sum(r.get('wall_s') or 0.0 for r in rs):.1f} s | {slow['input']}: {slow.get('wall_s', 0):.2f} s |")
    return lines


def floor_table(floor: dict) -> list[str]:
    lines = ["| B, N, d | floor | floor, one queue | fa-cuda | over the floor |", "|---|---|---|---|---|"]
    for shape, s in floor.get("shapes", {}).items():
        fa_cuda = next((v for k, v in s.items() if not k.startswith("floor")), None)
        if fa_cuda:
            f0 = s["floor"]["wall_s"]
            lines.append(f"| {shape.replace(',', ', ')} | {f0:.3f} | {s['floor-1queue']['wall_s']:.3f} | "
                         f"{fa_cuda['wall_s']:.3f} | {fa_cuda['wall_s'] - f0:+.3f} |")
    return lines


def summary(out: Path) -> str:
    """The measured section of docs/results.md: what the files in `out` say, with their commit.
    Its links are relative to docs/ where `out` lies there, else `out` as it is."""
    rel = out.relative_to(ROOT / "docs") if out.is_relative_to(ROOT / "docs") else out
    bench, runs = _records(out / "bench.json"), _records(out / "run.json")
    everything = bench + runs + _records(out / "profile.json") + _records(out / "ladder.json")
    # profile records name the device with its arch, "NAME (sm_90)": one name per device
    devices = sorted({re.sub(r" \(\w+\)$", "", r["device"]) for r in everything
                      if r.get("device") not in (None, "unknown")})
    dates = sorted(r["date"][:10] for r in everything if r.get("date"))
    parts = [f"_Made by `make results` on {', '.join(devices) or 'no GPU'}"
             + (f", {dates[0]}" + (f" to {dates[-1]}" if dates[-1] != dates[0] else "") if dates else "")
             + f", from {records.revision_text([r.get('source') or {} for r in everything])}; "
             f"the files are in [{rel}/]({rel}/)._\n"]
    if bench:
        parts += [f"**Kernel TFLOP/s / whole process, seconds** (`fa bench`, medians of 3 runs after a warm-up; "
                  f"TFLOP/s counts 4*B*N*N*d; [compare.md]({rel}/compare.md), [bench.json]({rel}/bench.json)). "
                  "cuda is fa-cuda with its default kernel; cuda-KERNEL the same program with FA_KERNEL=KERNEL; "
                  "torch is a Python script around PyTorch's SDPA in fp32, whose whole process is mostly Python "
                  "and PyTorch starting.\n", *bench_table(bench), ""]
    if runs:
        parts += [f"**The judge** (`fa run --all`, every value against float64 at 1e-4, "
                  f"[run.json]({rel}/run.json)):\n", *run_summary(runs), ""]
    if (out / "startup-floor.json").is_file():
        floor = json.loads((out / "startup-floor.json").read_text())
        parts += [f"**Whole process against the start-up floor** (`scripts/startup_floor.py`, medians of "
                  f"{floor.get('repeat')} rounds, input in the page cache, the output of the round before replaced; "
                  f"[startup-floor.json]({rel}/startup-floor.json)):\n", *floor_table(floor), ""]
    if (out / "judge-cost.json").is_file():
        cost = json.loads((out / "judge-cost.json").read_text())
        parts += [f"**What judging every value costs** ([judge-cost.json]({rel}/judge-cost.json)): the expected "
                  f"outputs of suite c's {cost.get('cases_computed')} cases computed in "
                  f"{cost.get('first_computation_s', 0):.1f} s ({cost.get('backend')}); then the compare of every "
                  f"value, cached, {cost.get('compare_mean_s', 0):.3f} s a case on average.\n"]
    if (out / "dense-error.txt").is_file():
        parts += ["**Every row of t27 and t28 against float64** "
                  f"([dense-error.txt]({rel}/dense-error.txt)):\n", "```",
                  (out / "dense-error.txt").read_text().rstrip(), "```", ""]
    missing = [part for part in PARTS if part != "summary" and not all(any(out.glob(f)) for f in plan(part, out)[0])]
    if missing:
        parts += [f"Not made yet from this build: the parts {', '.join(missing)} (`make results PARTS=\"{' '.join(missing)}"
                  " summary\"` on a machine with an NVIDIA GPU); what they measured before is dated, in "
                  "[history/](history/).\n"]
    if (out / "report.md").is_file():
        parts += [f"The whole `fa report` of these records (profile, ladder, sweeps, resources): "
                  f"[{rel}/report.md]({rel}/report.md).\n"]
    return "\n".join(parts)


def write_summary(out: Path) -> None:
    """docs/results.md's measured section where `out` is under docs/results/; the files of any
    other folder (a run on a machine whose checkout is a copy) get theirs beside them, summary.md."""
    if out.is_relative_to(RESULTS_DOC.parent / "results"):
        target, text = RESULTS_DOC, RESULTS_DOC.read_text()
        body = replace_section(text, "results", summary(out))
    else:
        target, body = out / "summary.md", summary(out)
    with atomic_file(target) as f:
        f.write(body.encode())
    print(f"== summary -> {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="*", choices=PARTS + [[]], default=[], metavar="PART",
                        help="bench, judge, report, floor, summary (default: all)")
    parser.add_argument("--dir", type=Path, help="where the files go (default: docs/results/ and the GPU's model)")
    parser.add_argument("--dry-run", action="store_true", help="only print each part's commands")
    args = parser.parse_args()
    out = (args.dir or default_dir()).resolve()
    parts = args.parts or PARTS
    for part in parts:
        if part != "summary":
            run_part(part, out, args.dry_run)
    if not args.dry_run:
        write_summary(out)


if __name__ == "__main__":
    main()

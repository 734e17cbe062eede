#!/usr/bin/env python3
"""The whole process against its floor, and where the time above it goes.

    python3 scripts/startup_floor.py [--program bin/fa-cuda ...] [--shape 26,32768,64 ...]
                                     [--repeat 9] [-o floor.json]

Floors: src_cuda/context_only.cu, built by the same nvcc for this GPU, which creates the CUDA
context and exits through the runtime's teardown:
  floor         as a user runs it (the driver's defaults);
  floor-1queue  with CUDA_DEVICE_MAX_CONNECTIONS=1, the setting fa-cuda starts with.
Per shape: the input is generated once (fa_cli.cases.generate, uniform, seed 0) into --inputs, flushed
to disk and read into the page cache; each runner runs once to warm up, then `repeat` rounds in
which every runner runs once, each round starting one runner later (as fa bench does), with the
output left from the round before (as repeated judging does).
Prints per shape and runner the median wall time, the difference to each floor, and the
median phases from FA_TIMING=2, in seconds since the process was spawned: main entered, device
up, last chunk copied back, output committed, device released, last instruction, and `exit`:
from the last instruction until the process was reaped (the driver's and the kernel's
teardown). Needs nvcc and an NVIDIA GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fa_cli.cases.format import Shape  # noqa: E402
from fa_cli.cases.generate import write_input  # noqa: E402
from fa_cli.measure import floor as floor_program  # noqa: E402
from fa_cli.programs import timing  # noqa: E402
from fa_cli.report import records  # noqa: E402

SHAPES = ["26,32768,64", "13000,128,32", "60,32768,64"]
PHASES = ["main", "device", "copied", "committed", "released", "last", "exit"]


def cached_input(shape: str, inputs: Path) -> Path:
    B, N, d = (int(x) for x in shape.split(","))
    path = inputs / f"uniform-B{B}-N{N}-d{d}-s0.in"
    if not path.exists():
        write_input(path, Shape(B, N, d), seed=0)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)  # written back now, not while a program is timed
    while os.read(fd, 1 << 24):  # into the page cache
        pass
    os.close(fd)
    return path


def phases(stderr: str, spawned: float, reaped: float) -> dict[str, float]:
    """Seconds since the spawn at which each phase ended, from the FA_TIMING=2 lines."""
    if m := re.search(r"context-only: started at ([\d.]+), context at ([\d.]+) s", stderr):
        start = float(m.group(1))
        marks = {"main": start, "device": start + float(m.group(2)), "last": start + float(m.group(2))}
    elif m := re.search(r"fa-trace: started at ([\d.]+) s", stderr):
        start = float(m.group(1))
        rel = {"device": r"device up at ([\d.]+) s", "copied": r"last chunk copied back at ([\d.]+) s",
               "committed": r"output committed at ([\d.]+) s", "released": r"device released at ([\d.]+) s",
               "last": r"exiting at ([\d.]+) s"}
        marks = {"main": start}
        for key, pattern in rel.items():
            if found := re.search(pattern, stderr):
                marks[key] = start + float(found.group(1))
    else:
        return {}
    out = {key: t - spawned for key, t in marks.items()}
    out["exit"] = reaped - marks["last"]
    return out


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, dict[str, float], str]:
    spawned = time.monotonic()  # the clock the programs print (CLOCK_MONOTONIC)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    reaped = time.monotonic()
    if proc.returncode != 0:
        sys.exit(f"startup_floor: {' '.join(argv)} failed: {proc.stderr.strip()}")
    line = timing.parse(proc.stderr)
    stages = " ".join(f"{k}={v:.6f}" for k, v in line.seconds.items())
    return reaped - spawned, phases(proc.stderr, spawned, reaped), stages


def measure(runners: list[tuple[str, list[str], dict[str, str]]], repeat: int) -> dict[str, dict]:
    """Warm-up, then `repeat` rounds of every runner, each round starting one runner later."""
    runs: dict[str, list] = {name: [] for name, _, _ in runners}
    for r in range(repeat + 1):
        for i in range(len(runners)):
            name, argv, env = runners[(r + i) % len(runners)]
            result = timed(argv, env)
            if r > 0:
                runs[name].append(result)
    summary = {}
    for name, results in runs.items():
        walls = [w for w, _, _ in results]
        median_run = sorted(results, key=lambda x: x[0])[len(results) // 2]
        summary[name] = {
            "wall_s": statistics.median(walls), "walls": walls,
            "phases": {k: statistics.median(p[k] for _, p, _ in results if k in p)
                       for k in PHASES if all(k in p for _, p, _ in results)},
            "stages": median_run[2],
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", action="append", help="a build of fa-cuda (repeatable; default bin/fa-cuda)")
    parser.add_argument("--shape", action="append", help="B,N,d (repeatable)")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--inputs", type=Path, default=Path(tempfile.gettempdir()) / "fa-floor-inputs")
    parser.add_argument("-o", "--output", type=Path, help="also write the medians and every wall time as JSON")
    args = parser.parse_args()
    if not shutil.which("nvcc"):
        sys.exit("startup_floor: needs nvcc and an NVIDIA GPU")
    programs = args.program or [str(ROOT / "bin" / "fa-cuda")]
    args.inputs.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k != "CUDA_DEVICE_MAX_CONNECTIONS"}
    env = dict(base, FA_TIMING="2")
    results = {}
    with tempfile.TemporaryDirectory(prefix="fa-floor-") as tmp:
        work = Path(tmp)
        floor = floor_program.build()  # src_cuda/context_only.cu, built once per nvcc into fa's cache
        print(f"{'shape':>14} {'runner':<24} {'wall s':>7} {'-floor':>7} {'-1queue':>7}  "
              + " ".join(f"{p:>9}" for p in PHASES))
        for shape in args.shape or SHAPES:
            path = cached_input(shape, args.inputs)
            runners = [("floor", [str(floor)], env),
                       ("floor-1queue", [str(floor)], dict(env, CUDA_DEVICE_MAX_CONNECTIONS="1"))]
            runners += [(program, [program, str(path), str(work / f"out{i}.bin")], env)
                        for i, program in enumerate(programs)]
            summary = measure(runners, args.repeat)
            results[shape] = summary
            f0, f1 = summary["floor"]["wall_s"], summary["floor-1queue"]["wall_s"]
            for name, s in summary.items():
                label = name if len(name) <= 24 else "..." + name[-21:]
                print(f"{shape:>14} {label:<24} {s['wall_s']:7.3f} {s['wall_s'] - f0:+7.3f} {s['wall_s'] - f1:+7.3f}  "
                      + " ".join(f"{s['phases'][p]:9.4f}" if p in s["phases"] else f"{'':>9}" for p in PHASES))
            for name in programs:
                print(f"{'':>14} {'':<24} {summary[name]['stages']}")
    if args.output:
        args.output.write_text(json.dumps({"device": device_name(), "repeat": args.repeat, "shapes": results,
                                           "command": " ".join(["python3", *sys.argv]),
                                           "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                           "source": records.source_revision()}, indent=1) + "\n")


def device_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()

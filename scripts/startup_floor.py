#!/usr/bin/env python3
"""The whole process against its floor: fa-cuda beside a program that only creates its CUDA
context (scripts/context_only.cu, built with the same nvcc), on page-cached inputs.

    python3 scripts/startup_floor.py [--program bin/fa-cuda] [--shape 26,32768,64 ...] [--repeat 9]

Per shape: the input is generated (fa gen, into the cache), flushed to disk and read once into
the page cache; then rounds in which each program runs once, the order alternating (A B, B A),
and the medians of the wall times. Prints one line per shape: floor, fa-cuda, the difference,
and FA_TIMING's stages of fa-cuda's median run. Needs an NVIDIA GPU.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fa_cli import locations  # noqa: E402

SHAPES = ["26,32768,64", "13000,128,32", "60,32768,64"]


def build_floor(work: Path) -> Path:
    exe = work / "context_only"
    subprocess.run(["nvcc", "-O3", "-arch=native", "-Xcompiler", "-pthread", "-o", str(exe),
                    str(ROOT / "scripts" / "context_only.cu")], check=True)
    return exe


def cached_input(shape: str) -> Path:
    B, N, d = shape.split(",")
    path = locations.cache_dir() / f"uniform-B{B}-N{N}-d{d}-s0.in"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "fa_cli", "gen", "-B", B, "-N", N, "-d", d, "-o", str(path)],
                       check=True, stdout=subprocess.DEVNULL)
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    while os.read(fd, 1 << 24):  # into the page cache
        pass
    os.close(fd)
    return path


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"startup_floor: {' '.join(argv)} failed: {proc.stderr.strip()}")
    return wall, proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", default=str(ROOT / "bin" / "fa-cuda"))
    parser.add_argument("--shape", action="append", help="B,N,d (repeatable)")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    if not shutil.which("nvcc"):
        sys.exit("startup_floor: needs nvcc and an NVIDIA GPU")
    with tempfile.TemporaryDirectory(prefix="fa-floor-") as tmp:
        work = Path(tmp)
        floor = build_floor(work)
        out = work / "out.bin"
        env = dict(os.environ, FA_TIMING="1")
        print(f"{'shape':>14} {'floor s':>8} {'fa-cuda s':>9} {'over s':>7}  fa-cuda stages (its median run)")
        for shape in args.shape or SHAPES:
            path = cached_input(shape)
            floors, runs = [], []
            timed([args.program, str(path), str(out)], env)  # warm-up: driver, JIT cache
            for r in range(args.repeat):
                pair = [("floor", [str(floor)]), ("fa", [args.program, str(path), str(out)])]
                for name, argv in (pair if r % 2 == 0 else pair[::-1]):
                    wall, err = timed(argv, env)
                    if name == "floor":
                        floors.append(wall)
                    else:
                        runs.append((wall, err))
            f = statistics.median(floors)
            runs.sort(key=lambda x: x[0])
            wall, err = runs[len(runs) // 2]
            stages = next((line[len("fa-timing: "):] for line in err.splitlines() if line.startswith("fa-timing:")), "")
            print(f"{shape:>14} {f:8.3f} {wall:9.3f} {wall - f:+7.3f}  {stages}")


if __name__ == "__main__":
    main()

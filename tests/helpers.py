"""Helpers the tests share: the fa command, the programs under test, and a one-call check of a
program against float64. (Fixtures live in conftest.py.)"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from fa_cli import locations
from fa_cli.cases import generate
from fa_cli.cases.format import AttentionInput, Shape, open_output
from fa_cli.judge import reference
from fa_cli.programs import programs
from fa_cli.programs.devices import list_devices

ROOT = locations.checkout()
BIN = ROOT / "bin"
DATA = Path(__file__).with_name("data")


def fa(*args, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The fa command as a user types it, started through the interpreter running the tests
    (never a `fa` found on PATH)."""
    return subprocess.run([sys.executable, "-m", "fa_cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd)


def have_torch() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def have_nvidia_gpu() -> bool:
    return any(d.vendor == "nvidia" for d in list_devices())


def build(target: str) -> Path:
    """Build a named program (cpu, cuda, hip, hip-cuda, or a test build such as hip-cuda-amd-tiles)
    with make and return its path."""
    subprocess.run(["make", "-s", "-C", str(ROOT), target], check=True)
    return BIN / programs.BUILT.get(target, f"fa-{target}")


def direct_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Textbook float64 attention of one batch, the whole score matrix at once (small N only)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    s = q @ k.T / np.sqrt(q.shape[1])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def run_and_check(program: Path, tmp_path: Path, shape: Shape, dist: str = "uniform", seed: int = 1,
                  env: dict | None = None) -> float:
    """Run program on a generated input; return the max abs error against float64 attention."""
    inp, out = tmp_path / f"{shape.B}_{shape.N}_{shape.d}_{dist}.in", tmp_path / "o.out"
    generate.write_input(inp, shape, seed, dist)
    subprocess.run([str(program), str(inp), str(out)], check=True, env=env)
    data, got = AttentionInput(inp), open_output(out, shape)
    worst = 0.0
    for b in range(shape.B):
        ref = reference.attention(*data.qkv(b))[0]
        err = np.abs(got[b].astype(np.float64) - ref)
        assert np.isfinite(err).all()
        worst = max(worst, float(err.max()))
    return worst


# Builds of tests/data/student_hw4.cpp kept between runs of the tests, by what makes them: the
# source, the compiler's line and its version (a planted program is the same binary every run).
TEST_BUILDS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fa-test-builds"


@functools.lru_cache(maxsize=1)
def gpp_version() -> str:
    return subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout


def student_program(folder: Path, mistake: str, *defines: str, name: str | None = None) -> Path:
    """tests/data/student_hw4.cpp built with -DMISTAKE=mistake and the defines (-DBC=1), as
    folder/name (hw4_<mistake> unless said): a copy of the build kept by content, made once."""
    source = DATA / "student_hw4.cpp"
    argv = ["g++", "-O2", f"-DMISTAKE={mistake}", *defines]
    key = hashlib.sha256("\0".join([*argv, source.read_text(), gpp_version()]).encode()).hexdigest()[:24]
    kept = TEST_BUILDS / key
    if not kept.exists():
        TEST_BUILDS.mkdir(parents=True, exist_ok=True)
        part = TEST_BUILDS / f"{key}.{os.getpid()}.part"  # side by side workers: each writes its own, then renames
        subprocess.run([*argv, "-o", str(part), str(source)], check=True)
        os.replace(part, kept)
    path = folder / (name or f"hw4_{mistake.lower()}")
    shutil.copy2(kept, path)
    return path


class PlantedPrograms(dict):
    """tests/data/student_hw4.cpp built per -DMISTAKE=NAME, each when a test first asks for it
    (NAME -> program): a run of a few tests builds only theirs."""

    def __init__(self, folder: Path, mistakes):
        super().__init__()
        self.folder, self.known = folder, set(mistakes)

    def __missing__(self, mistake: str) -> Path:
        assert mistake in self.known, mistake
        self[mistake] = student_program(self.folder, mistake)
        return self[mistake]


def build_students(folder: Path, mistakes) -> PlantedPrograms:
    """tests/data/student_hw4.cpp per -DMISTAKE=NAME, built as tests ask: NAME -> program."""
    return PlantedPrograms(folder, mistakes)


def verdicts(stdout: str) -> list[str]:
    """The verdict column of fa run's table, row by row (its summary line and paragraphs left out)."""
    return [line.strip("│ ").split("│")[-1].strip().split(",")[0] for line in stdout.splitlines()
            if line.startswith("│")]


def hip_port_with_a_kernel(tmp_path: Path, header: str, text: str, row: str, before: str, *make_args) -> Path:
    """fa-hip-cuda built from a copy of the sources with one more kernel: its header in
    src_common/ (included by registry.h) and its row put before the row that starts with
    `before`, as a contributor adds one (docs/contributing.md). Returns the program."""
    tree = tmp_path / "tree"
    for part in ("src_common", "src_cuda", "src_hip", "Makefile"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, tree / part)
    (tree / "src_common" / header).write_text(text)
    reg = tree / "src_common" / "registry.h"
    source = reg.read_text().replace('#include "kernel_row.h"\n', f'#include "kernel_row.h"\n#include "{header}"\n')
    anchor = f"        {before}"
    assert anchor in source, before
    reg.write_text(source.replace(anchor, row + anchor))
    subprocess.run(["make", "-s", "-C", str(tree), *make_args, "hip-cuda"], check=True, capture_output=True)
    return tree / "bin" / "fa-hip-cuda"


def path_without_bwrap(folder: Path) -> str:
    """A PATH of the build tools alone (links in `folder`): a machine where bubblewrap is not installed."""
    folder.mkdir()
    for tool in ("g++", "make", "sh", "bash"):
        if shutil.which(tool):
            (folder / tool).symlink_to(shutil.which(tool))
    return str(folder)


def stand_in_context(tmp_path: Path, script: str, source_text: str, inp):
    """A probe step's Context on a stand-in program (a Python script in the course's format, its
    `{python}` filled in) with the source fa would have (hw4.cu), its judged output and the truth
    already in its facts."""
    from fa_cli.judge.probes.step import Context
    from fa_cli.judge.tool_logs import Budget
    program = tmp_path / "stand-in"
    program.write_text(script.format(python=sys.executable))
    program.chmod(0o755)
    source = tmp_path / "hw4.cu"
    source.write_text(source_text)
    ctx = Context(programs.Program("stand-in", program, source=source), None, tmp_path, Budget(60.0), lambda line: None,
                  5e-3, inp, "t01")
    ctx.facts.out, ctx.facts.true = ctx.run(inp), inp.output()
    return ctx

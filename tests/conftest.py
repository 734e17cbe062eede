"""Shared fixtures: the fa command, programs under test and a one-call check of a program
against float64."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fa_cli import generate, locations, reference
from fa_cli.devices import list_devices
from fa_cli.format import AttentionInput, Shape, open_output

ROOT = locations.checkout()
BIN = ROOT / "bin"
DATA = Path(__file__).with_name("data")


def fa(*args, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The fa command as a user types it, started through the interpreter running the tests
    (never a `fa` found on PATH)."""
    return subprocess.run([sys.executable, "-m", "fa_cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Generated inputs go to a cache of the test session's own, never the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FA_CACHE", str(tmp_path_factory.mktemp("fa-cache")))
        yield


def have_nvidia_gpu() -> bool:
    return any(d.vendor == "nvidia" for d in list_devices())


def pytest_collection_modifyitems(config, items):
    if have_nvidia_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def build(target: str, binary: str) -> Path:
    """Build a program with make once per session and return its path."""
    subprocess.run(["make", "-s", "-C", str(ROOT), target], check=True)
    return BIN / binary


@pytest.fixture(scope="session")
def cpu_program() -> Path:
    return build("cpu", "fa-cpu")


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


@pytest.fixture
def stand_in_ncu(tmp_path):
    """An `ncu` on PATH that runs the program and writes, as its results, a real ncu log of
    fa-cuda captured on the H100 (tests/data/ncu-raw-h100.csv): fa profile's whole path with no GPU."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ncu"
    script.write_text(f"#!{sys.executable}\nimport shutil, subprocess, sys\n"
                      "args = sys.argv[1:]\nlog = args[args.index('--log-file') + 1]\n"
                      f"shutil.copy({str(DATA / 'ncu-raw-h100.csv')!r}, log)\n"
                      "sys.exit(subprocess.run(args[-3:]).returncode)\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

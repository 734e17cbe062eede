"""Every header of src_common compiles on its own: it includes what it uses (no includer must
know an order). With nvcc for sm_90 and, where hipcc is, with hipcc for gfx90a (AMD's platform);
no GPU needed."""
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEADERS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "src_common").rglob("*.h"))


def compile_alone(argv: list[str], header: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(tmp_path), "HIP_PLATFORM": "amd"}  # hipcc leaves files in TMPDIR
    return subprocess.run([*argv, header], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)


def test_every_header_is_listed():
    assert len(HEADERS) >= 20 and "src_common/host/gpu_api.h" in HEADERS and "src_common/online_softmax.h" in HEADERS


def failures(argv: list[str], tmp_path: Path) -> list[str]:
    """Each header compiled alone, as many at once as there are cores: what failed, and why."""
    def one(header: str) -> str:
        proc = compile_alone(argv, header, tmp_path)
        return "" if proc.returncode == 0 else f"{header}:\n{proc.stderr[-1500:]}"
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return [f for f in pool.map(one, HEADERS) if f]


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_every_header_compiles_alone_with_nvcc(tmp_path):
    assert failures(["nvcc", "-std=c++17", "-arch=sm_90", "-x", "cu", "-c", "-o", os.devnull], tmp_path) == []


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("hipcc"), reason="needs hipcc (apt-get install hipcc)")
def test_every_header_compiles_alone_with_hipcc(tmp_path):
    argv = ["hipcc", "-std=c++17", "--offload-arch=gfx90a", "-x", "hip", "-fsyntax-only"]
    assert failures(argv, tmp_path) == []


def test_a_header_that_misses_an_include_fails(tmp_path):
    """The check can fail: a header using the kernels' primitives without including them does not compile."""
    if not shutil.which("nvcc"):
        pytest.skip("needs nvcc")
    bad = tmp_path / "bad.h"
    bad.write_text("#pragma once\n__device__ float f(float v) { return FA_SHFL_XOR(v, 1, 32); }\n")
    proc = compile_alone(["nvcc", "-std=c++17", "-arch=sm_90", "-x", "cu", "-c", "-o", os.devnull], str(bad), tmp_path)
    assert proc.returncode != 0 and "FA_SHFL_XOR" in proc.stderr

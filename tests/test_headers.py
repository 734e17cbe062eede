"""src_common sits below both backends: it includes nothing of src_cuda or src_hip (the backend's
choices reach it as macros and declarations, src_common/gpu_primitives.h), and each of its headers
compiles on its own after its backend's platform header (no includer must know another order).
With nvcc for sm_90 and, where hipcc is, with hipcc for gfx90a (AMD's platform); no GPU needed."""
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMON = ROOT / "src_common"
HEADERS = sorted(p.relative_to(ROOT).as_posix() for p in COMMON.rglob("*.h"))
NVCC = ["nvcc", "-std=c++17", "-arch=sm_90", "-x", "cu", "-c", "-o", os.devnull]
# The platform headers, each of which brings its backend's primitives and API names.
CUDA_PLATFORM = "src_cuda/cuda_api.cuh"
HIP_PLATFORM = "src_hip/hip_api.h"
# What a backend gives the common layer (src_common/gpu_primitives.h, host/gpu_api.h), as a
# stand-in: enough for the preprocessor, so that only src_common's own includes are tried.
STAND_IN_BACKEND = """#define FA_SHFL_XOR(v, mask, width) (v)
#define FA_SYNC_WAVE()
#define FA_WAVE 32
#define FA_LAUNCH_BOUNDS(t, b)
#define FA_AMD_CODE 0
#define FA_ASYNC_COPY 0
#define FA_GPU(name) gpu##name
#define FA_CHECK(call) (call)
#define FA_CHECK_LAUNCH(name)
"""


def includes(header: Path) -> list[Path]:
    return [(header.parent / name).resolve()
            for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', header.read_text(), re.M)]


def needs_backend(header: Path, seen: frozenset = frozenset()) -> bool:
    """Whether the header reaches, through src_common's includes, a piece that a backend fills in."""
    if header.name in ("gpu_primitives.h", "gpu_api.h"):
        return True
    return any(needs_backend(h, seen | {header}) for h in includes(header) if h not in seen and h.is_file())


def compile_alone(argv: list[str], header: str, tmp_path: Path, cwd: Path = ROOT,
                  platform: str = "") -> subprocess.CompletedProcess:
    """The header compiled as a file that includes it alone, or after the platform header where
    it needs a backend."""
    path = (cwd / header).resolve()
    unit = tmp_path / f"{header.replace('/', '_')}.unit"
    first = f'#include "{ROOT / platform}"\n' if platform and needs_backend(path) else ""
    unit.write_text(f'{first}#include "{path}"\n')
    env = {**os.environ, "TMPDIR": str(tmp_path), "HIP_PLATFORM": "amd"}  # hipcc leaves files in TMPDIR
    return subprocess.run([*argv, str(unit)], cwd=cwd, capture_output=True, text=True, env=env, timeout=600)


def test_every_header_is_listed():
    assert len(HEADERS) >= 20 and "src_common/host/gpu_api.h" in HEADERS and "src_common/online_softmax.h" in HEADERS
    assert needs_backend(COMMON / "registry.h") and not needs_backend(COMMON / "host" / "input.h")


def failures(argv: list[str], tmp_path: Path, platform: str = "", cwd: Path = ROOT) -> list[str]:
    """Each header compiled alone, as many at once as there are cores: what failed, and why."""
    def one(header: str) -> str:
        proc = compile_alone(argv, header, tmp_path, cwd, platform)
        return "" if proc.returncode == 0 else f"{header}:\n{proc.stderr[-1500:]}"
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return [f for f in pool.map(one, HEADERS) if f]


def test_no_include_leaves_src_common():
    """Every quoted #include of src_common names a file inside src_common, which exists."""
    outside = []
    for header in COMMON.rglob("*.h"):
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', header.read_text(), re.M):
            target = (header.parent / name).resolve()
            if COMMON not in target.parents or not target.is_file():
                outside.append(f"{header.relative_to(ROOT)}: {name}")
    assert outside == []


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_src_common_preprocesses_with_only_itself_on_the_include_path(tmp_path):
    """src_common copied alone (no src_cuda or src_hip beside it), each header preprocessed with
    only that copy on the include path and a stand-in for the backend's macros: nothing missing."""
    shutil.copytree(COMMON, tmp_path / "src_common")
    (tmp_path / "backend.h").write_text(STAND_IN_BACKEND)
    argv = ["nvcc", "-std=c++17", "-x", "cu", "-E", "-o", os.devnull, "-I", "src_common", "-include",
            str(tmp_path / "backend.h")]
    assert failures(argv, tmp_path, cwd=tmp_path) == []


@pytest.mark.slow  # a nvcc compile per header: minutes on 2 cores
@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_every_header_compiles_alone_with_nvcc(tmp_path):
    assert failures(NVCC, tmp_path, CUDA_PLATFORM) == []


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("hipcc"), reason="needs hipcc (apt-get install hipcc)")
def test_every_header_compiles_alone_with_hipcc(tmp_path):
    argv = ["hipcc", "-std=c++17", "--offload-arch=gfx90a", "-x", "hip", "-fsyntax-only"]
    assert failures(argv, tmp_path, HIP_PLATFORM) == []


def test_checks_can_fail(tmp_path):
    """Each check fails where it should: a header that uses a shared piece without including it
    does not compile; a shared kernel without its backend's primitives stops at gpu_primitives.h;
    an include of a backend file does not preprocess from src_common alone."""
    if not shutil.which("nvcc"):
        pytest.skip("needs nvcc")
    bad = tmp_path / "bad.h"
    bad.write_text("#pragma once\ninline float f() { fa::CompensatedSum s; return s.value(); }\n")
    proc = compile_alone(NVCC, str(bad), tmp_path, platform=CUDA_PLATFORM)
    assert proc.returncode != 0 and "CompensatedSum" in proc.stderr
    proc = compile_alone(NVCC, "src_common/attention_tiled.h", tmp_path)
    assert proc.returncode != 0 and "backend's primitives first" in proc.stderr
    (tmp_path / "src_common").mkdir()
    (tmp_path / "src_common" / "leaky.h").write_text('#include "../src_cuda/kernel_primitives.cuh"\n')
    proc = compile_alone(["nvcc", "-x", "cu", "-E", "-o", os.devnull, "-I", "src_common"], "src_common/leaky.h",
                         tmp_path, cwd=tmp_path)
    assert proc.returncode != 0 and "kernel_primitives.cuh" in proc.stderr

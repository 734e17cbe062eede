"""What can run here, said before any work: a GPU program without its GPU, a missing profiler,
the disk a suite run takes."""
import os
import stat
import sys
from pathlib import Path

import pytest

from helpers import fa, have_nvidia_gpu
from fa_cli.errors import FaError
from fa_cli.programs import devices, programs, ready, wave64

no_nvidia = pytest.mark.skipif(have_nvidia_gpu(), reason="about a machine without an NVIDIA GPU")


def fake_cuda_binary(folder: Path) -> Path:
    """A program that reads as nvcc's output (a .nv_fatbin section name in its bytes) and would
    write an output if it were run."""
    path = folder / "hw4"
    path.write_text(f"#!{sys.executable}\n# .nv_fatbin\nimport sys\nopen(sys.argv[2], 'wb').write(b'')\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def cache_files(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


@no_nvidia
def test_cuda_program_without_gpu_is_one_line_before_any_input(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "FA_CACHE": str(cache)}
    program = fake_cuda_binary(tmp_path)
    proc = fa("run", "t01", "c01", "--program", program, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert f"{program} is a CUDA program, and this machine has no NVIDIA GPU to run it" in line
    assert "srun -p nvidia --gres=gpu:1 fa run t01 c01 --program" in line and "--program cpu" in line
    assert cache_files(cache) == []  # c01 neither generated nor its expected output computed


@no_nvidia
def test_profile_and_ladder_without_gpu_say_so_at_once(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "FA_CACHE": str(cache)}
    proc = fa("profile", "t17", "--program", fake_cuda_binary(tmp_path), env=env)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "no NVIDIA GPU" in proc.stderr and "nvprof" not in proc.stderr and "--program cpu" not in proc.stderr
    proc = fa("ladder", "t17", env=env)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1
    assert "cuda is a CUDA program" in proc.stderr
    assert cache_files(cache) == []


def test_missing_profiler_said_before_any_input(cpu_program, tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "FA_CACHE": str(cache), "PATH": "/usr/bin:/bin"}
    proc = fa("profile", "t17", "--program", "cpu", "--profiler", "ncu", env=env)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "cpu runs on the CPU: fa profile measures a GPU program's kernels with ncu" in proc.stderr
    assert ("nvprof" in proc.stderr) == ready.pascal_here()  # suggested only for a Pascal GPU
    assert cache_files(cache) == []


def test_kind_of_a_program_known_before_it_is_built(tmp_path):
    # hw4.hip runs on the NVIDIA GPU where only one is (the MI210 emulation, fa_cli/programs/wave64.py)
    for name, kind in (("hw4.cu", "cuda"), ("hw4.hip", "cuda" if wave64.emulated() else "hip"), ("hw4.cpp", "cpu")):
        (tmp_path / name).write_text("")
        assert ready.kind_of(programs.resolve(str(tmp_path / name))) == kind
    assert ready.kind_of(programs.named("cuda")) == "cuda" and ready.kind_of(programs.named("hip")) == "hip"
    assert ready.kind_of(programs.TORCH) == "torch"
    assert ready.gpu_problem(programs.named("cpu")) is None


def test_driver_answers_not_tools_on_path(tmp_path, monkeypatch):
    """An nvidia-smi on PATH is no GPU: only the driver's answer counts."""
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho GPU 0: NVIDIA H100\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert (devices.nvidia_problem() is None) == have_nvidia_gpu()


def test_suite_disk_said_before_generating_and_refused_where_it_does_not_fit(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    said = []
    monkeypatch.setattr(ready, "ANNOUNCE_BYTES", 0)
    ready.announce_disk(["c01", "c02", "t01"], True, said.append)  # t01 is shipped with its expected output
    [line] = said
    c01, c02 = (15728652, 15728652)
    outputs = 2 * (c01 - 12) // 3
    assert line.startswith(f"generating 2 inputs and 2 expected outputs, {ready.human_bytes(c01 + c02 + outputs)} "
                           f"in all, into {tmp_path / 'cache'} (")
    monkeypatch.setattr(ready, "free_bytes", lambda folder: 1000)
    with pytest.raises(FaError, match=r"need 41\.9 MB of generated files in .* only 1\.0 kB is free there"):
        ready.announce_disk(["c01", "c02"], True, said.append)
    assert not (tmp_path / "cache").exists()


def test_a_whole_suite_is_announced(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    said = []
    from fa_cli.cases import suite
    ready.announce_disk(list(suite.cases("c")), False, said.append)
    assert len(said) == 1 and said[0].startswith("generating 30 inputs, 6.") and "GB in all" in said[0]


def test_devices_says_what_runs_here():
    proc = fa("devices")
    assert proc.returncode == 0
    lines = proc.stdout.split("what runs here:\n")[1].splitlines()
    assert lines[0].startswith("  CUDA programs: " + ("yes" if have_nvidia_gpu() else "no, "))
    assert lines[1].startswith("  HIP programs: ") and any(l.startswith("  nvcc: ") for l in lines)
    assert lines[-1] == "  the cpu program: yes, everywhere (fa run --program cpu)"

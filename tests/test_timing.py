"""The fa-timing line, one contract: the stages declared in C++ and in Python agree, every
program that prints the line prints what the one parser (fa_cli/programs/timing.py) reads in full."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from helpers import ROOT, build, have_torch
from fa_cli.cases import generate
from fa_cli.cases.format import Shape
from fa_cli.programs import timing


def test_the_stages_are_declared_alike_in_cpp_and_python():
    text = (ROOT / "src_common" / "host" / "timing.h").read_text()
    declared = re.search(r"kStages\[\] = \{([^}]*)\}", text).group(1)
    assert tuple(re.findall(r'"(\w+)"', declared)) == timing.STAGES


def test_the_parser_reads_a_line_and_says_what_breaks_it():
    line = timing.format_line({s: 0.5 for s in timing.STAGES}, "simt", "sm_90", "NVIDIA H100 80GB HBM3")
    parsed = timing.parse("something\n" + line + "\n")
    assert parsed.seconds == {s: 0.5 for s in timing.STAGES} and parsed.problem is None
    assert parsed.facts == {"impl": "simt", "arch": "sm_90", "device": "NVIDIA_H100_80GB_HBM3"}
    broken = timing.parse("fa-timing: init=0.1 kernel=fast total=1 colour=blue")
    assert broken.seconds == {"init": 0.1, "total": 1.0}
    assert broken.problem == "missing read, h2d, kernel, d2h, write; not understood: kernel=fast colour=blue"
    assert timing.parse("no line here") == timing.TimingLine()


def run_with_timing(argv: list[str], tmp_path) -> timing.TimingLine:
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(2, 64, 32), 1)
    proc = subprocess.run([*argv, str(inp), str(tmp_path / "x.out")], capture_output=True, text=True,
                          env={**os.environ, "FA_TIMING": "1"})
    assert proc.returncode == 0, proc.stderr
    return timing.parse(proc.stderr)


def test_the_launch_log_is_read_as_the_header_prints_it():
    """launch_log.h's format string and the parser agree: the keys it prints are the ones read,
    a kernel name with spaces comes whole, a broken line is left out, and none is the program's."""
    header = (ROOT / "src_cuda" / "launch_log.h").read_text()
    assert "launches=%lld untimed=%lld ms=%.6f grid=%ux%ux%u block=%ux%ux%u smem=%zu regs=%d%s%s kernel=%s" in header
    assert '" error="' in header
    assert "gpu sms=%d smem_sm=%d regs_sm=%d threads_sm=%d blocks_sm=%d" in header
    stderr = ("fa-launch: launches=54 untimed=0 ms=1.944000 grid=20x8x1 block=128x1x1 smem=33280 regs=49 "
              "kernel=void flash<float, 64>\n"
              "fa-launch: launches=x ms=1 kernel=broken\n"
              "fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32\n"
              "hw4: done\n")
    [found] = timing.launches(stderr)
    assert found == timing.Launch("void flash<float, 64>", 54, 0, 1.944, (20, 8, 1), (128, 1, 1), 33280, 49)
    assert found.blocks == 160 and found.threads == 128
    assert timing.gpu_limits(stderr) == timing.SmLimits(132, 233472, 65536, 2048, 32)
    assert [l for l in stderr.splitlines() if not timing.is_timing_line(l)] == ["hw4: done"]
    assert timing.launches("hw4: done\n") == [] and timing.gpu_limits("") is None
    [failed] = timing.launches("fa-launch: launches=1 untimed=1 ms=0.000000 grid=2x1x1 block=128x1x1 smem=0 regs=32 "
                               "error=cudaErrorMisalignedAddress kernel=k\n")
    assert failed.error == "cudaErrorMisalignedAddress" and failed.kernel == "k" and found.error == ""


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
@pytest.mark.parametrize("layer", ["gtx1080", pytest.param("wave64", marks=pytest.mark.slow)])
def test_the_judges_layers_build_with_the_courses_line_without_a_word(tmp_path, layer):
    """A student's program builds with -std=c++11 (the course's line) and the layer, the launch
    log with it: not a warning from fa's headers, with the host compiler's -Wall too."""
    source = tmp_path / "hw4.cu"
    if layer == "gtx1080":
        source.write_text("__global__ void k(float* p) { p[0] = 1; }\n"
                          "int main() { float* d; cudaMalloc(&d, 4); k<<<1, 1>>>(d); cudaDeviceReset(); }\n")
        flags = ["-include", str(ROOT / "src_cuda" / "gtx1080" / "fa_gtx1080.h")]
    else:
        source.write_text("#include <hip/hip_runtime.h>\n__global__ void k(float* p) { p[0] = 1; }\n"
                          "int main() { float* d; hipMalloc(&d, 4); k<<<1, 64>>>(d); hipDeviceReset(); }\n")
        flags = ["-I", str(ROOT / "src_hip" / "wave64")]
    proc = subprocess.run(["nvcc", "-std=c++11", "-arch=sm_90", "-cudart", "shared", *flags, "-Xcompiler", "-Wall",
                           "-o", str(tmp_path / "hw4"), str(source)], capture_output=True, text=True)
    assert proc.returncode == 0 and "warning" not in (proc.stdout + proc.stderr).lower(), proc.stderr


def test_the_cpu_program_prints_the_whole_line(cpu_program, tmp_path):
    line = run_with_timing([str(cpu_program)], tmp_path)
    assert line.problem is None and set(line.seconds) == set(timing.STAGES) and line.facts["impl"] == "cpu"


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cuda", "hip-cuda"])
def test_the_gpu_programs_print_the_whole_line(name, tmp_path):
    line = run_with_timing([str(build(name))], tmp_path)
    assert line.problem is None and line.seconds["kernel"] > 0 and line.facts["arch"].startswith("sm_")


@pytest.mark.gpu
@pytest.mark.skipif(not have_torch(), reason="needs PyTorch")
def test_the_torch_program_prints_the_whole_line(tmp_path):
    import sys
    line = run_with_timing([sys.executable, str(ROOT / "fa_cli" / "programs" / "torch_program.py")], tmp_path)
    assert line.problem is None and line.facts["impl"].startswith("torch")


@pytest.mark.gpu
def test_the_starter_prints_the_whole_line(tmp_path):
    """fa init's hw4.cu, built with the course's line for this GPU, prints the line fa reads."""
    from helpers import fa
    from test_starter import local_sm
    fa("init", tmp_path / "starter")
    subprocess.run(["make", "-C", str(tmp_path / "starter"), "hw4", f"CUDA_ARCH={local_sm()}"], check=True,
                   capture_output=True)
    line = run_with_timing([str(tmp_path / "starter" / "hw4")], tmp_path)
    assert line.problem is None and line.seconds["kernel"] > 0

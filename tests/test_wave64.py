"""fa's MI210 emulation of a student's hw4.hip on an NVIDIA GPU (src_hip/wave64, fa_cli/programs/wave64.py):
the layer builds with nvcc here; on the GPU, HIP's cross-lane functions against AMD's formulas,
the planted AMD-only mistakes (tests/data/planted_hw4.hip) each named, the starter and the usual
port passing."""
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from helpers import DATA, ROOT, fa
from fa_cli.programs import programs, student_build, wave64
from fa_cli.programs.devices import Device
from fa_cli.judge import investigation
from fa_cli.judge.findings import Kind
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget

needs_nvcc = pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
PLANTS = ("LANE32", "BALLOT32", "LDS_OVER_64K", "BLOCK32", "CUDA_CALL", "HALF_BRANCH")


def student_hip(folder: Path, plant: str | None) -> Path:
    """hw4.hip as the student has it: planted_hw4.hip with one mistake switched on."""
    path = folder / "hw4.hip"
    path.write_text((f"#define PLANT {plant}\n" if plant else "") + f'#include "{DATA / "planted_hw4.hip"}"\n')
    return path


def student_cu(folder: Path, plant: str | None) -> Path:
    """The same program as the student's hw4.cu (planted_as_cuda.h: CUDA's names, 32-lane warps)."""
    path = folder / "hw4.cu"
    path.write_text((f"#define PLANT {plant}\n" if plant else "") + f'#include "{DATA / "planted_as_cuda.h"}"\n'
                    f'#include "{DATA / "planted_hw4.hip"}"\n')
    return path


def emulation_build(source: Path, out: Path) -> subprocess.CompletedProcess:
    argv = [*wave64.build_line("nvcc", "sm_90"), "-o", str(out), str(source), "-lm"]
    return subprocess.run(argv, capture_output=True, text=True)


# ----------------------------------------------------------------------------- here, no GPU
@pytest.mark.slow  # three nvcc builds of the HIP port
@needs_nvcc
def test_layer_builds_the_ports(tmp_path):
    """The starter's hw4.hip, the usual port and every planted one build with nvcc (sm_90) through
    the layer, and each program's <<<>>> and hipLaunchKernelGGL reach the layer's launch, not the
    CUDA runtime's directly (no undefined __cudaLaunchKernel left for libcudart to fill)."""
    sources = {"starter": ROOT / "fa_cli" / "starter" / "hw4.hip"}
    for plant in (None, *PLANTS):
        folder = tmp_path / (plant or "usual")
        folder.mkdir()
        sources[plant or "usual"] = student_hip(folder, plant)
    sources["primitives"] = DATA / "wave64_primitives.hip"

    def build(item):
        name, source = item
        out = tmp_path / f"{name}.bin"
        return name, out, emulation_build(source, out)

    with ThreadPoolExecutor(4) as pool:
        for name, out, proc in pool.map(build, sources.items()):
            assert proc.returncode == 0, (name, proc.stderr[-2000:])
            symbols = subprocess.run(["nm", str(out)], capture_output=True, text=True, check=True).stdout
            assert " U __cudaLaunchKernel" not in symbols, name


@needs_nvcc
def test_launch_refused_as_the_mi210_refuses_it(tmp_path):
    """A block of more than 1024 threads, or a grid with a dimension of 0, is refused before CUDA
    sees it, by hipLaunchKernelGGL and <<<>>> alike, in one line, and hipGetLastError says so (the
    check needs no GPU)."""
    source = tmp_path / "wide.hip"
    source.write_text("#include <cstdio>\n#include <hip/hip_runtime.h>\n"
                      "__global__ void wide(float* x) { if (x) x[threadIdx.x] = 1.f; }\n"
                      "int main() {\n"
                      "  hipLaunchKernelGGL(wide, dim3(1), dim3(2048), 0, 0, (float*)nullptr);\n"
                      "  printf(\"%d\\n\", hipGetLastError() == hipErrorInvalidConfiguration);\n"
                      "  wide<<<1, 1100>>>(nullptr);\n"
                      "  printf(\"%d\\n\", hipGetLastError() == hipErrorInvalidConfiguration);\n"
                      "  wide<<<dim3(128 / 256, 2), 256>>>(nullptr);\n"  # a count rounded down to 0
                      "  printf(\"%d\\n\", hipGetLastError() == hipErrorInvalidConfiguration);\n}\n")
    assert emulation_build(source, tmp_path / "wide").returncode == 0
    proc = subprocess.run([str(tmp_path / "wide")], capture_output=True, text=True)
    assert proc.stdout.split() == ["1", "1", "1"], proc
    lines = proc.stderr.splitlines()
    assert len(lines) == 3 and all(l.startswith("fa-wave64: ") for l in lines), lines
    assert "launch refused, as the MI210 refuses it: a block of 2048 threads (at most 1024)" in lines[0]
    assert "a block of 1100 threads" in lines[1]
    assert lines[2].endswith(": a launch of a grid of 0 x 2 x 1 blocks of 256 x 1 x 1 threads: a dimension of 0, so "
                             "no thread runs (refused)"), lines  # the kernel's name, where a GPU is here


def with_devices(monkeypatch, *vendors):
    found = tuple(Device(v, i, f"{v} GPU", "sm_90" if v == "nvidia" else "gfx90a", 1, 1) for i, v in enumerate(vendors))
    monkeypatch.setattr(wave64, "list_devices", lambda: found)
    monkeypatch.setattr(programs, "list_devices", lambda: found)
    monkeypatch.setattr(student_build, "list_devices", lambda: found)  # the build's target: no nvcc asked


@pytest.mark.parametrize("vendors, compiler, flag", [
    (("nvidia",), "nvcc", "-cudart"),           # only NVIDIA: the emulation
    (("nvidia", "amd"), "hipcc", "--offload-arch=gfx90a"),  # an AMD GPU here: built for it
    ((), "hipcc", "--offload-arch=gfx90a"),     # no GPU: built for AMD as before
])
def test_hip_build_follows_the_gpus_here(monkeypatch, tmp_path, vendors, compiler, flag):
    with_devices(monkeypatch, *vendors)
    source = tmp_path / "hw4.hip"
    source.write_text("int main() {}\n")
    argv = student_build.course_line(source, tmp_path / "hw4", ())
    assert Path(argv[0]).name == compiler and flag in argv
    assert programs.compiler_of(source) == compiler
    if compiler == "nvcc":
        assert argv[argv.index("-I") + 1] == str(wave64.layer_dir())
        assert (wave64.layer_dir() / "hip" / "hip_runtime.h").is_file()


def test_amd_build_names_its_platform(monkeypatch, tmp_path):
    """hipcc picks the NVIDIA platform where nvcc is installed: fa's build of a .hip for AMD runs
    it with HIP_PLATFORM=amd, and the build line says it is the AMD build."""
    with_devices(monkeypatch)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "platform"
    fake = bin_dir / "hipcc"
    fake.write_text(f"#!/bin/sh\necho \"$HIP_PLATFORM\" > {seen}\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    source = tmp_path / "hw4.hip"
    source.write_text("int main() {}\n")
    said = []
    programs.build_error(programs.from_source(source), said.append)
    assert seen.read_text().strip() == "amd"
    assert said and said[0].startswith("building HIP_PLATFORM=amd ") and said[0].endswith("(the course's line; hw4.hip for AMD)")


def test_emulated_build_line_says_what_it_is(monkeypatch, tmp_path):
    with_devices(monkeypatch, "nvidia")
    source = tmp_path / "hw4.hip"
    source.write_text("int main() {}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvcc").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.delenv("NVCC", raising=False)
    said = []
    programs.build_error(programs.from_source(source), said.append)
    assert "an emulation of the MI210 on the NVIDIA GPU" in said[0] and "times are the NVIDIA GPU's" in said[0]


def test_fault_line_is_the_runs_error():
    """The layer's line, not the program's own complaint after it, is what fa says of the run."""
    stderr = ("fa-wave64: note: k: blocks of 32 threads: on the MI210 32 of the 64 lanes ...\n"
              "fa-wave64: k: launch refused, as the MI210 refuses it: 70000 bytes of LDS per block\n"
              "hw4: line 12: invalid configuration argument\n")
    run = programs.RunResult(["hw4"], 1, 0.1, stderr)
    assert run.error == "k: launch refused, as the MI210 refuses it: 70000 bytes of LDS per block"
    assert wave64.notes(stderr) == ["k: blocks of 32 threads: on the MI210 32 of the 64 lanes ..."]
    assert wave64.fault("hw4: wrong\n") is None


def test_a_crash_after_an_empty_launch_is_said_as_the_crash():
    """A launch of no block said by a layer is the run's error where the program then exits with
    its own error, not where a signal ended it later (the crash says more)."""
    stderr = ("fa-gtx1080: tail: a launch of a grid of 0 x 1 x 1 blocks of 64 x 1 x 1 threads: a dimension of 0, so "
              "no thread runs (refused)\n")
    assert programs.RunResult(["hw4"], -11, 0.1, stderr).error == "killed by SIGSEGV"
    assert programs.RunResult(["hw4"], 1, 0.1, stderr).error.startswith("tail: a launch of a grid of 0 x 1 x 1")


@needs_nvcc  # the hints read the code nvcc preprocesses (the student's #include'd files, #if's decided)
@pytest.mark.parametrize("plant, named", [
    ("LANE32", "a 32-lane assumption"), ("BALLOT32", "a ballot mask stored in 32 bits"), (None, None)])
def test_source_hints_name_the_amd_only_pattern(tmp_path, plant, named):
    """Only the planted pattern is named (the #if's decided as the build decides them), at its line."""
    hints = wave64.source_hints(student_hip(tmp_path, plant))
    if named is None:
        assert hints == []
    else:
        assert len(hints) == 1 and named in hints[0] and hints[0].startswith("planted_hw4.hip line "), hints


def test_a_ballot_counted_in_32_bits_is_named_and_comes_first_among_the_lane_lines(tmp_path):
    """__popc(__ballot(...)) counts lanes 0..31 of a 64-bit mask: named at its line (a hint of
    its own, not the 32-bit store's), and the first lane line, before shuffles written for 32;
    __popcll(__ballot(...)) is right on either width: not named."""
    source = tmp_path / "keys.hip"
    source.write_text("__global__ void k(float* m) {\n"
                      "  const int lane = threadIdx.x % 32;\n"
                      "  float v = m[lane];\n"
                      "  const int nk = __popc(__ballot(v > 0));\n"
                      "  m[lane] = v + nk;\n"
                      "}\n")
    hints = wave64.source_hints(source)
    assert len(hints) == 1 and hints[0].startswith("keys.hip line 4: a ballot counted") and "__popcll" in hints[0]
    assert wave64.lane_lines(source)[0][0][1] == 4
    source.write_text(source.read_text().replace("__popc(", "__popcll("))
    assert wave64.source_hints(source) == []


def test_a_reduction_from_16_is_named_unless_the_lanes_are_counted_in_32_lane_halves(tmp_path):
    """Offsets 16..1 miss offset 32 where a row spans the wavefront, and are right where each 32-lane
    half is a row of its own (threadIdx.x % 32): named in the first, not in the second."""
    source = tmp_path / "rows.hip"
    body = ("__global__ void k(float* m) {\n"
            "  const int lane = threadIdx.x%s;\n"
            "  float v = m[threadIdx.x];\n"
            "  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor(v, off);\n"
            "  m[threadIdx.x] = v + lane;\n"
            "}\n")
    source.write_text(body % "")
    hints = wave64.source_hints(source)
    assert len(hints) == 1 and hints[0].startswith("rows.hip line 4: a reduction that starts at offset 16"), hints
    source.write_text(body % " % 32")
    assert wave64.source_hints(source) == []


def test_a_mask_of_the_first_n_lanes_shifted_by_n_is_said_of_a_passing_program(tmp_path):
    """set41's s10: (1ull << bc) - 1 for a tile's live lanes, bc = 64 on a full wavefront: undefined,
    the MI210's 0 where NVIDIA's emulation gives all ones; a hint at its line; a mask of one lane
    (1ull << lane) is no such shift, and is not named."""
    source = tmp_path / "mask.hip"
    source.write_text("__global__ void k(float* m, int n) {\n"
                      "  const int bc = min(64, n);\n"
                      "  const unsigned long long live = (1ull << bc) - 1;\n"
                      "  m[threadIdx.x] = (live >> threadIdx.x) & 1;\n"
                      "}\n")
    hints = wave64.source_hints(source, (wave64.FULL_MASK,))
    assert len(hints) == 1 and hints[0].startswith("mask.hip line 3: a mask of the first n lanes as (1ull << n) - 1"), \
        hints
    source.write_text(source.read_text().replace("(1ull << bc) - 1", "1ull << threadIdx.x"))
    assert wave64.source_hints(source, (wave64.FULL_MASK,)) == []


def test_head_dims_shared_over_the_lanes_are_read_as_none_a_lane_where_the_output_is_all_0(tmp_path):
    """DPL = D / W (W = warpSize) is 0 at d = 32 on 64 lanes: where the 64-lane output is all 0 at
    d = 32 that line is named; not where the output holds values, nor at d = 64."""
    from types import SimpleNamespace

    from fa_cli.judge.probes import experiments
    source = tmp_path / "dims.hip"
    source.write_text("template <int D> __global__ void k(float* o) {\n"
                      "  const int W = warpSize;\n"
                      "  const int DPL = D / W;  // dims a lane\n"
                      "  for (int u = 0; u < DPL; ++u) o[threadIdx.x % W + u * W] = 1.f;\n"
                      "}\n")
    assert [n for _, n, _ in wave64.dims_per_lane_lines(source)] == [3]
    ctx = SimpleNamespace(source=source, probe=SimpleNamespace(shape=SimpleNamespace(d=32)),
                          facts=SimpleNamespace(out=np.zeros((2, 128, 32), np.float32)))
    own = source.read_text().splitlines()
    said = experiments.dims_per_lane(ctx, own)
    assert said.startswith("; every value 0 at d = 32, and dims.hip line 3 divides the head dim by a name (`const "
                           "int DPL = D / W;  // dims a lane`): as a lane's share of the dims, d / 64 = 0"), said
    ctx.facts.out = np.ones((2, 128, 32), np.float32)
    assert experiments.dims_per_lane(ctx, own) == ""
    ctx.facts.out, ctx.probe.shape.d = np.zeros((2, 128, 64), np.float32), 64
    assert experiments.dims_per_lane(ctx, own) == ""


def test_a_tile_bound_of_32_and_a_lanes_second_key_at_32_are_among_the_lane_lines(tmp_path):
    """min(32, N - j0) or its ternary (a warp's tile where warpSize keys were loaded) and lane + 32 (a
    lane's second key in a 64-key tile) are 32-lane assumptions written out: listed before lines that
    only name warpSize."""
    source = tmp_path / "tile.hip"
    source.write_text("__global__ void k(float* m, int N) {\n"
                      "  const int W = warpSize, lane = threadIdx.x % W;\n"
                      "  for (int off = W / 2; off > 0; off >>= 1) m[lane] += __shfl_xor(m[lane], off);\n"
                      "  const int kn = min(32, N);\n"
                      "  const int k1 = lane + 32;\n"
                      "  const int kt = N < 32 ? N : 32;\n"
                      "  m[lane] += kn + k1 + kt;\n"
                      "}\n")
    lines, _ = wave64.lane_lines(source)
    assert [n for _, n, _ in lines[:3]] == [4, 5, 6], lines


def test_a_size_multiplied_out_from_32_under_a_name_is_among_the_lane_lines(tmp_path):
    """set40's s10: dynamic LDS sized `BC * (2 d + 1) * sizeof(float)` with a constant BC = 32 (a
    warp's tile) where the kernel's tiles hold warpSize keys: the size is a lane line, before lines
    that only name warpSize."""
    source = tmp_path / "lds.hip"
    source.write_text("constexpr int BC = 32;\nconstexpr int UNUSED = 32;\n"
                      "__global__ void k(float* m) {\n"
                      "  const int W = warpSize, lane = threadIdx.x % W;\n"
                      "  m[lane] = __shfl(m[lane], 0);\n"
                      "}\n"
                      "size_t lds(int d) { return (size_t)BC * (2 * d + 1) * sizeof(float); }\n")
    order = [n for _, n, _ in wave64.lane_lines(source)[0]]
    assert 7 in order and order.index(7) < order.index(4) and order.index(7) < order.index(5), order
    source.write_text("constexpr int D = 32;\n__global__ void k(float* q) {\n  q[threadIdx.x * D] = 0.f;\n}\n")
    assert 3 not in [n for _, n, _ in wave64.lane_lines(source)[0]]  # a head dim of 32 is no lane count


def test_a_row_of_33_for_a_wavefronts_lanes_is_among_the_lane_lines(tmp_path):
    """A wavefront's weights staged in LDS rows of 33 floats (a warp's 32 lanes and a pad): on 64
    lanes the upper lanes write into the next row, so the pitch is a lane line."""
    source = tmp_path / "ps.hip"
    source.write_text("__global__ void k(float* o) {\n  __shared__ float Ps[4 * 33];\n"
                      "  const int w = threadIdx.x / warpSize, lane = threadIdx.x % warpSize;\n"
                      "  Ps[w * 33 + lane] = o[lane];\n}\n")
    lines, _ = wave64.lane_lines(source)
    assert [n for _, n, _ in lines[:2]] == [2, 4], lines


def test_a_warpsize_test_beside_threads_grouped_by_32_comes_early_among_the_lane_lines(tmp_path):
    """Rows of 32 threads (tid >> 5, tid & 31) whose statistics are stored by tid % warpSize == 0:
    on 64 lanes the warpSize test is where the two disagree, so it comes right after the shuffle
    written for 32 lanes, before the grouping; a program with only written-out 32s is not mixed."""
    source = tmp_path / "rows.hip"
    source.write_text("__global__ void k(float* m) {\n"
                      "  const int tid = threadIdx.x, g = tid >> 5, t = tid & 31;\n"
                      "  float v = m[t];\n"
                      "  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor(v, off);\n"
                      "  if (tid % warpSize == 0) m[g] = v;\n"
                      "}\n")
    lines, mixed = wave64.lane_lines(source)
    assert mixed and [n for _, n, _ in lines[:3]] == [4, 5, 2], lines  # the shuffle of 16, the test, the grouping
    source.write_text(source.read_text().replace("tid % warpSize == 0", "t == 0"))
    lines, mixed = wave64.lane_lines(source)
    assert not mixed and lines[0][1] == 4, lines
    # warpSize used right (a lane's own test, a constant tile of 32) beside no grouping by 32: not mixed
    source.write_text("__global__ void k(float* m) {\n  const int BC = 32, lane = threadIdx.x % warpSize;\n"
                      "  if (lane == 0) m[threadIdx.x / warpSize] = BC;\n}\n")
    assert not wave64.lane_lines(source)[1]


@pytest.mark.slow  # builds through the layer
def test_cuda_call_left_in_the_port_is_named(tmp_path):
    line = wave64.cuda_leftover(student_hip(tmp_path, "CUDA_CALL"))
    assert line and "cudaDeviceSynchronize" in line
    assert wave64.cuda_leftover(student_hip(tmp_path, None)) is None
    assert wave64.cuda_leftover(ROOT / "fa_cli" / "starter" / "hw4.hip") is None


# ----------------------------------------------------------------------------- on the GPU
def documented(op: str, width: int, arg: int) -> list[int]:
    """HIP's results for two wavefronts (lane l of wavefront w holds 1000 w + l), from
    amd_warp_functions.h's formulas; ds_bpermute takes the index modulo 64."""
    out = []
    for t in range(128):
        w, self = divmod(t, 64)
        if op == "shfl":
            index = (arg & (width - 1)) + (self & ~(width - 1))
        elif op == "up":
            index = self - arg
            index = self if index < (self & ~(width - 1)) else index
        elif op == "down":
            index = self if (self & (width - 1)) + arg >= width else self + arg
        elif op == "xor":
            index = self ^ arg
            index = self if index >= ((self + width) & ~(width - 1)) else index
        elif op == "ballot":
            out.append(sum(1 << l for l in range(64) if l < arg) - (1 << 64 if arg >= 64 else 0))
            continue
        elif op == "any":
            out.append(int(arg < 64))
            continue
        elif op == "all":
            out.append(int(arg >= 64))
            continue
        elif op == "bpermute":
            index = self + arg
        elif op == "firstlane":
            index = 0
        elif op == "mbcnt":  # ARG's byte in every byte of both words: its set bits below the lane
            mask = (arg & 0xff) * 0x0101010101010101
            out.append(bin(mask & ((1 << self) - 1)).count("1"))
            continue
        else:
            out.append(self + 1000)
            continue
        out.append(1000 * w + (index & 63))
    return out


@pytest.mark.gpu
def test_primitives_follow_amds_formulas(tmp_path):
    """Every lane of two wavefronts, for every (function, width, offset) of the table in
    wave64_primitives.hip, equals HIP's documented result: lane numbering 0..63, the width's
    segments, out-of-range sources giving the caller's own value, lanes of the other 32-lane half;
    and the AMD builtins a port may call: ds_bpermute's byte address, readfirstlane, mbcnt."""
    exe = tmp_path / "primitives"
    proc = emulation_build(DATA / "wave64_primitives.hip", exe)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 4 * 7 * 12 + 7 * 12
    for line in lines:
        head, values = line.split(":")
        op, width, arg = head.split()
        assert [int(v) for v in values.split()] == documented(op, int(width), int(arg)), head


WAVE_BARRIER = r"""
#include <hip/hip_runtime.h>
#include <cstdio>
// Lane 63 stores, the wavefront's barrier, lane 0 reads: one wavefront's lanes are there together.
// The grid width is chosen by the target macro on the host (none) and checked on the device (gfx90a).
__global__ void exchange(int* out, int launch) {
  __shared__ int cell[2];
  const int w = threadIdx.x / 64, lane = threadIdx.x % 64;
  if (lane == 63) cell[w] = 1000 * launch + w;  // a value of this launch: shared memory keeps the last one's
  __builtin_amdgcn_wave_barrier();
  if (lane == 0) out[w] = cell[w];
#ifdef __gfx90a__
  if (threadIdx.x == 0) out[2] = 90;
#endif
}
int main() {
#ifdef __gfx90a__
  const int host = 90;
#else
  const int host = 0;
#endif
  int *d, h[3] = {0, 0, 0};
  hipMalloc(&d, sizeof h);
  hipMemset(d, 0, sizeof h);
  for (int i = 1; i <= 200; ++i) {
    hipLaunchKernelGGL(exchange, dim3(1), dim3(128), 0, 0, d, i);
    hipMemcpy(h, d, sizeof h, hipMemcpyDeviceToHost);
    if (h[0] != 1000 * i || h[1] != 1000 * i + 1) return 1;
  }
  std::printf("host %d device %d\n", host, h[2]);
  return 0;
}
"""


@pytest.mark.gpu
def test_a_wavefronts_barrier_meets_its_two_halves_and_the_target_macro_is_the_device_passes(tmp_path):
    """__builtin_amdgcn_wave_barrier: what lane 63 stored before it, lane 0 reads after it, in every
    one of 200 launches (the wavefront's two warps meet there); __gfx90a__ is defined in the device
    pass and not in the host's, as hipcc defines its target's macro."""
    source, exe = tmp_path / "barrier.hip", tmp_path / "barrier"
    source.write_text(WAVE_BARRIER)
    proc = emulation_build(source, exe)
    assert proc.returncode == 0, proc.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "host 0 device 90", run.stdout + run.stderr


def judged(tmp_path, source: Path, *cases, rules: bool = True) -> subprocess.CompletedProcess:
    return fa("run", *cases, "--program", source, "--why-budget", "0", *([] if rules else ["--no-gtx1080-rules"]),
              cwd=tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["starter", "usual"])
def test_ports_pass_through_the_emulation(tmp_path, which):
    """fa init's hw4.hip and a usual port pass t01, c01 and c30 as the MI210 would judge them, and
    fa says the run was an emulation on the NVIDIA GPU."""
    if which == "starter":
        source = tmp_path / "hw4.hip"
        shutil.copy(ROOT / "fa_cli" / "starter" / "hw4.hip", source)
    else:
        source = student_hip(tmp_path, None)
    proc = judged(tmp_path, source, "t01", "c01", "c30")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "an emulation of the MI210 on the NVIDIA GPU" in proc.stderr + proc.stdout
    # the launch log in the emulation: the MI210's time estimated, said to be uncalibrated
    text = " ".join(proc.stdout.split())
    assert "MI210 s: an estimate of each case's time on the judge's MI210" in text, proc.stdout
    assert "not calibrated on measured data" in text and len(re.findall(r"\d+\.\d\d-\d+\.\d\d", proc.stdout)) == 3


PLANT_LINES = {"HALF_BRANCH": next(n for n, text in enumerate((DATA / "planted_hw4.hip").read_text().splitlines(), 1)
                                   if "if (__lane_id() < G) pj = __shfl(p, j);" in text)}
PLANTED = {  # plant -> what fa must say of hw4.hip
    "LANE32": "a 32-lane assumption",
    "BALLOT32": "a ballot mask stored in 32 bits",
    "LDS_OVER_64K": "launch refused, as the MI210 refuses it",
    "BLOCK32": "blocks of 32 threads",
    "CUDA_CALL": "cudaDeviceSynchronize",  # in hipcc's error where it is installed, else in fa's line
    # the emulation's fault line with the shuffle's own line: the upper half's next exchange is the
    # chunk's __ballot (every wavefront of the grid stops at once: the lane that claims the fault
    # gets its record out before any trap ends the kernel)
    "HALF_BRANCH": f"lanes 0..31 at __shfl line {PLANT_LINES['HALF_BRANCH']}, lanes 32..63 at __ballot line",
}


@pytest.mark.gpu
@pytest.mark.parametrize("plant", PLANTS)
def test_planted_port_is_named(tmp_path, plant):
    """Each plant passes as hw4.cu and, as hw4.hip, fails (BLOCK32: passes with its note), named.
    LDS_OVER_64K's 65 KB a block is over the GTX 1080's 48 KB too: as hw4.cu it passes only
    without the GTX 1080's rules, and under them is refused, naming the judge's GPU."""
    cu_dir, hip_dir = tmp_path / "cu", tmp_path / "hip"
    cu_dir.mkdir(), hip_dir.mkdir()
    as_cuda = judged(cu_dir, student_cu(cu_dir, plant), "t01", rules=plant != "LDS_OVER_64K")
    assert as_cuda.returncode == 0, as_cuda.stdout + as_cuda.stderr
    if plant == "LDS_OVER_64K":
        under_rules = judged(cu_dir, student_cu(cu_dir, plant), "t01")
        said = under_rules.stdout + under_rules.stderr
        assert under_rules.returncode != 0 and "as the GTX 1080 refuses it" in said, said
    as_hip = judged(hip_dir, student_hip(hip_dir, plant), "t01")
    said = as_hip.stdout + as_hip.stderr
    assert (as_hip.returncode == 0) == (plant == "BLOCK32"), said
    assert PLANTED[plant] in said, said


@needs_nvcc  # its source hint, as above
def test_run_notes_say_it_is_an_emulation(monkeypatch, tmp_path):
    """Under fa run's table: what the run was, the layer's notes once each; for a wrong answer the
    investigation's MI210Hints step says the AMD-only pattern of the source; nothing for a
    hw4.hip built for AMD."""
    from types import SimpleNamespace
    with_devices(monkeypatch, "nvidia")
    program = programs.from_source(student_hip(tmp_path, "LANE32"))
    note = "fa-wave64: note: attention<32>: blocks of 32 threads: on the MI210 32 of the 64 lanes ...\n"
    results = [SimpleNamespace(run=SimpleNamespace(stderr=note), ok=False),
               SimpleNamespace(run=SimpleNamespace(stderr=note), ok=True)]
    lines = wave64.run_notes(program, results)
    assert lines == [f"hw4.hip ran as {wave64.LABEL}",
                     "note: attention<32>: blocks of 32 threads: on the MI210 32 of the 64 lanes ..."]
    ctx = Context(program, None, tmp_path, Budget(60.0), lambda line: None, 5e-3, None, "", results=results)
    hints = investigation.take((investigation.MI210Hints(),), ctx)  # the investigation's step on the run
    assert hints and all(f.kind == Kind.HYPOTHESIS for f in hints)
    assert hints[0].lines[0].startswith("looks like (MI210 only): planted_hw4.hip line ")
    with_devices(monkeypatch, "nvidia", "amd")
    assert wave64.run_notes(program, results) == []
    assert not investigation.MI210Hints().applies(ctx)


def test_compare_names_what_passes_as_cuda_and_fails_as_hip():
    records = [{"program": "hw4.cu", "input": "t01", "passed": True}, {"program": "hw4.hip", "input": "t01"},
               {"program": "hw4.cu", "input": "t02", "passed": True},
               {"program": "hw4.hip", "input": "t02", "passed": True}]
    [line] = wave64.compare_findings(records)
    assert line.startswith("t01: right as hw4.cu, wrong or failing as hw4.hip: an AMD-only mistake")
    assert wave64.compare_findings(records[2:]) == []


def test_bench_says_which_times_are_the_nvidia_gpus(monkeypatch, tmp_path):
    with_devices(monkeypatch, "nvidia")
    hip, cu = programs.from_source(student_hip(tmp_path, None)), programs.from_source(student_cu(tmp_path, None))
    assert wave64.emulated_sources([cu, hip]) == [f"hw4.hip: {wave64.LABEL}"]
    with_devices(monkeypatch, "amd")
    assert wave64.emulated_sources([cu, hip]) == []


@needs_nvcc
def test_index_arithmetic_without_a_gpu(tmp_path):
    """The layer's own source_lane() (compiled for the host) gives, for every case of the primitives'
    table and every lane of two wavefronts, what AMD's formulas give; and where its crosses() says
    no lane reads the other 32-lane half, none does (the two warps then skip their meeting)."""
    source = tmp_path / "index.cu"
    source.write_text("#include <cstdio>\n#include <hip/hip_runtime.h>\n"
                      "int main() {\n"
                      "  const char* names[] = {\"shfl\", \"up\", \"down\", \"xor\"};\n"
                      "  for (int op = 0; op < 4; ++op)\n"
                      "    for (int width : {64, 32, 16, 8, 4, 2, 1})\n"
                      "      for (int arg : {0, 1, 3, 5, 16, 31, 32, 33, 40, 63, 64, 70}) {\n"
                      "        printf(\"%s %d %d %d:\", names[op], width, arg,\n"
                      "               (int)fa_wave64::crosses(op, arg, width));\n"
                      "        for (int t = 0; t < 128; ++t)\n"
                      "          printf(\" %d\", 1000 * (t / 64) +\n"
                      "                 (fa_wave64::source_lane(op, t % 64, arg, width) & 63));\n"
                      "        printf(\"\\n\");\n"
                      "      }\n}\n")
    exe = tmp_path / "index"
    proc = subprocess.run(["nvcc", "-std=c++14", "-I", str(wave64.layer_dir()), "-o", str(exe), str(source)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(lines) == 4 * 7 * 12
    for line in lines:
        head, values = line.split(":")
        op, width, arg, crosses = head.split()
        got = [int(v) for v in values.split()]
        assert got == documented(op, int(width), int(arg)), head
        if crosses == "0":
            assert all((v % 1000) // 32 == (t % 64) // 32 for t, v in enumerate(got)), head


@pytest.fixture(scope="module")
def fa_hip_through_the_layer(tmp_path_factory):
    """Our own src_hip/fa_hip.hip built by nvcc through the MI210 emulation (FA_WAVE64_LAYER: hip_api.h
    takes the layer's hip/hip_runtime.h, as a student's hw4.hip does), for the GPU."""
    exe = tmp_path_factory.mktemp("wave64") / "fa-hip-wave64"
    line = ["-std=c++17" if a == "-std=c++14" else a for a in wave64.build_line("nvcc", "native")]  # the pipeline's C++
    argv = [*line, "-DFA_WAVE64_LAYER", "-Xcompiler", "-pthread", "-o", str(exe), str(ROOT / "src_hip" / "fa_hip.hip")]
    subprocess.run(argv, check=True, cwd=ROOT)
    return exe


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, env", [("simt", {}), ("tiled", {"FA_HIP_BC": "64"}), ("mfma", {})])
def test_our_hip_program_through_the_layer_matches_hip_cuda(fa_hip_through_the_layer, tmp_path, kernel, env):
    """fa_hip.hip through the emulation gives hip-cuda's outputs (make hip-cuda): the default kernel,
    the homework kernel at Bc = 64 (its row butterfly a single 64-lane __shfl_xor here, the xor-32
    step crossing the warps, which hip-cuda does through shared memory instead) and the MFMA kernel."""
    import os

    import numpy as np

    from fa_cli.cases import generate
    from fa_cli.cases.format import Shape
    from helpers import build
    hip_cuda = build("hip-cuda")
    run_env = {**os.environ, "FA_KERNEL": kernel, **env}
    for shape in (Shape(3, 200, 32), Shape(2, 333, 64), Shape(1, 1024, 64)):
        inp = tmp_path / f"{shape.N}_{shape.d}.in"
        generate.write_input(inp, shape, 7, "uniform")
        outs = []
        for exe in (fa_hip_through_the_layer, hip_cuda):
            out = tmp_path / f"{exe.name}.out"
            proc = subprocess.run([str(exe), str(inp), str(out)], capture_output=True, text=True, env=run_env,
                                  timeout=120)
            assert proc.returncode == 0, (exe.name, proc.stderr)
            outs.append(np.fromfile(out, "<f4"))
        assert np.abs(outs[0] - outs[1]).max() <= 1e-5, (kernel, shape)


UNEMULATED = {  # a kernel the emulation cannot run as the MI210 would -> what its one line says
    "branch": ("if (threadIdx.x % 64 < 40) v = __shfl_xor(v, 1);", 64, "a shuffle inside a branch"),
    "block96": ("v = __shfl_xor(v, 32);", 96, "which the block does not have"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(UNEMULATED))
def test_what_cannot_be_emulated_is_one_line_not_a_hang(tmp_path, case):
    """A shuffle in a branch not every lane takes, and a 64-lane shuffle in a block of 96 threads:
    the program ends at once with the layer's one line (and fa's fault reader finds it)."""
    body, threads, said = UNEMULATED[case]
    source = tmp_path / "k.hip"
    source.write_text("#include <hip/hip_runtime.h>\n#include <cstdio>\n"
                      f"__global__ void k(float* out) {{ float v = threadIdx.x; {body} out[threadIdx.x] = v; }}\n"
                      "int main() { float* d; hipMalloc(&d, 1024 * sizeof(float));\n"
                      f"  hipLaunchKernelGGL(k, dim3(1), dim3({threads}), 0, 0, d);\n"
                      "  hipError_t e = hipDeviceSynchronize();\n"
                      "  std::printf(\"%s\\n\", hipGetErrorString(e)); return e == hipSuccess ? 0 : 1; }\n")
    exe = tmp_path / "k"
    subprocess.run([*wave64.build_line("nvcc", "native"), "-o", str(exe), str(source)], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    line = wave64.fault(proc.stderr)
    assert line and said in line, proc.stderr


@pytest.mark.gpu
def test_a_port_that_resets_the_device_ends_well_and_logs_its_launches(tmp_path):
    """hipDeviceReset at the end of main, as many ports do: the emulation's fault record, which the
    reset frees, is not read after it (the program exited by SIGSEGV before), a launch after the
    reset gets a new one, and the launch log prints what ran before it."""
    source = tmp_path / "reset.cu"
    source.write_text("#include <hip/hip_runtime.h>\n"
                      "__global__ void k(float* p) { p[threadIdx.x] = 1; }\n"
                      "int main() { float* d; hipMalloc(&d, 4096);\n"
                      "  for (int i = 0; i < 5; ++i) hipLaunchKernelGGL(k, dim3(3), dim3(128), 0, 0, d);\n"
                      "  hipDeviceSynchronize(); hipDeviceReset();\n"
                      "  hipMalloc(&d, 4096); k<<<2, 64>>>(d); hipError_t e = hipDeviceSynchronize();\n"
                      "  hipDeviceReset(); return e == hipSuccess ? 0 : 1; }\n")
    exe = tmp_path / "reset"
    subprocess.run(["nvcc", "-std=c++11", "-arch=native", "-cudart", "shared", "-I", str(ROOT / "src_hip" / "wave64"),
                    "-o", str(exe), str(source)], check=True, capture_output=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, env={**os.environ, "FA_TIMING": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "fa-launch: launches=5 untimed=0" in proc.stderr and "fa-launch: launches=1 untimed=0" in proc.stderr


def test_a_passing_hip_programs_full_wavefront_mask_is_a_warning(monkeypatch, tmp_path):
    """The investigation's MI210Hints on a hw4.hip that passed every case through the emulation: the
    mask (1ull << n) - 1 is said as "passes here, but", with its line; a 32-lane hint, which the
    emulation shows by itself, is not said of a passing program."""
    from types import SimpleNamespace
    with_devices(monkeypatch, "nvidia")
    source = tmp_path / "hw4.hip"
    source.write_text("__global__ void k(float* m, int n) {\n"
                      "  const int bc = min(64, n);\n"
                      "  const unsigned long long live = (1ull << bc) - 1;\n"
                      "  m[threadIdx.x] = (live >> threadIdx.x) & 1;\n"
                      "  for (int off = 16; off > 0; off >>= 1) m[0] += __shfl_xor(m[0], off);\n"
                      "}\n")
    program = programs.from_source(source)
    results = [SimpleNamespace(run=SimpleNamespace(stderr=""), ok=True)]
    ctx = Context(program, None, tmp_path, Budget(60.0), lambda line: None, 5e-3, None, "", results=results)
    assert investigation.MI210Hints().applies(ctx)
    [found] = investigation.take((investigation.MI210Hints(),), ctx)
    assert found.kind == Kind.WARNING and found.lines[0].startswith(
        "passes here, but hw4.hip line 3: a mask of the first n lanes as (1ull << n) - 1"), found.lines


@pytest.mark.slow  # nvcc builds of the layer: in CI's run, not make test's
@needs_nvcc
def test_half_precision_from_hip_fp16_builds_beside_the_wavefront_shuffles(tmp_path):
    """<hip/hip_fp16.h> gives HIP's half types by CUDA's names, and a __shfl_xor after it still takes
    the layer's 64-lane form (CUDA's header, with 32-lane overloads of its own, is read with the
    layer's macros set aside); without that header a program may name `half` itself, as on the MI210."""
    source = tmp_path / "half.hip"
    source.write_text("#include <hip/hip_runtime.h>\n#include <hip/hip_fp16.h>\n"
                      "__global__ void k(float* x) {\n  __shared__ __half l[64];\n"
                      "  l[threadIdx.x] = __float2half(x[threadIdx.x]);\n"
                      "  x[threadIdx.x] = __half2float(l[threadIdx.x]) + __shfl_xor(x[threadIdx.x], 32);\n}\n"
                      "int main() { hipLaunchKernelGGL(k, dim3(1), dim3(64), 0, 0, (float*)nullptr); }\n")
    proc = emulation_build(source, tmp_path / "half")
    assert proc.returncode == 0, proc.stderr[-2000:]
    argv = [*wave64.build_line("nvcc", "sm_90"), "-E", str(source)]
    expanded = subprocess.run(argv, capture_output=True, text=True).stdout
    assert "fa_wave64_shfl_xor(6, x[threadIdx.x], 32)" in expanded.replace("\n", " ")
    plain = tmp_path / "plain.hip"
    plain.write_text("#include <hip/hip_runtime.h>\nconstexpr int half = 16;\n"
                     "int main() { return half - 16; }\n")
    proc = emulation_build(plain, tmp_path / "plain")
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_an_amd_header_the_emulation_lacks_is_said_as_the_layers_not_the_programs():
    said = wave64.missing_header("s.hip:95:10: fatal error: hip/hip_bfloat16.h: No such file or directory")
    assert said.startswith("it includes <hip/hip_bfloat16.h>, a header fa's MI210 emulation") and \
        "says nothing of its build with hipcc on the MI210" in said
    assert wave64.missing_header("s.hip:3:1: error: expected ';'") is None

"""A student's hw4.cu under the GTX 1080's rules on another NVIDIA GPU (src_cuda/gtx1080/fa_gtx1080.h,
fa_cli/programs/gtx1080.py): what passes here and not on the judge is refused in one line naming
the judge's GPU (64 KB of dynamic shared memory, more than 1024 threads a block, more registers
than an SM holds), the program sees the error it would get there, and the rules come off with a
switch. The starter (fa init) stands for a student: its launches are changed, its kernel not."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from helpers import fa, verdicts
from fa_cli.programs import gtx1080, timing

pytestmark = pytest.mark.gpu

# A kernel whose registers the compiler keeps many of (no launch bound): launched with 1024
# threads it asks more than the 65536 registers of an SM (the H100 refuses it too; the line says
# whose rule it is).
PROBE = r'''
#include <cstdio>
__global__ void heavy(float* y, int n) {
  float a[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) a[i] = y[(threadIdx.x * 7 + i) % n];
  float s = 0;
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int i = 0; i < 96; ++i) s += a[i] * a[(i + r) % 96];
  y[threadIdx.x % n] = s;
}
__global__ void small(float* y) { extern __shared__ float s[]; s[threadIdx.x] = 1; y[0] = s[0]; }
__global__ void __launch_bounds__(128) bounded(float* y) { y[threadIdx.x] = 1; }
int main(int argc, char** argv) {
  float* y; cudaMalloc(&y, 4096 * sizeof(float));
  const char* what = argv[1];
  if (!strcmp(what, "threads")) small<<<1, 2048, 0>>>(y);
  if (!strcmp(what, "smem")) {
    cudaError_t e = cudaFuncSetAttribute(small, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
    printf("attribute %s\n", cudaGetErrorName(e));
    small<<<1, 32, 65536>>>(y);
  }
  if (!strcmp(what, "registers")) heavy<<<1, 1024>>>(y, 4096);
  if (!strcmp(what, "bounds")) bounded<<<1, 256>>>(y);
  if (!strcmp(what, "fits")) small<<<1, 1024, 48 * 1024>>>(y);
  if (!strcmp(what, "empty")) small<<<dim3(128 / 256, 2), 256>>>(y);  // rows / 256 rounded down: no block
  if (!strcmp(what, "many")) {  // the launch log: three shapes, one of them after a device reset
    for (int i = 0; i < 3000; ++i) small<<<40, 64, 256>>>(y);
    small<<<2, 32, 128>>>(y);
    cudaDeviceSynchronize();
    cudaDeviceReset();
    cudaMalloc(&y, 4096 * sizeof(float));
    small<<<3, 32, 128>>>(y);
  }
  cudaError_t e = cudaGetLastError();
  cudaDeviceProp p; cudaGetDeviceProperties(&p, 0);
  printf("launch %s; cc %d.%d; %zu bytes a block\n", cudaGetErrorName(e), p.major, p.minor, p.sharedMemPerBlock);
  printf("name %s\n", p.name);
  return e == cudaSuccess ? 0 : 1;
}
'''


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gtx1080")
    (folder / "probe.cu").write_text("#include <cstring>\n" + PROBE)
    nvcc = shutil.which("nvcc") or "nvcc"
    subprocess.run([nvcc, "-O3", "-arch=native", *gtx1080.build_flags(nvcc), "-o", folder / "probe",
                    folder / "probe.cu"], check=True, capture_output=True)
    return folder / "probe"


@pytest.mark.parametrize("what, said", [
    ("threads", "a block of 2048 threads (at most 1024)"),
    ("smem", "65536 bytes of dynamic shared memory (the GTX 1080 gives a block 49152"),
    ("registers", "registers a block, over the 65536 of an SM"),
    ("bounds", "a block of 256 threads, over the 128 this build of the kernel takes (its maxThreadsPerBlock"),
    ("empty", "small: a launch of a grid of 0 x 2 x 1 blocks of 256 x 1 x 1 threads: a dimension of 0, so no thread"),
])
def test_what_the_judge_refuses_is_refused_naming_it(probe, what, said):
    proc = subprocess.run([str(probe), what], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = gtx1080.fault(proc.stderr)  # the first refusal: a launch's, or the attribute asked before it
    assert line and "refused" in line and said in proc.stderr, proc.stderr
    assert "cc 6.1; 49152 bytes a block" in proc.stdout


def test_what_the_judge_takes_runs(probe):
    proc = subprocess.run([str(probe), "fits"], capture_output=True, text=True)
    assert proc.returncode == 0 and "launch cudaSuccess" in proc.stdout and not gtx1080.fault(proc.stderr), \
        proc.stdout + proc.stderr
    # the name it reports holds this GPU's whole (it is read from where the judge's is written)
    assert re.search(r"^name NVIDIA GeForce GTX 1080 \(fa: its rules on (?!NVIDIA GeForce GTX)[^()]+\)$", proc.stdout,
                     re.M), proc.stdout


def test_every_launch_let_through_is_timed_and_logged_at_exit(probe):
    """The launch log (launch_log.h) under fa's FA_TIMING: one line per kernel and shape, each
    launch counted and timed, the lines before a reset printed then, the program's own work and
    exit unchanged; without FA_TIMING nothing is printed."""
    proc = subprocess.run([str(probe), "many"], capture_output=True, text=True, env={**os.environ, "FA_TIMING": "1"})
    assert proc.returncode == 0 and "launch cudaSuccess" in proc.stdout, proc.stdout + proc.stderr
    found = {(l.grid, l.launches): l for l in timing.launches(proc.stderr)}
    assert set(found) == {((40, 1, 1), 3000), ((2, 1, 1), 1), ((3, 1, 1), 1)}, proc.stderr
    many = found[(40, 1, 1), 3000]
    assert many.kernel == "small" and many.block == (64, 1, 1) and many.smem == 256 and many.untimed == 0
    assert 0 < many.ms < 1000 and timing.gpu_limits(proc.stderr).sms > 0
    quiet = subprocess.run([str(probe), "fits"], capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "FA_TIMING"})
    assert quiet.returncode == 0 and not timing.launches(quiet.stderr)


def asks_64_kb(folder) -> str:
    """The starter, its launches given 64 KB of dynamic shared memory (opted in, unused): right on
    this GPU, refused on the GTX 1080."""
    assert fa("init", folder).returncode == 0
    source = folder / "hw4.cu"
    text = source.read_text()
    for d in (32, 64):
        call = f"attention_rows<{d}><<<blocks, THREADS>>>(d_qkv, d_out, in.B, in.N);"
        text = text.replace(call, f"{{ cudaFuncSetAttribute(attention_rows<{d}>, "
                                  f"cudaFuncAttributeMaxDynamicSharedMemorySize, 65536); "
                                  f"{call.replace('THREADS>>>', 'THREADS, 65536>>>')} }}")
    assert text.count("65536>>>") == 2
    source.write_text(text)
    return str(source)


def test_a_program_asking_64_kb_passes_here_and_is_refused_under_the_rules(tmp_path):
    source = asks_64_kb(tmp_path / "hw4")
    without = fa("run", "t01", "--program", source, "--no-gtx1080-rules", "--no-race-check", "--why-budget", "0",
                 cwd=tmp_path)
    assert verdicts(without.stdout) == ["PASS"], without.stdout + without.stderr
    under = fa("run", "t01", "--program", source, "--no-race-check", "--why-budget", "0", cwd=tmp_path)
    assert under.returncode == 1 and verdicts(under.stdout) != ["PASS"], under.stdout + under.stderr
    text = " ".join(under.stdout.split())
    assert "under the GTX 1080's rules" in text and "as the GTX 1080 refuses it" in text, under.stdout


def test_the_rules_are_said_on_a_passing_run(tmp_path):
    assert fa("init", tmp_path / "hw4").returncode == 0
    proc = fa("run", "t01", "--program", tmp_path / "hw4" / "hw4.cu", "--no-race-check", cwd=tmp_path,
              env={**os.environ})
    assert verdicts(proc.stdout) == ["PASS"], proc.stdout + proc.stderr
    text = " ".join(proc.stdout.split())
    assert "hw4.cu ran under the GTX 1080's rules" in text
    # the estimate of the judge's time: a range in the row, its basis under the table
    assert re.search(r"│ \d+\.\d\d-\d+\.\d\d( !)? +│", proc.stdout), proc.stdout  # "!": a TLE risk on a loaded GPU
    assert "GTX 1080 s: an estimate of each case's time on the judge's GTX 1080" in text and "not a measurement" in text


def test_bench_and_compare_show_the_estimate_of_a_hw4_cu(tmp_path):
    """fa bench of a student's hw4.cu keeps the estimate in its record (from the last run's launch
    log) and shows it; fa compare of that file shows it again, with its words."""
    assert fa("init", tmp_path / "hw4").returncode == 0
    results = tmp_path / "bench.json"
    bench = fa("bench", "t01", "--program", tmp_path / "hw4" / "hw4.cu", "--repeat", "1", "-o", results, cwd=tmp_path)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    record = json.loads(results.read_text())["records"][0]
    found = record["judge_gpu_s"]
    assert found["gpu"] == "GTX 1080" and 0 < found["low"] < found["mid"] < found["high"]
    for proc in (bench, fa("compare", results, cwd=tmp_path)):
        text = " ".join(proc.stdout.split())
        assert "GTX 1080 s: an estimate of each case's time on the judge's GTX 1080 from the runs here" in text, \
            proc.stdout
        assert re.search(r"\d+\.\d\d-\d+\.\d\d", proc.stdout)


# A host that reads an asynchronous copy's destination without waiting for it: the kernel spins
# 200 ms before it writes, the copy into pinned memory follows it on the stream.
LATE_COPY = r'''
#include <cstdio>
__global__ void late(float* y) {
  long long start = clock64();
  while (clock64() - start < 400000000LL) {}
  y[0] = 42.f;
}
int main() {
  float *y, *h; cudaMalloc(&y, sizeof(float)); cudaMallocHost(&h, sizeof(float)); h[0] = 0.f;
  cudaStream_t s; cudaStreamCreate(&s);
  late<<<1, 1, 0, s>>>(y);
  cudaMemcpyAsync(h, y, sizeof(float), cudaMemcpyDeviceToHost, s);
  cudaMemcpyAsync(h, y, 0, cudaMemcpyDeviceToHost);  // the default stream's form builds too
  printf("read %g\n", h[0]);
  cudaDeviceSynchronize();
  return 0;
}
'''


def test_every_asynchronous_copy_is_waited_for_where_fa_asks(tmp_path):
    """FA_COPIES_WAITED=1 (the LaunchesWaited step's, beside CUDA_LAUNCH_BLOCKING=1) has the host read
    the copy's value; CUDA_LAUNCH_BLOCKING alone waits for the kernel, which the copy only follows."""
    (tmp_path / "late.cu").write_text(LATE_COPY)
    nvcc = shutil.which("nvcc") or "nvcc"
    subprocess.run([nvcc, "-O3", "-arch=native", *gtx1080.build_flags(nvcc), "-o", tmp_path / "late",
                    tmp_path / "late.cu"], check=True, capture_output=True)
    waited = subprocess.run([tmp_path / "late"], capture_output=True, text=True,
                            env={**os.environ, "FA_COPIES_WAITED": "1"})
    assert "read 42" in waited.stdout, waited.stderr
    as_built = subprocess.run([tmp_path / "late"], capture_output=True, text=True)
    assert "read 0" in as_built.stdout  # 200 ms of spinning: the host reads long before the copy

"""fa run finds the cause as a TA would: planted CPU programs (tests/data/student_hw4.cpp with
-DMISTAKE=SCATTERED, FLAKY, JITTER, HOST_OVERRUN) judged as a student runs them, and the pieces
that read the tools' reports. The GPU classes (a race, a misaligned access, a 32-bit size, on
tests/data/planted_hw4.cu) are in test_cause_gpu.py."""
import json
import shutil

import pytest

from helpers import DATA, build_students, fa
from fa_cli import cause, generate, programs
from fa_cli.format import Shape

PLANTED = ["NONE", "SCATTERED", "FLAKY", "JITTER", "HOST_OVERRUN"]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    return build_students(tmp_path_factory.mktemp("planted"), PLANTED)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cause-inputs")
    paths = {}
    for name, shape in {"long": Shape(1, 4096, 32), "many": Shape(64, 128, 32)}.items():
        paths[name] = folder / f"{name}.in"
        generate.write_input(paths[name], shape, 4)
    return paths


def test_scattered_wrong_values_are_wrong_by_default(student, inputs, tmp_path):
    """50 values off by 0.25 among 131072: the course's judge says WRONG, and so does fa."""
    results = tmp_path / "run.json"
    proc = fa("run", inputs["long"], "--program", student["SCATTERED"], "-o", results)
    assert proc.returncode == 1 and "WRONG" in proc.stdout, proc.stdout + proc.stderr
    assert "50 of 131072 values checked" in proc.stdout
    [record] = json.loads(results.read_text())["records"]
    assert record["verify_mode"] == "every value" and record["diagnosis"]["over_tolerance"] == 50
    assert "the same output" in proc.stdout  # deterministic: no race named
    assert "race:" not in proc.stdout


def test_a_sampled_verdict_says_it_is_sampled(student, inputs):
    proc = fa("run", inputs["long"], "--program", student["NONE"], "--sample", "8")
    assert proc.returncode == 0 and "PASS, sampled" in proc.stdout
    assert "the course compares every value" in proc.stdout


def test_an_output_that_changes_between_runs_is_named_a_race(student, inputs):
    proc = fa("run", inputs["many"], "--program", student["FLAKY"])
    assert proc.returncode == 1 and "WRONG" in proc.stdout
    line = next(l for l in proc.stdout.splitlines() if "race:" in l)
    assert "the output changes between runs" in line and "up to 0.25" in line, proc.stdout
    assert "why many.in: run 1 of 2" in proc.stderr  # each step said as it starts


def test_tiny_differences_between_runs_pass_and_are_called_harmless(student, inputs):
    proc = fa("run", "--why", inputs["many"], "--program", student["JITTER"])
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr
    line = next(l for l in proc.stdout.splitlines() if "harmless:" in l)
    assert "not the cause of a failure" in line and "race" not in proc.stdout


@pytest.mark.skipif(not shutil.which("gdb"), reason="needs gdb")
def test_a_host_crash_gets_a_backtrace(student, inputs):
    proc = fa("run", inputs["many"], "--program", student["HOST_OVERRUN"])
    assert proc.returncode == 1 and "killed by SIGSEGV" in proc.stdout
    assert "gdb: SIGSEGV in" in proc.stdout and "called from main" in proc.stdout, proc.stdout
    assert "--program hw4.cu" in proc.stdout  # what would name the line


def test_a_host_overrun_is_named_on_its_line_from_the_source(inputs, tmp_path):
    """With the source, fa rebuilds it with AddressSanitizer, which names the line of the overrun."""
    source = tmp_path / "hw4.cpp"
    source.write_text(f'#define MISTAKE HOST_OVERRUN\n#include "{DATA / "student_hw4.cpp"}"\n')
    line = next(i for i, l in enumerate((DATA / "student_hw4.cpp").read_text().splitlines(), 1)
                if "std::memcpy(staged" in l)
    proc = fa("run", inputs["many"], "--program", source)
    assert proc.returncode == 1 and "killed by SIGSEGV" in proc.stdout, proc.stdout + proc.stderr
    assert "AddressSanitizer: heap-buffer-overflow, WRITE" in proc.stdout
    assert f"at main student_hw4.cpp:{line}" in proc.stdout, proc.stdout


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_a_cuda_programs_host_overrun_is_named_without_a_gpu(tmp_path):
    """planted_hw4.cu's overrun happens while it reads its input, before any CUDA call: nvcc's
    AddressSanitizer build names the line on a machine with no GPU too."""
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(4, 1000, 64), 2)
    source = tmp_path / "hw4.cu"
    source.write_text(f'#define PLANT HOST_OVERRUN\n#include "{DATA / "planted_hw4.cu"}"\n')
    line = next(i for i, l in enumerate((DATA / "planted_hw4.cu").read_text().splitlines(), 1)
                if "qkv[i] = payload[i]" in l)
    proc = fa("run", inp, "--program", source, "--without-gpu")
    assert proc.returncode == 1 and "killed by SIGSEGV" in proc.stdout, proc.stdout + proc.stderr
    assert "AddressSanitizer: heap-buffer-overflow, READ" in proc.stdout
    assert f"at main planted_hw4.cu:{line}" in proc.stdout, proc.stdout


def test_a_source_is_built_with_the_course_line_once(inputs, tmp_path):
    source = tmp_path / "hw4.cpp"
    source.write_text(f'#include "{DATA / "student_hw4.cpp"}"\n')
    first = fa("run", "t01", "--program", source)
    assert first.returncode == 0 and "building g++ -std=c++11 -O3" in first.stderr
    again = fa("run", "t01", "--program", source)
    assert again.returncode == 0 and "building" not in again.stderr
    broken = tmp_path / "broken.cpp"
    broken.write_text("int main( {\n")
    proc = fa("run", "t01", "--program", broken)
    assert proc.returncode == 1 and proc.stderr.count("\n") <= 2 and "does not build" in proc.stderr


def test_no_search_when_the_budget_is_zero(student, inputs):
    proc = fa("run", inputs["many"], "--program", student["FLAKY"], "--why-budget", "0")
    assert proc.returncode == 1 and "race:" not in proc.stdout and "why" not in proc.stderr


# ---------------------------------------------------------------- across cases: a size
COURSE_C = [Shape(*s) for s in ((500, 2048, 32), (100, 4096, 64), (30, 8192, 32), (10, 16384, 32))]


def test_a_verdict_that_changes_where_n_n_4_passes_2_31_is_named():
    found = cause.size_finding(COURSE_C, [Shape(4, 32768, 32), Shape(2, 32768, 64)])
    assert found is not None
    assert found.lines[0].startswith("size: passes up to N=16384, fails from N=32768: N*N*4 bytes = 4 GiB passes "
                                     "2^31 there: a 32-bit size?")


def test_a_size_in_b_is_named_by_its_product():
    passed = [Shape(2, 1024, 64), Shape(100, 1024, 64)]
    failed = [Shape(9000, 1024, 64)]  # B*N*d*4 = 2.36e9: past 2^31
    found = cause.size_finding(passed, failed)
    assert found and "B*N*d*4 bytes" in found.lines[0] and "passes up to B=100, fails from B=9000" in found.lines[0]


@pytest.mark.parametrize("passed, failed", [
    ([], [Shape(2, 32768, 64)]),  # nothing passed: no size to compare with
    ([Shape(2, 32768, 64)], [Shape(2, 128, 32)]),  # the small one fails
    ([Shape(4, 32768, 32)], [Shape(2, 32768, 64)]),  # same N*N on both sides
])
def test_no_size_is_blamed_without_evidence(passed, failed):
    assert cause.size_finding(passed, failed) is None


# ---------------------------------------------------------------- reading the tools
MEMCHECK_LOG = """========= COMPUTE-SANITIZER
========= Invalid __shared__ write of size 16 bytes
=========     at void attention<(int)64>(const float *, float *, int, int)+0x2d0 in /home/s/hw4.cu:87
=========     by thread (1,0,0) in block (0,0,0)
=========     Address 0x104 is misaligned
=========     and is inside the nearest allocation at 0x0 of size 34,816 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: main [0x9e41] in hw4
=========
========= Program hit cudaErrorMisalignedAddress (error 716) due to "misaligned address" on CUDA API call to cudaMemcpy.
========= ERROR SUMMARY: 2 errors
"""
RACECHECK_LOG = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at void attention<(int)32>(const float *, float *, int, int)+0x1a0 in /home/s/hw4.cu:70
=========     and Read access at void attention<(int)32>(const float *, float *, int, int)+0x2b0 in /home/s/hw4.cu:80 [4096 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_memchecks_first_error_and_where():
    first = cause.first_sanitizer_error(MEMCHECK_LOG)
    assert first[0] == "Invalid __shared__ write of size 16 bytes"
    assert cause.short_place(first[1]) == "attention<(int)64>+0x2d0, hw4.cu:87"
    assert first[3] == "Address 0x104 is misaligned"
    assert cause.sanitizer_count(MEMCHECK_LOG) == 2


def test_racechecks_first_hazard():
    first = cause.first_sanitizer_error(RACECHECK_LOG)
    assert first[0].startswith("Error: Race reported between Write access at") and first[0].endswith("hw4.cu:70")
    assert first[1].startswith("and Read access at") and "[4096 hazards]" in first[1]
    assert cause.sanitizer_lines(first) == ["a shared-memory race: a write at attention<(int)32>+0x1a0, hw4.cu:70 "
                                            "against a read at attention<(int)32>+0x2b0, hw4.cu:80 [4096 hazards]"]


def test_memchecks_report_in_two_lines():
    lines = cause.sanitizer_lines(cause.first_sanitizer_error(MEMCHECK_LOG))
    assert lines == ["Invalid __shared__ write of size 16 bytes",
                     "attention<(int)64>+0x2d0, hw4.cu:87; by thread (1,0,0) in block (0,0,0); "
                     "Address 0x104 is misaligned"]


def test_a_clean_log_has_no_error():
    assert cause.first_sanitizer_error("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == []


def test_gdb_backtrace_is_read():
    log = ("Program received signal SIGSEGV, Segmentation fault.\n"
           "0x00007ffff7e4a in __memmove_avx_unaligned_erms () at ../sysdeps/x86_64/memmove.S:598\n"
           "#0  __memmove_avx_unaligned_erms () at ../sysdeps/x86_64/memmove.S:598\n"
           "#1  0x0000555555555e2c in main (argc=3, argv=0x7fffffffe0b8) at hw4.cu:119\n")
    signal, frames = cause.backtrace(log)
    assert signal == "SIGSEGV" and len(frames) == 2
    assert not cause.is_own_frame(frames[0]) and cause.is_own_frame(frames[1])
    assert not cause.is_own_frame("#0  __GI___call_tls_dtors () at ./stdlib/cxa_thread_atexit_impl.c:155")
    assert cause.frame_text(frames[1]) == "main () at hw4.cu:119"


def test_what_a_program_runs_on(cpu_program):
    assert cause.gpu_kind(programs.Program("fa-cpu", cpu_program)) == "cpu"
    assert cause.gpu_kind(programs.named("cuda")) == "cuda" and cause.gpu_kind(programs.named("hip")) == "hip"

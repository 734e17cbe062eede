"""On an NVIDIA GPU, each class of real student mistake is named with its evidence: a student's
hw4.cu (tests/data/planted_hw4.cu, one mistake planted by PLANT) given to fa as its source."""
import json
import shutil
import time

import pytest

from helpers import DATA, fa
from fa_cli.cases import generate
from fa_cli.cases.format import Shape
from fa_cli.judge import tool_logs

pytestmark = pytest.mark.gpu


def source(tmp_path, plant: str | None, whole: bool = False):
    """hw4.cu as the student has it: the planted program with one mistake switched on (its text
    included, or whole: the lines fa shows are then the file's own)."""
    path = tmp_path / (f"hw4_{plant.lower()}" if plant else "hw4") / "hw4.cu"
    path.parent.mkdir()
    body = (DATA / "planted_hw4.cu").read_text() if whole else f'#include "{DATA / "planted_hw4.cu"}"\n'
    path.write_text((f"#define PLANT {plant}\n" if plant else "") + body)
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu-cause")
    shapes = {"small": Shape(4, 1000, 64), "race": Shape(8, 2048, 64), "n16k": Shape(1, 16384, 32),
              "n32k": Shape(1, 32768, 32), "c23": Shape(100, 4096, 32)}
    paths = {}
    for name, shape in shapes.items():
        paths[name] = folder / f"{name}.in"
        generate.write_input(paths[name], shape, 11)
    return paths


def cause_lines(stdout: str) -> list[str]:
    kinds = ("race:", "harmless:", "memcheck", "racecheck", "gdb:", "cuda-gdb:", "AddressSanitizer", "at ",
             "called from", "size:", "the tools found")
    return [l.strip() for l in stdout.splitlines() if l.strip().startswith(kinds) or "across the cases" in l]


def test_the_correct_program_passes(tmp_path, inputs):
    proc = fa("run", "t01", "t02", inputs["small"], "--program", source(tmp_path, None))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "device made slower" not in proc.stdout  # it synchronizes: the slower device changes nothing


@pytest.mark.parametrize("confined", [False, True], ids=["here", "sandboxed"])
def test_an_output_written_before_the_device_finished_is_warned_with_the_device_made_slower(tmp_path, confined):
    if confined and not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap")
    proc = fa("run", "t01", "--program", source(tmp_path, "UNSYNCED", whole=True), *(["--sandbox"] if confined else []))
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0 and "PASS" in proc.stdout  # here the GPU finishes before the host writes
    [line] = [l for l in proc.stdout.splitlines() if "with the device made slower" in l]
    assert line.startswith("passes here, but with the device made slower") and "in 2 of 2 runs on B=2, N=256" in line
    assert "the same output bit for bit, where as built it is right in 2 of 2" in line
    assert "cudaMemcpyAsync" in line  # the lines that order host and device


def test_a_failure_that_comes_and_goes_as_the_host_writes_early_is_named_with_the_device_made_slower(tmp_path):
    """EARLY_WRITE's host writes while its kernel and copy may still run: here it fails most runs,
    not all. Slowed, it fails every run, the same way: the order of host and device, named. Where
    every run fails alike (a loaded machine), every launch waited for makes it right: named too."""
    proc = fa("run", "t01", "--why", "t01", "--program", source(tmp_path, "EARLY_WRITE", whole=True))
    print(proc.stdout, proc.stderr)
    said = proc.stdout
    claims = [l.strip() for l in said.splitlines() if "measured: with the device made slower" in l]
    if "intermittent:" in said or "race: the output changes" in said:  # the runs again depend on timing
        [line] = claims
        assert "it fails 3 of 3 runs on t01, the same output bit for bit" in line and "cudaMemcpyAsync" in line
        assert "before the device finished" in line
    elif "WRONG" in said:  # every run failed alike (a loaded GPU: the host won every time): waited for, right
        assert not claims
        [line] = [l.strip() for l in said.splitlines() if "measured: with every launch and copy waited for" in l]
        assert "(CUDA_LAUNCH_BLOCKING=1 FA_COPIES_WAITED=1) it is right in 3 of 3 runs on t01, and as built, run by " \
            "turns with them, wrong in every one" in line and "cudaMemcpyAsync" in line
    else:  # every run won by the GPU: a pass, warned with the device made slower, or as wrong as built where
        # the host won both runs on the slowed step's input
        assert not claims and ("passes here, but with the device made slower" in said or
                               "passes the cases run, but as built it is wrong in 2 of 2 runs" in said), said


def test_a_missing_syncthreads_is_named_a_race(tmp_path, inputs):
    results = tmp_path / "run.json"
    proc = fa("run", inputs["race"], "--program", source(tmp_path, "RACE"), "-o", results)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 1 and "WRONG" in proc.stdout
    found = cause_lines(proc.stdout)
    assert any(l.startswith("race: the output changes between runs") for l in found) or \
        any("a shared-memory race" in l for l in found), proc.stdout
    assert not any("Maximum number of" in l for l in found)
    [record] = json.loads(results.read_text())["records"]
    kinds = {c["kind"] for c in record["diagnosis"]["causes"]}
    assert kinds & {"race", "racecheck"}


def test_a_race_on_a_large_case_gets_its_line_within_the_budget(tmp_path, inputs):
    """c23's shape (100 x 4096 x 32): racecheck runs on batch 0 cut to its first rows, where it
    answers in seconds, and names the line within the 60 s budget; never a clear."""
    source_path = source(tmp_path, "RACE")
    fa("run", inputs["small"], "--program", source_path, "--why-budget", "0")  # built (and its -g build) first
    start = time.perf_counter()
    proc = fa("run", inputs["c23"], "--program", source_path)
    took = time.perf_counter() - start
    print(proc.stdout, proc.stderr, f"{took:.1f} s")
    assert proc.returncode == 1 and "WRONG" in proc.stdout
    assert "a shared-memory race:" in proc.stdout and "planted_hw4.cu:" in proc.stdout, proc.stdout
    assert "out of time" not in proc.stderr and "no sign of a race" not in proc.stdout
    assert any(l.startswith("race:") or l.startswith("intermittent:") for l in cause_lines(proc.stdout)) or \
        "racecheck on batch 0 of" in proc.stdout
    assert "__syncthreads" in proc.stdout or "a shared-memory race" in proc.stdout


def test_a_deterministic_gpu_mistake_is_named_and_not_called_a_race(tmp_path, inputs):
    proc = fa("run", inputs["small"], "--program", source(tmp_path, "BATCH0"))
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 1 and "WRONG" in proc.stdout
    assert "looks like: every batch computed from batch 0's Q/K/V" in proc.stdout
    assert "race:" not in proc.stdout and "intermittent:" not in proc.stdout and "a shared-memory race" not in \
        proc.stdout
    assert "the same output in every run, bit for bit" in proc.stdout


def test_a_misaligned_float4_store_is_quoted_from_memcheck(tmp_path, inputs):
    proc = fa("run", inputs["small"], "--program", source(tmp_path, "MISALIGNED"))
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 1 and "WRONG" in proc.stdout
    assert "memcheck" in proc.stdout and "misaligned" in proc.stdout.lower(), proc.stdout
    line = next(i for i, l in enumerate((DATA / "planted_hw4.cu").read_text().splitlines(), 1)
                if "*(float4*)&Ks[t][x] = kv" in l)
    assert f"planted_hw4.cu:{line}" in proc.stdout  # rebuilt with -lineinfo from the source: the line
    # the judged run's own launch log saw the fault first, before any rerun or tool
    assert "a kernel failed on the device: the end of its launches read cudaErrorMisalignedAddress" in proc.stdout


def test_a_32bit_size_is_named_where_it_overflows(tmp_path, inputs):
    proc = fa("run", inputs["n16k"], inputs["n32k"], "--program", source(tmp_path, "INT_SIZE"))
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 1
    rows = {l.split()[1]: l for l in proc.stdout.splitlines() if l.startswith("│ n")}
    assert "PASS" in rows["n16k.in"] and "WRONG" in rows["n32k.in"], proc.stdout
    assert ("across the cases: size: passes up to N=16384, fails from N=32768: N*N*4 bytes = 4 GiB passes 2^31 "
            "there: a 32-bit size?") in proc.stdout
    assert "memcheck" in proc.stdout  # the invalid access it leads to, quoted


def test_a_host_overrun_is_named_on_its_line(tmp_path, inputs):
    proc = fa("run", inputs["small"], "--program", source(tmp_path, "HOST_OVERRUN"))
    print(proc.stdout, proc.stderr)
    # SIGSEGV, or SIGABRT where glibc's _FORTIFY_SOURCE catches the fread first
    assert proc.returncode == 1 and ("killed by SIGSEGV" in proc.stdout or "killed by SIGABRT" in proc.stdout)
    line = next(i for i, l in enumerate((DATA / "planted_hw4.cu").read_text().splitlines(), 1)
                if "qkv[i] = payload[i]" in l)
    assert f"at main planted_hw4.cu:{line}" in proc.stdout or f"main () at {DATA / 'planted_hw4.cu'}:{line}" in \
        proc.stdout, proc.stdout


def test_nondeterministic_atomics_pass_and_are_harmless(tmp_path, inputs):
    proc = fa("run", "--why", inputs["small"], "--program", source(tmp_path, "JITTER"))
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0 and "PASS" in proc.stdout
    assert "race:" not in proc.stdout
    assert "harmless: " in proc.stdout or "nothing more found" in proc.stdout


def test_fa_cuda_is_clean_under_the_tools():
    proc = fa("run", "--why", "t05", "--program", "cuda")
    assert proc.returncode == 0 and "memcheck clean" in proc.stdout, proc.stdout + proc.stderr


def test_the_sanitizer_is_found():
    assert tool_logs.find_tool("compute-sanitizer") is not None

"""fa run finds the cause as a TA would: planted CPU programs (tests/data/student_hw4.cpp with
-DMISTAKE=SCATTERED, FLAKY, JITTER, HOST_OVERRUN,
ZEROS_THEN_SEGV) judged as a student runs them, and the reruns
(fa_cli/judge/reruns.py); the tools' reports are read in test_tool_logs.py, the findings across
cases in test_across_cases.py. The GPU classes (a race, a misaligned access, a 32-bit size, on
tests/data/planted_hw4.cu) are in test_cause_gpu.py."""
import json
import os
import shutil

import numpy as np
import pytest

from helpers import DATA, build_students, fa, have_nvidia_gpu, student_program
from fa_cli.cases import generate
from fa_cli.cases.format import Shape
from fa_cli.judge import cause, reruns
from fa_cli.judge.findings import Finding, Kind
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs import programs, student_build

PLANTED = ["NONE", "SCATTERED", "FLAKY", "JITTER", "HOST_OVERRUN", "ZEROS_THEN_SEGV"]


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


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
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


def test_a_sampled_verdict_says_it_is_sampled(student, tmp_path):
    """--sample where no expected output is cached: some rows against float64, said so; once the
    expected output is cached, every value is compared instead (it costs less), and said so."""
    inp = tmp_path / "fresh.in"
    generate.write_input(inp, Shape(2, 1000, 32), 77)
    proc = fa("run", inp, "--program", student["NONE"], "--sample", "8")
    assert proc.returncode == 0 and "PASS, sampled" in proc.stdout
    assert "the course compares every value" in proc.stdout
    fa("run", inp, "--program", student["NONE"])  # caches its expected output
    proc = fa("run", inp, "--program", student["NONE"], "--sample", "8")
    assert proc.returncode == 0 and "PASS, sampled" not in proc.stdout and "PASS" in proc.stdout
    assert "--sample: every value of fresh.in compared instead: its expected output was cached" in proc.stdout


def test_an_output_that_changes_between_runs_is_named_a_race(student, inputs):
    proc = fa("run", inputs["many"], "--program", student["FLAKY"])
    assert proc.returncode == 1 and "WRONG" in proc.stdout
    line = next(l for l in proc.stdout.splitlines() if "race:" in l)
    assert "the output changes between runs" in line and "up to 0.25" in line, proc.stdout
    assert "why many.in: rerun 1 (of up to 5) on many.in" in proc.stderr  # each step said as it starts


def test_tiny_differences_between_runs_pass_and_are_called_harmless(student, inputs):
    proc = fa("run", "--why", inputs["many"], "--program", student["JITTER"])
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr
    line = next(l for l in proc.stdout.splitlines() if "harmless:" in l)
    assert "not the cause of a failure" in line and "race" not in proc.stdout



@pytest.mark.skipif(not shutil.which("gdb"), reason="needs gdb")
@pytest.mark.slow
def test_a_crash_is_investigated_first_and_the_wrong_answer_too(student):
    """All zeros on t01 (2x128x32), a SIGSEGV on t03 (4x256x32): the crash, on the larger case, is
    looked into first (its backtrace), and the wrong answer after it with the budget left."""
    proc = fa("run", "t01", "t03", "--program", student["ZEROS_THEN_SEGV"])
    assert proc.returncode == 1 and "t03 ERROR: killed by SIGSEGV" in proc.stdout, proc.stdout + proc.stderr
    assert "gdb: SIGSEGV in main" in proc.stdout, proc.stdout
    why = [line.split(":")[1].strip() for line in proc.stderr.splitlines() if line.startswith("fa: why ")]
    assert why[0] == "why t03" and "why t01" in why, proc.stderr
    assert "failed 6 of 6 runs on t01" in proc.stdout, proc.stdout
    short = fa("run", "t01", "t03", "--program", student["ZEROS_THEN_SEGV"], "--why-budget", 2)
    assert "s were left after t03's ERROR, under the 5 s a second case takes (fa run t01 --why t01" in short.stdout, \
        short.stdout

@pytest.mark.skipif(not shutil.which("gdb"), reason="needs gdb")
def test_a_host_crash_gets_a_backtrace(student, inputs):
    proc = fa("run", inputs["many"], "--program", student["HOST_OVERRUN"])
    assert proc.returncode == 1 and "killed by SIGSEGV" in proc.stdout
    assert "gdb: SIGSEGV in" in proc.stdout and "called from main" in proc.stdout, proc.stdout
    assert "--program SOURCE (the .cu, .hip or .cpp it was built from)" in proc.stdout  # what would name the line


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


@pytest.mark.slow  # a nvcc build with AddressSanitizer
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


# ---------------------------------------------------------------- no false all-clear
def planted_source(folder, mistake: str):
    """tests/data/student_hw4.cpp as one file of the student's, with MISTAKE set (fa reads what a
    source asks of its build, -fopenmp say, from the file itself)."""
    path = folder / f"hw4_{mistake.lower()}.cpp"
    path.write_text(f"#define MISTAKE {mistake}\n" + (DATA / "student_hw4.cpp").read_text())
    return path


def line_of(text: str, source) -> int:
    return next(i for i, l in enumerate(source.read_text().splitlines(), 1) if text in l)


CLEARED = ("no sign of a race", "nothing more found", "did not crash")


@pytest.mark.slow
def test_a_failure_that_comes_and_goes_is_never_cleared(tmp_path, inputs):
    """A program that fails one run in four (at random, as a race whose timing varies): judged again
    and again, every failing judgement names it intermittent or a race, never clears it."""
    program = student_program(tmp_path, "FLAKY_QUARTER", name="hw4_quarter")
    failing, judged = [], 0
    while len(failing) < 5 and judged < 60:  # 5 failures expected in 20 judgements; 60 leave no doubt
        proc = fa("run", inputs["many"], "--program", program)
        judged += 1
        if proc.returncode == 1:
            failing.append(proc.stdout)
        else:
            assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr
    assert len(failing) >= 5, f"{len(failing)} failures in {judged} judgements"
    for out in failing:
        assert "intermittent: failed" in out or "race: the output changes between runs" in out, out
        assert not any(words in out for words in CLEARED), out
        assert "__syncthreads" not in out and "threads sharing a variable" in out  # a CPU program's words


def test_reruns_that_pass_after_a_failed_judgement_are_intermittent(tmp_path):
    """The judged run failed; two reruns agree with each other and pass: intermittent, never clear."""
    from fa_cli.judge.verdict import judged_output
    case = reruns.TrialCase("x", tmp_path / "x.in", Shape(1, 4, 2), np.zeros((1, 4, 2), np.float32))
    wrong = case.expected + 1
    runs = reruns.Reruns(case, 5e-3, judged_output(wrong, None), True)
    runs.add(case.expected.copy())
    runs.add(case.expected.copy())
    [found] = runs.findings("cpu")
    assert found.kind == "intermittent" and found.lines[0].startswith("intermittent: failed 1 of 3 runs on x")
    same = reruns.Reruns(case, 5e-3, judged_output(wrong, None), True)
    same.add(wrong.copy())
    same.add(wrong.copy())
    assert same.findings("cpu") == [] and "failed 3 of 3 runs" in same.agreement()
    other = reruns.Reruns(case, 5e-3, judged_output(wrong, None), True)
    other.add(wrong + 1)
    other.add(wrong + 1)
    [found] = other.findings("cuda")
    assert found.kind == "intermittent" and "the judged run wrote other values than all 2 reruns on x" in found.lines[0]
    assert "__syncthreads" in found.lines[0]
    jitter = reruns.Reruns(case, 5e-3, judged_output(wrong, None), True)  # wrong every run, atomics' order aside
    jitter.add(wrong + 1e-7)
    jitter.add(wrong + 2e-7)
    [found] = jitter.findings("cuda")
    assert found.kind == "harmless"
    crash = reruns.Reruns(case, 5e-3, judged_output(wrong, None), True)
    crash.add(wrong.copy())
    crash.add(None)
    [found] = crash.findings("cpu")
    assert found.kind == "intermittent" and "1 of 2 reruns on x wrote no output of the right size" in found.lines[0]


def test_values_that_change_in_the_last_batch_only_are_said_with_both_things_that_do_it(tmp_path):
    """Values that change in the last batch only: said with both things that do it (a race there, or
    memory past a buffer's end), never as "race:" alone; values that change in two batches stay a
    race."""
    from fa_cli.judge.verdict import judged_output
    case = reruns.TrialCase("x", tmp_path / "x.in", Shape(3, 4, 2), np.zeros((3, 4, 2), np.float32))
    wrong = case.expected + 1
    runs = reruns.Reruns(case, 5e-3, judged_output(wrong, None), True)
    for garbage in (7.0, -3.0, 1e30):
        got = wrong.copy()
        got[2, 1, 0] = garbage
        runs.add(got)
    [found] = runs.findings("cuda")
    assert found.kind == "race" and found.lines[0].startswith("the output changes between runs in its last batch "
                                                              "only: 1 of 24 values"), found.lines
    assert "race:" not in found.lines[0] and "a race in the last batch's blocks, or memory past the end of a " \
        "buffer read there" in found.lines[0]
    racy = reruns.Reruns(case, 5e-3, judged_output(wrong, None), True)
    for garbage in (7.0, -3.0):
        got = wrong.copy()
        got[0, 0, 0] = got[2, 1, 0] = garbage
        racy.add(got)
    assert racy.findings("cuda")[0].lines[0].startswith("race: the output changes between runs: 2 of 24")


@pytest.mark.slow
def test_an_openmp_race_is_built_with_openmp_and_never_cleared(tmp_path, inputs):
    """Shared row max and sum among OpenMP threads: built with -fopenmp as its author meant (without
    it the pragma is ignored and the program passes), then named a race whenever it fails."""
    source = planted_source(tmp_path, "OMP_RACE")
    for attempt in range(3):
        proc = fa("run", inputs["many"], "--program", source)
        if attempt == 0:
            assert "building g++ -std=c++11 -O3 -fopenmp -pthread" in proc.stderr, proc.stderr
            assert "the source asks for them; the course's example line has no such flag" in proc.stderr
        if proc.returncode == 1:
            assert "race: the output changes between runs" in proc.stdout or "intermittent: failed" in proc.stdout, \
                proc.stdout
            assert not any(words in proc.stdout for words in CLEARED), proc.stdout
        else:
            assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("text, flags", [
    ("#pragma omp parallel for\nint main(){}", ["-fopenmp"]),
    ("  #  pragma omp simd\n", ["-fopenmp"]),
    ("#include <omp.h>\n", ["-fopenmp"]),
    ("#include <thread>\nstd::thread t;", ["-pthread"]),
    ("#include <pthread.h>\n", ["-pthread"]),
    ("// no pragma omp here\nint main(){}", []),
])
def test_what_a_source_asks_of_its_build(tmp_path, text, flags):
    source = tmp_path / "hw4.cpp"
    source.write_text(text)
    assert student_build.source_needs(source) == flags
    line = student_build.course_line(source, tmp_path / "hw4")
    assert all(flag in line for flag in flags) and line[:3] == ["g++", "-std=c++11", "-O3"]


@pytest.mark.skipif(not shutil.which("gdb"), reason="needs gdb")
@pytest.mark.parametrize("mistake, where", [("THREAD_SEGV", "crash"),
                                            pytest.param("MAIN_SEGV", "main", marks=pytest.mark.slow)])
def test_a_crash_in_a_threaded_program_gives_its_frame(tmp_path, inputs, mistake, where):
    """A SIGSEGV in a worker thread (std::thread) and one in the main thread while a worker runs:
    the debugger's frame for each, with the thread; from the source, the line."""
    program = student_program(tmp_path, mistake)
    proc = fa("run", inputs["many"], "--program", program)
    assert proc.returncode == 1 and "killed by SIGSEGV" in proc.stdout
    assert f"gdb: SIGSEGV in {where}" in proc.stdout, proc.stdout
    assert ("(not the main thread)" in proc.stdout) == (mistake == "THREAD_SEGV"), proc.stdout
    assert not any(words in proc.stdout for words in CLEARED)
    source = planted_source(tmp_path, mistake)
    proc = fa("run", inputs["many"], "--program", source)
    line = line_of("*nowhere = 1.f;", source)
    assert f"at crash {source.name}:{line}" in proc.stdout, proc.stdout
    assert ("in thread T1 (not the main thread)" in proc.stdout) == (mistake == "THREAD_SEGV"), proc.stdout


@pytest.mark.parametrize("mistake", ["NO_SCALE", *(pytest.param(m, marks=pytest.mark.slow)  # the same reruns again
                                                   for m in ("BATCH_ZERO", "SKIP_LAST_KEY", "SCATTERED"))])
def test_a_deterministic_mistake_is_never_called_a_race(tmp_path, inputs, mistake):
    program = student_program(tmp_path, mistake)
    proc = fa("run", inputs["many"], "--program", program, "--why-budget", "8")  # the runs again; the probes cut
    assert proc.returncode == 1 and "WRONG" in proc.stdout
    assert "race:" not in proc.stdout and "intermittent:" not in proc.stdout, proc.stdout
    assert "the same output in every run, bit for bit, the judged one's included" in proc.stdout, proc.stdout


def test_why_takes_a_case_also_listed(student):
    proc = fa("run", "t01", "t02", "--why", "t01", "--program", student["NONE"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [l for l in proc.stdout.splitlines() if l.startswith("│ t")]
    assert len(rows) == 2  # judged once each
    assert "why t01: rerun 1" in proc.stderr and "why t02" not in proc.stderr




NO_GPU_PROGRAM = """#include <cstdio>
#include <cuda_runtime.h>
int main() {
  float* p;
  cudaError_t e = cudaMalloc(&p, 4);
  if (e != cudaSuccess) { std::fprintf(stderr, "hw4: %s\\n", cudaGetErrorString(e)); return 1; }
  return 0;
}
"""


@pytest.mark.skipif(not shutil.which("nvcc") or have_nvidia_gpu(), reason="needs nvcc on a machine with no NVIDIA GPU")
def test_a_gpu_program_where_no_gpu_is_said_once_with_no_reruns(tmp_path):
    """fa run --without-gpu: the machine explains the failure; one line says so, nothing is rerun."""
    source = tmp_path / "hw4.cu"
    source.write_text(NO_GPU_PROGRAM)
    proc = fa("run", "t01", "--program", source, "--without-gpu")
    assert proc.returncode == 1 and "ERROR" in proc.stdout, proc.stdout + proc.stderr
    assert "this machine has no NVIDIA GPU: the program's first GPU call fails here" in proc.stdout
    assert "rerun" not in proc.stderr and "compute-sanitizer" not in proc.stdout + proc.stderr


SYNCCHECK_LOG = """========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in block.
=========     at void attention<(int)32>(const float *, float *, int, int)+0x1f0 in /home/s/hw4.cu:131
=========     by thread (72,0,0) in block (1,0,0)
=========
========= ERROR SUMMARY: 16 errors
"""


def test_synccheck_and_initcheck_run_side_by_side_where_nothing_named_a_cause(tmp_path, monkeypatch):
    """A wrong hw4.cu that no run, tool or probe explained: a stand-in compute-sanitizer whose
    synccheck reports a divergent barrier and whose initcheck reports nothing; the barrier is a
    cause with its line, initcheck is said clean, and a case where a probe named a mechanism takes
    neither tool."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "synccheck.txt").write_text(SYNCCHECK_LOG)
    (tools / "initcheck.txt").write_text("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    (tools / "compute-sanitizer").write_text(
        "#!/bin/sh\necho \"$2\" >> \"$(dirname \"$0\")/ran\"\ntool=$2\n"
        "while [ \"$1\" != --log-file ]; do shift; done; cp \"$(dirname \"$0\")/$tool.txt\" \"$2\"\n")
    (tools / "compute-sanitizer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    source = tmp_path / "hw4.cu"
    source.write_text("// a student's program\n")
    program = programs.Program("hw4.cu", tmp_path / "hw4", source=source)
    monkeypatch.setattr(cause, "with_lines", lambda p: p)  # no rebuild with -lineinfo here
    trial = reruns.TrialCase("t01", tmp_path / "t01.in", Shape(2, 128, 32), None)
    ctx = Context(program, None, tmp_path, Budget(60), lambda line: None, 5e-3, None, "t01", kind="cuda")
    ctx.trial = trial
    step = cause.SyncInitcheck()
    assert step.applies(ctx)
    step.run(ctx)
    assert sorted((tools / "ran").read_text().split()) == ["initcheck", "synccheck"]
    [found] = ctx.findings
    assert found.kind == Kind.SYNCCHECK and found.is_cause
    assert found.lines[0] == ("synccheck on t01 (16 errors in all): a barrier used where not every thread of the "
                              "block reaches it:")
    assert any("hw4.cu:131" in line for line in found.lines[1:]), found.lines
    assert "initcheck clean on t01" in ctx.done
    named = Context(program, None, tmp_path, Budget(60), lambda line: None, 5e-3, None, "t01", kind="cuda")
    named.findings.append(Finding(Kind.MEASURED, ["measured: ..."]))
    assert not step.applies(named)


def test_a_run_the_sandbox_ended_at_a_limit_is_said_once_and_tried_no_more(tmp_path):
    """The sandbox's own reason (RunResult.launcher_says, never the program's stderr, which a
    program could fill with the same words) ends the case's investigation: nothing to rerun."""
    program = programs.Program("hw4.cpp", tmp_path / "hw4")
    said = "killed: more than the sandbox's 256 processes at once"
    ctx = Context(program, None, tmp_path, Budget(60), lambda line: None, 5e-3, None, "t01", verdict="ERROR",
                  launcher_says=said)
    step = cause.SandboxLimit()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert found.kind == Kind.LIMIT and found.is_cause and ctx.ended
    assert found.lines[0].startswith("the sandbox ended the run: more than the sandbox's 256 processes at once;")
    for other in (None, "slurm: job cancelled", "hw4: killed: a message of its own"):
        assert not step.applies(Context(program, None, tmp_path, Budget(60), lambda line: None, 5e-3, None, "t01",
                                        verdict="ERROR", launcher_says=other))


def test_a_race_the_emulation_made_is_no_finding_of_a_failing_hip_program():
    """On the MI210 emulation a racecheck hazard with no line in the student's file is the
    emulation's own two warps meeting (set30's s12: row_stats+0x1120 against +0x1510): said among
    what was tried, not as the program's race, so the steps after it (initcheck) still run; the same
    report with the student's line stays a finding."""
    from types import SimpleNamespace
    from fa_cli.judge.cause import Sanitizer
    from fa_cli.judge.tool_logs import SanitizerReport
    no_line = ["Error: Race reported between Write access at row_stats<(int)64>+0x1120",
               "    and Read access at row_stats<(int)64>+0x1510 [32768 hazards]"]
    ctx = SimpleNamespace(done=[], findings=[])
    case = SimpleNamespace(label="batch 0 of t02 (1x128x64)", shape=None)
    said = SanitizerReport("racecheck", no_line, 1, finished=True)
    assert Sanitizer.told(ctx, case, said, "s12.hip") is True
    assert ctx.findings == [] and "not said as the program's" in ctx.done[0], ctx.done
    with_line = [no_line[0] + " in /s/s12.hip:130", no_line[1]]
    assert Sanitizer.told(ctx, case, SanitizerReport("racecheck", with_line, 1, finished=True), "s12.hip") is False
    assert ctx.findings and ctx.findings[0].kind.value == "racecheck", ctx.findings
    assert Sanitizer.told(SimpleNamespace(done=[], findings=[]), case, said) is False  # hw4.cu: no such filter


def test_a_hazard_at_racechecks_warning_level_is_a_finding_marked_so():
    """racecheck's warning level (lanes in step) is said as the program's, marked warning_level for
    the probes to measure past it; its error level is not marked."""
    from types import SimpleNamespace
    from fa_cli.judge.cause import Sanitizer
    from fa_cli.judge.tool_logs import SanitizerReport
    case = SimpleNamespace(label="1x200x64.in", shape=None)
    for level, marked in (("Warning", True), ("Error", False)):
        ctx = SimpleNamespace(done=[], findings=[])
        report = [f"{level}: Race reported between Read access at k<64>+0x25e0 in /s/s05.cu:177",
                  "    and Write access at k<64>+0x2b10 in /s/s05.cu:188 [7168 hazards]"]
        assert Sanitizer.told(ctx, case, SanitizerReport("racecheck", report, 1, finished=True)) is False
        [found] = ctx.findings
        assert found.kind.value == "racecheck" and found.fields.get("warning_level", False) is marked
        assert "s05.cu:177" in found.lines[1]


def test_a_drawn_input_no_judged_run_ran_on_counts_no_judged_run():
    """LargerLookedInto's case is an input fa drew, run by a run step, never judged: the reruns
    count no judged run of it (cause.judged_failed_on: None), where a judged case counts its verdict."""
    from types import SimpleNamespace
    whole = object()
    judged = SimpleNamespace(whole=whole, verdict="WRONG", judged=None, judged_run=True)
    assert cause.judged_failed_on(judged, whole) is True
    drawn = SimpleNamespace(whole=whole, verdict="WRONG", judged=None, judged_run=False)
    assert cause.judged_failed_on(drawn, whole) is None


def test_a_race_whose_wrong_rows_are_each_the_right_row_scaled_says_so_with_the_sum_that_lost_parts(tmp_path):
    """set38's s05: key ranges of a row add into O with atomicAdd and into L with a plain +=: in every
    run each wrong row is the right row over a sum that lost some parts, by a factor that changes
    from run to run. Rows that change in other ways keep the plain race."""
    from fa_cli.judge.verdict import judged_output
    rng = np.random.default_rng(3)
    right = rng.uniform(-1, 1, (2, 16, 8)).astype(np.float32)
    case = reruns.TrialCase("x", tmp_path / "x.in", Shape(2, 16, 8), right)
    scaled = [right * rng.uniform(1.5, 3, (2, 16, 1)).astype(np.float32) for _ in range(3)]
    runs = reruns.Reruns(case, 5e-3, judged_output(scaled[0], None), True)
    for out in scaled[1:]:
        runs.add(out)
    [found] = runs.findings("cuda")
    assert found.kind == "race" and found.lines[0].endswith(reruns.SCALED_RACE), found.lines
    noisy = reruns.Reruns(case, 5e-3, judged_output(scaled[0], None), True)
    for _ in range(2):
        noisy.add(right + rng.uniform(-1, 1, right.shape).astype(np.float32))
    [found] = noisy.findings("cuda")
    assert found.kind == "race" and reruns.SCALED_RACE not in found.lines[0]

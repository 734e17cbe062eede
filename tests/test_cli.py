"""fa end to end, as a user types it."""
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from helpers import ROOT, fa, verdicts
from fa_cli.cases import generate, suite
from fa_cli.cases.format import Shape


def test_gen_then_verify_with_cpu_program(cpu_program, tmp_path):
    inp, exp, out = tmp_path / "x.in", tmp_path / "x.exp", tmp_path / "x.out"
    proc = fa("gen", "-B", 3, "-N", 70, "-d", 64, "--seed", 7, "--dist", "normal", "-o", inp, "--expected", exp)
    assert proc.returncode == 0, proc.stderr
    subprocess.run([cpu_program, inp, out], check=True)
    for how in (["--input", inp], ["--expected", exp], ["--input", inp, "--sample", 5]):
        proc = fa("verify", out, *how, "--tol", "1e-4")
        assert proc.returncode == 0 and proc.stdout.startswith("PASS"), proc.stdout + proc.stderr


def test_verify_fails_with_location(cpu_program, tmp_path):
    inp, out = tmp_path / "x.in", tmp_path / "x.out"
    generate.write_input(inp, Shape(2, 50, 32), 1)
    subprocess.run([cpu_program, inp, out], check=True)
    values = np.fromfile(out, dtype="<f4")
    values[(1 * 50 + 49) * 32 + 31] += 0.5
    values.tofile(out)
    proc = fa("verify", out, "--input", inp)
    assert proc.returncode == 1
    assert "FAIL" in proc.stdout and "batch 1, row 49, column 31" in proc.stdout and "1 over tolerance" in proc.stdout


def test_gen_is_byte_identical(tmp_path):
    for name in ("a", "b"):
        assert fa("gen", "-B", 2, "-N", 9, "-d", 32, "--seed", 3, "-o", tmp_path / name).returncode == 0
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_gen_strict(tmp_path):
    proc = fa("gen", "-B", 2, "-N", 100, "-d", 32, "-o", tmp_path / "x", "--strict")
    assert proc.returncode == 2 and "outside the course's ranges" in proc.stderr
    assert fa("gen", "-B", 2, "-N", 100, "-d", 32, "-o", tmp_path / "x").returncode == 0


def test_gen_suite_case(tmp_path):
    env = {**os.environ, "FA_CACHE": str(tmp_path)}
    proc = fa("gen", "--suite", "t13", env=env)
    assert proc.returncode == 0 and "sha256 matches" in proc.stdout
    assert suite.sha256_of(tmp_path / "t13.in") == suite.case("t13").sha256


def test_gen_suite_case_to_chosen_file(tmp_path):
    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache")}
    proc = fa("gen", "--suite", "t13", "-o", tmp_path / "mine.in", env=env)
    assert proc.returncode == 0 and "sha256 matches" in proc.stdout
    assert suite.sha256_of(tmp_path / "mine.in") == suite.case("t13").sha256
    assert not (tmp_path / "cache" / "t13.in").exists()


def test_run_suite_cases_with_cpu(cpu_program):
    proc = fa("run", "t01", "t04", "t07", "--program", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("t01", "t04", "t07"):
        assert name in proc.stdout
    assert verdicts(proc.stdout) == ["PASS"] * 3
    # the device by its one name, as fa bench's and the records' (tests/test_bench.py)
    assert "fa run of cpu on host CPU" in proc.stdout


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_gen_course_case(tmp_path):
    """The acceptance check of the course suite: c11 (13600 x 128 x 32, 214 MB) as the manifest says."""
    env = {**os.environ, "FA_CACHE": str(tmp_path)}
    proc = fa("gen", "--suite", "c11", env=env)
    assert proc.returncode == 0 and "B=13600, N=128, d=32" in proc.stdout and "sha256 matches" in proc.stdout
    assert suite.sha256_of(tmp_path / "c11.in") == suite.case("c11").sha256


def test_run_course_cases_with_cpu(cpu_program):
    proc = fa("run", "c01", "c02", "--program", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert verdicts(proc.stdout) == ["PASS"] * 2 and "320×128×32" in proc.stdout and "160×128×64" in proc.stdout


def test_run_help_shows_the_course_suite():
    text = fa("run", "--help").stdout
    assert "fa run --all --suite c" in text and "c01..c30" in text
    proc = fa("run", "c31", "--program", "cpu")
    assert proc.returncode == 2 and "t01..t30, c01..c30" in proc.stderr


def test_run_input_path_full_check(cpu_program, tmp_path):
    inp = tmp_path / "odd.in"
    generate.write_input(inp, Shape(2, 45, 64), 1, "extreme")
    proc = fa("run", inp, "--program", cpu_program, "--tol", "1e-4")
    assert proc.returncode == 0 and "every value" in proc.stdout and "PASS" in proc.stdout
    proc = fa("run", inp, "--program", cpu_program, "--tol", "1e-4", "--full")
    assert proc.returncode == 0 and "full" in proc.stdout and "PASS" in proc.stdout


def fake_program(tmp_path, body):
    path = tmp_path / "fake"
    path.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_run_reports_wrong_answer(tmp_path):
    zeros = fake_program(tmp_path, "import numpy as np, os\n"
                         "B, N, d = np.fromfile(sys.argv[1], '<i4', 3)\n"
                         "np.zeros(B * N * d, '<f4').tofile(sys.argv[2])")
    proc = fa("run", "t01", "--program", zeros, "--why-budget", "0")  # the verdict; the search is test_diagnose's
    assert proc.returncode == 1 and "WRONG" in proc.stdout


def test_run_reports_program_error(tmp_path):
    broken = fake_program(tmp_path, "print('fake: error: out of luck', file=sys.stderr); sys.exit(3)")
    proc = fa("run", "t01", "--program", broken)
    assert proc.returncode == 1 and "t01 ERROR: exit code 3" in proc.stdout
    assert "stderr: fake: error: out of luck" in proc.stdout


def test_run_reports_wrong_size_output(tmp_path):
    short = fake_program(tmp_path, "open(sys.argv[2], 'wb').write(b'1234')")
    proc = fa("run", "t01", "--program", short)
    assert proc.returncode == 1 and "t01 ERROR: output has 4 of the 32768 bytes expected" in proc.stdout


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_run_time_limit(tmp_path):
    slow = fake_program(tmp_path, "import time, shutil; time.sleep(2.3); shutil.copy(sys.argv[1][:-3] + '.out', sys.argv[2])")
    assert "TLE" in fa("run", "t01", "--program", slow).stdout
    assert fa("run", "t01", "--program", slow, "--no-time-limit").returncode == 0


def test_run_unknown_program_and_case():
    proc = fa("run", "t01", "--program", "no-such-thing")
    assert proc.returncode == 2 and "no program 'no-such-thing'" in proc.stderr


def test_a_program_path_that_is_not_a_program_says_what_it_is(tmp_path):
    """A path that does not exist is no such file (not an unknown program name); a folder is a
    folder; a file without execute permission says so: one line each, exit 2."""
    for given, said in ((tmp_path / "nosuch", f"{tmp_path / 'nosuch'}: no such file"),
                        ("./nosuch", "./nosuch: no such file"), ("hw5.cu", "hw5.cu: no such file"),
                        (tmp_path, f"{tmp_path}: is a directory, not a program")):
        proc = fa("run", "t01", "--program", given, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith(f"fa: error: {said}"), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    plain = tmp_path / "data.bin"
    plain.write_bytes(b"")
    proc = fa("run", "t01", "--program", plain)
    assert proc.returncode == 2 and "not an executable program (no execute permission)" in proc.stderr
    proc = fa("run", "t99", "--program", "cpu")
    assert proc.returncode == 2 and "no test case named t99" in proc.stderr


def test_traceback_on_request(tmp_path):
    """One line by default; --traceback (or FA_DEBUG=1) shows where an error came from."""
    missing = tmp_path / "nope.in"
    plain = fa("verify", tmp_path / "o", "--input", missing)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr and len(plain.stderr.splitlines()) == 1
    for proc in (fa("--traceback", "verify", tmp_path / "o", "--input", missing),
                 fa("verify", tmp_path / "o", "--input", missing, env={**os.environ, "FA_DEBUG": "1"})):
        assert proc.returncode == 1 and "Traceback" in proc.stderr and "FormatError" in proc.stderr


def test_case_names_as_fa_run_takes_them(cpu_program, tmp_path):
    """A case's name wherever an input is asked for; a near miss gets its suggestion; --suite
    never ignored."""
    out = tmp_path / "t01.out"
    subprocess.run([str(cpu_program), str(ROOT / "testcases" / "t01.in"), str(out)], check=True)
    proc = fa("verify", out, "--input", "t01")
    assert proc.returncode == 0 and proc.stdout.startswith("PASS"), proc.stderr
    proc = fa("run", "T01", "--program", "cpu")
    assert proc.returncode == 2 and proc.stderr.strip() == "fa: error: no test case or file named T01: did you mean t01?"
    proc = fa("run", "t01", "--suite", "c", "--program", "cpu")
    assert proc.returncode == 2 and "t01 is a case of suite t, and --suite c was given" in proc.stderr
    assert "name c01, or leave out --suite" in proc.stderr
    proc = fa("run", "1", "--suite", "t", "--program", "cpu")
    assert proc.returncode == 0 and "│ t01 " in proc.stdout


def test_a_program_not_built_yet_beside_its_source(tmp_path):
    (tmp_path / "hw4.cu").write_text("")
    proc = fa("run", "t01", "--program", "./hw4", cwd=tmp_path)
    assert proc.returncode == 2 and "no program './hw4': build it first (with the course's line), or give " \
        "--program hw4.cu to let fa build it" in proc.stderr
    (tmp_path / "Makefile").write_text("hw4:\n")
    assert "build it first (make hw4)" in fa("run", "t01", "--program", "./hw4", cwd=tmp_path).stderr


def test_run_groups_alike_diagnoses_and_ends_with_a_summary(tmp_path):
    broken = fake_program(tmp_path, "print('fake: error: out of luck', file=sys.stderr); sys.exit(3)")
    proc = fa("run", "t01", "t02", "t03", "t05", "--program", broken, "--why-budget", "0", "-o", tmp_path / "r.json")
    assert proc.returncode == 1
    assert verdicts(proc.stdout) == ["ERROR"] * 4 and proc.stdout.count("exit code 3") == 1, proc.stdout  # one paragraph
    assert "t01..t03, t05 ERROR (4 cases): exit code 3\n  stderr: fake: error: out of luck" in proc.stdout
    assert "4 records added to" in proc.stdout
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("4 cases: 4 ERROR; ") and " s of runs; nearest its limit: t0" in last and "s of 2 s (" in last
    proc = fa("run", "t01", "--program", broken, "--why-budget", "0", "-o", tmp_path / "one.json")
    assert "1 record added to" in proc.stdout and proc.stdout.splitlines()[-1].startswith("1 case: 1 ERROR; ")


def test_run_groups_time_limits(tmp_path):
    slow = fake_program(tmp_path, "import time; time.sleep(30)")
    proc = fa("run", "t01", "t02", "--program", slow, "--time-limit", "0.5")
    assert "t01, t02 TLE (2 cases): stopped at their 0.5 s time limit (whole process); --no-time-limit lets them " \
        "finish" in proc.stdout, proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("2 cases: 2 TLE; ")


def test_compare_says_hip_runs_on_nvidia_are_not_amd_figures(tmp_path):
    """A HIP build run on an NVIDIA GPU is labelled as such, and the MI210 as estimated only;
    a run on an AMD GPU needs no such note."""
    from fa_cli.measure import compare
    base = {"kind": "bench", "input": "t01", "shape": {"B": 1, "N": 4, "d": 32}, "wall_s": 0.2, "flops": 1}
    nvidia_hip = {**base, "program": "hip-cuda", "device": "NVIDIA H100 80GB HBM3"}
    cuda = {**base, "program": "cuda", "device": "NVIDIA H100 80GB HBM3"}
    amd = {**base, "program": "hip", "device": "AMD Instinct MI210"}
    assert "not AMD measurements" in compare.amd_note([cuda, nvidia_hip]) and "ESTIMATE" in compare.amd_note([nvidia_hip])
    assert compare.amd_note([cuda]) is None and compare.amd_note([cuda, nvidia_hip, amd]) is None


def test_fa_math_threads_limits_numpys_math_library_in_that_fa():
    """fa class gives each fa run side by side its share of the cores (FA_MATH_THREADS): the limit
    reaches the math library NumPy loaded in that fa, and without it the library keeps its own."""
    show = ("from fa_cli.commands import main\nfrom threadpoolctl import threadpool_info\n"
            "try:\n    main(['gen', '--help'], prog_name='fa')\nexcept SystemExit:\n    pass\n"
            "print(*sorted({i['num_threads'] for i in threadpool_info()}))")

    def threads(**env):
        base = {k: v for k, v in os.environ.items() if k != "FA_MATH_THREADS"}
        out = subprocess.run([sys.executable, "-c", show], env=base | env, capture_output=True, text=True, check=True)
        return out.stdout.split()[-1]
    assert threads(FA_MATH_THREADS="1") == "1"
    assert threads(FA_MATH_THREADS="1", OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2") == "1"
    assert threads(OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2") == "2"  # without it: what the library took

"""What a new user meets first: every option described with its default, required ones marked,
progress on stderr, fa system as a table, reasons on ERROR rows, files that honour the umask,
messages without holes."""
import os
import shutil
import stat
import subprocess

import click
import pytest

from helpers import fa
from fa_cli.commands import main
from fa_cli.measure import ladder
from fa_cli.report import writeup


def commands():
    every = [(name, main.get_command(None, name)) for name in main.list_commands(None)]
    return [(name, cmd) for name, cmd in every if not cmd.hidden]


@pytest.mark.parametrize("name,cmd", commands(), ids=[n for n, _ in commands()])
def test_every_option_has_help_and_its_default(name, cmd):
    for p in cmd.params:
        if not isinstance(p, click.Option) or p.hidden:
            continue
        assert p.help, f"fa {name} {p.opts[0]} has no help text"
        unset = p.default is None or "UNSET" in repr(p.default)  # click 8.3 marks "no default" with a sentinel
        has_default = not unset and p.default not in (False, (), []) and not p.is_flag
        if has_default:
            assert p.show_default, f"fa {name} {p.opts[0]}: its default {p.default!r} is not shown"


def test_required_options_say_so():
    out = fa("gen", "--help").stdout
    for opt in ("-B", "-N", "-d"):
        line = next(line for line in out.splitlines() if line.strip().startswith(opt))
        assert "Required" in line or "required" in line, line
    assert "[required]" in fa("report", "--help").stdout  # its -o: a report needs a folder named


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_resources_takes_a_relative_source(tmp_path):
    """The help's own example, `fa resources --program hw4.cu`, from the folder hw4.cu is in."""
    if not shutil.which("nvcc"):
        pytest.skip("needs nvcc")
    (tmp_path / "hw4.cu").write_text("__global__ void __launch_bounds__(128) k(float *x) { x[threadIdx.x] = 1; }\n"
                                    "int main() { return 0; }\n")
    proc = fa("resources", "--program", "hw4.cu", "--arch", "sm_80", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert " k " in proc.stdout or "│ k" in proc.stdout
    # not a terminal: a line per step on stderr, the first at once
    assert proc.stderr.splitlines()[:2] == ["fa: compiling: 0 of 1 done", "fa: compiling: 1 of 1 done"]


def test_run_shows_a_line_per_case_when_not_a_terminal(cpu_program):
    proc = fa("run", "t01", "t02", "--program", "cpu")
    assert proc.returncode == 0, proc.stderr
    assert "fa: judging: 2 of 2 done" in proc.stderr.splitlines()


def test_system_is_a_table():
    proc = fa("system")
    assert proc.returncode == 0
    assert "{" not in proc.stdout and "│ cores" in proc.stdout and "GiB free of" in proc.stdout


def test_error_rows_carry_their_reason():
    records = [{"step": 1, "step_name": "naive", "idea": "x", "error": "fa-cuda: error: no CUDA device available\n"}]
    ladder.add_speedups(records)
    _, body = ladder.rows(records)
    assert body[0][-1] == "ERROR: fa-cuda: error: no CUDA device available"


def test_report_note_without_vendor_has_no_hole(tmp_path):
    record = {"kind": "bench", "program": "cpu", "label": None, "device": "host CPU", "input": "t01",
              "shape": {"B": 2, "N": 128, "d": 32}, "wall_s": {"median": 0.1, "min": 0.1, "max": 0.1, "all": [0.1]},
              "timing": {"kernel": 0.01}, "max_err": 1e-6, "passed": True, "tflops_kernel": None}
    text = writeup.bench_section([record], tmp_path)
    assert "Only  runs" not in text and "do not say which vendor" in text


def test_verify_of_a_truncated_output_names_sizes_not_a_shape(tmp_path):
    exp, out = tmp_path / "x.exp", tmp_path / "x.out"
    exp.write_bytes(b"\0" * 4 * 1000)
    out.write_bytes(b"\0" * 4 * 600)
    proc = fa("verify", out, "--expected", exp)
    assert proc.returncode == 2
    assert "B=1" not in proc.stderr and "2400 bytes" in proc.stderr and "4000" in proc.stderr, proc.stderr


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_files_honour_the_umask(cpu_program, tmp_path):
    """Under umask 022 every file fa writes is 0644, the cache's included (a shared FA_CACHE)."""
    cache = tmp_path / "cache"
    env = {**os.environ, "FA_CACHE": str(cache)}
    script = (f"umask 022 && cd {tmp_path} && "
              f"python -m fa_cli gen -B 2 -N 16 -d 32 -o x.in --expected x.out && "
              f"python -m fa_cli gen --suite t12 && "
              f"python -m fa_cli run x.in --program cpu -o run.json && "
              f"python -m fa_cli bench --program cpu --shape 2,16,32 --repeat 1 -o bench.json && "
              f"python -m fa_cli compare bench.json --plot c.png && "
              f"python -m fa_cli report run.json bench.json -o rep")
    import sys
    env["PATH"] = f"{os.path.dirname(sys.executable)}:{env['PATH']}"
    proc = subprocess.run(["bash", "-c", script.replace("python ", f"{sys.executable} ")], env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.parent == cache for p in files)
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p
    for p in [tmp_path / "rep", cache]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o755, p


@pytest.mark.parametrize("command", ["run", "profile"])
def test_program_help_and_error_name_the_same_programs(command):
    from fa_cli.programs import programs
    helped = " ".join(fa(command, "--help").stdout.split())
    assert programs.CHOICES + "." in helped
    proc = fa(command, "t01", "--program", "nosuch")
    assert proc.returncode == 2 and proc.stderr.strip().endswith(f"give one of {programs.CHOICES}")
    assert "torch" in programs.CHOICES


def test_a_bare_number_is_a_case_of_the_default_suite_as_the_help_says(tmp_path, cpu_program):
    """fa run 7 runs t07 (the help: bare numbers are cases of --suite's suite, t by default); 99 is
    no case and says so; a file named 7 here is the file."""
    proc = fa("run", "7", "--program", "cpu", cwd=tmp_path)
    assert proc.returncode == 0 and "│ t07 " in proc.stdout, proc.stdout + proc.stderr
    proc = fa("run", "99", "--program", "cpu", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "fa: error: 99: suite t has cases 1 to 30 (t01..t30), and no file here has that name"


@pytest.mark.parametrize("command", ["run", "profile", "resources", "sweep", "ladder"])
def test_a_second_program_is_refused_never_taken_in_silence(command, tmp_path):
    """fa run t01 --program A --program B judged only B; every command of one program now refuses
    the second in one line that names both and says how to compare them."""
    proc = fa(command, *(["t01"] if command in ("run", "profile") else []), "--program", "cpu", "--program", "cuda",
              cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"--program was given 2 times (cpu, cuda): fa {command} " in proc.stderr
    assert "fa bench --program A --program B" in proc.stderr

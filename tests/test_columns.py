"""Everything fa prints fits an 80-column terminal (COLUMNS=80): every command's --help, the
tables and notes of the commands a student runs on a machine with no GPU, the diagnosis of a
wrong program, and the errors of bad input; nothing is cut to fit (each check also finds the
words it must show)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from helpers import fa, student_program

WIDTH = 80


def over(text: str) -> list[str]:
    """Lines wider than WIDTH, but for a line that is one word (a path longer than the terminal:
    put on a line of its own, never cut)."""
    return [line for line in text.splitlines() if len(line) > WIDTH and len(line.split()) > 1]


def env_80(tmp_path) -> dict:
    return {**os.environ, "COLUMNS": str(WIDTH), "FA_CACHE": os.environ["FA_CACHE"], "TMPDIR": str(tmp_path)}


def test_every_help_fits():
    """Every command's --help, in this process (click reads COLUMNS as the command line does)."""
    from click.testing import CliRunner
    from fa_cli.commands import main
    names = main.list_commands(None)
    assert {"run", "bench", "compare", "profile", "resources", "sweep", "report"} <= set(names)
    runner = CliRunner(env={"COLUMNS": str(WIDTH)})
    helps = {name: runner.invoke(main, [name, "--help"], prog_name="fa").output for name in names}
    helps["fa"] = runner.invoke(main, ["--help"], prog_name="fa").output
    wide = {name: over(text) for name, text in helps.items() if over(text)}
    assert wide == {} and all("Usage: fa" in text for text in helps.values())
    assert "sm__warps_active.avg.pct_of_peak_sustained_active" in helps["profile"]


def test_what_a_student_runs_fits(tmp_path, cpu_program):
    """The CPU program through run, bench, compare, report, gen, verify, init and the machine's words."""
    env = env_80(tmp_path)
    runs = {
        "run": fa("run", "t01", "t02", "--program", "cpu", "-o", tmp_path / "run.json", env=env, cwd=tmp_path),
        "bench": fa("bench", "t01", "t05", "--program", "cpu", "--repeat", "1", env=env, cwd=tmp_path),
        "gen": fa("gen", "--shape", "2,64,32", "-o", tmp_path / "x.in", env=env, cwd=tmp_path),
        "devices": fa("devices", env=env), "system": fa("system", env=env), "cache": fa("cache", env=env),
    }
    runs["compare"] = fa("compare", tmp_path / "bench.json", tmp_path / "run.json", env=env, cwd=tmp_path)
    subprocess.run([str(cpu_program), str(tmp_path / "x.in"), str(tmp_path / "x.out")], check=True)
    runs["verify"] = fa("verify", tmp_path / "x.out", "--input", tmp_path / "x.in", env=env, cwd=tmp_path)
    runs["init"] = fa("init", tmp_path / "hw4", env=env, cwd=tmp_path)
    runs["report"] = fa("report", tmp_path / "run.json", "-o", tmp_path / "report", env=env, cwd=tmp_path)
    failed = {k: p.stderr[-500:] for k, p in runs.items() if p.returncode != 0}
    assert failed == {}
    wide = {k: over(p.stdout + p.stderr) for k, p in runs.items() if over(p.stdout + p.stderr)}
    assert wide == {}
    assert "PASS" in runs["run"].stdout and "t05" in runs["bench"].stdout
    assert json.loads((tmp_path / "bench.json").read_text())


@pytest.mark.slow  # make test-all: a whole search for a cause (docs/testing.md)
@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_a_diagnosis_fits(tmp_path):
    """A wrong program's diagnosis (its paragraphs, 'looks like' lines, source lines)."""
    program = student_program(tmp_path, "NO_SCALE", name="hw4")
    proc = fa("run", "t01", "--program", program, env=env_80(tmp_path), cwd=tmp_path)
    assert proc.returncode == 1 and "WRONG" in proc.stdout and "looks like" in proc.stdout
    assert over(proc.stdout + proc.stderr) == []


ERRORS = [
    ("run", "t01", "--program", "./nosuch"),
    ("run", "t01", "--program", "/"),
    ("gen", "t01", "-o", "/proc/x.bin"),
    pytest.param(("run", "t01", "--program", "cuda", "--without-gpu"), marks=pytest.mark.slow),  # builds fa-cuda
    ("bench", "t01", "--program", "cpu", "--shape", "0,64,32"),
    ("run", "t99"),
    ("run",),
    ("compare", "nosuch.json"),
    ("resources", "--program", "cpu"),
    ("profile", "t01", "--program", "cpu"),
]


@pytest.mark.parametrize("argv", ERRORS, ids=[" ".join(a.values[0] if hasattr(a, "values") else a) for a in ERRORS])
def test_errors_fit(tmp_path, argv):
    """Each refused in a message that fits (the GPU program where there is no GPU: a run's
    ERROR row, and the one line that says why)."""
    proc = fa(*argv, env=env_80(tmp_path), cwd=tmp_path)
    assert proc.returncode != 0 and ("fa: error:" in proc.stderr or "ERROR" in proc.stdout)
    assert over(proc.stdout + proc.stderr) == []


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_the_resources_table_fits(tmp_path):
    """fa resources' table (the starter on two targets, the wider table): its kernels, figures whole."""
    assert fa("init", tmp_path / "hw4").returncode == 0
    proc = fa("resources", "--program", tmp_path / "hw4" / "hw4.cu", "--arch", "sm_75,sm_80", env=env_80(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert over(proc.stdout + proc.stderr) == [] and "registers" in proc.stdout and "128" in proc.stdout

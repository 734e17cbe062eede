"""fa run judges what the student named: a case name that is also a file is refused, a near miss
gets its suggestion, a changed shipped input is named and never judged; Ctrl-C keeps what is done."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import ROOT, fa, verdicts
from fa_cli import locations
from fa_cli.cases import drawing_processes, generate, suite
from fa_cli.cases.format import Shape
from fa_cli.judge import verdict


def test_a_case_name_that_is_also_a_file_here_is_refused(tmp_path, cpu_program):
    generate.write_input(tmp_path / "t01", Shape(2, 256, 64), 1)
    proc = fa("run", "t01", "--program", "cpu", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "fa: error: t01 is both a test case and a file in this folder: ./t01 judges the file; rename the file to "
        "judge the case")
    proc = fa("run", "./t01", "--program", "cpu", cwd=tmp_path)
    assert proc.returncode == 0 and "│ t01 " in proc.stdout and "2×256×64" in proc.stdout


@pytest.mark.parametrize("typed, meant", [("T01", "t01"), ("t1", "t01"), ("tO1", "t01"), ("c7", "c07"),
                                          ("C3O", "c30")])
def test_near_misses_get_their_suggestion(typed, meant, tmp_path):
    proc = fa("run", typed, "--program", "cpu", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"fa: error: no test case or file named {typed}: did you mean {meant}?"
    assert suite.suggestion("t99") is None and suite.suggestion("x01") is None


@pytest.fixture
def shipped_copy(tmp_path, monkeypatch):
    """The shipped cases in a folder of the test's own, fa's cache in another."""
    folder = tmp_path / "testcases"
    shutil.copytree(ROOT / "testcases", folder)
    monkeypatch.setattr(locations, "testcases", lambda: folder)
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    return folder


def test_a_changed_shipped_input_is_named_and_the_manifests_is_judged(shipped_copy, tmp_path):
    c = suite.case("t01")
    said = []
    assert verdict.target_for("t01", say=said.append).input_path == shipped_copy / "t01.in" and not said
    assert not (tmp_path / "cache").exists()  # a check never makes the cache
    (tmp_path / "cache").mkdir()
    verdict.target_for("t01")
    assert (tmp_path / "cache" / "stamps" / "t01.in.stamp").is_file()  # checked once by its hash
    generate.write_input(shipped_copy / "t01.in", c.shape, 99)  # same size, other values: fa gen over it
    target = verdict.target_for("t01", say=said.append)
    assert said == [f"{shipped_copy / 't01.in'} is not t01's input (its sha256 is not the manifest's: changed since it "
                     f"was shipped); t01 is judged on the manifest's input, generated into "
                     f"{tmp_path / 'cache' / 't01.in'}"]
    assert target.input_path == tmp_path / "cache" / "t01.in" and suite.sha256_of(target.input_path) == c.sha256


def test_a_shipped_input_is_trusted_by_its_stamp_until_it_changes(shipped_copy, tmp_path, monkeypatch):
    (tmp_path / "cache").mkdir()
    c = suite.case("t02")
    assert suite.input_here(c) == shipped_copy / "t02.in"
    hashed = []
    monkeypatch.setattr(suite, "sha256_of", lambda p: hashed.append(p) or "x")
    assert suite.input_here(c) == shipped_copy / "t02.in" and not hashed  # the stamp holds: not hashed
    os.utime(shipped_copy / "t02.in", ns=(1, 1))
    assert suite.input_here(c) is None and hashed  # touched: hashed again, and refused


def test_ctrl_c_keeps_the_finished_cases_their_records_and_says_how_far(tmp_path, cpu_program):
    slow = tmp_path / "slow.sh"
    slow.write_text(f'#!/bin/sh\ncase "$1" in *t02.in) sleep 60;; esac\nexec {cpu_program} "$@"\n')
    slow.chmod(0o755)
    results = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "fa_cli", "run", "t01", "t02", "t03", "--program", str(slow),
                             "-o", str(results)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "FA_CACHE": str(tmp_path / "cache")})
    deadline = time.monotonic() + 60
    seen = ""
    while "judging: 1 of 3 done" not in seen and time.monotonic() < deadline:
        seen += proc.stderr.readline()
    time.sleep(0.5)  # t02 is running
    os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C at a terminal: the whole foreground group
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert verdicts(out) == ["PASS"] and "│ t01 " in out
    assert "fa: interrupted during t02: 1 of 3 cases judged (the table above)" in err
    assert [r["input"] for r in json.loads(results.read_text())["records"]] == ["t01"]


def test_the_next_input_is_drawn_beside_an_expected_output_never_beside_a_run(tmp_path):
    """A first run of generated cases: the next case's input is drawn while this one's expected
    output is computed, and is whole (no file being written in the folder) when a program starts."""
    seen = tmp_path / "seen.txt"
    program = tmp_path / "look"
    program.write_text(f"#!{sys.executable}\nimport os, sys, numpy as np\n"
                       "folder = os.path.dirname(sys.argv[1])\n"
                       f"open({str(seen)!r}, 'a').write(' '.join(sorted(os.listdir(folder))) + '\\n')\n"
                       "B, N, d = np.fromfile(sys.argv[1], '<i4', 3)\n"
                       "np.zeros(int(B) * int(N) * int(d), '<f4').tofile(sys.argv[2])\n")
    program.chmod(0o755)
    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    proc = fa("run", "c01", "c03", "c05", "--program", program, "--why-budget", "0", env=env)
    assert proc.returncode == 1 and verdicts(proc.stdout) == ["WRONG"] * 3, proc.stdout + proc.stderr
    listings = seen.read_text().splitlines()
    assert len(listings) == 3 and not any(".tmp." in line for line in listings), listings
    assert "c03.in" in listings[0] and "c05.in" in listings[1]  # drawn ahead, whole before the run
    assert "at most" in proc.stderr and "the next case's drawn ahead" in proc.stderr


@pytest.mark.slow
def test_each_next_input_is_drawn_into_the_file_of_a_case_judged_before(tmp_path, cpu_program):
    """A suite run rewrites the files of judged cases instead of deleting them and making new
    ones (the pages are reused). A first run draws each next input beside the expected output
    computed, so c05 goes into c01's file while c03's is judged; a re-run draws it after the check,
    into the file of the case just judged: one input at a time. None is left at the end."""
    seen = tmp_path / "seen.txt"
    program = tmp_path / "look"
    program.write_text(f"#!{sys.executable}\nimport os, sys\n"
                       "folder = os.path.dirname(sys.argv[1])\n"
                       f"open({str(seen)!r}, 'a').write(str(os.stat(sys.argv[1]).st_ino) + ' ' + "
                       "' '.join(sorted(os.listdir(folder))) + '\\n')\n"
                       f"os.execv({str(cpu_program)!r}, [{str(cpu_program)!r}, *sys.argv[1:]])\n")
    program.chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache"), "TMPDIR": str(scratch)}
    runs = {}
    for first in (True, False):  # expected outputs computed (the next input drawn beside), then a re-run
        seen.write_text("")
        proc = fa("run", "c01", "c03", "c05", "c07", "--program", program, env=env)
        assert proc.returncode == 0 and verdicts(proc.stdout) == ["PASS"] * 4, proc.stdout + proc.stderr
        runs[first] = [line.split() for line in seen.read_text().splitlines()]
        assert not list(scratch.iterdir())
    first, again = runs[True], runs[False]
    assert first[2][0] == first[0][0] and first[3][0] == first[1][0]  # c05 in c01's file, c07 in c03's
    assert [files for _, *files in first] == [["c01.in", "c03.in"], ["c03.in", "c05.in"], ["c05.in", "c07.in"],
                                              ["c05.in", "c07.in"]]
    assert len({inode for inode, *_ in again}) == 1  # every input in the one file
    assert [files for _, *files in again] == [["c01.in"], ["c03.in"], ["c05.in"], ["c07.in"]]


@pytest.mark.slow
def test_a_case_named_twice_keeps_its_failing_input_for_the_cause_search(tmp_path):
    """c01 judged twice, both WRONG: its kept input (the smallest failure's) is never handed to the
    next draw, so the reruns of the cause search run on it."""
    wrong = tmp_path / "zeros.sh"
    wrong.write_text('#!/bin/sh\nhead -c $(( $(od -An -t d4 -N4 "$1") * $(od -An -t d4 -j4 -N4 "$1") * '
                     '$(od -An -t d4 -j8 -N4 "$1") * 4 )) /dev/zero > "$2"\n')
    wrong.chmod(0o755)
    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    proc = fa("run", "c01", "c02", "c01", "c04", "c06", "--program", wrong, "--why-budget", "20", env=env)
    assert proc.returncode == 1 and verdicts(proc.stdout) == ["WRONG"] * 5, proc.stdout + proc.stderr
    assert "the same output in every run, bit for bit" in proc.stdout, proc.stdout


def test_the_drawing_processes_start_only_for_large_inputs_and_are_up_before_a_run(tmp_path, monkeypatch):
    """No drawing process starts for small inputs (nothing beside c01's timed run); for a large one
    they start at once and settle() waits until every one has loaded, so no run shares the machine
    with their start."""
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(drawing_processes, "_up", [])  # as in a new fa: none up yet
    with verdict.CaseInputs(["c01", "c03"], False, False, lambda line: None, tmp_path) as inputs:
        assert not inputs.drawing
    with verdict.CaseInputs(["c11"], False, False, lambda line: None, tmp_path) as inputs:
        assert inputs.drawing
        inputs.settle()
        assert all(ready.is_set() for ready in generate.drawers().ready)

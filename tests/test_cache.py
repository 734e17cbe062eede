"""What the cache keeps: fa cache shows and clears it; fa run generates each suite input just
before its case into TMPDIR and deletes it, keeping only the expected outputs, and says so."""
import os
import re
from pathlib import Path

import pytest
from helpers import fa
from test_file_pages import shm_is_tmpfs

from fa_cli.cases import cache


def env_for(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    return {**os.environ, "FA_CACHE": str(tmp_path / "cache"), "TMPDIR": str(scratch)}, tmp_path / "cache", scratch


def kept_bytes(stderr: str) -> int:
    [line] = [line for line in stderr.splitlines() if " keeps " in line and "bytes" in line and "fa cache" in line]
    return int(re.search(r"\((\d+) bytes", line).group(1))


def test_course_inputs_are_made_per_case_in_tmpdir_and_only_expected_outputs_are_kept(tmp_path, cpu_program):
    env, where, scratch = env_for(tmp_path)
    proc = fa("run", "c01", "c02", "--program", "cpu", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 inputs generated one at a time into " + str(scratch) in proc.stderr
    assert "deleted at the end" in proc.stderr
    assert not list(where.rglob("*.in")) and not list(scratch.iterdir())  # no input left anywhere
    assert len(list((where / "expected").glob("*.out"))) == 2
    said = kept_bytes(proc.stderr)
    assert said == cache.total(cache.usage(where)) == sum(p.stat().st_size for p in where.rglob("*") if p.is_file())
    again = fa("run", "c01", "c02", "--program", "cpu", env=env, cwd=tmp_path)  # expected outputs reused
    assert again.returncode == 0 and "computing expected" not in again.stderr
    assert not list(scratch.iterdir())


def test_keep_inputs_keeps_them_in_the_cache(tmp_path, cpu_program):
    env, where, scratch = env_for(tmp_path)
    proc = fa("run", "c01", "--program", "cpu", "--keep-inputs", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (where / "c01.in").is_file() and "one at a time" not in proc.stderr
    again = fa("run", "c01", "--program", "cpu", env=env, cwd=tmp_path)  # the kept input is used
    assert again.returncode == 0 and "generated" not in again.stderr


def test_failing_cases_leave_no_input_behind(tmp_path):
    env, where, scratch = env_for(tmp_path)
    wrong = tmp_path / "wrong.sh"
    wrong.write_text("#!/bin/sh\nexit 3\n")
    wrong.chmod(0o755)
    proc = fa("run", "c01", "c02", "--program", wrong, "--why-budget", "0", env=env, cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout.count("ERROR") >= 2
    assert not list(scratch.iterdir())


def test_fa_cache_shows_each_kind_and_clears_only_fas_files(tmp_path):
    env, where, _ = env_for(tmp_path)
    (where / "expected").mkdir(parents=True)
    (where / "expected" / "a.out").write_bytes(b"x" * 1000)
    (where / "c11.in").write_bytes(b"y" * 500)
    (where / "student" / "hw4-1").mkdir(parents=True)
    (where / "student" / "hw4-1" / "hw4").write_bytes(b"z" * 20)
    (where / "notes.txt").write_text("mine")
    proc = fa("cache", env=env)
    assert proc.returncode == 0
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert "1 files" in lines["inputs"] and "500 bytes" in lines["inputs"]
    assert "1.0 kB" in lines["expected"] and "20 bytes" in lines["student"] and "(1520 bytes)" in proc.stdout
    cleared = fa("cache", "--clear", env=env)
    assert cleared.returncode == 0 and "removed from" in cleared.stdout
    assert sorted(p.name for p in where.iterdir()) == ["notes.txt"]
    assert "(0 bytes)" in fa("cache", env=env).stdout


@pytest.mark.skipif(not shm_is_tmpfs(), reason="no writable tmpfs at /dev/shm")
def test_without_tmpdir_inputs_are_drawn_in_memory_and_leave_nothing_there(tmp_path, cpu_program):
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    env["FA_CACHE"] = str(tmp_path / "cache")
    before = set(Path("/dev/shm").iterdir())
    proc = fa("run", "c01", "c02", "--program", "cpu", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 inputs generated one at a time into /dev/shm (in memory; TMPDIR names another place" in proc.stderr
    assert proc.stdout.count("PASS") >= 2
    assert not [p for p in set(Path("/dev/shm").iterdir()) - before if p.name.startswith("fa-inputs-")]

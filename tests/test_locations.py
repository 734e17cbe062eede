"""locations.shared_workdir: the work directory cluster nodes share, made under the current
directory and removed on the way out, however fa leaves."""
import os
import signal
import subprocess
import sys
import time

import pytest

from fa_cli import locations


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_made_under_the_current_directory_and_removed(in_tmp):
    with locations.shared_workdir() as work:
        assert work.is_dir() and work.is_absolute() and work.parent == in_tmp / ".fa-slurm"
        (work / "out.bin").write_bytes(b"x")
    assert not (in_tmp / ".fa-slurm").exists()


def test_not_needed_is_none(in_tmp):
    with locations.shared_workdir(False) as work:
        assert work is None
    assert not (in_tmp / ".fa-slurm").exists()


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_removed_when_interrupted(in_tmp, error):
    with pytest.raises(error):
        with locations.shared_workdir() as work:
            (work / "out.bin").write_bytes(b"x")
            raise error()
    assert not (in_tmp / ".fa-slurm").exists()


def test_another_runs_directory_stays(in_tmp):
    with locations.shared_workdir() as other:
        with locations.shared_workdir() as mine:
            assert mine != other
        assert other.is_dir() and not mine.exists()
    assert not (in_tmp / ".fa-slurm").exists()


def test_removed_when_fa_is_terminated(in_tmp):
    """SIGTERM reaches fa as an exception (errors.Terminated, raised by commands/group.py): the
    directory goes on the way out."""
    code = ("import time, signal\nfrom fa_cli import locations\nfrom fa_cli.commands import group\n"
            "signal.signal(signal.SIGTERM, group.raise_terminated)\n"
            "with locations.shared_workdir() as w:\n    print(w, flush=True)\n    time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    work = proc.stdout.readline().strip()
    assert work and os.path.isdir(work)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    deadline = time.time() + 5
    while os.path.exists(work) and time.time() < deadline:
        time.sleep(0.05)
    assert not (in_tmp / ".fa-slurm").exists()

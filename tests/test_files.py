"""fa_cli/files.py: every file fa writes placed atomically, and what no writer replaces (a student's
source or Makefile, unless --force; each writer's own rule). The hostile cases (links, sticky
folders, kill -9, full disks, another user) are in test_hostile_outputs.py."""
import json
import os

import pytest

from helpers import ROOT, fa
from fa_cli.cases.format import Shape
from fa_cli.errors import FormatError
from fa_cli.files import atomic_file, check_output_path


def test_atomic_file_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.bin"
    with pytest.raises(RuntimeError):
        with atomic_file(target) as f:
            f.write(b"partial")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with atomic_file(target) as f:
        f.write(b"whole")
    assert target.read_bytes() == b"whole" and len(list(tmp_path.iterdir())) == 1


def test_atomic_file_unwritable_directory(tmp_path):
    with pytest.raises(FormatError, match="cannot write"):
        with atomic_file(tmp_path / "missing" / "x.out"):
            pass


# ---------------------------------------------------------------- what fa never replaces
@pytest.mark.parametrize("name", ["hw4.cu", "hw4.hip", "mine.cpp", "x.cc", "y.c", "z.h", "s.py", "Makefile"])
def test_no_writer_replaces_a_source_or_a_makefile_without_force(tmp_path, name):
    path = tmp_path / name
    path.write_text("the homework")
    with pytest.raises(FormatError, match="fa never replaces one: name another output, or give --force"):
        check_output_path(path)
    with pytest.raises(FormatError):
        with atomic_file(path) as f:
            f.write(b"binary")
    assert path.read_text() == "the homework"
    check_output_path(tmp_path / ("new-" + name))  # a new file of that name is fine


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_each_writer_refuses_in_one_line_and_force_replaces(tmp_path, cpu_program):
    source, notes, results = tmp_path / "hw4.cu", tmp_path / "notes.txt", tmp_path / "run.json"
    source.write_text("__global__ void k() {}")
    notes.write_text("my notes")
    for args in (["gen", "-B", 2, "-N", 16, "-d", 32, "-o", source], ["gen", "-B", 2, "-N", 16, "-d", 32, "-o", notes],
                 ["gen", "--suite", "t01", "-o", notes], ["run", "t01", "--program", "cpu", "-o", source],
                 ["run", "t01", "--program", "cpu", "-o", notes],
                 *([command, *where, "--program", "cpu", "-o", out] for command, where in
                   (("bench", ["--shape", "2,128,32"]), ("profile", ["t01"]), ("sweep", ["t01"]))
                   for out in (source, notes))):
        proc = fa(*args, cwd=tmp_path)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, args
    assert source.read_text() == "__global__ void k() {}" and notes.read_text() == "my notes"
    empty = tmp_path / "empty.in"
    empty.touch()
    assert fa("gen", "-B", 2, "-N", 16, "-d", 32, "-o", empty).returncode == 0  # an empty file or an input: replaced
    assert fa("gen", "-B", 2, "-N", 16, "-d", 32, "--seed", 3, "-o", empty).returncode == 0
    assert fa("gen", "-B", 2, "-N", 16, "-d", 32, "-o", notes, "--force").returncode == 0
    assert notes.stat().st_size == Shape(2, 16, 32).input_bytes
    assert fa("run", "t01", "--program", "cpu", "-o", results).returncode == 0
    assert fa("run", "t01", "--program", "cpu", "-o", results).returncode == 0  # a results file is extended
    assert len(json.loads(results.read_text())["records"]) == 2


def test_report_replaces_only_its_own_report(tmp_path):
    records = ROOT / "docs" / "history" / "h100-2026-11-23" / "run.json"
    out = tmp_path / "report"
    out.mkdir()
    (out / "report.md").write_text("# my own report\n")
    proc = fa("report", records, "-o", out)
    assert proc.returncode != 0 and "is not a report fa report made" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and (out / "report.md").read_text() == "# my own report\n"
    assert fa("report", records, "-o", out, "--force").returncode == 0
    assert fa("report", records, "-o", out).returncode == 0  # its own: replaced


def test_a_place_no_file_can_be_made_in_says_so_not_that_it_is_full(tmp_path):
    """/proc has no room of its own (0 blocks): the refusal names what it is, not "only 0 MB free";
    a folder without write permission is refused as such (for a user root does not bypass)."""
    proc = fa("gen", "-B", "1", "-N", "8", "-d", "32", "-o", "/proc/fa-test.bin")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "fa: error: /proc/fa-test.bin: cannot write: /proc is a kernel file system, not a " \
                                  "place for files"
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        proc = fa("gen", "-B", "1", "-N", "8", "-d", "32", "-o", locked / "x.bin")
        assert proc.returncode == 2 and "cannot write: Permission denied" in proc.stderr


def test_a_file_on_a_copy_on_write_file_system_is_written_not_mapped(tmp_path, monkeypatch):
    """Blocks reserved on btrfs or ZFS do not hold for pages written through memory (a full disk
    would be a SIGBUS): there an input is written in order, with the same bytes."""
    from fa_cli import file_pages
    from fa_cli.cases import generate
    from fa_cli.cases.format import Shape

    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert file_pages.copy_on_write(fd) in (True, False)  # this machine's, read from the mount table
    finally:
        os.close(fd)
    generate.write_input(tmp_path / "mapped.in", Shape(3, 50, 32), 4)
    monkeypatch.setattr(file_pages, "copy_on_write", lambda fd: True)
    with atomic_file(tmp_path / "probe") as f, file_pages.mapped(f, 100) as pages:
        assert pages is None
    generate.write_input(tmp_path / "written.in", Shape(3, 50, 32), 4)
    (tmp_path / "rewritten.in").write_bytes(b"\xff" * 9999)
    generate.write_input(tmp_path / "rewritten.in", Shape(3, 50, 32), 4, in_place=True)
    assert (tmp_path / "written.in").read_bytes() == (tmp_path / "mapped.in").read_bytes() == \
        (tmp_path / "rewritten.in").read_bytes()

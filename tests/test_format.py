import json

import numpy as np
import pytest

from helpers import ROOT, fa
from fa_cli.cases import generate
from fa_cli.cases.format import AttentionInput, FormatError, Shape, check_shape, header_bytes, open_output, read_header
from fa_cli.files import atomic_file, check_output_path


def write_raw(path, header, payload_floats=0):
    with open(path, "wb") as f:
        f.write(np.array(header, dtype="<i4").tobytes())
        f.write(np.zeros(payload_floats, dtype="<f4").tobytes())
    return path


def test_round_trip_views_match_generated_batches(tmp_path):
    shape = Shape(3, 17, 32)
    path = tmp_path / "x.in"
    generate.write_input(path, shape, seed=5)
    inp = AttentionInput(path)
    assert inp.shape == shape
    for b in range(3):
        for got, want in zip(inp.qkv(b), generate.batch(shape, 5, "uniform", b)):
            np.testing.assert_array_equal(got[0], want)
    # Interleaved layout: batch 1's Q starts right after batch 0's V.
    raw = np.fromfile(path, dtype="<f4", offset=12)
    np.testing.assert_array_equal(raw[3 * 17 * 32 : 4 * 17 * 32].reshape(17, 32), inp.qkv(1)[0][0])


def test_header_bytes_little_endian():
    assert header_bytes(Shape(2, 3, 64)) == bytes([2, 0, 0, 0, 3, 0, 0, 0, 64, 0, 0, 0])


@pytest.mark.parametrize("header,floats,message", [
    (None, 0, "empty file"),
    ("short", 0, "short header (5 bytes)"),
    ([0, 4, 32], 0, "B = 0, must be positive"),
    ([2, -1, 32], 0, "N = -1, must be positive"),
    ([2, 4, 48], 0, "d = 48 is not supported (the programs support d = 32 and 64)"),
    ([2**31 - 1, 2**31 - 1, 64], 0, "overflows 64-bit file sizes"),
    ([2, 4, 32], 10, "file has 52 bytes, expected 12 + 12*B*N*d = 3084 for B=2, N=4, d=32"),
])
def test_read_header_rejects(tmp_path, header, floats, message):
    path = tmp_path / "bad.in"
    if header is None:
        path.write_bytes(b"")
    elif header == "short":
        path.write_bytes(b"\1\2\3\4\5")
    else:
        write_raw(path, header, floats)
    with pytest.raises(FormatError) as e:
        read_header(path)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(FormatError, match="cannot read input"):
        read_header(tmp_path / "nope.in")


def test_output_size_checked(tmp_path):
    shape = Shape(2, 4, 32)
    path = tmp_path / "o.out"
    np.zeros(shape.elements - 1, dtype="<f4").tofile(path)
    with pytest.raises(FormatError, match="expected 4\\*B\\*N\\*d = 1024"):
        open_output(path, shape)
    np.arange(shape.elements, dtype="<f4").tofile(path)
    assert open_output(path, shape)[1, 3, 31] == shape.elements - 1


def test_check_shape_accepts_course_extremes():
    assert check_shape(13000, 128, 32).elements == 53_248_000
    assert check_shape(1, 1, 64).input_bytes == 12 + 12 * 64


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

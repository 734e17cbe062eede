"""records.py: results files made, saved, read back and told apart from files fa did not write."""
import json
from pathlib import Path

import pytest

from helpers import ROOT
from fa_cli.cases.format import Shape
from fa_cli.cases.suite import Target
from fa_cli.errors import FaError
from fa_cli.programs import devices
from fa_cli.programs.programs import Program
from fa_cli.report import records

PROGRAM = Program("cpu", Path("/opt/fa/bin/fa-cpu"), "cpu")
TARGET = Target("t01", Path("t01.in"), Shape(2, 128, 32), 2.0)
# The fields every record has, whichever command made it (fa report and fa compare rely on them).
FIELDS = {"kind", "program", "program_path", "input", "shape", "flops", "label", "device", "host", "build",
          "date", "command", "error", "system"}


def test_new_record_has_the_schema_fields():
    r = records.new_record(PROGRAM, TARGET, "mine", None, "run", wall_s=0.5)
    assert FIELDS <= set(r) and r["wall_s"] == 0.5
    assert (r["kind"], r["program"], r["program_path"], r["input"], r["label"]) == \
        ("run", "cpu", "/opt/fa/bin/fa-cpu", "t01", "mine")
    assert r["shape"] == {"B": 2, "N": 128, "d": 32} and r["flops"] == TARGET.shape.flops
    # a record that no program's timing line named a device for: this machine's, by the one name
    assert r["device"] == devices.describe_first() and r["build"] == {} and r["error"] is None
    assert isinstance(r["system"], dict) and r["date"].endswith("+00:00")
    assert records.kind_of(r) == "run"


def test_new_record_defaults_to_bench_and_keeps_an_error():
    r = records.new_record(PROGRAM, TARGET, None, "killed by SIGSEGV")
    assert r["kind"] == "bench" and r["error"] == "killed by SIGSEGV"


def test_save_load_round_trip_and_append(tmp_path):
    path = tmp_path / "r.json"
    assert records.load(path) == []  # missing: nothing yet
    first = [records.new_record(PROGRAM, TARGET, None, None, "bench", wall_s={"median": 1.0})]
    records.save(path, first)
    assert records.load(path) == first
    assert json.loads(path.read_text()) == {"records": first}
    second = [records.new_record(PROGRAM, TARGET, "b", None, "run", wall_s=2.0)]
    records.append(path, second)
    assert records.load(path) == first + second
    assert [len(v) for v in records.by_kind([path]).values()] == [1, 1, 0, 0, 0, 0]
    assert list(records.by_kind([path])) == list(records.KINDS)


def test_a_device_is_not_read(tmp_path):
    assert records.load(Path("/dev/null")) == []


@pytest.mark.parametrize("text", ["{}", "[1, 2]", '{"records": 5}', "not json", "", '{"records": {"a": 1}}'])
def test_a_file_that_is_not_results_is_refused_in_one_line(text, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    for read in (records.load, lambda p: records.by_kind([p])):
        with pytest.raises(FaError) as e:
            read(bad)
        assert str(e.value) == f"{bad}: not a results file of fa (JSON with a list of records)"
        assert "\n" not in str(e.value)


def test_a_binary_file_is_refused_as_not_text(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(FaError, match=r"bad\.json: not a results file of fa \(not text\)$"):
        records.load(bad)


def test_by_kind_refuses_unknown_records_and_no_records(tmp_path):
    odd = tmp_path / "odd.json"
    odd.write_text('{"records": [{"x": 1}]}')
    with pytest.raises(FaError, match=r"odd\.json: a record fa does not know \(\{'x': 1\}\)"):
        records.by_kind([odd])
    empty = tmp_path / "empty.json"
    empty.write_text('{"records": []}')
    with pytest.raises(FaError, match="no records in"):
        records.by_kind([empty])
    assert records.load(empty) == []  # an empty file can still be extended


def test_kinds_of_old_records_by_their_fields():
    assert records.kind_of({"profiler": "ncu"}) == "profile"
    assert records.kind_of({"target": "sm_90", "registers": 64}) == "resources"
    assert records.kind_of({"program": "cpu", "wall_s": 1.0}) == "bench"
    assert records.kind_of({"program": "cpu"}) is None


@pytest.mark.parametrize("kind", records.KINDS)
def test_every_kind_fa_wrote_on_the_h100_is_read(kind):
    found = records.by_kind([ROOT / "docs" / ("results/h200" if kind == "bench" else "history/h100-2026-11-23") / f"{kind}.json"])
    assert found[kind] and not any(v for k, v in found.items() if k != kind)

"""fa compare and fa report take every results file fa writes (real ones: the H200 bench of
docs/results/, the H100 runs of 2026-11-23 in docs/history/) or refuse a file in one line; never a
traceback."""
import json

import pytest

from helpers import ROOT, fa

DATED = ROOT / "docs" / "history" / "h100-2026-11-23"
FILES = {"bench": ROOT / "docs" / "results" / "h200" / "bench.json",
         **{kind: DATED / f"{kind}.json" for kind in ("run", "profile", "resources", "ladder", "sweep")}}
KINDS = list(FILES)


@pytest.mark.parametrize("kind", [k if k == KINDS[0] else pytest.param(k, marks=pytest.mark.slow) for k in KINDS])
def test_report_takes_every_kind(kind, tmp_path):
    proc = fa("report", FILES[kind], "-o", tmp_path / "r")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r" / "report.md").stat().st_size > 0


@pytest.mark.parametrize("kind", KINDS)
def test_compare_takes_or_refuses_every_kind_in_one_line(kind):
    proc = fa("compare", FILES[kind])
    assert "Traceback" not in proc.stderr
    if proc.returncode != 0:
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
    else:
        assert proc.stdout.strip()


@pytest.mark.parametrize("text", ["{}", "not json", *(pytest.param(t, marks=pytest.mark.slow)
                                                      for t in ("[1, 2]", '{"records": 5}', ""))])
def test_files_that_are_not_results_are_refused_in_one_line(text, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    for args in (["compare", bad], ["report", bad, "-o", tmp_path / "r"]):
        proc = fa(*args)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr, \
            (args, proc.stderr)


def test_compare_of_a_run_file_uses_its_wall_times():
    proc = fa("compare", FILES["run"])
    records = json.loads((FILES["run"]).read_text())["records"]
    assert proc.returncode == 0 and records[0]["input"] in proc.stdout

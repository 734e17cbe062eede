"""fa report: one markdown report from CPU-only results (fa run, fa bench), laid out in the
course's order with the machine's spec; and every bad input is one line."""
import json

import pytest

from helpers import fa
from fa_cli.report import writeup


def student_program(cpu_program, folder):
    """A student's hw4 (our CPU program under the student's name), as fa run records it."""
    hw4 = folder / "hw4"
    hw4.write_text(f"#!/bin/sh\nexec {cpu_program} \"$@\"\n")
    hw4.chmod(0o755)
    return hw4


SECTIONS = ["## 1. Implementation", "## 2. Profiling results", "## 3. Experiment and analysis", "### 3a. System spec",
            "### 3b. Optimization", "### 3c. Others", "## 4. NVIDIA and AMD", "## 5. Experience and conclusion"]


def test_a_report_from_the_students_hw4_alone_is_theirs(cpu_program, tmp_path):
    student_program(cpu_program, tmp_path)
    assert fa("run", "t01", "t02", "--program", "./hw4", "-o", "run.json", cwd=tmp_path).returncode == 0
    proc = fa("report", "run.json", "-o", "rep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "rep" / "report.md").read_text()
    assert [text.index(h) for h in SECTIONS] == sorted(text.index(h) for h in SECTIONS)
    assert "For reference" not in text and "| cpu |" not in text and "--program cuda" not in text
    judged = text[text.index("### 3c."):text.index("## 4.")]
    # in 80 columns: what every row shares is said once above the table
    assert "2 of 2 runs PASS (2 PASS;" in judged and "Every row: device host CPU; verdict PASS." in judged
    rows = [line for line in judged.splitlines() if line.startswith("| t0")]
    assert rows[0].startswith("| t01 | 2x128x32 | hw4 |") and len(rows) == 2
    assert all(line.endswith("| 0.005 |") for line in rows)  # the tolerance, last (a time may read 0.005 too)
    # every section the records do not fill names the command that fills it, for ./hw4
    assert "`fa profile t17 --program ./hw4 -o profile.json`" in text
    assert "`fa resources --program hw4.cu --json > resources.json`" in text
    assert "`fa bench --suite c --program ./hw4 -o bench.json`" in text
    assert "`fa sweep t17 --program hw4.cu --param BR=16,32 --param BC=32,64 -o sweep.json`" in text
    # a marked place for the student's words in every section of the course's
    places = [text.index(writeup.YOURS, text.index(h)) for h in ["# Homework 4", *SECTIONS[:2], *SECTIONS[4:]]]
    assert len(set(places)) == len(places) and text.count(writeup.YOURS) >= 8


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_fa_programs_only_as_a_labelled_reference(cpu_program, tmp_path):
    student_program(cpu_program, tmp_path)
    assert fa("run", "t01", "--program", "./hw4", "-o", "run.json", cwd=tmp_path).returncode == 0
    assert fa("run", "t02", "--program", "cpu", "-o", "run.json", cwd=tmp_path).returncode == 0
    assert fa("bench", "--program", "cpu", "--shape", "2,128,32", "--shape", "2,256,64", "--repeat", 1,
              "-o", "bench.json", cwd=tmp_path).returncode == 0
    # A ladder file as the GPU writes one, made here from the CPU bench records (the report
    # only lays records out; their figures are real CPU measurements).
    bench_records = json.loads((tmp_path / "bench.json").read_text())["records"]
    steps = [{**r, "kind": "ladder", "step": i, "step_name": f"s{i}", "idea": "why", "speedup": None,
              "speedup_total": None} for i, r in enumerate(bench_records[:1] * 2, 1)]
    (tmp_path / "ladder.json").write_text(json.dumps({"records": steps}))
    proc = fa("report", "run.json", "bench.json", "ladder.json", "-o", "rep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "rep" / "report.md").read_text()
    system = json.loads((tmp_path / "run.json").read_text())["records"][0]["system"]
    spec = text[text.index("### 3a."):text.index("### 3b.")]  # one machine: a row per item
    assert all(f"| {item} | {system[key]} |" in spec for item, key in (("host", "host"), ("CPU", "cpu"),
                                                                      ("cores", "cores")))
    theirs = text.index("## For reference: fa's own programs (not your work)")
    assert [text.index(h) for h in SECTIONS] == sorted(text.index(h) for h in SECTIONS) and text.index(SECTIONS[-1]) < theirs
    ours, reference = text[:theirs], text[theirs:]
    assert "| hw4 |" in ours and "| cpu |" not in ours and "1 of 1 runs PASS" in ours
    assert "| case | t02 |" in reference and "### fa's optimization ladder" in reference  # one row: on its side
    assert "No results: `fa bench --suite c --program ./hw4" in ours  # fa's bench is not the student's
    pngs = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert "reference-bench.png" in pngs and any(p.startswith("ladder-") for p in pngs)
    for png in pngs:
        assert f"]({png})" in reference and (tmp_path / "rep" / png).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_bad_inputs_are_one_line(tmp_path):
    (tmp_path / "empty.json").write_text('{"records": []}')
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "odd.json").write_text('{"records": [{"x": 1}]}')
    (tmp_path / "taken").write_text("a file")
    cases = [
        (["report", "empty.json", "-o", "o"], "fa: error: no records in empty.json"),
        (["report", "notes.txt", "-o", "o"], "fa: error: notes.txt: not a results file of fa (JSON with a list of records)"),
        (["report", "odd.json", "-o", "o"], "fa: error: odd.json: a record fa does not know ({'x': 1})"),
    ]
    for args, line in cases:
        proc = fa(*args, cwd=tmp_path)
        assert (proc.returncode, proc.stderr.strip(), proc.stdout) == (2, line, ""), args
    assert not (tmp_path / "o").exists()
    proc = fa("report", "missing.json", "-o", "o", cwd=tmp_path)
    assert proc.returncode == 2 and "'missing.json' does not exist" in proc.stderr
    (tmp_path / "run.json").write_text(json.dumps({"records": [{"kind": "run", "program": "cpu", "input": "t01"}]}))
    proc = fa("report", "run.json", "-o", "taken", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().endswith("taken' is a file.") or "taken" in proc.stderr


def test_nvidia_and_amd_results_are_told_apart():
    nvidia = {"device": "NVIDIA H100 80GB HBM3 (sm_90)"}
    amd = {"device": "unknown", "system": {"gpus": [{"vendor": "amd", "name": "AMD Instinct MI210"}]}}
    assert [writeup._vendor(r) for r in (nvidia, amd, {"device": "host CPU"})] == ["nvidia", "amd", None]

"""fa's tables in an 80-column terminal and through a pipe: never a number cut."""
import io
import json
import os
import re

import pytest
from rich.console import Console
from rich.text import Text

from helpers import ROOT, fa
from fa_cli.measure import compare
from fa_cli.report import records, tables

BENCH = ROOT / "docs" / "history" / "h100-bench.json"  # a fixed record of five programs


def bench_records(n: int = 4) -> list[dict]:
    return [dict(input="26x32768x64", program=name, device="NVIDIA H100 80GB HBM3", control=False,
                 build={"impl": "wgmma-fused" if i else "torch-sdpa-fp32-efficient"},
                 wall_s={"median": 2.083 + i, "all": [2.08, 2.09, 2.07, 2.1, 2.05], "min": 2.05, "max": 2.1},
                 timing={"kernel": 1.0301 + i}, tflops_kernel=34.8 * (i + 1), max_err=3.13e-6 * (i + 1))
            for i, name in enumerate(["cuda", "hip-cuda", "torch", "hw4"][:n])]


@pytest.fixture
def terminal(monkeypatch):
    """report's console as an 80-column terminal; returns what it printed."""
    out = io.StringIO()
    monkeypatch.setattr(tables, "console", Console(file=out, width=80, force_terminal=True, color_system=None))
    return out


def figures(text: str) -> list[str]:
    return re.findall(r"\d+\.\d+(?:e[-+]\d+)?", text)


def test_bench_table_fits_80_columns_and_cuts_no_number(terminal):
    recs = bench_records()
    tables.show(tables.bench_table(recs))
    text = terminal.getvalue()
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text, text
    for r in recs:
        for cell in (f"{r['wall_s']['median']:.3f} ±", tables.fmt_err(r["max_err"]), f"{r['timing']['kernel'] * 1e3:.2f}"):
            assert cell in text, (cell, text)
    assert "on NVIDIA H100 80GB HBM3" in text.splitlines()[0]  # one device: named in the title


def test_compare_table_fits_80_columns(terminal):
    recs = compare.timed_records(records.by_kind([BENCH]))
    header, body, about = compare.long_rows(recs)
    tables.show(tables.compare_table(header, body, f"fa compare{about}"))
    text = terminal.getvalue()
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text, text
    for row in body:
        for cell in row[2:]:
            assert cell in text


@pytest.mark.parametrize("args", [(), ("--wide",)])
def test_piped_tables_cut_nothing(args):
    """Through a pipe (COLUMNS=80 too) a table is printed as wide as it needs: every figure whole."""
    proc = fa("compare", BENCH, *args, env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0 and "…" not in proc.stdout, proc.stdout
    data = json.loads(BENCH.read_text())["records"]
    errs = {f"{r['max_err']:.1e}" for r in data if r.get("max_err") is not None}
    assert errs <= set(figures(proc.stdout)) | set(re.findall(r"\d\.\de-\d\d", proc.stdout))
    assert all(f"{r['wall_s']['median']:.3f}" in proc.stdout for r in data)


def test_the_amd_note_under_a_table_fits_80_columns():
    """Runs of a HIP build on NVIDIA get a note that they are not AMD measurements, in lines a
    terminal of 80 columns shows whole."""
    proc = fa("compare", BENCH, env={**os.environ, "COLUMNS": "80"})
    note = proc.stdout[proc.stdout.index("Note: no AMD GPU"):]
    assert proc.returncode == 0 and "not AMD measurements" in " ".join(note.split())
    assert max(map(len, note.splitlines())) <= 80, note


def test_the_run_table_fits_80_columns(cpu_program):
    """fa run's table names its one program in the title, so that the columns fit 80."""
    proc = fa("run", "t01", "t02", "--program", "cpu", env={**os.environ, "COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("fa run of cpu on ") and "2 cases: 2 PASS" in proc.stdout
    assert max(len(line.rstrip()) for line in proc.stdout.splitlines()) <= 80, proc.stdout


def test_a_table_wider_than_the_terminal_is_stacked_with_nothing_cut(terminal):
    """fa profile's table (a column per metric) on an 80-column terminal: row by row, each of its
    figures whole, no line over 80."""
    recs = json.loads((ROOT / "docs" / "results" / "h200" / "profile.json").read_text())["records"][:4]
    table = tables.profile_table(recs)
    cells = [Text.from_markup(str(c)).plain for column in table.columns for c in column.cells]
    tables.show(table)
    text = terminal.getvalue()
    assert max(map(len, text.splitlines())) <= 80, text
    flat = " ".join(text.split())
    assert all(c in flat for c in cells), [c for c in cells if c not in flat]


def test_bench_and_compare_show_the_gtx1080_estimate_where_a_record_has_one():
    """A record of a hw4.cu under the GTX 1080's rules carries judge_gpu_s (measure/judge_time.py):
    fa bench's table and fa compare's tables and markdown get the column, its words under them;
    a record without one shows '-'."""
    import copy

    from fa_cli.measure import compare, judge_column

    model = {"params": {"startup_s": 0.1, "host_ratio": 1.0, "sm_ratio": 1.5}, "half_width_x": 1.5, "points": 43,
             "median_x": 1.3, "covered": 0.8}
    base = {"kind": "bench", "program": "hw4.cu", "program_path": "hw4", "input": "c29",
            "shape": {"B": 4, "N": 32768, "d": 32}, "label": None, "device": "GPU", "error": None,
            "wall_s": {"median": 0.7, "min": 0.7, "max": 0.7, "all": [0.7]}, "timing": {}, "build": {},
            "tflops_kernel": None, "max_err": 1e-6, "time_limit": 10.0}
    student = {**copy.deepcopy(base),
               "judge_gpu_s": {"gpu": "GTX 1080", "low": 1.0, "mid": 1.5, "high": 2.25, "model": model}}
    ours = {**copy.deepcopy(base), "program": "cuda", "program_path": "bin/fa-cuda"}
    column = judge_column.for_records([student, ours], tables.bench_row)
    assert column.cells == {"hw4.cu on c29": "1.00-2.25", "cuda on c29": "-"}
    table = tables.bench_table([student, ours], False, column)
    assert "GTX 1080 s" in [c.header for c in table.columns]
    header, body, _ = compare.long_rows([student, ours])
    column = header.index("GTX 1080 s")
    assert [row[column] for row in body] == ["1.00-2.25", "-"]
    assert "an estimate of each case's time on the judge's GTX 1080" in " ".join(compare.markdown([student, ours]).split())
    assert compare.judge_words([ours]) == [] and "GTX 1080 s" not in compare.long_rows([ours])[0]
    assert "kernel TFLOP/s" not in header  # no run printed a kernel stage: the estimate takes its place
    assert "kernel TFLOP/s" in compare.long_rows([ours])[0]
    wide_header, wide_body = compare.rows([student, ours])
    assert wide_body[0][wide_header.index("hw4.cu on GPU GTX 1080 s")] == "1.00-2.25"


def test_one_of_lists_alternatives():
    assert [tables.one_of(x) for x in ([16], [16, 32], [16, 32, 64])] == ["16", "16 or 32", "16, 32 or 64"]

"""Markdown tables for a report: at most 80 columns, nothing lost (what leaves a table is said
above or below it)."""
import json

import pytest

from helpers import ROOT, fa
from fa_cli.measure import compare
from fa_cli.report import markdown


def table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def tables_of(text: str) -> list[list[list[str]]]:
    """Each table of text as its rows of cells (the header first)."""
    return [cells_of(block) for block in text.split("\n\n") if block.startswith("|")]


def figures_by_name(parts: list[list[list[str]]], names: int) -> dict[tuple, dict[str, str]]:
    """Every figure the tables show, by the row's first `names` cells and the figure's column:
    a row's figures found under its own name whichever table holds them."""
    found: dict[tuple, dict[str, str]] = {}
    for part in parts:
        header = part[0]
        for row in part[1:]:
            found.setdefault(tuple(row[:names]), {}).update(zip(header[names:], row[names:]))
    return found


def cells_of(text: str) -> list[list[str]]:
    """The cells of every table row in text (header and separator rows left out)."""
    lines = table_lines(text)
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in lines if not line.startswith("|---")]


def test_a_table_that_fits_is_left_as_it_is():
    text = markdown.markdown_table(["case", "time s"], [["t01", "0.133"], ["t02", "0.182"]])
    assert text == "| case | time s |\n|---|---|\n| t01 | 0.133 |\n| t02 | 0.182 |\n"


def test_a_name_shared_by_every_row_is_said_once_above():
    header = ["case", "program", "device", "time s", "max err", "tolerance", "verdict"]
    rows = [[f"t{i:02}", "cuda", "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", f"0.1{i}", "2.1e-06", "0.0001", "PASS"]
            for i in range(1, 4)] + [["t04", "cuda", "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", "0.2", "1.0e-05",
                                      "0.0001", "WRONG"]]
    text = markdown.markdown_table(header, rows)
    assert text.splitlines()[0] == "Every row: device NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)."
    assert cells_of(text) == [[h for h in header if h != "device"]] + [[c for j, c in enumerate(r) if j != 2]
                                                                    for r in rows]
    assert max(map(len, table_lines(text))) <= 80


def test_columns_without_a_figure_and_shared_names_go_above_and_the_row_names_stay_in_every_table():
    header = ["input", "program", "kernel", "achieved occ. %", *(f"figure {k}" for k in range(8))]
    rows = [["t17", "cuda", f"attention_kernel_{n}<64>", "-", *(f"{n}.{k}e+09" for k in range(8))] for n in range(4)]
    text = markdown.markdown_table(header, rows, keys=3)
    assert text.splitlines()[0] == "Every row: input t17; program cuda; no figure in any row: achieved occ. %."
    parts = tables_of(text)
    assert len(parts) > 1 and all(part[0][0] == "kernel" for part in parts)  # keys: 3, less the two lifted
    assert figures_by_name(parts, 1) == {(r[2],): dict(zip(header[4:], r[4:])) for r in rows}


def test_a_table_of_one_row_is_turned_on_its_side():
    header = ["host", "CPU", "cores", "memory", "GPUs", "driver", "OS"]
    row = ["node7", "Intel(R) Xeon(R) Platinum 8480+", "112", "2015.6 GiB", "8 x NVIDIA H100 80GB HBM3 (sm_90)",
           "580.159.04", "Linux 6.18.44"]
    text = markdown.markdown_table(header, [row])
    assert cells_of(text) == [["host", "node7"], *([h, c] for h, c in zip(header[1:], row[1:]))]
    assert max(map(len, table_lines(text))) <= 80


def test_long_names_repeated_down_a_column_become_letters_with_a_legend():
    runs = ["cuda on NVIDIA H100 80GB HBM3 (sm_90)", "hip on AMD Instinct MI210 (gfx90a)"]
    header = ["input", "run", "time s", "kernel TFLOP/s", "max err", "speed-up vs cuda"]
    rows = [[f"t{i:02} (26x32768x64)", run, f"{0.2 + j:.3f}", "242", "5.8e-06", f"{1 - j / 10:.2f}x"]
            for i in range(1, 4) for j, run in enumerate(runs)]
    text = markdown.markdown_table(header, rows, keys=2)
    assert f"run: a = {runs[0]}; b = {runs[1]}." in " ".join(text.split())
    assert [r[1] for r in cells_of(text)[1:]] == ["a", "b"] * 3
    assert max(map(len, table_lines(text))) <= 80


def test_long_texts_go_below_by_row_and_a_rare_long_cell_becomes_a_note():
    header = ["step", "what changes", "kernel ms", "TFLOP/s", "max err", "verdict"]
    ideas = ["one thread per query row; K and V read from global memory",
             "a warp per row, lanes across d: coalesced loads from global memory"]
    rows = [[f"{i} step", idea, "1009", "7.08", "1.3e-05", "PASS"] for i, idea in enumerate(ideas, 1)]
    rows.append(["3 skipped", "too many threads for a block: skipped before it ran", "-", "-", "-",
                 "skipped: Br x Bc threads: a block holds at most 1024 of them"])
    text = markdown.markdown_table(header, rows)
    below = text[text.index("What changes:"):]
    assert [f"- {r[0]}: {r[1]}" in below for r in rows] == [True] * 3
    assert [r[-1] for r in cells_of(text)[1:]] == ["PASS", "PASS", "note 1"]
    assert "Note 1: skipped: Br x Bc threads: a block holds at most 1024 of them" in text.splitlines()
    assert max(map(len, table_lines(text))) <= 80


def test_many_figures_are_split_over_tables_that_repeat_the_names_of_the_rows():
    header = ["Br", "Bc", *(f"figure {k}" for k in range(12))]
    rows = [[str(br), str(bc), *(f"{br * bc * (k + 1) / 7:.4g}" for k in range(12))]
            for br in (8, 16) for bc in (32, 64)]
    text = markdown.markdown_table(header, rows, keys=2)
    parts = tables_of(text)
    assert len(parts) > 1 and max(map(len, table_lines(text))) <= 80
    assert all([r[:2] for r in part] == [["Br", "Bc"], *([r[0], r[1]] for r in rows)] for part in parts)
    assert sum(len(part[0]) - 2 for part in parts) == 12  # each column once
    assert figures_by_name(parts, 2) == {(r[0], r[1]): dict(zip(header[2:], r[2:])) for r in rows}


def test_wide_row_names_are_numbered_and_the_first_table_holds_them():
    header = ["program", "kernel", *(f"figure {k}" for k in range(9))]
    kernels = ["attention_simt<64, 8, 8, 8, 16, 2, 1>", "attention_tensorcore<64, true>", "split_kv_blocked<64>",
               "attention_simt<32, 8, 8, 4, 16, 4, 2>"]
    rows = [[p, k, *(f"{n * 1.5e9 * (j + 1):.3g}" for j in range(9))]
            for n, (p, k) in enumerate(zip(["cuda", "cuda", "hip-cuda", "hip-cuda"], kernels), 1)]
    text = markdown.markdown_table(header, rows, keys=2)
    parts = [cells_of(block) for block in text.split("\n\n") if block.startswith("|")]
    assert parts[0][0][:3] == ["#", "program", "kernel"] and [r[:3] for r in parts[0][1:]] == [
        [str(n), r[0], r[1]] for n, r in enumerate(rows, 1)]
    assert all(part[0][0] == "#" and "kernel" not in part[0] for part in parts[1:])
    assert figures_by_name(parts, 1) == {(str(n),): dict(zip(header, r)) for n, r in enumerate(rows, 1)}
    assert max(map(len, table_lines(text))) <= 80


def test_a_long_split_table_comes_in_blocks_of_rows_each_with_all_its_columns():
    header = ["kernel", *(f"figure {k}" for k in range(10))]
    rows = [[f"kernel_number_{n}<{n}>", *(f"{n * 1000 + k}.5" for k in range(10))] for n in range(23)]
    text = markdown.markdown_table(header, rows)
    parts = tables_of(text)
    per_block = len(parts) // 3
    assert len(parts) == 3 * per_block and per_block > 1  # 23 rows: blocks of 10, 10 and 3
    assert [len(part) - 1 for part in parts] == [10] * 2 * per_block + [3] * per_block
    assert figures_by_name(parts, 1) == {(r[0],): dict(zip(header[1:], r[1:])) for r in rows}
    assert max(map(len, table_lines(text))) <= 80


def test_a_list_below_names_each_row_by_all_its_names_and_lines_above_and_below_are_wrapped():
    header = ["Br", "Bc", "why", "TFLOP/s", "result"]
    rows = [[str(br), str(bc), f"tiles of {br} x {bc}: " + "every thread loads its own share of K and V " * 2,
             "10.5", "PASS"] for br in (8, 16) for bc in (32, 64)]
    text = markdown.markdown_table(header, rows, keys=2)
    for br, bc, why, *_ in rows:
        assert f"- {br} {bc}: {why.rstrip()}" in " ".join(text.split()).replace(" - ", "\n- ").splitlines()
    assert max(map(len, text.splitlines())) <= 80


def test_cells_are_escaped_and_bad_tables_are_refused():
    text = markdown.markdown_table(["a", "b"], [["x|y", "line\nbreak"]])
    assert text == "| a | b |\n|---|---|\n| x\\|y | line break |\n"
    assert markdown.markdown_table(["a" * 50, "b" * 50], []) == f"| {'a' * 50} | {'b' * 50} |\n|---|---|\n"
    with pytest.raises(ValueError, match="a row of other than 2 cells"):
        markdown.markdown_table(["a", "b"], [["1"]])


def test_letters_only_where_they_make_the_table_fit():
    header = ["name", *(f"figure {k}" for k in range(12))]
    rows = [["a long repeated name", *(f"{k}.25" for k in range(12))], ["another long name", *["1.5"] * 12]] * 2
    text = markdown.markdown_table(header, rows)
    assert "name: a = " not in text and "| a long repeated name |" in text  # split, not lettered


def test_nvidia_and_amd_runs_side_by_side_in_80_columns():
    """fa compare --markdown of one program on two GPUs: a row per input and run, the runs as
    letters with a legend, the speed-up's baseline said above."""
    def record(case, device, wall):
        return {"kind": "bench", "input": case, "shape": {"B": 64, "N": 4096, "d": 64}, "program": "./hw4",
                "device": device, "wall_s": {"median": wall, "min": wall, "max": wall, "all": [wall]},
                "tflops_kernel": 40.0, "max_err": 3e-6}
    devices = ["NVIDIA H100 80GB HBM3 (sm_90)", "AMD Instinct MI210 (gfx90a)"]
    records = [record(c, dev, 0.3 + i) for c in ("t17", "t18", "t19") for i, dev in enumerate(devices)]
    text = compare.markdown(records)
    assert " ".join(text.split()).startswith(
        "Whole-process medians; the speed-up is over ./hw4 on NVIDIA H100 80GB HBM3 (sm_90):")
    assert f"run: a = ./hw4 on {devices[0]}; b = ./hw4 on {devices[1]}." in " ".join(text.split())
    rows = cells_of(text)
    assert rows[0] == ["input", "run", "time s", "kernel TFLOP/s", "max err", "speed-up"]
    assert [r[:2] + r[-1:] for r in rows[1:3]] == [["t17 (64x4096x64)", "a", "1.00x"], ["t17 (64x4096x64)", "b", "0.23x"]]
    assert max(map(len, text.splitlines())) <= 80


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_a_report_of_the_shipped_h200_records_fits_80_columns(tmp_path):
    """fa report of docs/results/h200's records (every kind: run, bench, profile, ladder, sweep,
    resources), each table line at most 80 characters and every run's figures in it."""
    folder = ROOT / "docs" / "results" / "h200"
    files = [folder / f for f in ("profile.json", "ladder.json", "ladder-profile.json", "sweep.json",
                                  "sweep-profile.json", "resources-cuda.json", "resources-hip-cuda.json",
                                  "run.json", "bench.json")]
    proc = fa("report", *files, "-o", tmp_path / "rep")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "rep" / "report.md").read_text()
    assert table_lines(text) and max(map(len, table_lines(text))) <= 80
    for r in json.loads((folder / "run.json").read_text())["records"]:
        assert f"| {r['input']} | " in text and f"{r['max_err']:.2e}" in text

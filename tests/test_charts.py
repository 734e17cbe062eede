"""The charts are fit for a report: rendered at a test size (a few CPU runs) and at full size
(the H200 records in docs/results), each has no text cut off at the figure's edge, no title,
label, legend or tick label running into another panel's, no empty panel, and a label on every
axis that has units."""
from __future__ import annotations

import itertools

import pytest

from helpers import ROOT
from fa_cli.measure import compare
from fa_cli.report import charts, writeup
from fa_cli.report.records import by_kind

RESULTS = ROOT / "docs" / "results"
H200 = RESULTS / "h200"


@pytest.fixture
def drawn(monkeypatch):
    """The figures the charts draw, kept for inspection (they are still written as PNGs)."""
    figures = []
    save = charts.save

    def keep(fig, path, records):
        figures.append(fig)
        return save(fig, path, records)

    monkeypatch.setattr(charts, "save", keep)
    return figures


def texts_of(fig):
    """(owner, kind, bbox) of every visible non-empty text and legend; owner: the axes, or the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the figure is closed once saved: draw it again, as savefig did
    canvas.draw()
    renderer = canvas.get_renderer()
    found = []
    for sub in [fig, *fig.subfigs]:
        for t in (getattr(sub, "_suptitle", None),):
            if t is not None and t.get_visible() and t.get_text():
                found.append((sub, "suptitle", t.get_window_extent(renderer)))
        for legend in sub.legends:
            found.append((sub, "legend", legend.get_window_extent(renderer)))
    for ax in fig.axes:
        items = [("title", ax.title), ("xlabel", ax.xaxis.label), ("ylabel", ax.yaxis.label)]
        items += [("xtick", t) for t in ax.get_xticklabels()] + [("ytick", t) for t in ax.get_yticklabels()]
        inside = ax.get_window_extent(renderer)
        for kind, t in items:
            if not (t.get_visible() and t.get_text()):
                continue
            bb = t.get_window_extent(renderer)
            middle_x, middle_y = (bb.x0 + bb.x1) / 2, (bb.y0 + bb.y1) / 2
            if kind == "ytick" and not inside.y0 - 2 <= middle_y <= inside.y1 + 2:
                continue  # a tick outside the view limits: not drawn
            if kind == "xtick" and not inside.x0 - 2 <= (bb.x1 if t.get_rotation() else middle_x) <= inside.x1 + 2:
                continue
            found.append((ax, kind, bb))
        if ax.get_legend():
            found.append((ax, "legend", ax.get_legend().get_window_extent(renderer)))
    return found


def check_figure(fig):
    box = fig.bbox
    found = texts_of(fig)
    for owner, kind, bb in found:
        assert bb.x0 >= box.x0 - 1 and bb.y0 >= box.y0 - 1 and bb.x1 <= box.x1 + 1 and bb.y1 <= box.y1 + 1, \
            f"{kind} cut off at the figure's edge: {bb} outside {box}"
    for (o1, k1, b1), (o2, k2, b2) in itertools.combinations(found, 2):
        if o1 is o2 and k1 == k2 and k1 in ("xtick", "ytick"):
            continue  # rotated tick labels of one axis: their boxes touch by design
        if o1 is o2 and {k1, k2} <= {"xtick", "ytick"}:
            continue  # an axis' x and y tick labels meet at its corner
        inter = max(0, min(b1.x1, b2.x1) - max(b1.x0, b2.x0)) * max(0, min(b1.y1, b2.y1) - max(b1.y0, b2.y0))
        assert inter <= 2, f"{k1} and {k2} overlap: {b1} and {b2}"
    for ax in fig.axes:
        assert ax.lines or ax.patches or ax.texts, f"an empty panel: {ax.get_title()!r}"
        assert ax.get_ylabel(), f"panel {ax.get_title()!r} has no y label"
        if ax.get_xscale() == "log" or ax.lines:
            assert ax.get_xlabel(), f"panel {ax.get_title()!r} has no x label"


def small_bench() -> list[dict]:
    """Two CPU runs and a program without stage times, on two d = 32 inputs."""
    out = []
    for N in (64, 128):
        for program, timing in (("cpu", {"read": 0.001, "kernel": 0.004, "write": 0.0005}), ("mine", {})):
            out.append({"kind": "bench", "program": program, "label": None, "device": "host CPU",
                        "input": f"2x{N}x32", "shape": {"B": 2, "N": N, "d": 32},
                        "wall_s": {"median": 0.01 + N * 1e-5, "min": 0.01, "max": 0.02, "all": [0.01]},
                        "timing": timing, "max_err": 1e-6, "passed": True, "tflops_kernel": None})
    return out


def shipped_records(*names) -> list[dict]:
    found = by_kind([H200 / n for n in names])
    return [r for records in found.values() for r in records]


def test_bench_chart_test_size(drawn, tmp_path):
    compare.plot(small_bench(), tmp_path / "c.png")
    [fig] = drawn
    check_figure(fig)
    assert len(fig.subfigs[1].axes) == 1, "only d = 32 was run: one panel of time against N"
    assert "no stage times from mine" in fig._suptitle.get_text()


@pytest.mark.slow  # full-size charts: the test-size ones stay in make test
@pytest.mark.parametrize("path", [ROOT / "docs" / "history" / "h100-bench.json", H200 / "bench.json"],
                         ids=lambda p: p.parent.name)
def test_bench_chart_full_size(drawn, tmp_path, path):
    compare.plot(compare.timed_records(by_kind([path])), tmp_path / "c.png")
    [fig] = drawn
    check_figure(fig)


def ladder_records(failed: bool) -> list[dict]:
    out = []
    for i, name in enumerate(("naive", "warp per row", "smem tiles"), 1):
        r = {"kind": "ladder", "step": i, "step_name": name, "idea": "", "program": "cpu", "device": "host CPU",
             "input": "t01", "shape": {"B": 2, "N": 128, "d": 32}, "passed": not failed,
             "tflops_kernel": None if failed else 0.01 * i, "timing": {} if failed else {"kernel": 0.1 / i}}
        if failed:
            r["error"] = "fa-cuda: error: no CUDA device available"
        out.append(r)
    return out


@pytest.mark.parametrize("failed", [False, True], ids=["ran", "no-gpu"])
def test_ladder_chart_test_size(drawn, tmp_path, failed):
    records = ladder_records(failed)
    from fa_cli.measure import ladder
    ladder.add_speedups(records)
    charts.ladder_chart(records, tmp_path / "l.png")
    check_figure(drawn[0])


def test_sweep_chart_test_size(drawn, tmp_path):
    records = [{"kind": "sweep", "program": "cuda-br8-bc32", "device": "host CPU", "input": "t01", "Br": br, "Bc": 32,
                "tflops_kernel": 0.5 * br, "resources": {"occupancy": br / 64}} for br in (8, 16)]
    records.append({"kind": "sweep", "program": "cuda-br32-bc64", "device": "unknown", "input": "t01", "Br": 32,
                    "Bc": 64, "skipped": "too much shared memory"})
    charts.sweep_chart(records, tmp_path / "s.png")
    check_figure(drawn[0])
    assert "Br=32 Bc=64" in drawn[0]._suptitle.get_text()


@pytest.mark.slow
def test_report_charts_full_size(drawn, tmp_path):
    """fa report on the shipped records (the H200 bench, the dated H100 runs): the bench chart, each ladder
    and each sweep."""
    dated = ROOT / "docs" / "history" / "h100-2026-11-23"
    files = [H200 / "bench.json", *(dated / n for n in ("run.json", "ladder.json", "sweep.json", "sweep-profile.json"))]
    writeup.write(files, tmp_path / "report")
    assert len(drawn) >= 5
    for fig in drawn:
        check_figure(fig)


def test_docs_results_charts_are_current():
    """The PNGs in docs/results are what the charts draw today (regenerated with fa compare --plot
    and fa report; their sizes are the figures' own)."""
    from PIL import Image  # matplotlib's own dependency
    for png in H200.glob("*.png"):
        with Image.open(png) as im:
            assert im.size[0] >= 800, png


def test_a_chart_replaces_only_a_png(tmp_path):
    from fa_cli import files as placing
    from fa_cli.errors import FaError
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(FaError, match="is not a PNG image: a chart replaces only one"):
        charts.check_replaceable(notes)
    (tmp_path / "old.png").write_bytes(charts.PNG_SIGNATURE + b"rest")
    charts.check_replaceable(tmp_path / "old.png")  # a PNG, an empty file or no file: replaced
    (tmp_path / "empty.png").touch()
    charts.check_replaceable(tmp_path / "empty.png")
    placing.replace_students_files(True)
    try:
        charts.check_replaceable(notes)  # --force
    finally:
        placing.replace_students_files(False)

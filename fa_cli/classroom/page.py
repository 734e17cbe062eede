"""The class page (CLASS/index.html): the class table, sortable by any column with a click, each
student's name a link to their report; the class's plots (verdicts per case, each program's time
against the case's limit); the most similar pairs with the code they share. One file and its
plots beside it, nothing fetched from elsewhere: it opens from a disk, offline."""
from __future__ import annotations

import html
from collections import Counter
from pathlib import Path

from ..files import atomic_file
from ..report import charts
from . import table

VERDICTS = ("PASS", "WRONG", "ERROR", "TLE")
COLOURS = {"PASS": "#4c9f50", "WRONG": "#d1495b", "ERROR": "#8d6a9f", "TLE": "#edae49"}
EXCERPT = 400  # characters of a shared span shown

SORTING = """<script>
document.querySelectorAll('th').forEach((th, col) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
  const key = r => { const t = r.cells[col].innerText, x = parseFloat(t); return isNaN(x) ? t : x; };
  const up = th.dataset.up !== '1'; th.dataset.up = up ? '1' : '0';
  rows.sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (up ? 1 : -1));
  rows.forEach(r => body.appendChild(r));
}));
</script>"""
STYLE = ("<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}th,td{border:1px solid #ccc;"
         "padding:4px 6px;font-size:90%;vertical-align:top}th{cursor:pointer;background:#eee}pre{background:#f6f6f6;"
         "padding:6px;max-width:60em;overflow:auto}</style>")


def write(folder: Path, records: list[dict], pairs: list[dict], texts: dict[tuple[str, str], str]) -> Path:
    """CLASS/index.html and its plots; texts: (student, source) -> the source, for the pairs' excerpts."""
    plots = [p for p in (_verdict_plot(folder, records), _time_plot(folder, records)) if p]
    header, rows = table.rows_of(records)
    parts = [f"<!doctype html><meta charset='utf-8'><title>fa class</title>{STYLE}<h1>fa class</h1>",
             f"<p>{html.escape(table.summary(records, folder / 'class.csv'))}</p>",
             _table(header, rows, _reported(records)), *(f"<p><img src='{p.relative_to(folder)}'></p>" for p in plots),
             _pairs(pairs, texts), SORTING]
    path = folder / "index.html"
    with atomic_file(path) as f:
        f.write("\n".join(parts).encode())
    return path


def _reported(records: list[dict]) -> set[tuple[str, str]]:
    """(student, platform) of the rows with a report: judged (fa run's exit status) or a build error."""
    return {(r["student"], r["platform"]) for r in records if r.get("exit_code") is not None or r.get("build_error")}


def _table(header: list[str], rows: list[dict], reported: set[tuple[str, str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = []
    for row in rows:
        cells = []
        for column in header:
            text = html.escape("" if row.get(column) is None else str(row[column]))
            if column == "student" and (row["student"], row["platform"]) in reported:
                text = f"<a href='reports/{html.escape(row['student'])}.{html.escape(row['platform'])}.txt'>{text}</a>"
            cells.append(f"<td>{text}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _pairs(pairs: list[dict], texts: dict[tuple[str, str], str]) -> str:
    if not pairs:
        return "<h2>Similar pairs</h2><p>No two sources share code beyond fa init's starter.</p>"
    items = ["<h2>Similar pairs</h2><p>copydetect (winnowing over tokens; fa init's starter not counted). "
             "A pair is a place to look, not a verdict.</p>"]
    for p in pairs:
        items.append(f"<h3>{html.escape(p['a'])} ~ {html.escape(p['b'])} ({html.escape(p['source'])}): "
                     f"{p['share_a']:.0%} / {p['share_b']:.0%}, {p['tokens']} tokens</h3>")
        for student, spans in ((p["a"], p["spans_a"]), (p["b"], p["spans_b"])):
            if spans:
                start, end = max(spans, key=lambda s: s[1] - s[0])
                excerpt = texts.get((student, p["source"]), "")[start:min(end, start + EXCERPT)]
                items.append(f"<p>{html.escape(student)}, characters {start} to {end} (the longest shared run):</p>"
                             f"<pre>{html.escape(excerpt)}</pre>")
    return "\n".join(items)


def _verdict_plot(folder: Path, records: list[dict]) -> Path | None:
    """How many programs got each verdict, case by case."""
    cases = list(dict.fromkeys(c for r in records for c in r["cases"]))
    counts = {c: Counter(x.get("verdict") for r in records for x in r.get("runs") or [] if x["input"] == c)
              for c in cases}
    if not any(counts.values()):
        return None
    fig, ax = charts.pyplot().subplots(figsize=(max(6, 0.4 * len(cases) + 2), 3.5))
    bottom = [0] * len(cases)
    for verdict in VERDICTS:
        heights = [counts[c][verdict] for c in cases]
        ax.bar(cases, heights, bottom=bottom, label=verdict, color=COLOURS[verdict])
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_ylabel("programs")
    ax.set_title("Verdicts per case")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelrotation=90, labelsize=8)
    return charts.save(fig, folder / "plots" / "verdicts.png", [r for x in records for r in x.get("runs") or []])


def _time_plot(folder: Path, records: list[dict]) -> Path | None:
    """Each program's time on each case, as a share of the case's limit (1: the limit)."""
    points = [(x["input"], x["wall_s"] / x["time_limit"], x.get("verdict")) for r in records for x in r.get("runs") or []
              if x.get("wall_s") is not None and x.get("time_limit")]
    if not points:
        return None
    cases = list(dict.fromkeys(c for c, _, _ in points))
    fig, ax = charts.pyplot().subplots(figsize=(max(6, 0.4 * len(cases) + 2), 3.5))
    for verdict in VERDICTS:
        mine = [(cases.index(c), share) for c, share, v in points if v == verdict]
        if mine:
            ax.scatter(*zip(*mine), s=12, label=verdict, color=COLOURS[verdict])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(cases)), cases, rotation=90, fontsize=8)
    ax.set_ylabel("time / limit")
    ax.set_title("Each program's time against the case's limit")
    ax.legend(fontsize=8)
    return charts.save(fig, folder / "plots" / "time-vs-limit.png", [r for x in records for r in x.get("runs") or []])

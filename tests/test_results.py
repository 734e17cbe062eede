"""The shipped results (docs/results/, scripts/make_results.py): every file there is one that
`make results` makes, every file the docs cite exists, the records name the commit they were
made from, and the ladder and kernels they show are the ones the code has now."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, fa
from fa_cli.commands import main
from fa_cli.programs import registry
from fa_cli.report import records

RESULTS = ROOT / "docs" / "results"
# The pages a reader follows (docs/history/ keeps dated write-ups as they were, with their own links).
PAGES = [ROOT / "README.md", ROOT / "src_hip" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted(RESULTS.rglob("*.md"))]


def make_results():
    spec = importlib.util.spec_from_file_location("make_results", ROOT / "scripts" / "make_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def shipped_dirs() -> list[Path]:
    return sorted(p for p in RESULTS.iterdir() if p.is_dir())


def cited(page: Path) -> list[tuple[str, Path]]:
    """Result and history files a page names: markdown links (relative to the page) and paths
    written out from the repository's root (`docs/results/...`)."""
    text = page.read_text()
    found = [(m, page.parent / m) for m in re.findall(r"\]\(([^)#\s]+)\)", text)
             if not re.match(r"[a-z]+:", m) and ("results" in m or "history" in m)]
    found += [(m, ROOT / m) for m in re.findall(r"\b(docs/(?:results|history)/[\w./-]*\w)", text)]
    return found


def test_the_docs_cite_only_files_that_exist():
    missing = [f"{page.relative_to(ROOT)}: {name}" for page in PAGES for name, path in cited(page)
               if not path.exists()]
    assert missing == []


def test_every_file_under_docs_results_is_made_by_make_results():
    """`make results` makes every file there again: none is left from an older run or written by hand."""
    mr = make_results()
    assert shipped_dirs(), "no results shipped"
    for folder in shipped_dirs():
        patterns = [p for part in mr.PARTS for p in mr.plan(part, folder)[0]]
        strays = [f.name for f in folder.iterdir() if not any(f.match(p) for p in patterns)]
        assert strays == [], f"{folder.relative_to(ROOT)}: not made by make results"
    assert [p for p in RESULTS.iterdir() if p.is_file()] == []


def test_every_command_of_make_results_is_one_fa_takes(tmp_path):
    """Each part's fa commands parse as fa's own (options and values checked by click, nothing run)."""
    mr = make_results()
    checked = 0
    for part in mr.PARTS:
        for step in mr.plan(part, tmp_path)[1]:
            if step.argv[1:3] != ["-m", "fa_cli"]:
                assert Path(step.argv[1]).is_file() or Path(ROOT / step.argv[0]).name.startswith("fa-"), step
                continue
            args = step.argv[3:]
            for arg in args:  # the records a later command reads, made by an earlier one
                if arg.endswith(".json"):
                    Path(arg).touch()
            command = main.get_command(None, args[0])
            assert command is not None, step
            command.make_context(args[0], list(args[1:]))
            checked += 1
    assert checked > 15


def test_make_results_dry_run_lists_each_part_without_a_gpu():
    proc = subprocess.run([sys.executable, "scripts/make_results.py", "--dry-run", "--dir", "docs/results/h200"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert [line.split(":")[1].split("->")[0].strip() for line in proc.stdout.splitlines()
            if line.startswith("== make results")] == ["bench", "judge", "floor", "report"]
    assert "-o docs/results/h200/bench.json" in proc.stdout


def test_the_summary_of_a_folder_outside_docs_goes_beside_its_files(tmp_path):
    """make results --dir elsewhere (a copy of the checkout on a GPU machine) writes its summary
    there and leaves docs/results.md as it is."""
    for name in ("run.json", "judge-cost.json", "dense-error.txt"):
        src = next(RESULTS.glob(f"*/{name}"), None)
        if src is None:
            pytest.skip(f"no {name} shipped under docs/results")
        (tmp_path / name).write_bytes(src.read_bytes())
    before = (ROOT / "docs" / "results.md").read_text()
    proc = subprocess.run([sys.executable, "scripts/make_results.py", "summary", "--dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (ROOT / "docs" / "results.md").read_text() == before
    text = (tmp_path / "summary.md").read_text()
    assert f"[dense-error.txt]({tmp_path}/dense-error.txt)" in text and "**The judge**" in text
    assert "Not made yet from this build: the parts bench, floor, report" in text


def test_every_shipped_record_names_its_commit():
    for folder in shipped_dirs():
        for path in folder.glob("*.json"):
            data = json.loads(path.read_text())
            revisions = [r.get("source") for r in data["records"]] if "records" in data else [data.get("source")]
            assert revisions and all(r and re.fullmatch(r"[0-9a-f]{40}", r.get("commit", "")) and
                                     isinstance(r.get("dirty"), bool) for r in revisions), path


def test_every_shipped_chart_names_its_commit():
    from PIL import Image

    for folder in shipped_dirs():
        for png in folder.glob("*.png"):
            assert re.fullmatch(r"made from commit [0-9a-f]{7}( \(dirty\))?", Image.open(png).info.get("Source", "")), png


def test_every_shipped_report_reads_in_80_columns():
    """The example reports make results ships: each table line at most 80 characters (fa
    report's markdown tables fit themselves), and only the marked places left for the student."""
    reports = [folder / "report.md" for folder in shipped_dirs() if (folder / "report.md").is_file()]
    assert reports
    for report in reports:
        text = report.read_text()
        wide = [line for line in text.splitlines() if line.startswith("|") and len(line) > 80]
        assert not wide, (report, wide[:3])
        assert "TODO" not in text.replace("**Yours to write (TODO):**", ""), report


def test_the_shipped_ladders_are_the_codes(listing_programs):
    shipped = [folder / "ladder.json" for folder in shipped_dirs() if (folder / "ladder.json").is_file()]
    if not shipped:
        pytest.skip("no ladder shipped under docs/results (make results' report part makes one)")
    for path in shipped:
        folder = path.parent
        runs = json.loads(path.read_text())["records"]
        for name, binary in listing_programs.items():
            shipped = [(r["step"], r["step_name"]) for r in runs if r["program"] == name]
            if shipped:
                code = [(r.rung.step, r.rung.label) for r in registry.ladder(registry.kernels_of(binary))]
                assert shipped == code, f"{folder.name}/ladder.json, {name}"


def test_the_shipped_kernels_are_the_codes(listing_programs):
    """Each `cuda-KERNEL` run of the shipped bench is a kernel fa-cuda has, by family or name."""
    if "cuda" not in listing_programs:
        pytest.skip("needs nvcc, to list fa-cuda's kernels")
    rows = registry.kernels_of(listing_programs["cuda"])
    known = {r.name for r in rows} | {r.family for r in rows}
    for folder in shipped_dirs():
        labels = {r["label"] for r in json.loads((folder / "bench.json").read_text())["records"] if r.get("label")}
        kernels = {label.removeprefix("cuda-") for label in labels if label.startswith("cuda-")}
        assert kernels and kernels <= known, kernels - known


def test_a_record_names_the_commit_of_this_checkout():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert records.source_revision()["commit"] == head.stdout.strip()


def test_a_copy_without_history_takes_the_written_revision(tmp_path):
    """Where the checkout has no .git (a GPU node that was sent the files), the commit comes
    from .source-revision, and fa says it came from there."""
    tree = tmp_path / "tree"
    (tree / "testcases").mkdir(parents=True)
    (tree / "Makefile").write_text("")
    (tree / "testcases" / "manifest.json").write_text("{}")
    (tree / ".source-revision").write_text('{"commit": "' + "a" * 40 + '", "dirty": false}')
    import shutil
    shutil.copytree(ROOT / "fa_cli", tree / "fa_cli", ignore=shutil.ignore_patterns("__pycache__"))
    code = "from fa_cli.report import records; print(records.source_revision())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tmp_path),
                               "PYTHONPATH": str(tree)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str({"commit": "a" * 40, "dirty": False, "from": ".source-revision"})


def test_a_chart_is_stamped_with_its_records_commit(tmp_path):
    from PIL import Image

    bench = tmp_path / "bench.json"
    proc = fa("bench", "--program", "cpu", "--shape", "2,64,32", "--repeat", "1", "-o", bench)
    assert proc.returncode == 0, proc.stderr
    proc = fa("compare", bench, "--plot", tmp_path / "bench.png")
    assert proc.returncode == 0, proc.stderr
    rev = records.source_revision()
    if "commit" in rev:
        assert Image.open(tmp_path / "bench.png").info["Source"].startswith(f"made from commit {rev['commit'][:7]}")

"""Every shell command of README.md and docs/*.md that runs without a GPU is run here, so none
can rot. Commands are the lines of ```sh blocks. A line whose comment says `(needs X)` is run
only where X is here (nvcc, hipcc; `X and Y` for both) and never for anything else a test cannot
have (an NVIDIA GPU, Slurm, PyPI, network); a block whose first line is such a comment is one
unit. Each block runs in bash, `set -e`, from the root of a copy of the checkout, with fa on PATH
and a HOME and FA_CACHE of its page's own (so `~/hw4` from one block is there for the next).
`make test` and `make test-all` are this suite itself, and are not run from here; `make run` runs
with the environment running the tests."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT
from test_layout import tracked_files

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NEEDS = re.compile(r"\(needs ([^)]*)\)")
TOOLS = {"nvcc", "hipcc"}  # needs a test can meet, where the tool is installed
SUITE_ITSELF = re.compile(r"^make (test|test-all)\b")
# make run and make env install into .venv: they run here with the environment running the tests
# (made by make env, linked as the copy's .venv), never into a new one; elsewhere they are left out.
MADE_ENV = Path(sys.prefix) / ".installed"
NEEDS_ENV = re.compile(r"^make (run|env)\b")


def blocks(text: str) -> list[list[str]]:
    """The ```sh blocks of a page, each its lines (continuations joined)."""
    found = []
    for body in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        found.append(body.replace("\\\n", " ").splitlines())
    return found


def unmet(line: str) -> list[str]:
    """What a line says it needs and this machine lacks."""
    missing = []
    for needs in NEEDS.findall(line):
        for need in (n.strip() for n in needs.split(" and ")):
            if need not in TOOLS or not shutil.which(need):
                missing.append(need)
    return missing


def runnable(block: list[str]) -> tuple[list[str], list[str]]:
    """The block's lines to run, and what the lines left out need."""
    lines = [line for line in block if line.strip()]
    if lines and lines[0].lstrip().startswith("#") and unmet(lines[0]):
        return [], unmet(lines[0])
    run, left = [], []
    for line in lines:
        if line.lstrip().startswith("#"):
            continue
        if unmet(line) or SUITE_ITSELF.match(line.strip()):
            left += unmet(line) or ["the test suite itself"]
            continue
        if NEEDS_ENV.match(line.strip()) and not MADE_ENV.exists():
            left.append("an environment made by make env")
            continue
        run.append(line)
    return run, left


@pytest.fixture(scope="module")
def checkout_copy(tmp_path_factory) -> Path:
    """The tracked files, copied: commands that write (make submission, reports) write there."""
    copy = tmp_path_factory.mktemp("checkout")
    for name in tracked_files():
        target = copy / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    if MADE_ENV.exists():
        (copy / ".venv").symlink_to(sys.prefix)
    return copy


def test_every_page_has_commands_and_marks_what_it_needs():
    """The convention holds: each `(needs X)` names something, and README's commands include
    at least one that runs here."""
    for page in PAGES:
        for block in blocks(page.read_text()):
            for line in block:
                for needs in NEEDS.findall(line):
                    assert needs.strip(), f"{page.name}: empty (needs) in {line!r}"
    readme = blocks((ROOT / "README.md").read_text())
    assert any(runnable(b)[0] for b in readme), "README.md has no command that runs without a GPU"


# Pages whose commands build GPU programs for several targets: half a minute and more on 2 cores.
SLOW_PAGES = {"submitting.md"}


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_PAGES else p
                                  for p in PAGES], ids=[p.name for p in PAGES])
def test_commands_run(page, checkout_copy, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(home),
           "FA_CACHE": str(tmp_path / "cache"), "LANG": os.environ.get("LANG", "C.UTF-8"),
           "TMPDIR": str(tmp_path)}
    ran = 0
    for block in blocks(page.read_text()):
        lines, _ = runnable(block)
        if not lines:
            continue
        script = "set -e\n" + "\n".join(lines) + "\n"
        proc = subprocess.run(["bash", "-c", script], cwd=checkout_copy, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"{page.name}:\n{script}\nexit {proc.returncode}\n{proc.stdout[-2000:]}\n" \
                                     f"{proc.stderr[-2000:]}"
        ran += len(lines)
    if not ran:
        pytest.skip(f"{page.name}: no command runs on this machine")


def test_readme_is_a_first_screen():
    """README: short, a contents line, a picture, the student's steps before any detail of the
    output promise; no claim the tools contradict."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    first_screen = "\n".join(text.splitlines()[:40])
    assert "**Contents:**" in first_screen and "![" in first_screen
    assert "O_TMPFILE" not in text and "SIGKILL" not in text
    image = re.search(r"!\[[^]]*\]\(([^)]+)\)", text).group(1)
    assert (ROOT / image).is_file()
    steps = re.findall(r"^\*\*(\d)\. ([^*]+)\*\*", text, re.M)
    assert [n for n, _ in steps] == ["1", "2", "3", "4", "5"], steps
    assert "No AMD GPU was available" in text and "hip_on_cuda.h" in text
    for link in re.findall(r"\]\((docs/[^)#]+)\)", text):
        assert (ROOT / link).is_file(), link
    for page in PAGES:
        assert "two PNG charts" not in page.read_text(), f"{page.name}: fa compare --plot writes one chart"


def test_the_settings_table_is_the_programs_own(cpu_program):
    """docs/settings.md's run-time rows for the programs name exactly the settings that
    `PROGRAM --settings` lists (src_common/host/settings.h, where each is read)."""
    listed = [line.split("\t")[0] for line in subprocess.run([str(cpu_program), "--settings"], capture_output=True,
                                                             text=True, check=True).stdout.splitlines()[1:]]
    documented = set()
    for line in (ROOT / "docs" / "settings.md").read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]  # a cell's own \| is no border
        if len(cells) > 2 and (name := re.match(r"`(FA_[A-Z0-9_]+)[=`]", cells[0])) and "-D" not in cells[1] \
                and cells[1] != "fa":
            documented.add(name.group(1))
    assert documented == set(listed)


def test_the_count_of_usual_mistakes_is_the_catalogues():
    """Where a page counts the catalogue ("one of 21 usual mistakes", "lists the 21 it knows"), the
    count is fa_cli/judge/mistakes.py's, so that adding a mistake cannot leave the pages behind."""
    from fa_cli.judge.mistakes import MISTAKES
    counted = []
    for page in dict.fromkeys([ROOT / "README.md", *PAGES]):  # each page once
        text = " ".join(page.read_text().split())
        counted += [(page.name, int(n)) for n in re.findall(r"\b(\d+) (?:usual mistakes|it knows)\b", text)]
    assert counted, "no page counts the usual mistakes"
    assert all(n == len(MISTAKES) for _, n in counted), (counted, len(MISTAKES))

"""docs/layout.md's Layout section (README links it) is true: it names every source file of fa_cli/ (its modules,
__init__.py and __main__.py included), scripts/ and the program folders, every top-level
folder, and no file that does not exist. Files are those git tracks (a checkout), else those
on disk."""
import re
import shutil
import subprocess

import pytest

from helpers import ROOT

# Folders whose every file the Layout names, and which of their files count.
CHECKED = {
    "fa_cli": "*.py",  # the modules, in its sub-packages too; starter/ is named as a folder
    "scripts": "**",
    "src_common": "**",
    "src_cpu": "**",
    "src_hip": "**",
    "src_cuda": "**",  # subfolders (ptx/, tensorcore/, wgmma/) included
}
FILE_NAME = re.compile(r"(?<![\w./-])(\w[\w./-]*\.(?:py|h|cuh|cu|hip|cpp|c|sh|mk|md|json|toml|txt|csv))(?![\w])")


def tracked_files() -> list[str]:
    """Paths relative to the checkout, '/'-separated."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        proc = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return [p for p in proc.stdout.splitlines() if (ROOT / p).is_file()]
    return [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
            if p.is_file() and not {".git", ".venv", "__pycache__", "bin", "build"} & set(p.relative_to(ROOT).parts)]


def layout_entries(readme: str) -> dict[str, str]:
    """The Layout section's entries: folder ('fa_cli') -> its text, continuation lines included."""
    match = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
    assert match, "docs/layout.md has no '## Layout' section"
    entries: dict[str, str] = {}
    folder = None
    for line in match.group(1).splitlines():
        head = re.match(r"^    (\.?[\w-]+)/\s+(.*)$", line)
        if head:
            folder = head.group(1)
            assert folder not in entries, f"Layout names {folder}/ twice"
            entries[folder] = head.group(2)
        elif folder and re.match(r"^     +\S", line):
            entries[folder] += " " + line.strip()
        elif line.strip():
            folder = None  # prose after the listing
    return entries


def files_in(files: list[str], folder: str, pattern: str) -> list[str]:
    inside = [f for f in files if f.startswith(folder + "/")]
    return inside if pattern == "**" else [f for f in inside if f.endswith(".py")]


def mentions(text: str, word: str) -> bool:
    return re.search(r"(?<![\w./-])" + re.escape(word) + r"(?![\w-])", text) is not None


def mentioned(text: str, path: str, folder: str) -> bool:
    """Named by its stem, its file name, its path in its folder or from the root."""
    name = path.rsplit("/", 1)[-1]
    stem = name.split(".")[0]
    return any(mentions(text, w) for w in {stem, name, path, path[len(folder) + 1:]})


@pytest.fixture(scope="module")
def layout() -> dict[str, str]:
    return layout_entries((ROOT / "docs" / "layout.md").read_text())


@pytest.fixture(scope="module")
def files() -> list[str]:
    return tracked_files()


@pytest.mark.parametrize("folder", CHECKED)
def test_layout_names_every_file(folder, layout, files):
    assert folder in layout, f"docs/layout.md's Layout has no {folder}/ entry"
    present = files_in(files, folder, CHECKED[folder])
    assert present, f"no files found in {folder}/"
    missing = [f for f in present if not mentioned(layout[folder], f, folder)]
    assert not missing, f"docs/layout.md's Layout does not name: {', '.join(missing)}"


def test_layout_names_every_top_level_folder(layout, files):
    folders = {f.split("/")[0] for f in files if "/" in f}
    assert not folders - set(layout), f"docs/layout.md's Layout does not name: {', '.join(sorted(folders - set(layout)))}"


def test_layout_names_no_file_that_does_not_exist(layout):
    """A file name in an entry is a file on disk: in that folder (at any depth) or a path from the root."""
    wrong = []
    for folder, text in layout.items():
        if not (ROOT / folder).is_dir():
            wrong.append(f"{folder}/")
            continue
        for name in FILE_NAME.findall(text):
            if not ((ROOT / name).is_file() or (ROOT / folder / name).is_file()
                    or any(p.is_file() for p in (ROOT / folder).rglob(name.rsplit("/", 1)[-1]))):
                wrong.append(f"{name} (in the {folder}/ entry)")
    assert not wrong, f"docs/layout.md's Layout names what does not exist: {', '.join(wrong)}"


def test_the_checks_catch_a_wrong_layout():
    readme = ("## Layout\n\n    fa_cli/      judging: format.py, verify\n                 more: cli.py\n"
              "    src_cpu/     the CPU program\n\n## Next\n")
    entries = layout_entries(readme)
    assert entries == {"fa_cli": "judging: format.py, verify more: cli.py", "src_cpu": "the CPU program"}
    assert mentioned(entries["fa_cli"], "fa_cli/verify.py", "fa_cli")
    assert mentioned(entries["fa_cli"], "fa_cli/cli.py", "fa_cli")
    assert not mentioned(entries["fa_cli"], "fa_cli/judge.py", "fa_cli")
    assert not mentioned(entries["src_cpu"], "src_cpu/fa_cpu.cpp", "src_cpu")
    assert not mentioned("kernel_wgmma_v2.cuh", "src_cuda/kernel_wgmma.cuh", "src_cuda")
    assert FILE_NAME.findall("x (kernels.md, a/b.py) and python -m fa_cli") == ["kernels.md", "a/b.py"]
    assert files_in(["fa_cli/a.py", "fa_cli/starter/hw4.cu", "fa_cli/b.txt", "fa_cli/c/d.py"], "fa_cli", "*.py") == \
        ["fa_cli/a.py", "fa_cli/c/d.py"]
    nested = ["src_cuda/ptx/k.ptx", "src_cuda/a.cu"]
    assert files_in(nested, "src_cuda", "**") == nested

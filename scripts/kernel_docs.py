"""docs/kernels.md: the kernels' measurements, each section written by the script that measures it.

A section lies between `<!-- measured: NAME -->` and `<!-- end: NAME -->`. A script replaces its
own section's body, which opens with the date, the device and the command that produced it, so
a figure never outlives the record of where it came from. Sections a script has not written yet
are appended at the end.
"""
import datetime
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "kernels.md"


def nvidia_device() -> str:
    """The first NVIDIA GPU, its driver and CUDA compiler, as one line (or 'no NVIDIA GPU')."""
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout.splitlines()[0]
        name, driver = (x.strip() for x in gpu.split(","))
        gpu = f"{name}, driver {driver}"
    except (OSError, subprocess.CalledProcessError, IndexError, ValueError):
        gpu = "no NVIDIA GPU"
    try:
        nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=True).stdout
        release = re.search(r"release ([0-9.]+)", nvcc)
        return f"{gpu}, nvcc {release.group(1)}" if release else gpu
    except (OSError, subprocess.CalledProcessError):
        return gpu


def command_line() -> str:
    """How this script was started, as a command to run from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return shlex.join(["python3", str(script), *sys.argv[1:]])


def replace_section(text: str, name: str, body: str) -> str:
    """`text` with section `name`'s body replaced by `body` (the section appended if missing)."""
    begin, end = f"<!-- measured: {name} -->", f"<!-- end: {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    return text.rstrip("\n") + "\n\n" + block + "\n"


def write_section(name: str, body: str, device: str, doc: Path = DOC) -> None:
    """Record `body` as section `name` of the kernels' notes, stamped with date, device, command."""
    stamp = f"_Measured {datetime.date.today().isoformat()} on {device}: `{command_line()}`_\n\n"
    text = doc.read_text() if doc.exists() else "# Kernel measurements\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    tmp = doc.with_suffix(".tmp")
    tmp.write_text(replace_section(text, name, stamp + body))
    tmp.replace(doc)
    # on stderr: a script's stdout is its record (make results keeps dense_error.py's as dense-error.txt)
    print(f"wrote section '{name}' of {doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc}", file=sys.stderr)

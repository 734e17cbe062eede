"""fa as a student has it: the wheel installed into a fresh virtual environment and used from a
directory of their own, far from the checkout, with a home (and so a cache) of its own.
Marked `wheel`: it builds the wheel and installs it and its dependencies from PyPI."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT, verdicts
from fa_cli.cases import suite

pytestmark = [pytest.mark.wheel, pytest.mark.slow]


@pytest.fixture(scope="module")
def student(tmp_path_factory, cpu_program):
    """The installed fa, a home, a working directory and the student's own hw4 (our CPU program)."""
    base = tmp_path_factory.mktemp("student")
    dist, venv, home, work = base / "dist", base / "venv", base / "home", base / "work"
    for d in (home, work):
        d.mkdir()
    # The wheel is built from a copy: building in place would leave build/ in the checkout.
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "bin", "build", "submission",
                                                                  "*.egg-info", "__pycache__", ".*"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)],
                   check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    (wheel,) = dist.glob("fa_toolkit-*.whl")
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], check=True, capture_output=True)
    hw4 = work / "hw4"
    shutil.copy(cpu_program, hw4)
    env = {"PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(base)}
    return {"venv": venv, "home": home, "work": work, "hw4": hw4, "env": env,
            "cache": home / ".cache" / "fa"}


def fa(student, *args, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    """The installed `fa` on the student's PATH, run in their working directory."""
    proc = subprocess.run(["fa", *map(str, args)], capture_output=True, text=True, env=student["env"],
                          cwd=student["work"])
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def test_runs_from_the_installed_package(student):
    where = subprocess.run([str(student["venv"] / "bin" / "python"), "-c",
                            "import fa_cli.locations as l; print(l.checkout(), l.PACKAGE)"],
                           capture_output=True, text=True, env=student["env"], cwd=student["work"], check=True)
    checkout, package = where.stdout.split()
    assert checkout == "None" and "site-packages" in package
    assert fa(student, "--version").stdout.strip() == "fa, version 0.2.0"


def test_gen_shipped_and_generated_cases(student):
    proc = fa(student, "gen", "--suite", "t03")
    assert "t03.in: B=4, N=256, d=32" in proc.stdout and "site-packages" in proc.stdout
    proc = fa(student, "gen", "--suite", "t13")
    path = student["cache"] / "t13.in"
    assert f"{path}:" in proc.stdout and suite.sha256_of(path) == suite.case("t13").sha256


def test_judge_own_program(student):
    """A shipped case (against its expected output) and one generated on demand (against float64)."""
    proc = fa(student, "run", "t03", "t12", "--program", student["hw4"])
    assert verdicts(proc.stdout) == ["PASS"] * 2
    assert "fa: inputs: 1 input generated one at a time into " in proc.stderr  # into TMPDIR, deleted at the end
    assert not (student["cache"] / "t12.in").exists() and len(list(student["cache"].glob("expected/*.out"))) >= 1
    assert sorted(p.name for p in student["work"].iterdir()) == ["hw4"]


def test_the_wheel_ships_every_source_of_the_programs(student):
    """Every file the programs' builds read (Makefile, src_*/, their sub-folders) is in the
    installed package, so that `make cuda` or `make hip` there builds what a checkout builds."""
    where = subprocess.run([str(student["venv"] / "bin" / "python"), "-c",
                            "import fa_cli.locations as l; print(l.package_data('sources'))"],
                           capture_output=True, text=True, env=student["env"], cwd=student["work"], check=True)
    shipped = Path(where.stdout.strip())
    wanted = {p.relative_to(ROOT) for part in ("src_common", "src_cpu", "src_cuda", "src_hip")
              for p in (ROOT / part).rglob("*") if p.is_file() and p.suffix in (".h", ".cuh", ".cu", ".hip", ".cpp")}
    assert wanted and {p for p in wanted if not (shipped / p).is_file()} == set()
    fitted = subprocess.run([str(student["venv"] / "bin" / "python"), "-c",
                             "from fa_cli.measure import judge_column; print(judge_column.calibration() is not None)"],
                            capture_output=True, text=True, env=student["env"], cwd=student["work"], check=True)
    assert fitted.stdout.strip() == "True"  # the GTX 1080 estimate's fit ships too


def test_named_program_built_from_shipped_sources(student):
    proc = fa(student, "run", "t01", "--program", "cpu")
    assert "PASS" in proc.stdout and "building cpu in " in proc.stderr
    (binary,) = student["cache"].glob("build/*/bin/fa-cpu")
    assert (binary.parent.parent / "src_cpu" / "fa_cpu.cpp").is_file()
    again = fa(student, "run", "t02", "--program", "cpu")  # built once
    assert "PASS" in again.stdout and "building" not in again.stderr


def test_verify_bench_compare(student):
    work = student["work"]
    fa(student, "gen", "-B", 3, "-N", 200, "-d", 64, "--seed", 4, "-o", "x.in")
    subprocess.run([str(student["hw4"]), "x.in", "x.out"], cwd=work, check=True)
    assert fa(student, "verify", "x.out", "--input", "x.in", "--tol", "1e-4").stdout.startswith("PASS")
    fa(student, "bench", "--program", student["hw4"], "--suite", "t01,t03", "--shape", "2,128,64", "--repeat", 1,
       "-o", "r.json")
    records = json.loads((work / "r.json").read_text())["records"]
    assert [r["input"] for r in records] == ["t01", "t03", "2x128x64"] and all(r["passed"] for r in records)
    proc = fa(student, "compare", "r.json", "--markdown", "--plot", "c.png")
    table = [line.split(" | ")[:2] for line in proc.stdout.splitlines() if line.startswith("|")]
    assert table[2:] == [["| t01 (2x128x32)", "hw4"], ["| t03 (4x256x32)", "hw4"], ["| 2x128x64", "hw4"]]
    assert sorted(p.name for p in work.iterdir()) == ["c.png", "hw4", "r.json", "x.in", "x.out"]


def test_run_all_generates_every_case(student, tmp_path):
    """fa run --all --keep-inputs from the installed package: every case t11..t30 generated on
    demand into the cache (7.2 GB) and checked against the manifest's sha256. The program answers zeros at once (a real one
    would take hours on this CPU): every case is then judged WRONG, which is what this checks."""
    free = shutil.disk_usage(student["home"]).free
    if free < 12 << 30:
        pytest.skip(f"needs 12 GB of free disk for the whole suite, {free >> 30} GB here")
    zeros = tmp_path / "zeros"
    zeros.write_text(f"#!{student['venv'] / 'bin' / 'python'}\nimport sys, numpy as np\n"
                     "B, N, d = np.fromfile(sys.argv[1], '<i4', 3)\n"
                     "np.zeros(int(B) * int(N) * int(d), '<f4').tofile(sys.argv[2])\n")
    zeros.chmod(0o755)
    there = {p.name for p in student["cache"].glob("t*.in")}  # earlier tests generated a few
    try:
        # --sample: this is about the inputs; every value of the 30 outputs would first cost 21.5 TFLOP
        # of float64 here
        proc = fa(student, "run", "--all", "--program", zeros, "--sample", "2", "--keep-inputs", check_rc=1)
        rows = [l for l in proc.stdout.splitlines() if l.startswith("│ t")]
        assert len(rows) == 30 and all("WRONG" in row for row in rows), proc.stdout
        for c in suite.cases().values():
            if not c.shipped:
                path = student["cache"] / f"{c.name}.in"
                assert path.stat().st_size == c.shape.input_bytes, c.name
                assert (f"generated {c.name} " in proc.stderr) == (path.name not in there), c.name
    finally:
        for path in student["cache"].glob("t*.in"):
            path.unlink()

"""fa bench and fa compare run directly (no launcher): records, safety of the results file, charts."""
import json
import os
import stat
import sys

import pytest

from helpers import fa
from fa_cli.measure import bench, compare
from fa_cli.report.records import load


def test_bench_records_and_extends(cpu_program, tmp_path):
    out = tmp_path / "r.json"
    proc = fa("bench", "--program", "cpu", "--suite", "t01,t02", "--shape", "3,70,64", "--repeat", 2,
              "-o", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads(out.read_text())["records"]
    assert [r["input"] for r in records] == ["t01", "t02", "3x70x64"]
    for r in records:
        assert r["passed"] and r["max_err"] < 1e-4 and r["repeats"] == 2 and len(r["wall_s"]["all"]) == 2
        assert r["wall_s"]["min"] <= r["wall_s"]["median"] <= r["wall_s"]["max"]
        assert r["build"] == {"impl": "cpu", "arch": "cpu", "device": "host_CPU"} and r["device"] == "host CPU"
        assert r["flops"] == 4 * r["shape"]["B"] * r["shape"]["N"] ** 2 * r["shape"]["d"]
        assert r["tflops_kernel"] > 0 and "bench" in r["command"] and r["date"]
    # A second run extends the file instead of replacing it.
    assert fa("bench", "--program", "cpu", "--suite", "t03", "--repeat", 1, "-o", out, cwd=tmp_path).returncode == 0
    assert [r["input"] for r in json.loads(out.read_text())["records"]][-1] == "t03"


def test_failing_program_is_recorded_not_fatal(tmp_path):
    broken = tmp_path / "broken"
    broken.write_text(f"#!{sys.executable}\nimport sys\nprint('broken: error: nope', file=sys.stderr)\nsys.exit(1)\n")
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "r.json"
    proc = fa("bench", "--program", broken, "--program", "cpu", "--suite", "t01", "--repeat", 1, "-o", out, cwd=tmp_path)
    assert proc.returncode == 1
    records = json.loads(out.read_text())["records"]
    assert records[0]["error"] == "broken: error: nope" and records[1]["passed"]


def test_each_round_starts_one_program_later():
    assert [bench.order_of(r, 2) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    rounds = [bench.order_of(r, 3) for r in range(3)]
    assert rounds == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    assert sorted(r[0] for r in rounds) == [0, 1, 2]  # each program first once


def test_median_interval_is_the_order_statistics_of_the_binomial():
    """n = 10: P(X <= 1) = 11/1024 <= 0.025 < P(X <= 2) = 56/1024, so x(2) and x(9); n = 5: the
    whole range (k cannot be below 1); n = 60: x(22) and x(39) (P(X <= 21) = 0.0136, P(X <= 22)
    = 0.0259), as a table of the binomial gives them."""
    values = [float(v) for v in range(10, 0, -1)]  # 10 .. 1, unsorted on purpose
    assert bench.median_interval(values) == (2.0, 9.0)
    assert bench.median_interval([5.0, 1.0, 3.0, 2.0, 4.0]) == (1.0, 5.0)
    assert bench.median_interval([float(v) for v in range(1, 61)]) == (22.0, 39.0)
    assert bench.uncertainty([1.0, 2.0, 3.0, 4.0, 5.0]) == (5.0 - 1.0) / 2 / 3.0


def test_rounds_go_on_until_every_median_is_known_within_the_precision():
    plan = bench.BenchPlan([], [], repeats=None, precision=0.02)
    tight, loose = [1.0, 1.01, 0.99, 1.0, 1.005], [1.0, 1.2, 0.8, 1.1, 0.9]
    assert not bench.enough_rounds(plan, [tight[:4]], [None], 4)  # fewer than MIN_ROUNDS
    assert bench.enough_rounds(plan, [tight], [None], 5)
    assert not bench.enough_rounds(plan, [tight, loose], [None, None], 5)  # every program must be known
    assert bench.enough_rounds(plan, [tight, loose], [None, "failed"], 5)  # a failed one does not count
    assert bench.enough_rounds(plan, [loose * 12], [None], bench.MAX_ROUNDS)  # the cap
    assert bench.enough_rounds(plan, [[], []], ["failed", "failed"], 1)
    fixed = bench.BenchPlan([], [], repeats=3)
    assert not bench.enough_rounds(fixed, [tight[:2]], [None], 2) and bench.enough_rounds(fixed, [tight[:3]], [None], 3)


def test_without_repeat_the_bench_runs_until_the_median_is_known(cpu_program, tmp_path):
    out = tmp_path / "r.json"
    proc = fa("bench", "--program", "cpu", "--suite", "t01", "--precision", "0.05", "-o", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (r,) = json.loads(out.read_text())["records"]
    walls = r["wall_s"]["all"]
    assert bench.MIN_ROUNDS <= r["repeats"] == len(walls) <= bench.MAX_ROUNDS
    assert r["wall_s"]["ci95"] == list(bench.median_interval(walls))
    assert bench.uncertainty(walls) <= 0.05 or r["repeats"] == bench.MAX_ROUNDS
    if r["repeats"] > bench.MIN_ROUNDS:  # it stopped at the first round that was enough
        assert bench.uncertainty(walls[:-1]) > 0.05


def logging_program(tmp_path, name, log):
    """A program that notes its run in `log`, then runs the CPU program (a correct output)."""
    from fa_cli.programs import programs
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho {name} >> {log}\nexec {programs.named('cpu').path} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_programs_take_turns_and_inputs_are_flushed(cpu_program, tmp_path, monkeypatch):
    """A B, B A, ... per input (warm-up round included), never A A ... B B; each input fsynced once
    before its first run."""
    from fa_cli.judge import verdict
    from fa_cli.programs import programs
    log = tmp_path / "runs.log"
    a, b = (logging_program(tmp_path, n, log) for n in ("A", "B"))
    synced = []
    real_fsync = bench.os.fsync
    monkeypatch.setattr(bench.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    plan = bench.BenchPlan([programs.resolve(str(a)), programs.resolve(str(b))],
                           [verdict.target_for("t01"), verdict.target_for("t02")], repeats=3)
    records = bench.run_bench(plan, tmp_path / "r.json")
    assert log.read_text().split() == ["A", "B", "B", "A", "A", "B", "B", "A"] * 2
    assert len(synced) == 2
    assert all(r["passed"] and r["repeats"] == 3 and not r.get("control") for r in records)


def test_every_run_starts_without_an_old_output_and_after_a_sync(cpu_program, tmp_path, monkeypatch):
    """No run pays for removing the previous run's output or competes with its write-back."""
    from fa_cli.judge import verdict
    from fa_cli.programs import programs
    log = tmp_path / "existed.log"
    program = tmp_path / "P"
    program.write_text(f"#!/bin/sh\n[ -e \"$2\" ] && echo existed >> {log} || echo fresh >> {log}\n"
                       f"exec {programs.named('cpu').path} \"$@\"\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    syncs = []
    real_sync = bench.os.sync
    monkeypatch.setattr(bench.os, "sync", lambda: (syncs.append(1), real_sync()))
    plan = bench.BenchPlan([programs.resolve(str(program))], [verdict.target_for("t01")], repeats=3)
    records = bench.run_bench(plan, tmp_path / "r.json")
    assert log.read_text().split() == ["fresh"] * 4  # warm-up and three timed runs
    assert len(syncs) == 4
    assert records[0]["passed"]  # the last run's output is still there to verify


def test_a_program_given_twice_is_an_a_a_control_row(cpu_program, tmp_path):
    out = tmp_path / "r.json"
    proc = fa("bench", "--program", "cpu", "--control", "--suite", "t01", "--repeat", 2, "-o", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, control = json.loads(out.read_text())["records"]
    assert first["program"] == control["program"] == "cpu" and control["control"] and not first.get("control")
    assert "cpu (A/A)" in proc.stdout
    ratio = control["wall_s"]["median"] / first["wall_s"]["median"]
    assert f"A/A control cpu on t01: whole process {control['wall_s']['median']:.3f} s" in proc.stdout
    assert f"ratio {ratio:.3f} (2 runs each; medians known within" in proc.stdout
    fa("bench", "--program", "cpu", "--program", "cpu", "--suite", "t01", "--repeat", 1, "-o",
              tmp_path / "s.json", cwd=tmp_path)
    assert [r.get("control", False) for r in json.loads((tmp_path / "s.json").read_text())["records"]] == [False, True]


def test_two_builds_of_one_name_keep_their_own_rows(cpu_program, tmp_path):
    """bin/fa-cpu of two trees (a build before a change and after it): each named by its folder,
    in the table and in the records fa compare reads."""
    for tree in ("before", "after"):
        (tmp_path / tree / "bin").mkdir(parents=True)
        (tmp_path / tree / "bin" / "fa-cpu").write_bytes(cpu_program.read_bytes())
        (tmp_path / tree / "bin" / "fa-cpu").chmod(0o755)
    out = tmp_path / "r.json"
    proc = fa("bench", "--control", "--program", "before/bin/fa-cpu", "--program", "after/bin/fa-cpu",
              "--suite", "t01", "--repeat", 1, "-o", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads(out.read_text())["records"]
    assert [(r["program"], r.get("control", False)) for r in records] == [
        ("before/bin/fa-cpu", False), ("before/bin/fa-cpu", True), ("after/bin/fa-cpu", False)]
    assert "before/bin/fa-cpu (A/A)" in proc.stdout and "after/bin/fa-cpu" in proc.stdout


def test_distinct_names_go_back_as_far_as_the_paths_differ():
    from pathlib import Path
    from fa_cli.programs.programs import Program
    progs = [Program("fa-cuda", Path("/x/a/bin/fa-cuda")), Program("fa-cuda", Path("/y/a/bin/fa-cuda")),
             Program("fa-cuda", Path("/x/a/bin/fa-cuda")), Program("cuda", Path("/r/bin/fa-cuda"), "cuda")]
    assert [p.name for p in bench.distinct_names(progs)] == ["x/a/bin/fa-cuda", "y/a/bin/fa-cuda",
                                                             "x/a/bin/fa-cuda", "cuda"]
    # paths of different depths: the shorter one whole once its parts run out
    deep = [Program("fa", Path("/x/fa")), Program("fa", Path("/y/x/fa"))]
    assert [p.name for p in bench.distinct_names(deep)] == ["/x/fa", "y/x/fa"]


def test_results_saved_after_each_record(cpu_program, tmp_path, monkeypatch):
    """A crash after the first measurement leaves that measurement in the file."""
    from fa_cli.judge import verdict
    from fa_cli.programs import programs

    calls = []
    real = bench.measure_side_by_side

    def measure_then_crash(plan, programs_, target, workdir, controls, outlook=None):
        if calls:
            raise KeyboardInterrupt
        calls.append(target.name)
        return real(plan, programs_, target, workdir, controls, outlook)

    monkeypatch.setattr(bench, "measure_side_by_side", measure_then_crash)
    plan = bench.BenchPlan([programs.named("cpu")], [verdict.target_for("t01"), verdict.target_for("t02")], repeats=1)
    out = tmp_path / "r.json"
    try:
        bench.run_bench(plan, out)
    except KeyboardInterrupt:
        pass
    assert [r["input"] for r in load(out)] == ["t01"]


def test_not_a_results_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    proc = fa("compare", bad, cwd=tmp_path)
    assert proc.returncode == 2 and "not a results file of fa" in proc.stderr


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_compare_markdown_and_charts(cpu_program, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for path, label in ((a, "first"), (b, "second")):
        assert fa("bench", "--program", "cpu", "--shape", "2,128,32", "--shape", "2,256,64", "--repeat", 1,
                  "--label", label, "-o", path, cwd=tmp_path).returncode == 0
    records = load(a) + load(b)
    header, rows = compare.rows(records)
    assert header[1] == "first on host CPU time s" and header[-1] == "speedup second vs first"
    base, other = records[0]["wall_s"]["median"], records[2]["wall_s"]["median"]
    assert rows[0][-1] == f"{base / other:.2f}x"
    proc = fa("compare", a, b, "--markdown", "--wide", cwd=tmp_path)  # the same table for a report
    assert proc.returncode == 0 and proc.stdout.startswith("| input | first on host CPU time s |")
    assert proc.stdout.splitlines()[2].endswith(f" | {rows[0][-1]} |")
    proc = fa("compare", a, b, "--markdown", "--plot", tmp_path / "c.png", cwd=tmp_path)  # a row per run, 80 columns
    table = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    assert proc.returncode == 0 and proc.stdout.startswith("Whole-process medians on host CPU; the speed-up is over "
                                                           "first:\n")
    assert table[0] == "| input | run | time s | kernel TFLOP/s | max err | speed-up |"
    assert table[3].startswith("| 2x128x32 | second |") and table[3].endswith(f" | {rows[0][-1]} |")
    assert max(map(len, table)) <= 80
    assert proc.stdout.rstrip().endswith(f"wrote {tmp_path / 'c.png'}")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the file asked for, nothing beside it
    assert not list(tmp_path.glob("c-*.png"))


def test_bench_takes_case_names_as_fa_run_does_and_names_its_default_output(cpu_program, tmp_path):
    """`fa bench t01 t05 --program cpu` alone: the cases positional, the records in ./bench.json,
    said so; words left over and no case at all are fa's one-line errors."""
    proc = fa("bench", "t01", "t05", "--program", "cpu", "--repeat", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("2 records added to bench.json")
    said = " ".join(proc.stdout.split())
    assert "max err: of 32 rows/batch, sampled against float64 (a benchmark checks a sample; fa run compares every " \
        "value, so its max err can be larger)" in said
    assert sorted(r["input"] for r in load(tmp_path / "bench.json")) == ["t01", "t05"]
    proc = fa("bench", "--program", "cpu", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("fa: error: name cases (t01 c05 x.in), or give --all [--suite c]")


def test_a_cpu_programs_bench_says_what_it_will_take_and_keeps_no_input(tmp_path, cpu_program):
    """fa bench of the CPU program on a generated case: the input is made in TMPDIR and removed,
    nothing is left in the cache but what --keep-inputs asks for."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache"), "TMPDIR": str(scratch)}
    proc = fa("bench", "c01", "--program", "cpu", "--repeat", "1", "-o", tmp_path / "b.json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "removed at the end (--keep-inputs keeps it in the cache)" in proc.stderr
    assert not list((tmp_path / "cache").rglob("*.in")) and not list(scratch.iterdir())
    proc = fa("bench", "c01", "--program", "cpu", "--repeat", "1", "--keep-inputs", "-o", tmp_path / "b.json",
              env=env, cwd=tmp_path)
    assert proc.returncode == 0 and (tmp_path / "cache" / "c01.in").is_file(), proc.stderr


def test_the_outlook_of_a_cpu_program_on_a_large_input():
    """Said before the first run where an input is large, and after a long warm-up: the runs left
    and their minutes; left() counts what remains."""
    from fa_cli.measure import bench
    from fa_cli.cases import suite
    from fa_cli.programs import programs

    said = []
    cpu = programs.named("cpu")
    c21 = suite.case("c21")
    target = suite.Target(c21.name, c21.input_path, c21.shape, c21.time_limit)
    outlook = bench.BenchOutlook([cpu], [target], None, said.append)
    assert "runs on the CPU" in outlook.up_front() and outlook.left() is None
    outlook.warmed(cpu, target, 60.0, None)
    assert said == ["cpu on c21: the warm-up run took 60.0 s on the CPU; 5 more at least for its median: about 5.0 "
                    "min more (--repeat 1 for one)"]
    assert outlook.left() == 300.0
    outlook.timed(cpu, 61.0)
    assert outlook.left() == 239.0  # counts down as the timed runs go
    small = suite.case("c01")
    assert bench.BenchOutlook([cpu], [suite.Target("c01", small.input_path, small.shape, 2)], None, said.append
                              ).up_front() is None


def test_bench_inputs_that_do_not_fit_in_tmpdir_are_refused_before_any_is_made(tmp_path, monkeypatch):
    """fa bench makes all its inputs before its first run: where TMPDIR has not the room for all of
    them, one line says so, before any is generated."""
    import pytest as _pytest

    from fa_cli.commands import shared
    from fa_cli.errors import FaError

    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(shared.ready, "free_bytes", lambda folder: 100 << 20)
    shared.check_room_for_inputs(["c01", "c02"], [], tmp_path / "scratch")  # 40 MB: fits
    with _pytest.raises(FaError, match=r"for the inputs this command generates: needs 1\.3 GB \(1297\d+ bytes\), "
                                       r"only 0\.105 GB free"):
        shared.check_room_for_inputs(["c11", "c13"], [], tmp_path / "scratch")

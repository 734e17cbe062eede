"""fa_cli/judge/race_check.py, without a GPU: the passing build's three tools read through a
stand-in compute-sanitizer that writes a given log, so that what fa says of each log is checked
(the GPU runs are in test_probes_gpu.py)."""
import os

import pytest

from fa_cli.judge import race_check
from fa_cli.judge.findings import Kind
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

from test_tool_logs import RACECHECK_LOG

NO_CUDA_LOG = """========= COMPUTE-SANITIZER
========= Error: Target application terminated before first instrumented API call
========= Tool execution finished with errors
"""


@pytest.fixture
def sanitizer_saying(tmp_path, monkeypatch):
    """A stand-in compute-sanitizer on PATH that writes the log given to it (for every tool) and
    counts its calls."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "compute-sanitizer").write_text(
        "#!/bin/sh\nfor a in \"$@\"; do input=$last; last=$a; done\n"  # PROGRAM INPUT OUTPUT last
        "echo \"$2 $(basename \"$input\")\" >> \"$(dirname \"$0\")/calls\"\n"  # --tool TOOL first
        "while [ \"$1\" != --log-file ]; do shift; done; cp \"$(dirname \"$0\")/log.txt\" \"$2\"\n")
    (tools / "compute-sanitizer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")

    def saying(log: str):
        (tools / "log.txt").write_text(log)
        (tools / "calls").unlink(missing_ok=True)
        return lambda: len((tools / "calls").read_text().splitlines())
    return saying


def checked(tmp_path, name: str):
    binary = tmp_path / name
    binary.write_bytes(name.encode())  # its bytes name its kept verdict
    return race_check.check(Program(name, binary), 32, None, tmp_path, lambda line: None, Budget(60))


def test_a_program_that_makes_no_cuda_call_is_said_to_be_unchecked_never_warned(tmp_path, sanitizer_saying):
    """compute-sanitizer's 'Target application terminated before first instrumented API call' is
    the tool seeing no CUDA call (a program that computes on the host, or exits first): one line
    says nothing was checked, and no tool's warning is made of it."""
    calls = sanitizer_saying(NO_CUDA_LOG)
    found = checked(tmp_path, "host-only")
    assert [f.kind for f in found] == [Kind.MISSING_TOOL] and calls() == 4
    assert found[0].lines[0].startswith("race check: racecheck, synccheck on B=1, N=256, d=32 and initcheck, memcheck "
                                        "on B=2, N=256, d=32: checked nothing: the program made no CUDA call there")
    assert not race_check.cache_file(Program("host-only", tmp_path / "host-only"), 32).exists()  # checked again


def test_racecheck_and_synccheck_watch_one_batch_initcheck_and_memcheck_two(tmp_path, sanitizer_saying):
    """Shared memory and barriers are a block's own (one batch has every block's code); global
    memory past the first batch's place is touched only by a second batch."""
    sanitizer_saying("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    said, binary = [], tmp_path / "clean"
    binary.write_bytes(b"clean")  # its bytes name its kept verdict
    race_check.check(Program("clean", binary), 32, None, tmp_path, said.append, Budget(60))
    ran = sorted((tmp_path / "bin" / "calls").read_text().splitlines())
    assert ran == ["initcheck race-B=2, N=256, d=32.in", "memcheck race-B=2, N=256, d=32.in",
                   "racecheck race-B=1, N=256, d=32.in", "synccheck race-B=1, N=256, d=32.in"]
    assert said == ["race check: compute-sanitizer's racecheck, synccheck on B=1, N=256, d=32 and initcheck, "
                    "memcheck on B=2, N=256, d=32, side by side (once per build and d)"]


def test_a_hazard_is_a_warning_with_its_lines_and_kept(tmp_path, sanitizer_saying):
    calls = sanitizer_saying(RACECHECK_LOG)
    found = checked(tmp_path, "racy")
    assert calls() == 4 and found and all(f.kind == Kind.WARNING for f in found)
    assert found[0].lines[0].startswith("passes here, but racecheck reports a shared-memory race: a write at "
                                        "attention<(int)32>+0x1a0, hw4.cu:70")
    assert race_check.cache_file(Program("racy", tmp_path / "racy"), 32).exists()


def test_on_the_emulation_a_hazard_with_no_source_line_is_not_said_as_the_programs(tmp_path, sanitizer_saying,
                                                                                     monkeypatch):
    """A hw4.hip on the MI210 emulation: a hazard placed by kernel and offset alone may be the
    emulation's own exchange between a wavefront's two warps: said as unplaced, never a warning;
    one with the program's line stays a warning."""
    from fa_cli.programs import wave64
    monkeypatch.setattr(wave64, "emulated", lambda: True)
    monkeypatch.setattr(race_check, "with_lines", lambda program: program)  # the build is not what is tested here
    source = tmp_path / "hw4.hip"
    source.write_text("")
    unplaced = RACECHECK_LOG.replace(" in /home/s/hw4.cu:70", "").replace(" in /home/s/hw4.cu:80", "")
    sanitizer_saying(unplaced)
    binary = tmp_path / "emulated"
    binary.write_bytes(b"emulated")
    found = race_check.check(Program("hw4.hip", binary, source=source), 32, None, tmp_path, lambda line: None,
                             Budget(60))
    assert not any(f.kind == Kind.WARNING and "racecheck" in f.lines[0] for f in found), found
    said = next(f.lines[0] for f in found if f.lines[0].startswith("race check: racecheck reports"))
    assert "with no source line: not said as the program's" in said, said
    sanitizer_saying(RACECHECK_LOG.replace("hw4.cu", "hw4.hip"))
    binary.write_bytes(b"emulated, with lines")
    found = race_check.check(Program("hw4.hip", binary, source=source), 32, None, tmp_path, lambda line: None,
                             Budget(60))
    assert any(f.kind == Kind.WARNING and "hw4.hip:70" in f.lines[0] for f in found), found


def test_a_passing_build_is_checked_at_each_d_that_passed_until_one_reports(tmp_path, sanitizer_saying):
    """A race that needs d = 64's block to show: a build whose d = 32 and d = 64 cases passed is
    checked at both (the four tools at the first, racecheck at the second, each kept); a hazard at
    the first d ends the check there."""
    from types import SimpleNamespace
    from fa_cli.cases.format import Shape
    from fa_cli.judge.steps import Context
    results = [SimpleNamespace(verdict="PASS", target=SimpleNamespace(name=f"t{i}", shape=Shape(2, 128, d)))
               for i, d in enumerate((32, 32, 64))]

    def passing_build(name: str):
        binary = tmp_path / name
        binary.write_bytes(name.encode())
        program = Program(name, binary)
        ctx = Context(program, None, tmp_path, Budget(60), lambda line: None, 5e-3, None, "", results=results)
        return program, race_check.PassingBuild().run(ctx)
    calls = sanitizer_saying("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    program, found = passing_build("clean at both d")
    assert calls() == 5 and not any(f.kind == Kind.WARNING for f in found), found
    assert race_check.cache_file(program, 32).exists() and race_check.cache_file(program, 64, tools=("racecheck",)).exists()
    calls = sanitizer_saying(RACECHECK_LOG)
    program, found = passing_build("racy at d = 32")
    assert calls() == 4 and any(f.kind == Kind.WARNING and "d=32" in f.lines[0] for f in found)
    assert not race_check.cache_file(program, 64, tools=("racecheck",)).exists()
    results[2] = SimpleNamespace(verdict="PASS", target=SimpleNamespace(name="t2", shape=Shape(2, 200, 64)))
    calls = sanitizer_saying("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    program, found = passing_build("a partial tile at d = 64")  # memcheck joins racecheck there
    assert calls() == 6 and race_check.cache_file(program, 64, 200, ("racecheck", "memcheck")).exists()


def test_memcheck_runs_on_a_passing_cases_partial_tile_n_and_its_report_is_a_warning(tmp_path, sanitizer_saying):
    """memcheck of a passing build runs on RACE_N (the course's N are powers of 2, and a program may
    rely on that), or on the N of a passing case with a partial last tile (N = 200): rows stored
    past N into the next batch's place, or past the output's end, are reported there, as a warning
    that names that input and says the access left this output right."""
    from types import SimpleNamespace
    from fa_cli.cases.format import Shape
    from fa_cli.judge.steps import Context
    from test_tool_logs import MEMCHECK_LOG
    sanitizer_saying(MEMCHECK_LOG)
    found = checked(tmp_path, "stores past n")
    said = [f.lines[0] for f in found if f.kind == Kind.WARNING and "memcheck" in f.lines[0]]
    assert said and said[0].startswith("passes here, but memcheck reports an invalid memory access: Invalid "
                                       "__shared__ write of size 16 bytes"), found
    assert "on B=2, N=256, d=32; an access outside its buffers that left this output right" in said[0]
    results = [SimpleNamespace(verdict="PASS", target=SimpleNamespace(name=n, shape=Shape(1, N, 64)))
               for n, N in (("t02", 128), ("drawn", 200))]
    binary = tmp_path / "partial"
    binary.write_bytes(b"partial")
    ctx = Context(Program("partial", binary), None, tmp_path, Budget(60), lambda line: None, 5e-3, None, "",
                  results=results)
    found = race_check.PassingBuild().run(ctx)
    assert any("memcheck" in f.lines[0] and "on B=2, N=200, d=64" in f.lines[0] for f in found), found
    assert (tmp_path / "race-B=2, N=200, d=64.in").is_file()


def test_a_build_that_fails_other_cases_has_its_hazard_said_beside_those_failures(tmp_path, sanitizer_saying):
    """Where a case failed, the race check (run because another passed) does not say "passes here",
    nor that the access left the output right (its own run checks no output): "besides the cases it
    fails, memcheck reports ..."; the class table's warnings column takes that line too."""
    from types import SimpleNamespace
    from fa_cli.cases.format import Shape
    from fa_cli.classroom import table
    from fa_cli.judge.steps import Context
    from test_tool_logs import MEMCHECK_LOG
    sanitizer_saying(MEMCHECK_LOG)
    results = [SimpleNamespace(verdict=v, target=SimpleNamespace(name=n, shape=Shape(B, 256, 32)))
               for n, v, B in (("t01", "WRONG", 2), ("one", "PASS", 1))]
    binary = tmp_path / "fails"
    binary.write_bytes(b"fails")
    ctx = Context(Program("fails", binary), None, tmp_path, Budget(60), lambda line: None, 5e-3, None, "",
                  results=results)
    found = race_check.PassingBuild().run(ctx)  # the stand-in writes memcheck's log for every tool
    assert not any("passes here" in f.lines[0] for f in found), found
    said = [f.lines[0] for f in found if f.kind == Kind.WARNING and "memcheck reports" in f.lines[0]]
    assert said and said[0].startswith("besides the cases it fails, memcheck reports an invalid memory access"), said
    assert said[0].endswith("(2 in all) on B=2, N=256, d=32"), said
    assert table.row_of(dict(student="s", platform="cuda", cases=["t01"], words="x\n" + said[0]))["warnings"] == said[0]


def test_each_sanitizer_run_notes_its_wait_and_which_tools_finished(tmp_path, sanitizer_saying, monkeypatch):
    """Where fa class asks (FA_STEP_TIMES), a group of tools side by side writes one line: its tools,
    its wall seconds, the part spent waiting for a slot, and whether each tool finished."""
    from fa_cli.judge import step_times
    monkeypatch.setenv("FA_STEP_TIMES", str(tmp_path / "steps"))
    sanitizer_saying("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    checked(tmp_path, "timed")
    line, = step_times.read(tmp_path / "steps")
    assert line["what"] == "compute-sanitizer racecheck, synccheck, initcheck, memcheck"
    assert line["finished"] == dict(racecheck=True, synccheck=True, initcheck=True, memcheck=True)
    assert line["wall_s"] >= line["waited_s"] >= 0


def test_a_tool_stopped_after_its_first_report_says_it_stopped(tmp_path):
    """A report from a tool fa stopped at its limit has no count: the warning says the tool stopped,
    so that no one reads the missing count as a whole run's."""
    from fa_cli.cases.format import Shape
    from fa_cli.judge.tool_logs import SanitizerReport, first_sanitizer_error
    from test_tool_logs import MEMCHECK_LOG
    first = first_sanitizer_error(MEMCHECK_LOG)
    whole, = race_check.told(SanitizerReport("memcheck", first, 2, finished=True), Shape(2, 256, 32), 60.0)
    stopped, = race_check.told(SanitizerReport("memcheck", first, None, finished=False), Shape(2, 256, 32), 59.8737)
    assert "(2 in all)" in whole.lines[0] and "stopped" not in whole.lines[0]
    assert "(the tool stopped at fa's 60 s limit after it) on B=2, N=256, d=32" in stopped.lines[0]  # whole seconds


def test_a_grid_fixed_whatever_the_work_gets_racecheck_where_its_blocks_take_items_in_turn(tmp_path, sanitizer_saying):
    """set41's s05: persistent blocks, a grid of SMs x blocks an SM (160 in every case), items of 8 rows
    a block takes in turn: on racecheck's 1 x 256 every block has one item at most, and the race
    between one item's reads and the next item's writes never runs. The launch logs show the grid
    fixed while the work grows: racecheck runs again on 16 x 128 (256 items), kept apart."""
    from types import SimpleNamespace
    from fa_cli.cases.format import Shape
    from fa_cli.judge.steps import Context
    log = ("fa-launch: launches=1 untimed=0 ms=0.2 grid=160x1x1 block=256x1x1 smem=18560 regs=40 "
           "kernel=void attention_persist<32>(const float *, float *, int, int)\n")
    results = [SimpleNamespace(verdict="PASS", run=SimpleNamespace(stderr=log),
                               target=SimpleNamespace(name=name, shape=shape))
               for name, shape in (("t01", Shape(2, 128, 32)), ("t09", Shape(16, 128, 32)))]
    assert race_check.fixed_grid(results) == ("attention_persist", 160)
    binary = tmp_path / "persistent"
    binary.write_bytes(b"persistent")
    program = Program("persistent", binary)
    ctx = Context(program, None, tmp_path, Budget(60), lambda line: None, 5e-3, None, "", results=results)
    calls = sanitizer_saying("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    race_check.PassingBuild().run(ctx)
    assert calls() == 5 and race_check.cache_file(program, 32, tools=("racecheck",), race=(16, 128)).exists()
    grows = "fa-launch: launches=1 untimed=0 ms=0.2 grid={}x1x1 block=256x1x1 smem=0 regs=40 kernel=k\n"
    for r, blocks in zip(results, (32, 256)):  # a grid that grows with the work: no second racecheck
        r.run.stderr = grows.format(blocks)
    assert race_check.fixed_grid(results) is None

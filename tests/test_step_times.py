"""fa_cli/judge/step_times.py: each step's seconds written where FA_STEP_TIMES names a file, read
back whole lines only, and the longest said in words."""
import json
import time

from fa_cli.judge import step_times
from fa_cli.programs import gpu_turns


def test_nothing_is_written_where_no_file_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("FA_STEP_TIMES", raising=False)
    monkeypatch.chdir(tmp_path)
    step_times.note("a step", wall_s=1.0)
    assert list(tmp_path.iterdir()) == []


def test_a_timed_block_notes_its_wall_its_waits_and_what_its_budget_counted(tmp_path, monkeypatch):
    path = tmp_path / "steps"
    monkeypatch.setenv("FA_STEP_TIMES", str(path))
    monkeypatch.setattr(gpu_turns, "_waited", [0.0])
    used = iter([10.0, 10.5])
    with step_times.timed("the reruns", lambda: next(used), case="t05"):
        time.sleep(0.1)
        gpu_turns._waited[0] += 2.0  # a turn waited for inside the block
    line, = step_times.read(path)
    assert line["what"] == "the reruns" and line["case"] == "t05"
    assert line["wall_s"] >= 0.1 and line["waited_s"] == 2.0 and line["counted_s"] == 0.5


def test_a_line_cut_short_is_left_out_and_a_missing_file_reads_as_none(tmp_path):
    path = tmp_path / "steps"
    path.write_text(json.dumps(dict(what="a", wall_s=3.0, waited_s=0, counted_s=3.0)) + '\n{"what": "b", "wa')
    assert [line["what"] for line in step_times.read(path)] == ["a"]
    assert step_times.read(tmp_path / "none") == []


def test_the_longest_step_is_said_with_its_wait_and_a_sanitizer_run_is_not_a_step():
    lines = [dict(what="the reruns", wall_s=12.0, waited_s=0.2, counted_s=11.0),
             dict(what="compute-sanitizer initcheck", wall_s=90.0, waited_s=40.0, finished={"initcheck": False}),
             dict(what="the race check of a passing build", wall_s=120.4, waited_s=80.2, counted_s=30.0)]
    assert step_times.longest(lines) == "120 s in the race check of a passing build; 80 s of it waiting for the GPU"
    assert step_times.longest(lines[:1]) == "12 s in the reruns"
    assert step_times.longest([lines[1]]) == "" == step_times.longest([])
    assert step_times.longest([dict(what="quick", wall_s=0.4, waited_s=0, counted_s=0.4)]) == ""  # not worth a word


def test_an_unwritable_file_never_ends_a_search_and_lines_not_fas_are_left_out(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_STEP_TIMES", str(tmp_path / "no such folder" / "steps"))
    with step_times.timed("a step"):
        pass  # nothing raised: the note is dropped
    path = tmp_path / "steps"
    path.write_text('[1, 2]\n{"what": "x", "counted_s": 1}\n{"what": "y", "wall_s": 2, "waited_s": 0, "counted_s": 2}\n')
    assert [line["what"] for line in step_times.read(path)] == ["y"]

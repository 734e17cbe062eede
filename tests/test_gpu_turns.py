"""fa_cli/programs/gpu_turns.py: untimed runs share the GPU with one another, a timed run has it
alone and is not kept waiting by untimed runs that come after it; with no lock named, nothing is
taken."""
import threading
import time

from fa_cli.programs import gpu_turns


def holder(timed: bool, log: list, name: str, hold_s: float, started: threading.Event | None = None):
    def body():
        with gpu_turns.turn(timed):
            log.append((name, "in", time.monotonic()))
            if started:
                started.set()
            time.sleep(hold_s)
            log.append((name, "out", time.monotonic()))
    return threading.Thread(target=body)


def at(log, name, what):
    return next(t for n, w, t in log if n == name and w == what)


def test_untimed_turns_share_and_a_timed_turn_waits_for_them_and_goes_before_later_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_GPU_TURNS", str(tmp_path / "turns"))
    log = []
    first = threading.Event()
    readers = [holder(False, log, f"probe{i}", 0.4, first if i == 0 else None) for i in range(2)]
    for r in readers:
        r.start()
    first.wait(5)
    time.sleep(0.05)
    timed = holder(True, log, "timed", 0.3)
    timed.start()
    time.sleep(0.1)  # the timed run waits at the GPU; an untimed run that comes now waits behind it
    late = holder(False, log, "late", 0.05)
    late.start()
    for t in (*readers, timed, late):
        t.join(10)
    assert at(log, "probe1", "in") < at(log, "probe0", "out")  # the two untimed ones side by side
    assert at(log, "timed", "in") >= max(at(log, "probe0", "out"), at(log, "probe1", "out"))
    assert at(log, "late", "in") >= at(log, "timed", "out")  # not before the timed one, though it could share


def test_timed_turns_never_overlap(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_GPU_TURNS", str(tmp_path / "turns"))
    log = []
    threads = [holder(True, log, f"t{i}", 0.05) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    spans = sorted((at(log, f"t{i}", "in"), at(log, f"t{i}", "out")) for i in range(4))
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_without_a_lock_named_no_turn_is_taken(tmp_path, monkeypatch):
    monkeypatch.delenv("FA_GPU_TURNS", raising=False)
    monkeypatch.chdir(tmp_path)
    with gpu_turns.turn(True), gpu_turns.turn(True):  # (would wait forever on a lock)
        pass
    assert list(tmp_path.iterdir()) == []


def test_what_a_search_waits_for_its_turns_is_not_taken_from_its_budget(tmp_path, monkeypatch):
    from fa_cli.judge.tool_logs import Budget
    monkeypatch.setenv("FA_GPU_TURNS", str(tmp_path / "turns"))
    held = threading.Event()
    other = holder(True, [], "timed", 0.5, held)  # another program's timed run holds the GPU
    other.start()
    held.wait(5)
    budget = Budget(10.0)
    with gpu_turns.turn(False):  # this search's rerun waits about 0.5 s
        pass
    other.join(10)
    assert budget.used < 0.2 and budget.left > 9.8


def test_a_turn_given_back_inside_its_block_lets_the_next_timed_run_in(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_GPU_TURNS", str(tmp_path / "turns"))
    log = []
    with gpu_turns.turn(True) as gpu:
        other = holder(True, log, "next", 0.0)
        other.start()
        time.sleep(0.2)
        assert log == []  # held: the next timed run waits
        gpu.give_back()
        gpu.give_back()  # twice is once
        other.join(5)
        assert [w for _, w, _ in log] == ["in", "out"]  # in while this block still runs (fa's clean-up)


def test_a_programs_run_gives_its_turn_back_before_fas_clean_up(tmp_path, monkeypatch):
    """programs.run holds the GPU from the program's start to its exit, not while fa's reader and
    the sandbox's watcher settle."""
    from fa_cli.programs import programs
    monkeypatch.setenv("FA_GPU_TURNS", str(tmp_path / "turns"))
    order = []
    real_give_back, real_settled = gpu_turns.Turn.give_back, programs._settled

    def give_back(self):
        order.append("given back" if self.fd is not None else "again")
        real_give_back(self)

    def settled(watcher):
        order.append("settled")
        real_settled(watcher)
    monkeypatch.setattr(gpu_turns.Turn, "give_back", give_back)
    monkeypatch.setattr(programs, "_settled", settled)
    script = tmp_path / "prog.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    result = programs.run(programs.Program("prog", script), tmp_path / "in", tmp_path / "out")
    assert result.returncode == 0
    assert order == ["given back", "settled", "again"]


def test_at_most_count_sanitizer_runs_hold_a_slot_at_once_and_the_wait_is_not_budgeted(tmp_path, monkeypatch):
    """FA_TOOL_SLOTS=FOLDER:2: of three runs that ask at once, two go in, the third when one leaves;
    its wait joins the turns' (no budget counts it)."""
    monkeypatch.setenv("FA_TOOL_SLOTS", f"{tmp_path}:2")
    log, inside, most = [], [0], [0]
    lock = threading.Lock()

    def body(name):
        with gpu_turns.tool_slot():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            log.append((name, "in", time.monotonic()))
            time.sleep(0.3)
            with lock:
                inside[0] -= 1
            log.append((name, "out", time.monotonic()))
    waited = gpu_turns.waited_s()
    threads = [threading.Thread(target=body, args=(f"run{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert most[0] == 2 and len(log) == 6
    last_in = max(at(log, f"run{i}", "in") for i in range(3))
    assert last_in >= min(at(log, f"run{i}", "out") for i in range(3)) - 0.01
    assert gpu_turns.waited_s() - waited >= 0.25  # the third run's wait


def test_no_slot_is_taken_where_none_is_named(monkeypatch):
    monkeypatch.delenv("FA_TOOL_SLOTS", raising=False)
    start = time.monotonic()
    with gpu_turns.tool_slot(), gpu_turns.tool_slot():
        pass
    assert time.monotonic() - start < 0.05


def test_a_slot_is_given_back_when_its_run_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_TOOL_SLOTS", f"{tmp_path}:1")
    try:
        with gpu_turns.tool_slot():
            raise RuntimeError("the sanitizer's run failed")
    except RuntimeError:
        pass
    start = time.monotonic()
    with gpu_turns.tool_slot():  # the one slot free again
        pass
    assert time.monotonic() - start < 0.5

"""Progress that is long says how far it is: at least every few seconds, with the time left."""
import re
import sys
import time

import pytest

from helpers import fa
from fa_cli.report import progress_bars, tables


def test_a_long_step_says_how_far_it_is_with_the_time_left(monkeypatch, capsys):
    monkeypatch.setattr(progress_bars, "TICK_AFTER_S", 0.3)
    monkeypatch.setattr(progress_bars, "TICK_EVERY_S", 0.2)
    with tables.progress("expected output of c30.in", 100) as advance:
        for _ in range(10):
            advance(5)
            time.sleep(0.1)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 2
    for line in lines:
        assert re.fullmatch(r"fa: expected output of c30\.in: \d+ of 100 done \(\d+%\), \d+ s so far, about \d+ s left",
                            line), line


def test_only_the_innermost_long_step_speaks_and_a_short_one_is_silent(monkeypatch, capsys):
    monkeypatch.setattr(progress_bars, "TICK_AFTER_S", 0.2)
    monkeypatch.setattr(progress_bars, "TICK_EVERY_S", 0.1)
    with tables.progress("judging", 3, steps=True) as advance:
        with tables.progress("input c30", None):
            time.sleep(0.5)
        advance()
        with tables.progress("quick", 1):
            pass
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "fa: judging: 0 of 3 done" and "fa: judging: 1 of 3 done" in err
    during = err[1:err.index("fa: judging: 1 of 3 done")]
    # The two steps start a moment apart, so the outer one may speak once before the inner one has
    # been going for TICK_AFTER_S; from the inner one's first line on, it alone speaks.
    first = next(i for i, line in enumerate(during) if line.startswith("fa: input c30: "))
    assert first <= 1 and all(line.startswith("fa: judging: 0 of 3 done") for line in during[:first]), err
    assert all(line.startswith("fa: input c30: ") and line.endswith("s so far") for line in during[first:]), err
    assert not any("quick" in line for line in err)


def test_a_long_step_keeps_speaking_through_short_steps_inside_it(monkeypatch, capsys):
    monkeypatch.setattr(progress_bars, "TICK_AFTER_S", 0.3)
    monkeypatch.setattr(progress_bars, "TICK_EVERY_S", 0.1)
    with tables.progress("judging", 3) as advance:
        for _ in range(20):
            with tables.progress("input c12", None):
                time.sleep(0.05)  # each inner step far shorter than TICK_AFTER_S (a loaded machine too): silent
        advance()
    err = capsys.readouterr().err.splitlines()
    # only the outer step spoke, at least three times (its last tick may come after advance())
    assert len(err) >= 3 and all(line.startswith("fa: judging: ") for line in err), err
    assert sum(line.startswith("fa: judging: 0 of 3 done") for line in err) >= 3, err


@pytest.mark.slow
def test_a_single_long_case_and_its_cause_search_say_how_long_they_have_taken(tmp_path):
    """One case whose program takes 12 s, then a search for its cause: each says, every 5 s once
    past 10 s, how long it has taken (the search with its budget)."""
    program = tmp_path / "slow"
    program.write_text(f"#!{sys.executable}\nimport sys, time, numpy as np\ntime.sleep(12)\n"
                       "B, N, d = np.fromfile(sys.argv[1], '<i4', 3)\n"
                       "np.zeros(int(B) * int(N) * int(d), '<f4').tofile(sys.argv[2])\n")
    program.chmod(0o755)
    proc = fa("run", "t01", "--program", program, "--no-time-limit", "--why-budget", "14")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(r"^fa: judging: 0 of 1 done \(0%\), 1\d s so far", proc.stderr, re.M), proc.stderr
    assert re.search(r"^fa: looking for the cause \(14 s at most\): 1\d s so far", proc.stderr, re.M), proc.stderr

"""fa_cli/programs/gpu_shares.py: a search's budget counts each second as its share of the GPU,
as the log fa class writes says how many searches run; with no log, a second is a second."""
import threading
import time

import pytest

from fa_cli.judge.tool_logs import Budget
from fa_cli.programs import gpu_shares


def test_with_no_log_a_second_is_a_second(monkeypatch):
    monkeypatch.delenv("FA_GPU_SHARES", raising=False)
    assert gpu_shares.charged(10.0, 12.5) == 2.5
    assert gpu_shares.charged(12.5, 10.0) == 0.0


def test_each_second_is_divided_by_the_searches_running_then(tmp_path):
    log = tmp_path / "shares"
    log.write_text("100.0 1\n101.0 3\n103.0 1\n104.0 0\n")
    # 100.5..101: 1 running, 101..103: 3, 103..104: 1, then 0 (said as 1: the search itself)
    assert gpu_shares.charged(100.5, 105.0, str(log)) == pytest.approx(0.5 + 2 / 3 + 1 + 1)
    assert gpu_shares.charged(101.5, 102.5, str(log)) == pytest.approx(1 / 3)
    assert gpu_shares.charged(50.0, 60.0, str(log)) == pytest.approx(10.0)  # before the log: alone
    assert gpu_shares.charged(1.0, 2.0, str(tmp_path / "gone")) == pytest.approx(1.0)


def test_the_writer_logs_each_search_that_starts_and_ends(tmp_path):
    sharing = gpu_shares.Sharing(tmp_path / "shares")
    inside = threading.Barrier(3)

    def search():
        with sharing.one():
            inside.wait(5)
    threads = [threading.Thread(target=search) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    counts = [int(line.split()[1]) for line in (tmp_path / "shares").read_text().splitlines()]
    times = [float(line.split()[0]) for line in (tmp_path / "shares").read_text().splitlines()]
    assert counts[:3] == [1, 2, 3] and counts[-1] == 0 and len(counts) == 6 and times == sorted(times)


def test_a_budget_beside_three_other_searches_counts_a_quarter_of_its_seconds(tmp_path, monkeypatch):
    log = tmp_path / "shares"
    log.write_text(f"{time.monotonic() - 1:.6f} 4\n")
    monkeypatch.setenv("FA_GPU_SHARES", str(log))
    budget = Budget(10.0)
    time.sleep(0.4)
    assert 0.09 <= budget.used <= 0.3 and budget.left > 9.7
    monkeypatch.delenv("FA_GPU_SHARES")
    assert budget.used >= 0.4  # read alone: every second counts


def test_the_sanitizers_timeout_counts_a_share_of_each_second_beside_other_searches(tmp_path, monkeypatch):
    """A tool run beside three other searches is stopped once its share of the time reaches the
    timeout (4 x the wall); alone, at the timeout itself."""
    from fa_cli.judge import tool_logs
    log = tmp_path / "shares"
    log.write_text(f"{time.monotonic() - 1:.6f} 4\n")
    for shared, low, high in ((True, 1.5, 3.5), (False, 0.4, 1.2)):
        if shared:
            monkeypatch.setenv("FA_GPU_SHARES", str(log))
        else:
            monkeypatch.delenv("FA_GPU_SHARES")
        began = time.monotonic()
        codes = tool_logs._side_by_side([["sleep", "20"], ["true"]], [tmp_path / "a", tmp_path / "b"], 0.5)
        assert codes[0] is None and codes[1] == 0 and low <= time.monotonic() - began <= high

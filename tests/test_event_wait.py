"""An event's time read before the event completed (fa_cli/judge/event_wait.py): "device not
ready" at the program's own check of cudaEventElapsedTime, said with the line and whether a wait
for the event comes before it; another error, or another call, is not said."""
from pathlib import Path

from fa_cli.judge.event_wait import TimeReadEarly
from fa_cli.judge.findings import Kind
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

HOST = """int main(int argc, char** argv) {
  cudaEvent_t start, stop;
  float ms = 0.f;
  CHECK(cudaEventRecord(start));
  attend<<<grid, 128>>>(d_qkv, d_out, B, N);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventElapsedTime(&ms, start, stop));  // line 7
  return 0;
}
"""


def context(tmp_path: Path, text: str, stderr: str, verdict: str = "ERROR") -> Context:
    source = tmp_path / "hw4.cu"
    source.write_text(text)
    return Context(Program("hw4.cu", "hw4", source=source), None, tmp_path, Budget(60.0), lambda line: None, 5e-3,
                   None, "t01", verdict=verdict, run_stderr=stderr, kind="cuda")


def test_a_time_read_before_its_event_completed_is_said_with_its_line(tmp_path):
    ctx = context(tmp_path, HOST, "hw4: hw4.cu:7: device not ready\n")
    step = TimeReadEarly()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert found.kind == Kind.OBSERVED and found.fields == dict(line=7, waited_at=None)
    assert found.lines[0].startswith("the call that failed, hw4.cu line 7 (`CHECK(cudaEventElapsedTime(&ms, "
                                     "start, stop));`: device not ready), reads the time from event start to stop")
    assert "no cudaEventSynchronize(stop) (nor a wait for the device) comes between its record and the call" in \
        found.lines[0]


def test_a_wait_before_the_call_is_said_as_found(tmp_path):
    waited = HOST.replace("  CHECK(cudaEventRecord(stop));\n",
                          "  CHECK(cudaEventRecord(stop));\n  CHECK(cudaEventSynchronize(stop));\n")
    [found] = TimeReadEarly().run(context(tmp_path, waited, "hw4: hw4.cu:8: device not ready\n"))
    assert found.fields == dict(line=8, waited_at=7) and "the event not ready may be start" in found.lines[0]
    same_line = HOST.replace("  CHECK(cudaEventElapsedTime(",
                             "  cudaEventSynchronize(stop); CHECK(cudaEventElapsedTime(")
    assert TimeReadEarly().run(context(tmp_path, same_line, "hw4: hw4.cu:7: device not ready\n"))[0].fields == \
        dict(line=7, waited_at=7)
    early = HOST.replace("  CHECK(cudaEventRecord(stop));\n",
                         "  cudaDeviceSynchronize();\n  CHECK(cudaEventRecord(stop));\n")
    [found] = TimeReadEarly().run(context(tmp_path, early, "hw4: hw4.cu:8: device not ready\n"))
    assert found.fields == dict(line=8, waited_at=None)  # the wait came before stop was recorded: none of it


def test_another_error_or_another_call_is_not_said(tmp_path):
    assert not TimeReadEarly().applies(context(tmp_path, HOST, "hw4: hw4.cu:7: invalid argument\n"))
    assert not TimeReadEarly().applies(context(tmp_path, HOST, "hw4: hw4.cu:7: device not ready\n", "WRONG"))
    assert TimeReadEarly().run(context(tmp_path, HOST, "hw4: hw4.cu:5: device not ready\n")) == []


def test_events_that_keep_no_time_are_said_with_the_line_that_makes_them(tmp_path):
    """set43's s05: every event made by a helper with cudaEventDisableTiming, the timing pair too:
    cudaEventElapsedTime refuses them with "invalid resource handle"."""
    helper = "static cudaEvent_t make_event() {\n  cudaEvent_t e;\n  cudaEventCreateWithFlags(&e, " \
        "cudaEventDisableTiming);\n  return e;\n}\n"
    text = helper + HOST.replace("  cudaEvent_t start, stop;\n",
                                 "  cudaEvent_t start = make_event(), stop = make_event();\n")
    ctx = context(tmp_path, text, "hw4: hw4.cu:12: invalid resource handle\n")
    assert TimeReadEarly().applies(ctx)
    [found] = TimeReadEarly().run(ctx)
    assert found.fields == dict(line=12, no_timing_at=3), found.fields
    assert "which the runtime refuses with \"invalid resource handle\" for an event that keeps no time" in \
        found.lines[0] and "line 3 creates an event with cudaEventDisableTiming" in found.lines[0], found.lines


def test_an_untimed_event_of_its_own_is_not_blamed_for_start_and_stop(tmp_path):
    """A sync event made without timing beside start and stop made plainly: the line is shown, and
    that start and stop are made so is not said."""
    text = HOST.replace("  cudaEvent_t start, stop;\n", "  cudaEvent_t start, stop, sync;\n"
                        "  cudaEventCreateWithFlags(&sync, cudaEventDisableTiming);\n")
    [found] = TimeReadEarly().run(context(tmp_path, text, "hw4: hw4.cu:8: invalid resource handle\n"))
    assert found.fields["no_timing_at"] is None and "whether start and stop are made so fa could not read" in \
        found.lines[0], found.lines

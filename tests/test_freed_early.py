"""A failed call whose buffer was freed before it (fa_cli/judge/freed_early.py): the line the
program's own check names, the free before it, said together; a buffer allocated again between,
or freed only after, is not said."""
from pathlib import Path

from fa_cli.judge.findings import Kind
from fa_cli.judge.freed_early import FreedBeforeUse
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

HOST = """#include <cstdio>
#define CHECK(x) do { cudaError_t e = (x); if (e) { fprintf(stderr, "hw4: %s:%d: %s\\n", __FILE__, __LINE__, \\
  cudaGetErrorString(e)); return 1; } } while (0)
int main(int argc, char** argv) {
  float *d_in, *d_out;
  CHECK(cudaMalloc(&d_in, 64));
  CHECK(cudaMalloc(&d_out, 64));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));  // line 9
  CHECK(cudaMemcpy(out, d_out, 64, cudaMemcpyDeviceToHost));  // line 10
  return 0;
}
"""


def context(tmp_path: Path, text: str, stderr: str, verdict: str = "ERROR") -> Context:
    source = tmp_path / "hw4.cu"
    source.write_text(text)
    return Context(Program("hw4.cu", "hw4", source=source), None, tmp_path, Budget(60.0), lambda line: None, 5e-3,
                   None, "t01", verdict=verdict, run_stderr=stderr, kind="cuda")


def test_a_call_that_failed_on_a_buffer_freed_before_it_is_said_with_both_lines(tmp_path):
    ctx = context(tmp_path, HOST, f"hw4: {tmp_path}/hw4.cu:10: invalid argument\n")
    step = FreedBeforeUse()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert found.kind == Kind.MEASURED and found.fields == dict(line=10, freed_at=9)
    assert found.lines[0].startswith("the call that failed, hw4.cu line 10 (`CHECK(cudaMemcpy(out, d_out, 64, "), found
    assert ": invalid argument), uses d_out, which line 9 freed before it (`CHECK(cudaFree(d_out));`)" in found.lines[0]


def test_no_claim_where_the_buffer_was_allocated_again_or_freed_after_or_nothing_names_a_line(tmp_path):
    again = HOST.replace("  CHECK(cudaMemcpy(out", "  CHECK(cudaMalloc(&d_out, 64));\n  CHECK(cudaMemcpy(out")
    assert FreedBeforeUse().run(context(tmp_path, again, "hw4: hw4.cu:11: invalid argument\n")) == []
    stderr = "hw4: hw4.cu:10: invalid argument\n"
    after = HOST.replace("CHECK(cudaFree(d_out));  // line 9", "CHECK(cudaGetLastError());")
    assert FreedBeforeUse().run(context(tmp_path, after, stderr)) == []
    assert not FreedBeforeUse().applies(context(tmp_path, HOST, "hw4: invalid argument\n"))
    assert not FreedBeforeUse().applies(context(tmp_path, HOST, stderr, verdict="WRONG"))

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
    assert found.kind == Kind.OBSERVED and found.fields == dict(line=10, freed_at=9)  # the tools still run
    assert found.lines[0].startswith("the call that failed, hw4.cu line 10 (`CHECK(cudaMemcpy(out, d_out, 64, "), found
    assert ": invalid argument), uses d_out, which line 9 freed before it on the way there " \
        "(`CHECK(cudaFree(d_out));`)" in found.lines[0], found.lines


def test_no_claim_where_the_buffer_was_allocated_again_or_freed_after_or_nothing_names_a_line(tmp_path):
    again = HOST.replace("  CHECK(cudaMemcpy(out", "  CHECK(cudaMalloc(&d_out, 64));\n  CHECK(cudaMemcpy(out")
    assert FreedBeforeUse().run(context(tmp_path, again, "hw4: hw4.cu:11: invalid argument\n")) == []
    stderr = "hw4: hw4.cu:10: invalid argument\n"
    after = HOST.replace("CHECK(cudaFree(d_out));  // line 9", "CHECK(cudaGetLastError());")
    assert FreedBeforeUse().run(context(tmp_path, after, stderr)) == []
    assert not FreedBeforeUse().applies(context(tmp_path, HOST, "hw4: invalid argument\n"))
    assert not FreedBeforeUse().applies(context(tmp_path, HOST, stderr, verdict="WRONG"))


def claims(tmp_path: Path, text: str, line: int) -> list:
    return FreedBeforeUse().run(context(tmp_path, text, f"hw4: hw4.cu:{line}: an illegal memory access\n"))


def test_frees_that_do_not_run_on_the_way_or_free_something_else_are_not_said(tmp_path):
    """A member or an element freed (b.q, d_buf[0]), a free on an error branch (one line or a
    block), in a lambda or another block closed before the failing line, after an unbraced `if`,
    or a pointer allocated again on the failing line itself (cudaMalloc(&d, ...) after its free):
    none is a use after a free."""
    head = "int main(int argc, char** argv) {\n"
    shapes = {
        "member": "  cudaFree(b.q);\n  CHECK(cudaMemcpy(h, b.o, 64, cudaMemcpyDeviceToHost));\n",
        "element": "  cudaFree(d_buf[0]);\n  CHECK(cudaMemcpy(h, d_buf[1], 64, cudaMemcpyDeviceToHost));\n",
        "branch": "  if (err) { cudaFree(d_q); return 1; }\n  CHECK(cudaMemcpy(h, d_q, 64, cudaMemcpyDeviceToHost));\n",
        "block": "  if (err) {\n    cudaFree(d_q);\n    return 1;\n  }\n"
                 "  CHECK(cudaMemcpy(h, d_q, 64, cudaMemcpyDeviceToHost));\n",
        "lambda": "  auto fail = [&] {\n    cudaFree(d_q);\n  };\n"
                  "  CHECK(cudaMemcpy(h, d_q, 64, cudaMemcpyDeviceToHost));\n",
        "unbraced": "  if (err)\n    cudaFree(d_q);\n  CHECK(cudaMemcpy(h, d_q, 64, cudaMemcpyDeviceToHost));\n",
        "again": "  cudaFree(d_q);\n  CHECK(cudaMalloc(reinterpret_cast<void**>(&d_q), 128));\n",
        "context": "  CHECK(cudaFree(0));\n  CHECK(cudaMemcpy(h, d_q, 0, cudaMemcpyDeviceToHost));\n",  # the seed's
        "assigned": "  cudaFree(d_q);\n  d_q = d_k;\n  CHECK(cudaMemcpy(h, d_q, 64, cudaMemcpyDeviceToHost));\n",
    }
    for what, body in shapes.items():
        last = 1 + body.count("\n")
        assert claims(tmp_path, head + body + "}\n", last) == [], what
    # the same use after a free that runs on the way, with a block closed between: said
    said = claims(tmp_path, head + "  cudaFree(d_q);\n  if (v) {\n    x = 1;\n  }\n"
                  "  CHECK(cudaMemcpy(h, d_q, 64, cudaMemcpyDeviceToHost));\n}\n", 6)
    assert len(said) == 1 and said[0].fields == dict(line=6, freed_at=2), said

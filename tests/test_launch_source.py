"""A launch as the source writes it (fa_cli/judge/launch_source.py): two arguments that carry each
other's parameter names, and a copy to the device after the launch that reads it, each said with
its line; the right order, a launch in a loop, a copy the kernel never reads, not said."""

import pytest

from fa_cli.judge.findings import Kind
from fa_cli.judge.launch_source import LaunchAsWritten, read
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

KERNEL = """__constant__ float c_scale;
template <int D>
__global__ void __launch_bounds__(128) attend(const float* __restrict__ qkv, float* out, int B, int N) {
  float s = c_scale * qkv[0];
  out[B * N] = s;
}
"""


def program(host: str) -> str:
    return KERNEL + "int main() {\n  float *d_qkv, *d_out; int b = 2, n = 128; float scale = 0.5f;\n" + host + "}\n"


def test_two_arguments_swapped_by_name_are_said_with_the_launch_line():
    [said] = read(program("  attend<32><<<dim3(1, b), 128>>>(d_qkv, d_out, n, b);\n"))
    assert said.startswith("line 9 (`attend<32><<<dim3(1, b), 128>>>(d_qkv, d_out, n, b);`) gives attend n for its "
                           "parameter B and b for N"), said


def test_an_argument_array_for_cudaLaunchKernel_is_read_at_its_own_line():
    host = ("  void* args[] = {(void*)&d_qkv, (void*)&d_out, (void*)&n, (void*)&b};\n"
            "  cudaLaunchKernel((const void*)attend<32>, dim3(1), dim3(128), args, 0, 0);\n")
    [said] = read(program(host))
    assert said.startswith("line 9 (`void* args[] = {") and "gives attend n for its parameter B and b for N" in said


def test_members_and_hip_launches_are_read_by_their_names():
    [said] = read(program("  hipLaunchKernelGGL(attend<32>, dim3(1), dim3(128), 0, 0, d_qkv, d_out, in.N, in.B);\n"))
    assert "gives attend N for its parameter B and B for N" in said


@pytest.mark.parametrize("host", [
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n",  # the right order (names differ only in case)
    "  attend<32><<<1, 128>>>(d_qkv, d_out, n * 1, b);\n",  # an expression: no name to compare
    "  cudaMemcpyToSymbol(c_scale, &scale, 4);\n  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n",  # copy first
    "  for (int r = 0; r < 2; ++r) {\n    attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n"
    "    cudaMemcpyToSymbol(c_scale, &scale, 4);\n  }\n",  # in a loop: the copy comes before the next launch
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n  cudaMemcpy(h, d_out, 4, cudaMemcpyDeviceToHost);\n",  # back
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n  cudaMemcpyToSymbol(c_other, &scale, 4);\n",  # not read by it
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n  cudaMemcpyToSymbol(c_scale, &scale, 4);\n"
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n",  # launched again after the copy
    "  if (b) { attend<32><<<1, 128>>>(d_qkv, d_out, b, n); }\n"
    "  else { cudaMemcpy(d_qkv, h, 4, cudaMemcpyHostToDevice); attend<64><<<1, 64>>>(d_qkv, d_out, b, n); }\n",
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n  if (b) cudaMemcpy(d_qkv, h, 4, cudaMemcpyHostToDevice);\n",
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n  cudaMemcpy(d_qkv, h, 4, cudaMemcpyHostToDevice);\n"
    "  other<<<1, 128>>>(d_qkv, d_out, b, n);\n",  # another kernel reads the new values
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n  cudaFree(d_qkv);\n  cudaMalloc(&d_qkv, 8);\n"
    "  cudaMemcpy(d_qkv, h, 8, cudaMemcpyHostToDevice);\n",  # a buffer of its own since
    "  auto go = [&]() {\n    attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n"
    "    cudaMemcpy(d_qkv, h, 4, cudaMemcpyHostToDevice);\n  };\n  go();\n  go();\n",  # a lambda called again
    "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n  cudaMemcpy(h, d_out, 4, cudaMemcpyDeviceToHost);\n"
    "  cudaMemset(d_out, 0, 4);\n",  # the output cleared after it was copied back
    '  printf("attend<<<1, 1>>>(d_qkv, d_out, n, b);\\n");\n  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n',
    "  attend<32><<<1, 128>>>(d_out, d_qkv, b, n);\n",  # two pointers given the other way: a ping-pong
])
def test_what_is_not_a_mistake_of_the_launch_is_not_said(host):
    assert read(program(host)) == []


@pytest.mark.parametrize("copy, words", [
    ("cudaMemcpyToSymbol(c_scale, &scale, sizeof(float));", "copies to the symbol c_scale after line 9 launches"),
    ("cudaMemcpy(d_qkv, h, 4, cudaMemcpyHostToDevice);", "copies to d_qkv after line 9 launches"),
])
def test_a_copy_to_the_device_after_the_launch_that_reads_it_is_said_once(copy, words):
    host = "  if (b) attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n" \
           f"  else attend<64><<<1, 64>>>(d_qkv, d_out, b, n);\n  {copy}\n"
    [said] = read(program(host))
    assert said.startswith(f"line 11 (`{copy}`) {words} attend, which reads it, and no launch of it follows"), said


def test_a_limit_raised_for_another_instance_of_the_template_is_said_with_both_lines():
    host = ("  cudaFuncSetAttribute(attend<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, 66048);\n"
            "  if (b) attend<32><<<1, 128, 33280>>>(d_qkv, d_out, b, n);\n"
            "  else attend<64><<<1, 128, 66048>>>(d_qkv, d_out, b, n);\n")
    [said] = read(program(host))
    assert said.startswith("line 9 (`cudaFuncSetAttribute(attend<32>, ") and \
        "limit of attend<32> only, and line 11 launches attend<64> with dynamic shared memory" in said, said
    both = host.replace("  if (b)", "  cudaFuncSetAttribute(attend<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                                    "66048);\n  if (b)")
    assert read(program(both)) == []
    assert read(program(host.replace(", 66048>>>", ">>>"))) == []  # no dynamic shared memory: no limit to raise
    assert read(program(host.replace(", 66048>>>", ", 1024>>>"))) == []  # under 48 KB: nothing to raise
    assert read(program(host.replace("(attend<32>, ", "(attend<D_HEAD>, "))) == []  # which instance: not known


def test_a_copy_after_the_launch_in_a_helper_is_not_said():
    """A helper may be called in a loop: only main's own order is read."""
    text = KERNEL + "void go(float* d_qkv, float* d_out, int b, int n) {\n" \
        "  attend<32><<<1, 128>>>(d_qkv, d_out, b, n);\n  cudaMemcpyToSymbol(c_scale, &b, 4);\n}\n" \
        "int main() {\n  for (int i = 0; i < 2; ++i) go(0, 0, 1, 2);\n}\n"
    assert read(text) == []


def test_the_step_says_it_as_an_observation_of_a_failing_gpu_case(tmp_path):
    source = tmp_path / "hw4.cu"
    source.write_text(program("  attend<32><<<1, 128>>>(d_qkv, d_out, n, b);  // swapped\n"))
    ctx = Context(Program("hw4.cu", "hw4", source=source), None, tmp_path, Budget(60.0), lambda line: None, 5e-3,
                  None, "t01", verdict="WRONG", kind="cuda")
    step = LaunchAsWritten()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert found.kind == Kind.OBSERVED and found.lines[0].startswith("read in hw4.cu: line 9 ")
    ctx.verdict = "PASS"
    assert not step.applies(ctx)

"""fa_cli/judge/leaving_early.py: a kernel whose threads past N return before a barrier, named
where the judged output is wrong in exactly the last, partial block's rows, with its two lines;
no return before a barrier of the same kernel, or another pattern of wrong rows, names nothing."""
from fa_cli.cases.format import Shape
from fa_cli.judge.findings import Kind
from fa_cli.judge.leaving_early import LeftBeforeBarrier, returns_before_barriers
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

LEAVES_EARLY = """__global__ void attention(const float* qkv, float* out, int N) {
  const int i = blockIdx.x * 128 + threadIdx.x;
  if (i >= N) return;  // rows past N
  __shared__ float Ks[32 * 64];
  Ks[threadIdx.x] = qkv[threadIdx.x];
  __syncthreads();
  out[i] = Ks[0];
}
"""
STORE_GUARDED = """__global__ void attention(const float* qkv, float* out, int N) {
  const int i = blockIdx.x * 128 + threadIdx.x;
  __shared__ float Ks[32 * 64];
  Ks[threadIdx.x] = qkv[threadIdx.x];
  __syncthreads();
  if (i >= N) return;
  out[i] = Ks[0];
}
__global__ void other(float* x) {
  __syncthreads();
}
"""


BLOCK_LEAVES_WHOLE = """__global__
void attention(const float* qkv, float* out, int N)
{
  if (blockIdx.x * 128 >= N) return;  // every thread of the block leaves together
  /* if (threadIdx.x >= N) return; */
  __shared__ float Ks[32 * 64];
  __syncthreads();
}
__global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  x[i] *= 2.0f;
}
__device__ void tile_barrier() {
  __syncthreads();
}
"""


def context(tmp_path, text: str, pattern: dict) -> Context:
    source = tmp_path / "hw4.cu"
    source.write_text(text)
    return Context(Program("hw4", tmp_path / "hw4", source=source), None, tmp_path, Budget(1.0), lambda line: None,
                   5e-3, None, "t", case_shape=Shape(2, 200, 64), kind="cuda", pattern=pattern)


def test_a_return_before_a_barrier_of_its_kernel_is_found_and_one_after_the_last_is_not(tmp_path):
    (tmp_path / "a.cu").write_text(LEAVES_EARLY)
    (tmp_path / "b.cu").write_text(STORE_GUARDED)
    assert returns_before_barriers(tmp_path / "a.cu") == [((3, "if (i >= N) return;"), (6, "__syncthreads();"))]
    assert returns_before_barriers(tmp_path / "b.cu") == []  # the next kernel's barrier is not this return's
    (tmp_path / "c.cu").write_text(BLOCK_LEAVES_WHOLE)
    # a block that leaves whole, a comment, a return whose kernel has no barrier (the next function's is not its)
    assert returns_before_barriers(tmp_path / "c.cu") == []
    by_thread = BLOCK_LEAVES_WHOLE.replace("blockIdx.x * 128 >= N", "blockIdx.x * 128 + threadIdx.x >= N")
    (tmp_path / "d.cu").write_text(by_thread)
    assert returns_before_barriers(tmp_path / "d.cu") == [((4, "if (blockIdx.x * 128 + threadIdx.x >= N) return;"),
                                                          (7, "__syncthreads();"))]


def test_wrong_in_exactly_the_last_partial_block_names_the_return_and_the_barrier(tmp_path):
    ctx = context(tmp_path, LEAVES_EARLY, dict(last_partial_tiles=[128]))
    step = LeftBeforeBarrier()
    assert step.applies(ctx)
    found = step.run(ctx)
    assert [f.kind for f in found] == [Kind.MEASURED]
    assert found[0].lines[0].startswith(
        "measured: wrong in exactly the rows of the last, partial block of rows (128..199 of N = 200, for blocks of "
        "128 rows) and right in every whole block; hw4.cu:3 `if (i >= N) return;` lets the threads past row N leave "
        "before the kernel's barrier at hw4.cu:6 `__syncthreads();`")
    ctx.pattern["last_partial_tiles"] = [16, 32, 64]  # rows 192..199: the cases fit any of these blocks
    assert "(192..199 of N = 200, for blocks of 16, 32 or 64 rows)" in step.run(ctx)[0].lines[0]


def test_other_wrong_rows_or_a_store_guarded_after_the_barriers_name_nothing(tmp_path):
    assert not LeftBeforeBarrier().applies(context(tmp_path, LEAVES_EARLY, dict(last_partial_tiles=[])))
    ctx = context(tmp_path, STORE_GUARDED, dict(last_partial_tiles=[128]))
    assert LeftBeforeBarrier().run(ctx) == []

"""fa_cli/judge/warp_lanes.py: a lane taken from threadIdx.y in blocks narrower than a warp, read from
the source and the launch log; blocks a warp wide, or a lane from threadIdx.x, say nothing."""
from fa_cli.judge import warp_lanes
from fa_cli.programs.timing import launches

SOURCE = """__global__ void attention_warp(const float* qkv, float* out, int N) {
  const int r = threadIdx.x, lane = threadIdx.y;
  float v = qkv[r * 32 + lane];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  out[r * 32 + lane] = v;
}
"""


def log(block: str) -> list:
    return launches(f"fa-launch: launches=1 untimed=0 ms=0.01 grid=16x2x1 block={block} smem=0 regs=32 "
                    "kernel=void attention_warp<32>(const float*, float*, int)\n")


def test_a_lane_from_threadidx_y_in_blocks_eight_wide_is_read_as_warps_across_threadidx_x():
    [said] = warp_lanes.read(SOURCE.splitlines(), log("8x32x1"), 32)
    assert said.startswith("attention_warp's blocks are 8 x 32 x 1 threads (fa's launch log of the judged run), and "
                           "the GPU makes its warps of 32 consecutive threads, thread x + 8 y: one warp holds 4 values "
                           "of threadIdx.y, each with all 8 of threadIdx.x; line 2 takes a lane from threadIdx.y "
                           "(`const int r = threadIdx.x, lane = threadIdx.y;`): the shuffles (lines 4)"), said


def test_blocks_a_warp_wide_or_a_lane_from_x_or_no_shuffle_say_nothing():
    assert warp_lanes.read(SOURCE.splitlines(), log("32x8x1"), 32) == []
    assert warp_lanes.read(SOURCE.replace("lane = threadIdx.y", "lane = threadIdx.x").splitlines(), log("8x32x1"),
                           32) == []
    assert warp_lanes.read(SOURCE.replace("__shfl_xor_sync(0xffffffffu, v, off)", "v").splitlines(), log("8x32x1"),
                           32) == []
    assert warp_lanes.read(SOURCE.splitlines(), log("32x2x1"), 64)  # 64-lane wavefronts: 32 wide is narrower

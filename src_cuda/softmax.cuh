// softmax.cuh: the online softmax of a warp's ScoreTile rows (fragments.cuh), shared by the
// mma.sync and wgmma kernels: masking of keys past N, the running max and compensated running
// sum of each row, and P = 2^(s - m) (scaled by 2^12 for its split).
#pragma once

#include "../src_common/compensated_sum.h"
#include "../src_common/online_softmax.h"
#include "fragments.cuh"

namespace fa {

// Keys at or past `valid_keys` of the tile score -inf (the last tile only).
__device__ __forceinline__ void mask_keys_past(ScoreTile& s, int valid_keys, int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kTcBc / 8; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (nt * 8 + 2 * t + (c & 1) >= valid_keys) s[nt][c] = -INFINITY;
  }
}

// Online softmax of a lane's two rows (g and g + 8: h = 0, 1); the quad of lanes sharing a row
// exchanges maxima by shuffles, and each lane keeps its own share of the row's sum.
struct OnlineSoftmax {
  float m[2] = {-INFINITY, -INFINITY};  // running max (base 2, unscaled)
  CompensatedSum l[2];                  // this lane's share of the running sums

  // Scores -> probabilities (times 2^12) in place; alpha[h] = the factor by which row h of O shrinks.
  __device__ __forceinline__ void update(ScoreTile& s, float (&alpha)[2]) {
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kTcBc / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) tile_max[c >> 1] = fmaxf(tile_max[c >> 1], s[nt][c]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      alpha[h] = online_rescale(m[h], l[h], tile_max[h] * kUnscaleS);
    }
    // The tile's 16 probabilities per lane are summed first, then added to l with compensation:
    // one by one, probabilities far below l would be rounded away together (N = 32768).
    float tile_sum[2] = {0.f, 0.f};
    // P = 2^(s - m) 2^12: unscale S, subtract the max and scale P in one FMA.
    const float shift[2] = {kLog2PScale - m[0], kLog2PScale - m[1]};
#pragma unroll
    for (int nt = 0; nt < kTcBc / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[nt][c] = exp2_approx(fmaf(s[nt][c], kUnscaleS, shift[c >> 1]));
        tile_sum[c >> 1] += s[nt][c];
      }
    }
    l[0].add(tile_sum[0]);
    l[1].add(tile_sum[1]);
  }

  // Row h's whole sum: the quad's shares added.
  __device__ __forceinline__ float row_sum(int h) const {
    float sum = l[h].value();
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    return sum;
  }
};

}  // namespace fa

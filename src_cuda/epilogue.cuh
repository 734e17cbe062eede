// epilogue.cuh: what the mma.sync and wgmma kernels do with a tile's P V and, at the end, with O.
#pragma once

#include "softmax.cuh"

namespace fa {

// O = O * alpha + P V, with round-to-nearest FMAs: the tensor core's fp32 accumulation
// truncates, and O accumulated inside it over every tile drifts at N = 32768.
template <int D>
__device__ __forceinline__ void fold_pv(float (&o)[D / 8][4], const float (&pv)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) o[nt][c] = fmaf(o[nt][c], alpha[c >> 1], pv[nt][c]);
  }
}

// O's rows below N, normalized by the row sums and unscaled, written once.
template <int D>
__device__ __forceinline__ void store_o(float* O, const float (&o)[D / 8][4], const OnlineSoftmax& softmax,
                                        int64_t row0, int64_t N, int lane) {
  const int g = lane / 4, t = lane % 4;
  const float row_sum[2] = {softmax.row_sum(0), softmax.row_sum(1)};  // every lane shuffles
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + g + h * 8;
    if (row >= N) continue;
    const float inv = kUnscaleO / row_sum[h];
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(O + row * D + nt * 8 + 2 * t) = make_float2(o[nt][2 * h] * inv, o[nt][2 * h + 1] * inv);
  }
}

}  // namespace fa

// fragments.cuh: a warp's 16 query rows in the mma.sync m16n8k16 register layout, shared by
// the mma.sync and wgmma kernels (a wgmma m64 accumulator is four such warps' fragments).
//
// Fragment coordinates of a lane: g = lane / 4 (row group: rows g and g + 8), t = lane % 4
// (column pair 2t, 2t + 1). Scores of a K/V tile (kTcBc keys) are a ScoreTile, whose layout is
// also P's A-operand layout for P V: P never leaves registers.
#pragma once

#include "split3xfp16.cuh"

namespace fa {

constexpr int kTcBc = 64;               // keys per K/V tile
using ScoreTile = float[kTcBc / 8][4];  // 16 x 64 scores of a warp: 8 n-tiles of 8 keys

// Q as A fragments of this warp's 16 rows (rows row0 + g and row0 + g + 8 in each lane), split
// into hi and lo after scaling by 2^6 log2(e) / sqrt(d), so that scores come out in base 2.
template <int D>
struct QFragments {
  float2 raw[D / 16][4];
  uint32_t hi[D / 16][4], lo[D / 16][4];

  // kGlobalReadOnly: Q is in global memory and read-only: an explicit ld.global.nc (LDG.CONSTANT),
  // for attention_tensorcore, whose loads follow inline assembly (cp.async) that may write memory.
  template <bool kGlobalReadOnly = false>
  __device__ __forceinline__ void load(const float* Q, int64_t row0, int64_t N, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t row = row0 + g + (r & 1) * 8;
        const int col = ks * 16 + 2 * t + (r >> 1) * 8;
        const float2* src = reinterpret_cast<const float2*>(Q + row * D + col);
        raw[ks][r] = row < N ? (kGlobalReadOnly ? __ldg(src) : *src) : make_float2(0.f, 0.f);
      }
    }
  }
  // Returns false when a value is outside the split's range.
  __device__ __forceinline__ bool split() {
    const float scale = kQKScale * 1.4426950408889634f / sqrtf((float)D);
    bool in_range = true;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        in_range &= splittable(raw[ks][r]);
        split_pair(raw[ks][r].x * scale, raw[ks][r].y * scale, hi[ks][r], lo[ks][r]);
      }
    }
    return in_range;
  }
};

// P's A fragments for keys 16kk..16kk+15 (the score n-tiles 2kk and 2kk+1), split into hi and lo
// (P is already scaled by 2^12).
__device__ __forceinline__ void split_p(const ScoreTile& p, int kk, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
  split_pair_masked(p[2 * kk][0], p[2 * kk][1], hi[0], lo[0]);
  split_pair_masked(p[2 * kk][2], p[2 * kk][3], hi[1], lo[1]);
  split_pair_masked(p[2 * kk + 1][0], p[2 * kk + 1][1], hi[2], lo[2]);
  split_pair_masked(p[2 * kk + 1][2], p[2 * kk + 1][3], hi[3], lo[3]);
}

}  // namespace fa

// wgmma/split.cuh: K and V split (3xFP16, split3xfp16.cuh) into the wgmma tile layout
// (layout.cuh): the store of one key's 8 dimensions, shared by the long kernel's split pass
// (split_kv_blocked, once per chunk) and the short kernel's producer (per batch, in the kernel).
#pragma once

#include "layout.cuh"

namespace fa {

// Dimensions dim .. dim + 7 of one key of K (x[0]) and V (x[1]), scaled and split into the
// tile's four arrays at `tile` (K -> arrays 0 and 1, V -> 2 and 3). False when a value is
// outside the split's range.
template <int D>
__device__ __forceinline__ bool wg_store_split(__half* tile, int key, int dim, const float4 (&x)[2][2]) {
  const bool in_range = splittable(x[0][0]) && splittable(x[0][1]) && splittable(x[1][0]) && splittable(x[1][1]);
  __half* dst = tile + wg_offset<D>(key, dim);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const float scale = m == 0 ? kQKScale : kVScale;
    uint2 hi0, lo0, hi1, lo1;
    split_float4(x[m][0], scale, hi0, lo0);
    split_float4(x[m][1], scale, hi1, lo1);
    *reinterpret_cast<uint4*>(dst + 2 * m * kTcBc * D) = make_uint4(hi0.x, hi0.y, hi1.x, hi1.y);
    *reinterpret_cast<uint4*>(dst + (2 * m + 1) * kTcBc * D) = make_uint4(lo0.x, lo0.y, lo1.x, lo1.y);
  }
  return in_range;
}

// K and V -> scaled hi and lo halves in the tiled layout above, range-checked (Q is checked by
// the kernel, which loads it anyway). One thread per 8 dimensions of one key (one core-matrix
// row), in destination order.
template <int D>
__device__ __forceinline__ void split_kv_blocked_pass(const float* __restrict__ qkv, __half* __restrict__ kv,
                                                      int64_t batches, int64_t N, int* __restrict__ decline,
                                                      volatile int* declined_ever) {
  const int64_t tiles = wg_tiles(N), ND = N * D;
  const int64_t rows = batches * tiles * kTcBc;  // padded keys of every batch
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < rows * (D / 8);
       c += (int64_t)gridDim.x * blockDim.x) {
    const int r8 = c % 8, dim = (c / 8) % (D / 8) * 8;
    const int64_t key_block = c / (8 * (D / 8)), padded_key = key_block * 8 + r8;
    const int64_t b = padded_key / (tiles * kTcBc), tile = padded_key / kTcBc % tiles;
    const int64_t key = padded_key % (tiles * kTcBc);
    float4 x[2][2] = {};  // K, V: 8 dimensions each (zeros past N)
    if (key < N) {
      const float* src = qkv + (b * 3 + 1) * ND + key * D + dim;
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        x[m][0] = *reinterpret_cast<const float4*>(src + m * ND);
        x[m][1] = *reinterpret_cast<const float4*>(src + m * ND + 4);
      }
    }
    if (!wg_store_split<D>(kv + (b * tiles + tile) * wg_tile_halves<D>(), (int)(key % kTcBc), dim, x))
      decline_chunk(decline, declined_ever);
  }
}

template <int D>
__global__ void __launch_bounds__(kSplitThreads) split_kv_blocked(const AttentionParams p) {
  split_kv_blocked_pass<D>(p.qkv, p.kv, p.batches, p.N, p.decline, p.declined_ever);
}

}  // namespace fa

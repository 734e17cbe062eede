// tensorcore/kernel.cuh: fp32-accurate attention on mma.sync tensor cores (sm_80 and later).
//
// The 3xFP16 products of split3xfp16.cuh on mma.sync.m16n8k16. Launch geometry: one block per
// (batch, tc_rows query rows), one warp per 16 rows: 4 warps, or FA_TC_FUSED32_WARPS for the
// fused kernel at d = 32 (one block per batch at N = 128). Each warp keeps Q's fragments in
// registers and streams K/V tiles of 64 keys through shared memory (TcShared, two stages:
// tensorcore/mainloop.cuh). For short sequences (kFused) the block splits fp32 K and V itself,
// saving split_kv's round trip; otherwise split_kv runs first, once per chunk.
// Measurements behind these choices (error budget, profiles, what was tried): docs/kernels.md.
#pragma once

#include "mainloop.cuh"

namespace fa {

// Blocks per SM the register allocation must allow: 2 lets d = 64 keep all its registers.
#ifndef FA_TC_MIN_BLOCKS
#define FA_TC_MIN_BLOCKS 2
#endif
// The fused d = 32 kernel is latency-bound: more warps per SM at a few spilled registers pay.
#ifndef FA_TC_FUSED32_WARPS
#define FA_TC_FUSED32_WARPS 8
#endif
#ifndef FA_TC_FUSED32_WARPS_PER_SM
#define FA_TC_FUSED32_WARPS_PER_SM 16
#endif

template <int D, bool kFused>
__host__ __device__ constexpr int tc_warps() { return kFused && D == 32 ? FA_TC_FUSED32_WARPS : 4; }
template <int D, bool kFused>
__host__ __device__ constexpr int tc_rows() { return 16 * tc_warps<D, kFused>(); }
template <int D, bool kFused>
__host__ __device__ constexpr int tc_min_blocks() {
  return kFused && D == 32 ? FA_TC_FUSED32_WARPS_PER_SM / FA_TC_FUSED32_WARPS : FA_TC_MIN_BLOCKS;
}
template <int D>
__host__ __device__ constexpr int tc_smem_bytes() { return sizeof(TcShared<D>); }

// Per K/V tile: wait for it in shared memory, attend_tile; the next tile's load is in flight
// meanwhile (cp.async, two stages). kFused: the block splits fp32 K and V itself (all of
// N <= 128 up front, later tiles one at a time) and range-checks what it reads.
template <int D, bool kFused>
__device__ __forceinline__ void tc_block(const float* __restrict__ qkv, const __half* __restrict__ kv,
                                         float* __restrict__ out, int64_t N, int64_t row_tiles,
                                         int* __restrict__ decline, volatile int* declined_ever) {
#if __CUDA_ARCH__ >= 800
  if (!kFused && *decline) return;  // values the split cannot take: the tiled kernel runs this chunk
  constexpr int kThreads = tc_warps<D, kFused>() * 32;
  extern __shared__ __align__(16) __half tc_smem[];
  TcShared<D>& shared = *reinterpret_cast<TcShared<D>*>(tc_smem);
  const int tid = threadIdx.x, lane = tid % 32;
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t row0 = (blockIdx.x % row_tiles) * tc_rows<D, kFused>() + tid / 32 * 16;  // this warp's rows
  const int64_t ND = N * D;
  const float* Q = qkv + b * 3 * ND;
  const float* K = Q + ND;             // fp32 K, then V (kFused)
  const __half* KV = kv + b * 4 * ND;  // split K and V from split_kv
  const int64_t tiles = (N + kTcBc - 1) / kTcBc;

  // Q is loaded while the first K/V tiles are on their way (after them where the fused d = 64
  // kernel has no registers to hold Q across its split).
  QFragments<D> q;
  bool in_range = true;
  if (kFused) {
    if (D == 32) q.template load<true>(Q, row0, N, lane);
    in_range = split_kv_tiles<D, kThreads, 2, 16>(shared, 0, K, 0, N, tid);
    if (D != 32) q.template load<true>(Q, row0, N, lane);
  } else {
    load_kv_tile<D, kThreads>(KVStage<D>(shared, 0), KV, 0, N, tid);
    q.template load<true>(Q, row0, N, lane);
  }
  const bool q_in_range = q.split();
  if (kFused) in_range &= q_in_range;  // otherwise split_kv checked Q

  float o[D / 8][4] = {};  // O fragments: 16 rows x D, fp32, not yet normalized
  OnlineSoftmax softmax;
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t key0 = j * kTcBc;
    if (kFused) {
      if (j >= 2) in_range &= split_kv_tiles<D, kThreads, 1, 4>(shared, j & 1, K, key0, N, tid);
    } else if (j + 1 < tiles) {
      load_kv_tile<D, kThreads>(KVStage<D>(shared, (j + 1) & 1), KV, key0 + kTcBc, N, tid);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const KVStage<D> stage(shared, j & 1);
    attend_tile<D>(o, softmax, q, stage, key0, N, lane);
    __syncthreads();  // this stage is refilled by the next iteration's load
  }

  if (kFused && !in_range) decline_chunk(decline, declined_ever);
  store_o<D>(out + b * ND, o, softmax, row0, N, lane);
#endif
}

// p: qkv, kv (unless kFused), out, N, row_tiles, decline, declined_ever.
template <int D, bool kFused>
__global__ void __launch_bounds__(tc_warps<D, kFused>() * 32, tc_min_blocks<D, kFused>())
    attention_tensorcore(const AttentionParams p) {
  tc_block<D, kFused>(p.qkv, p.kv, p.out, p.N, p.row_tiles, p.decline, p.declined_ever);
}

}  // namespace fa

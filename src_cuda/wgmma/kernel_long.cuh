// wgmma/kernel_long.cuh: attention_wgmma, the Hopper kernel for long sequences (sm_90a code
// only), on K and V split beforehand by split_kv_blocked (split.cuh).
//
// The mma.sync kernel's algorithm and precision with each product issued as wgmma by a
// warpgroup (64 query rows) and each K/V tile shared by the block's consumer warpgroups. A
// persistent block (one per SM) takes work items (a batch's wg_rows query rows) item =
// blockIdx.x, + gridDim.x, ...:
//   producer  the producer warpgroup's first thread bulk-copies each item's Q rows into a Q
//             slot (two slots) and its K/V tiles into the ring (tile t of the block's stream
//             into slot t % kWgStages once the consumers released it); the warpgroup gives up
//             registers (setmaxnreg) to the consumers;
//   consumer  per item: its Q rows from the slot, wg_attend (mainloop.cuh), O.
// The ring runs on from one item to the next, so the next item's first tiles and Q arrive
// while this one finishes (10% at 512 x 1024 x 32 against a block per item: docs/kernels.md).
#pragma once

#include "mainloop.cuh"

namespace fa {

// 1 where this program carries sm_90a code (wgmma exists only there), else 0.
__global__ void wgmma_compiled(int* yes) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *yes = 1;
#else
  *yes = 0;
#endif
}

// Query rows of a work item (the last of a batch may be short).
template <int D>
__device__ __forceinline__ int wg_item_rows(int64_t item, int64_t N, int64_t row_tiles) {
  const int64_t left = N - item % row_tiles * wg_rows<D>();
  return (int)(left < wg_rows<D>() ? left : wg_rows<D>());
}

// The producer warpgroup's first thread: Q and the K/V tiles of every item of this block.
template <int D>
__device__ __forceinline__ void wg_produce(WgShared<D>& shared, const float* qkv, const __half* kv, int64_t N,
                                           int64_t row_tiles, int64_t items) {
  constexpr int kRows = wg_rows<D>();
  constexpr uint32_t kTileBytes = wg_tile_halves<D>() * 2;
  const int64_t tiles = wg_tiles(N);
  int64_t k = 0, t = 0;  // the block's item and tile counts so far
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x, ++k) {
    const int64_t b = item / row_tiles, row0 = item % row_tiles * kRows;
    const int qs = k & 1;
    if (k >= 2) mbar_wait(&shared.q_empty[qs], (k / 2 - 1) & 1);
    const uint32_t q_bytes = wg_item_rows<D>(item, N, row_tiles) * D * 4;
    mbar_arrive_expect_tx(&shared.q_full[qs], q_bytes);
    bulk_copy(shared.q[qs], qkv + (b * 3 * N + row0) * D, q_bytes, &shared.q_full[qs]);
    const __half* src = kv + b * tiles * wg_tile_halves<D>();
    for (int64_t j = 0; j < tiles; ++j, ++t) {
      const int slot = t % kWgStages;
      if (t >= kWgStages) mbar_wait(&shared.empty[slot], (t / kWgStages - 1) & 1);
      mbar_arrive_expect_tx(&shared.full[slot], kTileBytes);
      bulk_copy(shared.ring[slot], src + j * wg_tile_halves<D>(), kTileBytes, &shared.full[slot]);
    }
  }
}

// A consumer warpgroup: per item, its warps' 16 rows of Q from the slot, the pass, O.
template <int D>
__device__ __forceinline__ void wg_consume(WgShared<D>& shared, float* out, int64_t N, int64_t row_tiles,
                                           int64_t items, int* decline, volatile int* declined_ever, int warp,
                                           int lane) {
  constexpr int kRows = wg_rows<D>();
  const int64_t tiles = wg_tiles(N);
  const TensorTurns<wg_groups<D>()> turns{warp / 4};
  turns.start();
  int64_t k = 0;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x, ++k) {
    const int64_t b = item / row_tiles, row0 = item % row_tiles * kRows;
    const int qs = k & 1;
    mbar_wait(&shared.q_full[qs], (k / 2) & 1);
    QFragments<D> q;
    q.load(shared.q[qs], warp * 16, wg_item_rows<D>(item, N, row_tiles), lane);  // this warp's 16 rows
    if (!q.split()) decline_chunk(decline, declined_ever);
    __syncwarp();
    if (lane == 0) mbar_arrive(&shared.q_empty[qs]);
    float o[D / 8][4] = {};  // O: 16 rows x D per warp, fp32, not yet normalized
    OnlineSoftmax softmax;
    wg_attend<D>(o, softmax, q, WgRing<D>{shared.ring[0], shared.full, shared.empty, k * tiles}, N, turns,
                 item + gridDim.x >= items, lane);
    store_o<D>(out + b * N * D, o, softmax, row0 + warp * 16, N, lane);
  }
}

template <int D>
__device__ __forceinline__ void wgmma_block(const float* __restrict__ qkv, const __half* __restrict__ kv,
                                            float* __restrict__ out, int64_t N, int64_t row_tiles, int64_t items,
                                            int* __restrict__ decline, volatile int* declined_ever) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (*decline) return;  // values the split cannot take: the tiled kernel runs this chunk
  constexpr int kConsumerWarps = 4 * wg_groups<D>();
  extern __shared__ __align__(128) __half wg_smem[];
  WgShared<D>& shared = *reinterpret_cast<WgShared<D>*>(wg_smem);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  wg_init_pairs(shared.full, shared.empty, kWgStages, 1, kConsumerWarps);
  wg_init_pairs(shared.q_full, shared.q_empty, 2, 1, kConsumerWarps);
  wg_barriers_ready();
  if (warp >= kConsumerWarps) {
    regs_dec<kWgProducerRegs>();
    if (tid == kConsumerWarps * 32) wg_produce<D>(shared, qkv, kv, N, row_tiles, items);
  } else {
    regs_inc<wg_consumer_regs<D>()>();
    wg_consume<D>(shared, out, N, row_tiles, items, decline, declined_ever, warp, lane);
  }
#endif
}

template <int D>
__global__ void __launch_bounds__(wg_threads<D>(), 1) attention_wgmma(const AttentionParams p) {
  wgmma_block<D>(p.qkv, p.kv, p.out, p.N, p.row_tiles, p.items, p.decline, p.declined_ever);
}

}  // namespace fa

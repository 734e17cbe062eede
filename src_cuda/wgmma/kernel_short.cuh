// wgmma/kernel_short.cuh: attention_wgmma_short, the Hopper kernel for short sequences
// (N <= kWgShortMaxN: one block holds a batch's rows and keys; sm_90a code only), K and V
// split in the kernel. A persistent block takes batches b = blockIdx.x, + gridDim.x, ... Three
// stages run at once on different batches:
//   copy     the producer's first thread copies a batch's fp32 Q, K and V (contiguous in the
//            input) into a staging slot with one bulk copy (full[slot]);
//   split    the producer warpgroup splits K and V from the slot into split tiles (two buffers,
//            alternating per batch; split_full[buf]) and range-checks them;
//   attend   the consumers load and split their Q rows from the slot, release it (empty[slot],
//            one arrival per warp of both kinds), run wg_attend_short on the split tiles and
//            release them (split_empty[buf]).
// One block per batch that loaded, split and computed in turn left DRAM and the tensor cores
// idle in turn (docs/kernels.md).
#pragma once

#include "mainloop.cuh"
#include "split.cuh"

namespace fa {

constexpr int kWgShortProducerRegs = 56;  // the split's registers
template <int D>
__host__ __device__ constexpr int wg_short_consumer_regs() {
  return (65536 / 128 - kWgShortProducerRegs) / wg_groups<D>() / 8 * 8;
}

// The producer warpgroup (ptid 0..127): copy and split every batch of this block. Returns false
// when a value of K or V is outside the split's range.
template <int D>
__device__ __forceinline__ bool wg_short_produce(WgShortShared<D>& shared, const float* qkv, int64_t N,
                                                 int64_t batches, int ptid, int lane) {
  constexpr int kStages = wg_short_stages<D>();
  const int64_t ND = N * D;
  bool in_range = true;
  auto copy = [&](int64_t k) {  // batch k of this block into its slot, once the slot is free
    const int64_t b = blockIdx.x + k * gridDim.x;
    if (b >= batches) return;
    const int slot = k % kStages;
    if (k >= kStages) mbar_wait(&shared.empty[slot], (k / kStages - 1) & 1);
    mbar_arrive_expect_tx(&shared.full[slot], (uint32_t)(3 * ND * 4));
    bulk_copy(shared.staging[slot], qkv + b * 3 * ND, (uint32_t)(3 * ND * 4), &shared.full[slot]);
  };
  // The batches ahead are asked for once this one has arrived: all slots of every block asked
  // for at once made the first batch of each block (and of each chunk) arrive later.
  int64_t issued = 0;
  auto copy_upto = [&](int64_t last) {
    for (; issued <= last; ++issued) copy(issued);
  };
  int64_t k = 0;
  for (int64_t b = blockIdx.x; b < batches; b += gridDim.x, ++k) {
    if (ptid == 0) copy_upto(k);  // not yet asked for at the start, or with a single slot
    mbar_wait(&shared.full[k % kStages], (k / kStages) & 1);
    if (ptid == 0) copy_upto(k + kStages - 1);
    if (k >= 2) mbar_wait(&shared.split_empty[k & 1], (k / 2 - 1) & 1);
    const float* stage = shared.staging[k % kStages];
    __half* tiles = shared.split[k & 1];
    // One key's 8 dimensions of K and V per step, keys past N as zeros.
    for (int c = ptid; c < (int)wg_tiles(N) * kTcBc * (D / 8); c += 128) {
      const int key = c / (D / 8), dim = c % (D / 8) * 8;
      float4 x[2][2] = {};
      if (key < N) {
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          const float* src = stage + (1 + m) * ND + key * D + dim;
          x[m][0] = *reinterpret_cast<const float4*>(src);
          x[m][1] = *reinterpret_cast<const float4*>(src + 4);
        }
      }
      in_range &= wg_store_split<D>(tiles + key / kTcBc * wg_tile_halves<D>(), key % kTcBc, dim, x);
    }
    // The split tiles are written by the generic proxy and read by wgmma (the async proxy).
    fence_proxy_async();
    __syncwarp();
    if (lane == 0) {
      mbar_arrive(&shared.split_full[k & 1]);
      mbar_arrive(&shared.empty[k % kStages]);
    }
  }
  return in_range;
}

// A consumer warpgroup: per batch, its warps' 16 rows of Q from the slot, the pass, O. Returns
// false when a value of Q is outside the split's range.
template <int D>
__device__ __forceinline__ bool wg_short_consume(WgShortShared<D>& shared, float* out, int64_t N, int64_t batches,
                                                 int warp, int lane) {
  constexpr int kStages = wg_short_stages<D>();
  const int64_t ND = N * D;
  bool in_range = true;
  const TensorTurns<wg_groups<D>()> turns{warp / 4};
  turns.start();
  const int64_t row0 = warp * 16;  // this warp's 16 rows of the batch
  int64_t k = 0;
  for (int64_t b = blockIdx.x; b < batches; b += gridDim.x, ++k) {
    mbar_wait(&shared.full[k % kStages], (k / kStages) & 1);
    QFragments<D> q;
    q.load(shared.staging[k % kStages], row0, N, lane);
    in_range &= q.split();
    __syncwarp();
    if (lane == 0) mbar_arrive(&shared.empty[k % kStages]);  // this warp is done with the slot
    mbar_wait(&shared.split_full[k & 1], (k / 2) & 1);
    float o[D / 8][4];
    OnlineSoftmax softmax;
    const WgSplitTiles<D> tiles{shared.split[k & 1]};
    if (N > kTcBc)
      wg_attend_short<D, wg_groups<D>(), true>(o, softmax, q, tiles, N, turns, b + gridDim.x >= batches, lane);
    else
      wg_attend_short<D, wg_groups<D>(), false>(o, softmax, q, tiles, N, turns, b + gridDim.x >= batches, lane);
    __syncwarp();
    if (lane == 0) mbar_arrive(&shared.split_empty[k & 1]);  // its products are done (waited for)
    store_o<D>(out + b * ND, o, softmax, row0, N, lane);
  }
  return in_range;
}

template <int D>
__device__ __forceinline__ void wgmma_short_block(const float* __restrict__ qkv, float* __restrict__ out, int64_t N,
                                                  int64_t batches, int* __restrict__ decline,
                                                  volatile int* declined_ever) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kConsumerWarps = 4 * wg_groups<D>(), kConsumers = 32 * kConsumerWarps;
  extern __shared__ __align__(128) float wg_staging[];
  WgShortShared<D>& shared = *reinterpret_cast<WgShortShared<D>*>(wg_staging);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  wg_init_pairs(shared.full, shared.empty, wg_short_stages<D>(), 1, kConsumerWarps + 4);
  wg_init_pairs(shared.split_full, shared.split_empty, 2, 4, kConsumerWarps);
  wg_barriers_ready();
  bool in_range;
  if (warp >= kConsumerWarps) {
    regs_dec<kWgShortProducerRegs>();
    in_range = wg_short_produce<D>(shared, qkv, N, batches, tid - kConsumers, lane);
  } else {
    regs_inc<wg_short_consumer_regs<D>()>();
    in_range = wg_short_consume<D>(shared, out, N, batches, warp, lane);
  }
  if (!in_range) decline_chunk(decline, declined_ever);
#endif
}

template <int D>
__global__ void __launch_bounds__(wg_threads<D>(), 1) attention_wgmma_short(const AttentionParams p) {
  wgmma_short_block<D>(p.qkv, p.out, p.N, p.batches, p.decline, p.declined_ever);
}

}  // namespace fa

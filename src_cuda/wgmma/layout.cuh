// wgmma/layout.cuh: the wgmma kernels' launch geometry and memory layout.
//
// Block: kGroups = wg_groups<D>() consumer warpgroups (warps 0 .. 4 kGroups - 1, 64 query rows
// each), then one producer warpgroup. Grid: one block per SM (fewer where there is less work),
// each taking the work items blockIdx.x, + gridDim.x, ...: a batch's 64 kGroups rows (long
// sequences, kernel_long.cuh), a batch (short ones, kernel_short.cuh).
// Split K and V, in global memory (split_kv_blocked) and in shared memory alike: per batch,
// tiles of kTcBc keys (the last zero-padded), each [K_hi | K_lo | V_hi | V_lo], each array in
// wgmma's canonical no-swizzle layout: 8 x 8 core matrices (8 keys x 8 dimensions, 128
// contiguous bytes), dimension blocks innermost. A tile is one contiguous copy.
// Each kernel's shared memory is one struct (WgShared, WgShortShared); its size is what the
// host asks for.
#pragma once

#include <cstdint>

#include "../ptx/sm90.cuh"
#include "../fragments.cuh"

namespace fa {

// ------------------------------------------------------------------------- launch geometry
#ifndef FA_WG_GROUPS32
#define FA_WG_GROUPS32 2
#endif
template <int D>
__host__ __device__ constexpr int wg_groups() { return D == 32 ? FA_WG_GROUPS32 : 2; }
template <int D>
__host__ __device__ constexpr int wg_threads() { return 128 * (wg_groups<D>() + 1); }
// Registers per thread after the producer hands its share over: 24 for the producer, the rest
// of the SM's 64 K split among the consumers (a multiple of 8).
constexpr int kWgProducerRegs = 24;
template <int D>
__host__ __device__ constexpr int wg_consumer_regs() {
  return (65536 / 128 - kWgProducerRegs) / wg_groups<D>() / 8 * 8;
}
template <int D>
__host__ __device__ constexpr int wg_rows() { return 64 * wg_groups<D>(); }

// ------------------------------------------------------------------------- split tiles
#ifndef FA_WG_STAGES
#define FA_WG_STAGES 4
#endif
constexpr int kWgStages = FA_WG_STAGES;
template <int D>
__host__ __device__ constexpr int wg_tile_halves() { return 4 * kTcBc * D; }
__host__ __device__ constexpr int64_t wg_tiles(int64_t N) { return (N + kTcBc - 1) / kTcBc; }

// Offset (halves) of element (key, dim) of one array of a tile.
template <int D>
__host__ __device__ __forceinline__ int wg_offset(int key, int dim) {
  return ((key / 8) * (D / 8) + dim / 8) * 64 + (key % 8) * 8 + dim % 8;
}

// Descriptors' byte offsets between core matrices: the leading offset runs along the product's
// reduction, the stride offset along N. K as B (K-major, reducing over dims): 128 B to the next
// dimension block, D / 8 * 128 B to the next key block. V as B (transposed, reducing over
// keys): the other way round. (Measured: the swapped pairs give wrong results.)
template <int D>
struct WgTile {
  static constexpr int kArray = kTcBc * D;  // halves of one of K_hi, K_lo, V_hi, V_lo
  static constexpr uint32_t kNearDim = 128, kNearKey = D / 8 * 128;
  const __half* k_hi;
  __device__ __forceinline__ uint64_t k(int array, int ks) const {  // dims 16 ks.. of K_hi (0) or K_lo (1)
    return wg_desc(k_hi + array * kArray + ks * 2 * 64, kNearDim, kNearKey);
  }
  __device__ __forceinline__ uint64_t v(int array, int kk) const {  // keys 16 kk.. of V_hi (0) or V_lo (1)
    return wg_desc(k_hi + (2 + array) * kArray + kk * 2 * (D / 8) * 64, kNearKey, kNearDim);
  }
};

// ------------------------------------------------------------------------- shared memory
// Long sequences: kWgStages split tiles in a ring, two slots of Q (fp32, a work item's wg_rows
// rows), then the barriers (the ring's full and empty, Q's).
template <int D>
__host__ __device__ constexpr int wg_q_floats() { return wg_rows<D>() * D; }
template <int D>
struct WgShared {
  __half ring[kWgStages][wg_tile_halves<D>()];
  float q[2][wg_q_floats<D>()];
  uint64_t full[kWgStages], empty[kWgStages], q_full[2], q_empty[2];
};

// Short sequences (N <= kWgShortMaxN: one block holds a batch's rows and keys): staging slots
// of a batch's fp32 Q, K and V, as many as shared memory holds beside the split tiles (48 KB
// each at d = 32, 96 KB at d = 64), two buffers of both split tiles, the barriers.
constexpr int64_t kWgShortMaxN = 2 * kTcBc;
#ifndef FA_WG_SHORT_STAGES32
#define FA_WG_SHORT_STAGES32 3
#endif
template <int D>
__host__ __device__ constexpr int wg_short_stages() { return D == 32 ? FA_WG_SHORT_STAGES32 : 1; }
template <int D>
__host__ __device__ constexpr int wg_short_stage_floats() { return 3 * kWgShortMaxN * D; }
template <int D>
__host__ __device__ constexpr int wg_short_split_halves() { return 2 * wg_tile_halves<D>(); }  // both tiles
template <int D>
struct WgShortShared {
  float staging[wg_short_stages<D>()][wg_short_stage_floats<D>()];
  __half split[2][wg_short_split_halves<D>()];
  uint64_t full[wg_short_stages<D>()], empty[wg_short_stages<D>()], split_full[2], split_empty[2];
};

// A block's barriers: pairs full[s] / empty[s] with their arrival counts, initialized by thread 0
// (wg_init_pairs, once per set), then published to the block (wg_barriers_ready).
__device__ __forceinline__ void wg_init_pairs(uint64_t* full, uint64_t* empty, int n, int full_count, int empty_count) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < n; ++s) {
      mbar_init(&full[s], full_count);
      mbar_init(&empty[s], empty_count);
    }
  }
}
__device__ __forceinline__ void wg_barriers_ready() {
  if (threadIdx.x == 0) mbar_init_fence();
  __syncthreads();
}

template <int D>
__host__ __device__ constexpr int wg_smem_bytes() { return sizeof(WgShared<D>); }
template <int D>
__host__ __device__ constexpr int wg_short_smem_bytes() { return sizeof(WgShortShared<D>); }

}  // namespace fa

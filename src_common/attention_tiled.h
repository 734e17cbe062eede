// attention_tiled.h: the homework kernel in plain fp32, one source for CUDA and HIP.
//
// Written against the platform's primitives (gpu_primitives.h: FA_SHFL_XOR, FA_SYNC_WAVE,
// FA_WAVE, FA_LAUNCH_BOUNDS); launched by src_common/fp32_launches.h.
// Algorithm (FlashAttention forward): a block holds Br = 16 query rows in registers and streams
// K/V tiles of Bc keys through shared memory, one score per thread and tile (TiledTile: the
// geometry; -DFA_TILED_BR=N and -DFA_TILED_BC=N build others, for `fa sweep`); the online softmax
// keeps each row's running max and compensated running sum and rescales the output accumulator
// by 2^(m_old - m_new); O is written once, at the end. Q is pre-scaled by log2(e)/sqrt(d), so
// exp2 gives e^x. Keys past N score -inf; rows past N compute but never store.
// Bc follows the hardware: 32 on NVIDIA (a warp per row), 64 on AMD CDNA (a wavefront per row),
// so row reductions stay inside one warp; a Bc wider than the warp (the AMD tile run on an
// NVIDIA GPU) combines the warps' partial results through shared memory.
// The kernel reads as its phases (tiled_rows); its arguments: AttentionParams (attention_params.h).
// Measurements (profiles, bank conflicts): docs/kernels.md.
#pragma once

#include <cstdint>

#include "attention_params.h"
#include "compensated_sum.h"
#include "gpu_primitives.h"
#include "online_softmax.h"

namespace fa {

// Query rows per block (Br); FA_TILED_BR=N builds another (the block-size sweep, `fa sweep`).
#ifndef FA_TILED_BR
#define FA_TILED_BR 16
#endif
constexpr int kTiledBr = FA_TILED_BR;

// Row reductions over BC lanes: butterfly inside each warp, then across the row's warps.
template <int BC>
struct RowReduce {
  static constexpr int kLanes = BC < FA_WAVE ? BC : FA_WAVE;  // lanes of one warp in a row
  static constexpr int kParts = BC / kLanes;                  // warps a row spans

  template <class Op>
  __device__ static float all(float x, Op op, float* parts /* [kTiledBr][kParts] */, int row, int lane) {
#pragma unroll
    for (int offset = kLanes / 2; offset > 0; offset >>= 1) x = op(x, FA_SHFL_XOR(x, offset, kLanes));
    if (kParts == 1) return x;
    __syncthreads();  // `parts` may still be read from the last reduction
    if (lane % kLanes == 0) parts[row * kParts + lane / kLanes] = x;
    __syncthreads();
    x = parts[row * kParts];
#pragma unroll
    for (int p = 1; p < kParts; ++p) x = op(x, parts[row * kParts + p]);
    return x;
  }
  // Orders the Ps row between its writers and readers.
  __device__ static void sync_row() {
    if (kParts == 1) {
      FA_SYNC_WAVE();
    } else {
      __syncthreads();
    }
  }
};

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// The block's geometry. One block per (batch, rows_per_block query rows), blockDim =
// (keys_per_tile, rows_per_block): threadIdx.y = the query row, threadIdx.x = a key of the current
// tile (and, for P V, output columns x, x + keys_per_tile, ...). Shared memory (TiledShared), two
// stages so that one barrier per tile suffices (one stage and two barriers where two would pass
// 40 KB: Bc = 64 with d = 64, as AMD's LDS holds 64 KB per workgroup):
//   k[S][Bc][d + 1]  K tile; the +1 pitch puts the lanes' reads k[j][x] in distinct banks
//   v[S][Bc][d]      V tile; lanes read consecutive columns of one row
//   p[Br][Bc]        the tile's probabilities, a row per warp, read back as float4 broadcasts
template <int D, int BC, bool ExplicitReadOnly = false>
struct TiledTile {
  static constexpr int d = D;
  static constexpr bool explicit_read_only = ExplicitReadOnly;  // tiled_load4
  static constexpr int rows_per_block = kTiledBr;  // Br (FA_TILED_BR): query rows, one per row of threads
  static constexpr int keys_per_tile = BC;         // Bc (FA_TILED_BC): keys of a K/V tile, one per lane
  static constexpr int threads = rows_per_block * keys_per_tile;
  static constexpr int threads_per_row = keys_per_tile;             // lanes that share a query row
  static constexpr int cols_per_lane = (d + keys_per_tile - 1) / keys_per_tile;  // O columns x + Bc c
  static constexpr int quads_per_key = d / 4;                       // float4 per K/V row
  static constexpr int tile_quads = keys_per_tile * quads_per_key;  // float4 of K (and of V) per tile
  static constexpr int loads_per_thread = (tile_quads + threads - 1) / threads;  // 1 for Br >= d / 4
  static constexpr int k_pitch = d + 1, v_pitch = d;
  static constexpr int stages = 2 * keys_per_tile * (k_pitch + v_pitch) * 4 <= 40 * 1024 ? 2 : 1;
  // Blocks per SM the compiler is asked to fit (__launch_bounds__): two 512-thread blocks at d = 32.
  static constexpr int min_blocks = d == 32 && threads <= 512 ? 1024 / threads : 1;
  static_assert(threads <= 1024, "Br x Bc threads: a block holds at most 1024");
};

template <class T>
struct TiledShared {
  typedef RowReduce<T::keys_per_tile> Reduce;
  float k[T::stages][T::keys_per_tile][T::k_pitch];
  float v[T::stages][T::keys_per_tile][T::v_pitch];
  __align__(16) float p[T::rows_per_block][T::keys_per_tile];
  float parts[T::rows_per_block * Reduce::kParts];
};

// Blocks per SM the compiler is asked to fit: TiledTile::min_blocks.
template <int D, int BC>
constexpr int tiled_min_blocks() {
  return TiledTile<D, BC>::min_blocks;
}

// A float4 of Q, K or V. T::explicit_read_only: an explicit ld.global.nc (LDG.CONSTANT) on
// NVIDIA, for attention_tiled_declined, which reaches these loads past inline assembly that may
// write memory (griddepcontrol.wait), where nvcc no longer proves its AttentionParams' pointers
// read-only. Not for attention_tiled, whose plain loads are LDG.CONSTANT already: there __ldg
// computes each address of Q apart (attention_tiled<64, 32>: 904 instructions instead of 808).
template <class T>
__device__ __forceinline__ float4 tiled_load4(const float* __restrict__ p) {
#ifdef __CUDA_ARCH__
  if (T::explicit_read_only) return __ldg(reinterpret_cast<const float4*>(p));
#endif
  return *reinterpret_cast<const float4*>(p);
}

// Load Q rows: this thread's query row into registers, pre-scaled by log2(e) / sqrt(d) (all lanes
// load the same row: broadcast reads); rows past N are zeros.
template <class T>
__device__ __forceinline__ void tiled_load_q(const float* __restrict__ Q, int64_t row, int64_t N, float (&q)[T::d]) {
  const float q_scale = 1.4426950408889634f / sqrtf((float)T::d);
#pragma unroll
  for (int k = 0; k < T::d; k += 4) {
    float4 v = row < N ? tiled_load4<T>(Q + row * T::d + k) : make_float4(0, 0, 0, 0);
    q[k] = v.x * q_scale, q[k + 1] = v.y * q_scale, q[k + 2] = v.z * q_scale, q[k + 3] = v.w * q_scale;
  }
}

// Load K/V tile: load i of a tile (i < tile_quads) moves one float4 of K and one of V; thread tid
// does loads tid, tid + threads, ... fetch brings a tile into registers (the next one, while the
// current one is computed), stash stores it into a shared stage.
template <class T>
struct TiledKVLoads {
  int row[T::loads_per_thread], col[T::loads_per_thread];
  float4 k[T::loads_per_thread], v[T::loads_per_thread];

  __device__ __forceinline__ explicit TiledKVLoads(int tid) {
#pragma unroll
    for (int r = 0; r < T::loads_per_thread; ++r) {
      const int i = tid + r * T::threads;
      row[r] = i / T::quads_per_key, col[r] = (i % T::quads_per_key) * 4;
    }
  }
  __device__ __forceinline__ void fetch(const float* __restrict__ K, const float* __restrict__ V, int64_t key0,
                                        int64_t N, int tid) {
#pragma unroll
    for (int r = 0; r < T::loads_per_thread; ++r) {
      const int64_t key = key0 + row[r];
      if ((tid + r * T::threads < T::tile_quads) && key < N) {
        k[r] = tiled_load4<T>(K + key * T::d + col[r]);
        v[r] = tiled_load4<T>(V + key * T::d + col[r]);
      } else {
        k[r] = v[r] = make_float4(0, 0, 0, 0);  // keys past N: zeros, never NaN from garbage
      }
    }
  }
  __device__ __forceinline__ void stash(TiledShared<T>& smem, int buf, int tid) const {
#pragma unroll
    for (int r = 0; r < T::loads_per_thread; ++r) {
      if (tid + r * T::threads < T::tile_quads) {
        float* ks = &smem.k[buf][row[r]][col[r]];
        ks[0] = k[r].x, ks[1] = k[r].y, ks[2] = k[r].z, ks[3] = k[r].w;
        *reinterpret_cast<float4*>(&smem.v[buf][row[r]][col[r]]) = v[r];
      }
    }
  }
};

// Scores: this lane's key of the tile against the row's Q, four partial sums for
// instruction-level parallelism; keys past N score -inf.
template <class T>
__device__ __forceinline__ float tiled_scores(const float (&q)[T::d], const float* k_row, int64_t key0, int64_t N,
                                              int lane) {
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
  for (int k = 0; k < T::d; k += 4) {
    s0 = fmaf(q[k], k_row[k], s0);
    s1 = fmaf(q[k + 1], k_row[k + 1], s1);
    s2 = fmaf(q[k + 2], k_row[k + 2], s2);
    s3 = fmaf(q[k + 3], k_row[k + 3], s3);
  }
  return key0 + lane < N ? (s0 + s1) + (s2 + s3) : -INFINITY;
}

// Online softmax: the row's new max m, the lane's probability p = 2^(s - m), the running sum l
// and the O row rescaled by 2^(m_old - m_new). Returns p.
template <class T>
__device__ __forceinline__ float tiled_online_softmax(float s, float& m, CompensatedSum& l,
                                                      float (&acc)[T::cols_per_lane], TiledShared<T>& smem,
                                                      int row_in_tile, int lane) {
  typedef typename TiledShared<T>::Reduce Reduce;
  const float alpha = online_rescale<Exp2Library>(m, l, Reduce::all(s, MaxOp{}, smem.parts, row_in_tile, lane));
  const float p = exp2f(s - m);
  l.add(p);
#pragma unroll
  for (int c = 0; c < T::cols_per_lane; ++c) acc[c] *= alpha;
  return p;
}

// Fold P V: O row += P V over the tile's keys: v is the tile's stage of V (v_pitch floats a key),
// p_row the row's probabilities, shared by its lanes. Both restrict: as plain references into the
// shared struct, hipcc kept more registers live (attention_tiled<32, 32> on gfx908: 98 VGPRs
// instead of 83, one wavefront per SIMD fewer).
template <class T>
__device__ __forceinline__ void tiled_fold_pv(float p, float (&acc)[T::cols_per_lane], const float* __restrict__ v,
                                              float* __restrict__ p_row, int lane) {
  typedef typename TiledShared<T>::Reduce Reduce;
  constexpr int BC = T::keys_per_tile;
  p_row[lane] = p;
  Reduce::sync_row();
#pragma unroll 8
  for (int j = 0; j < BC; j += 4) {
    const float4 pj = *reinterpret_cast<const float4*>(&p_row[j]);
#pragma unroll
    for (int c = 0; c < T::cols_per_lane; ++c) {
      const int x = lane + BC * c;
      if (x < T::d) {
        acc[c] = fmaf(pj.x, v[j * T::v_pitch + x], acc[c]);
        acc[c] = fmaf(pj.y, v[(j + 1) * T::v_pitch + x], acc[c]);
        acc[c] = fmaf(pj.z, v[(j + 2) * T::v_pitch + x], acc[c]);
        acc[c] = fmaf(pj.w, v[(j + 3) * T::v_pitch + x], acc[c]);
      }
    }
  }
  Reduce::sync_row();  // p_row is rewritten by the next tile
}

// Store O: the row normalized by its sum, written once; rows past N are never stored.
template <class T>
__device__ __forceinline__ void tiled_store_o(float* __restrict__ O, const float (&acc)[T::cols_per_lane],
                                              const CompensatedSum& l, TiledShared<T>& smem, int64_t row, int64_t N,
                                              int row_in_tile, int lane) {
  typedef typename TiledShared<T>::Reduce Reduce;
  const float inv_l = 1.f / Reduce::all(l.value(), SumOp{}, smem.parts, row_in_tile, lane);
  if (row < N) {
#pragma unroll
    for (int c = 0; c < T::cols_per_lane; ++c) {
      const int x = lane + T::keys_per_tile * c;
      if (x < T::d) O[row * T::d + x] = acc[c] * inv_l;
    }
  }
}

// One block's work: the rows_per_block query rows of row tile `tile` (batch tile / row_tiles).
// Load Q rows (tiled_load_q), then per K/V tile: load the next tile (TiledKVLoads: fetch into
// registers, stash into shared memory), scores (tiled_scores), online softmax
// (tiled_online_softmax), fold P V (tiled_fold_pv); last, store O (tiled_store_o).
template <class T>
__device__ __forceinline__ void tiled_rows(const float* __restrict__ qkv, float* __restrict__ out, int64_t N,
                                           int64_t row_tiles, int64_t tile) {
  constexpr int D = T::d, BC = T::keys_per_tile;
  __shared__ TiledShared<T> smem;
  static_assert(sizeof(TiledShared<T>) <= 48 * 1024, "Br x Bc tiles need more than 48 KB of static shared memory");

  const int lane = threadIdx.x, row_in_tile = threadIdx.y;
  const int tid = row_in_tile * BC + lane;
  const int64_t b = tile / row_tiles;
  const int64_t row = (tile % row_tiles) * T::rows_per_block + row_in_tile;
  const float* Q = qkv + b * 3 * N * D;
  const float* K = Q + N * D;
  const float* V = K + N * D;

  float q[D];
  tiled_load_q<T>(Q, row, N, q);

  float m = -INFINITY;              // running max (base 2)
  CompensatedSum l;                 // this lane's share of the running sum
  float acc[T::cols_per_lane] = {};  // O row: lane owns columns lane + BC * c
  TiledKVLoads<T> kv(tid);
  kv.fetch(K, V, 0, N, tid);
  kv.stash(smem, 0, tid);
  __syncthreads();
  int buf = 0;
  for (int64_t key0 = 0; key0 < N; key0 += BC) {
    const bool more = key0 + BC < N;
    if (more) kv.fetch(K, V, key0 + BC, N, tid);  // in flight while this tile is computed
    const float s = tiled_scores<T>(q, smem.k[buf][lane], key0, N, lane);
    const float p = tiled_online_softmax<T>(s, m, l, acc, smem, row_in_tile, lane);
    tiled_fold_pv<T>(p, acc, &smem.v[buf][0][0], smem.p[row_in_tile], lane);
    if (more) {
      if (T::stages == 1) __syncthreads();  // one buffer: every warp must be done with it first
      kv.stash(smem, T::stages - 1 - buf, tid);  // two: the other one, which all finished before the last barrier
    }
    __syncthreads();
    buf = T::stages - 1 - buf;
  }

  tiled_store_o<T>(out + b * N * D, acc, l, smem, row, N, row_in_tile, lane);
}

template <int D, int BC>
__global__ void FA_LAUNCH_BOUNDS(kTiledBr* BC, (tiled_min_blocks<D, BC>())) attention_tiled(const AttentionParams p) {
  tiled_rows<TiledTile<D, BC> >(p.qkv, p.out, p.N, p.row_tiles, blockIdx.x);
}

}  // namespace fa

// attention_tiled.h: the homework kernel in plain fp32, one source for CUDA and HIP.
//
// The includer first defines its platform's primitives FA_SHFL_XOR(v, mask, width),
// FA_SYNC_WAVE(), FA_WAVE and FA_LAUNCH_BOUNDS (src_cuda/kernel_primitives.cuh for nvcc,
// src_hip/hip_api.h for hipcc); the guard below names what is missing.
// Algorithm (FlashAttention forward): a block holds kTiledBr = 16 query rows in registers and streams
// K/V tiles of BC keys through shared memory, one score per thread and tile; the online softmax
// keeps each row's running max and compensated running sum and rescales the output accumulator
// by 2^(m_old - m_new); O is written once, at the end. Q is pre-scaled by log2(e)/sqrt(d), so
// exp2 gives e^x. Keys past N score -inf; rows past N compute but never store.
// BC follows the hardware: 32 on NVIDIA (a warp per row), 64 on AMD CDNA (a wavefront per row),
// so row reductions stay inside one warp; a BC wider than the warp (the AMD tile run on an
// NVIDIA GPU) combines the warps' partial results through shared memory.
// Measurements (profiles, bank conflicts): docs/kernels.md.
#pragma once

#include <cstdint>

#include "compensated_sum.h"

#if !defined(FA_SHFL_XOR) || !defined(FA_SYNC_WAVE) || !defined(FA_WAVE) || !defined(FA_LAUNCH_BOUNDS)
#error "attention_tiled.h needs FA_SHFL_XOR, FA_SYNC_WAVE, FA_WAVE and FA_LAUNCH_BOUNDS: include src_cuda/kernel_primitives.cuh (nvcc) or src_hip/hip_api.h (hipcc) first"
#endif

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

// Blocks per SM the compiler is asked to fit (__launch_bounds__): two 512-thread blocks at d = 32.
template <int D, int BC>
constexpr int tiled_min_blocks() {
  return D == 32 && kTiledBr * BC <= 512 ? 1024 / (kTiledBr * BC) : 1;
}

// One block's work: the kTiledBr query rows of row tile `tile` (batch tile / row_tiles).
template <int D, int BC>
__device__ __forceinline__ void tiled_rows(const float* __restrict__ qkv, float* __restrict__ out, int64_t N,
                                           int64_t row_tiles, int64_t tile) {
  using Reduce = RowReduce<BC>;
  constexpr int kPitch = D + 1;
  constexpr int kVec = D / 4;              // float4 per K/V row
  constexpr int kLoads = BC * kVec;        // float4 of K (and of V) per tile
  constexpr int kThreads = BC * kTiledBr;
  constexpr int kLoadRounds = (kLoads + kThreads - 1) / kThreads;  // per thread: 1 for Br >= d / 4
  constexpr int kCols = (D + BC - 1) / BC;  // output columns per lane
  // Launch geometry: one block per (batch, kTiledBr query rows), blockDim = (BC, kTiledBr):
  // threadIdx.y = the query row, threadIdx.x = a key of the current tile (and, for P V, output
  // columns x, x + BC, ...). Shared memory, two stages so that one barrier per tile suffices (one
  // stage and two barriers where two would pass 40 KB: BC = 64 with d = 64, as AMD's LDS holds
  // 64 KB per workgroup):
  //   Ks[S][BC][D + 1]  K tile; the +1 pitch puts the lanes' reads Ks[j][k] in distinct banks
  //   Vs[S][BC][D]      V tile; lanes read consecutive columns of one row
  //   Ps[kTiledBr][BC]  the tile's probabilities, a row per warp, read back as float4 broadcasts
  constexpr int kStages = 2 * BC * (kPitch + D) * 4 <= 40 * 1024 ? 2 : 1;
  __shared__ float Ks[kStages][BC][kPitch];
  __shared__ float Vs[kStages][BC][D];
  __shared__ __align__(16) float Ps[kTiledBr][BC];
  __shared__ float parts[kTiledBr * Reduce::kParts];
  static_assert(kThreads <= 1024, "Br x Bc threads: a block holds at most 1024");
  static_assert(sizeof(Ks) + sizeof(Vs) + sizeof(Ps) + sizeof(parts) <= 48 * 1024,
                "Br x Bc tiles need more than 48 KB of static shared memory");

  const int lane = threadIdx.x, row_in_tile = threadIdx.y;
  const int tid = row_in_tile * BC + lane;
  const int64_t b = tile / row_tiles;
  const int64_t row = (tile % row_tiles) * kTiledBr + row_in_tile;
  const float* Q = qkv + b * 3 * N * D;
  const float* K = Q + N * D;
  const float* V = K + N * D;

  // --- Q row into registers (all lanes load the same row: broadcast reads).
  const float q_scale = 1.4426950408889634f / sqrtf((float)D);
  float q[D];
#pragma unroll
  for (int k = 0; k < D; k += 4) {
    float4 v = row < N ? *reinterpret_cast<const float4*>(Q + row * D + k) : make_float4(0, 0, 0, 0);
    q[k] = v.x * q_scale, q[k + 1] = v.y * q_scale, q[k + 2] = v.z * q_scale, q[k + 3] = v.w * q_scale;
  }

  // --- K/V tile loads: load i of a tile (i < kLoads) moves one float4 of K and one of V; thread
  // tid does loads tid, tid + kThreads, ... The next tile is loaded into registers before the
  // current one is computed, stored after it.
  int load_row[kLoadRounds], load_col[kLoadRounds];
#pragma unroll
  for (int r = 0; r < kLoadRounds; ++r) {
    const int i = tid + r * kThreads;
    load_row[r] = i / kVec, load_col[r] = (i % kVec) * 4;
  }
  float4 k_next[kLoadRounds], v_next[kLoadRounds];
  auto fetch = [&](int64_t key0) {
#pragma unroll
    for (int r = 0; r < kLoadRounds; ++r) {
      const int64_t key = key0 + load_row[r];
      if ((tid + r * kThreads < kLoads) && key < N) {
        k_next[r] = *reinterpret_cast<const float4*>(K + key * D + load_col[r]);
        v_next[r] = *reinterpret_cast<const float4*>(V + key * D + load_col[r]);
      } else {
        k_next[r] = v_next[r] = make_float4(0, 0, 0, 0);  // keys past N: zeros, never NaN from garbage
      }
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int r = 0; r < kLoadRounds; ++r) {
      if (tid + r * kThreads < kLoads) {
        float* k = &Ks[buf][load_row[r]][load_col[r]];
        k[0] = k_next[r].x, k[1] = k_next[r].y, k[2] = k_next[r].z, k[3] = k_next[r].w;
        *reinterpret_cast<float4*>(&Vs[buf][load_row[r]][load_col[r]]) = v_next[r];
      }
    }
  };

  float m = -INFINITY;           // running max (base 2)
  CompensatedSum l;              // this lane's share of the running sum
  float acc[kCols] = {};         // O row: lane owns columns lane + BC * c
  fetch(0);
  stash(0);
  __syncthreads();
  int buf = 0;
  for (int64_t key0 = 0; key0 < N; key0 += BC) {
    const bool more = key0 + BC < N;
    if (more) fetch(key0 + BC);  // in flight while this tile is computed

    // --- Scores: one per lane, four partial sums for instruction-level parallelism.
    const float* k_row = Ks[buf][lane];
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
    for (int k = 0; k < D; k += 4) {
      s0 = fmaf(q[k], k_row[k], s0);
      s1 = fmaf(q[k + 1], k_row[k + 1], s1);
      s2 = fmaf(q[k + 2], k_row[k + 2], s2);
      s3 = fmaf(q[k + 3], k_row[k + 3], s3);
    }
    const float s = key0 + lane < N ? (s0 + s1) + (s2 + s3) : -INFINITY;

    // --- Online softmax.
    const float m_new = fmaxf(m, Reduce::all(s, MaxOp{}, parts, row_in_tile, lane));
    const float alpha = exp2f(m - m_new);
    const float p = exp2f(s - m_new);
    l.scale(alpha);
    l.add(p);
    m = m_new;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[c] *= alpha;

    // --- Output: O row += P V over the tile's BC keys.
    Ps[row_in_tile][lane] = p;
    Reduce::sync_row();
#pragma unroll 8
    for (int j = 0; j < BC; j += 4) {
      const float4 pj = *reinterpret_cast<const float4*>(&Ps[row_in_tile][j]);
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int x = lane + BC * c;
        if (x < D) {
          acc[c] = fmaf(pj.x, Vs[buf][j][x], acc[c]);
          acc[c] = fmaf(pj.y, Vs[buf][j + 1][x], acc[c]);
          acc[c] = fmaf(pj.z, Vs[buf][j + 2][x], acc[c]);
          acc[c] = fmaf(pj.w, Vs[buf][j + 3][x], acc[c]);
        }
      }
    }
    Reduce::sync_row();  // Ps is rewritten by the next tile

    if (more) {
      if (kStages == 1) __syncthreads();  // one buffer: every warp must be done with it first
      stash(kStages - 1 - buf);           // two: the other one, which all finished before the last barrier
    }
    __syncthreads();
    buf = kStages - 1 - buf;
  }

  // --- O written once.
  const float inv_l = 1.f / Reduce::all(l.value(), SumOp{}, parts, row_in_tile, lane);
  if (row < N) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int x = lane + BC * c;
      if (x < D) out[b * N * D + row * D + x] = acc[c] * inv_l;
    }
  }
}

template <int D, int BC>
__global__ void FA_LAUNCH_BOUNDS(kTiledBr* BC, (tiled_min_blocks<D, BC>()))
    attention_tiled(const float* __restrict__ qkv, float* __restrict__ out, int64_t N, int64_t row_tiles) {
  tiled_rows<D, BC>(qkv, out, N, row_tiles, blockIdx.x);
}

template <int D, int BC, class Stream>
void launch_tiled(const float* qkv, float* out, int64_t batches, int64_t N, Stream stream) {
  const int64_t row_tiles = (N + kTiledBr - 1) / kTiledBr;
  attention_tiled<D, BC><<<(unsigned)(batches * row_tiles), dim3(BC, kTiledBr), 0, stream>>>(qkv, out, N, row_tiles);
}

}  // namespace fa

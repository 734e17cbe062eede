// ladder.h: the homework kernel's optimizations one step at a time, for the report's section 3.
//
// Every step is a complete kernel computing O = softmax(Q K^T / sqrt(d)) V with the same online
// softmax (running max m, compensated running sum l, O rescaled by 2^(m_old - m_new); Q
// pre-scaled by log2(e)/sqrt(d) so exp2 gives e^x); the steps differ in who reads what from
// where. Programs run step N with FA_KERNEL=ladder-N; `fa ladder CASE` runs them all in order,
// followed by the tiled kernel (attention_tiled.h: Q and O in registers, float4 loads and a
// register prefetch of the next tile) and, on NVIDIA, the tensor-core kernel. Written against
// the same platform primitives as attention_tiled.h (FA_SHFL_XOR, FA_SYNC_WAVE, FA_WAVE,
// FA_LAUNCH_BOUNDS); every launch is one block per (batch, group of rows), on a 1-D grid.
#pragma once

#include <cstdint>

#include "attention_params.h"
#include "compensated_sum.h"
#include "gpu_primitives.h"
#include "online_softmax.h"

namespace fa {
namespace ladder {

// Each kernel's block is a template parameter, which its launch (fp32_launches.h) gives from one
// constant; steps 3-5 tile keys by a warp's 32 lanes (a lane per key), as the design card's Bc.
constexpr int kTileBc = 32;

constexpr float kLog2e = 1.4426950408889634f;

// The online softmax of one row, as every step keeps it: fold in a score s, get p and the
// factor alpha that rescales what was accumulated so far.
struct RowSoftmax {
  float m = -INFINITY;
  CompensatedSum l;

  __device__ float step(float s, float& alpha) {
    alpha = online_rescale<Exp2Library>(m, l, s);
    const float p = exp2f(s - m);
    l.add(p);
    return p;
  }
};

// --- 1 naive: one thread per query row, reading every key's K and V row from global memory.
//     The starting point: neighbouring threads read Q rows d floats apart (uncoalesced), and
//     each thread walks all of K and V alone, its whole output row in registers.
template <int D, int Threads>  // Threads: query rows per block, one a thread
__device__ __forceinline__ void naive_rows(const float* __restrict__ qkv, float* __restrict__ out, int64_t N,
                                          int64_t row_tiles) {
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t row = (blockIdx.x % row_tiles) * Threads + threadIdx.x;
  if (row >= N) return;
  const float* Q = qkv + b * 3 * N * D;
  const float* K = Q + N * D;
  const float* V = K + N * D;
  const float scale = kLog2e / sqrtf((float)D);
  float q[D], acc[D];  // unrolled loops keep both in registers
#pragma unroll
  for (int k = 0; k < D; ++k) q[k] = Q[row * D + k] * scale, acc[k] = 0.f;
  RowSoftmax softmax;
  for (int64_t j = 0; j < N; ++j) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < D; ++k) s = fmaf(q[k], K[j * D + k], s);
    float alpha;
    const float p = softmax.step(s, alpha);
#pragma unroll
    for (int k = 0; k < D; ++k) acc[k] = fmaf(p, V[j * D + k], acc[k] * alpha);
  }
  const float inv_l = 1.f / softmax.l.value();
#pragma unroll
  for (int k = 0; k < D; ++k) out[b * N * D + row * D + k] = acc[k] * inv_l;
}
template <int D, int Threads>
__global__ void FA_LAUNCH_BOUNDS(Threads, 1) naive(const AttentionParams p) {
  naive_rows<D, Threads>(p.qkv, p.out, p.N, p.row_tiles);
}

// --- 2 warp-per-row: a warp (wavefront) per query row, its lanes across the d columns.
//     Was: a thread per row. Every read of a Q, K or V row is now one coalesced access; each
//     score is a butterfly sum over the lanes, and each lane keeps only its own output columns.
template <int D, int Threads>  // Threads: per block, a warp (wavefront) per query row
__device__ __forceinline__ void warp_per_row_rows(const float* __restrict__ qkv, float* __restrict__ out, int64_t N,
                                                 int64_t row_tiles) {
  constexpr int kRows = Threads / FA_WAVE, kCols = (D + FA_WAVE - 1) / FA_WAVE;
  const int lane = threadIdx.x % FA_WAVE;
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t row = (blockIdx.x % row_tiles) * kRows + threadIdx.x / FA_WAVE;
  if (row >= N) return;  // the whole warp leaves together: its shuffles stay complete
  const float* Q = qkv + b * 3 * N * D;
  const float* K = Q + N * D;
  const float* V = K + N * D;
  const float scale = kLog2e / sqrtf((float)D);
  float q[kCols], acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int x = lane + c * FA_WAVE;
    q[c] = x < D ? Q[row * D + x] * scale : 0.f;
    acc[c] = 0.f;
  }
  RowSoftmax softmax;  // the same in every lane of the row
  for (int64_t j = 0; j < N; ++j) {
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int x = lane + c * FA_WAVE;
      if (x < D) s = fmaf(q[c], K[j * D + x], s);
    }
#pragma unroll
    for (int offset = FA_WAVE / 2; offset > 0; offset >>= 1) s += FA_SHFL_XOR(s, offset, FA_WAVE);
    float alpha;
    const float p = softmax.step(s, alpha);
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int x = lane + c * FA_WAVE;
      if (x < D) acc[c] = fmaf(p, V[j * D + x], acc[c] * alpha);
    }
  }
  const float inv_l = 1.f / softmax.l.value();
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int x = lane + c * FA_WAVE;
    if (x < D) out[b * N * D + row * D + x] = acc[c] * inv_l;
  }
}
template <int D, int Threads>
__global__ void FA_LAUNCH_BOUNDS(Threads, 1) warp_per_row(const AttentionParams p) {
  warp_per_row_rows<D, Threads>(p.qkv, p.out, p.N, p.row_tiles);
}

// --- 3 smem-tiles: K and V in tiles of kTileBc keys in shared memory, loaded once per block for
//     its BR rows (was: each row's warp read all of K and V from global memory); Q in shared
//     memory too; a thread per (row, key) score, row max and sum by shuffles, P through shared
//     memory to the P V product (lanes own output columns). BR = 4, K unpadded: the lanes'
//     reads Ks[lane][k] are d floats apart, all in one bank (32-way conflicts).
// --- 4 padded-K: the K tile's rows padded to d + 1 floats (was: d), so those reads fall in 32
//     different banks.
// --- 5 br16: 16 query rows per block (was: 4), so each K/V tile read from global memory serves
//     4x the rows, and a block has 16 warps to hide the loads' latency.
template <int D, int BR, bool kPadK>
__device__ __forceinline__ void smem_tiles_rows(const float* __restrict__ qkv, float* __restrict__ out, int64_t N,
                                               int64_t row_tiles) {
  constexpr int kPitch = kPadK ? D + 1 : D, kThreads = kTileBc * BR, kCols = D / kTileBc;
  __shared__ float Qs[BR][D];
  __shared__ float Ks[kTileBc][kPitch];
  __shared__ float Vs[kTileBc][D];
  __shared__ float Ps[BR][kTileBc];
  const int lane = threadIdx.x, r = threadIdx.y, tid = r * kTileBc + lane;  // lane: a key of the tile
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t row0 = (blockIdx.x % row_tiles) * BR;
  const float* Q = qkv + b * 3 * N * D;
  const float* K = Q + N * D;
  const float* V = K + N * D;
  const float scale = kLog2e / sqrtf((float)D);
  for (int i = tid; i < BR * D; i += kThreads) {
    const int64_t row = row0 + i / D;
    Qs[i / D][i % D] = row < N ? Q[row * D + i % D] * scale : 0.f;
  }
  float acc[kCols] = {};  // columns lane, lane + 32, ... of this thread's row
  float m = -INFINITY;
  CompensatedSum l;  // this lane's share of the row's sum
  for (int64_t key0 = 0; key0 < N; key0 += kTileBc) {
    __syncthreads();  // the last tile's readers are done (and, the first time, Qs is written)
    for (int i = tid; i < kTileBc * D; i += kThreads) {
      const int64_t key = key0 + i / D;
      Ks[i / D][i % D] = key < N ? K[key * D + i % D] : 0.f;
      Vs[i / D][i % D] = key < N ? V[key * D + i % D] : 0.f;
    }
    __syncthreads();
    float s = 0.f;
#pragma unroll 16
    for (int k = 0; k < D; ++k) s = fmaf(Qs[r][k], Ks[lane][k], s);
    s = key0 + lane < N ? s : -INFINITY;
    float tile_max = s;
#pragma unroll
    for (int offset = kTileBc / 2; offset > 0; offset >>= 1)
      tile_max = fmaxf(tile_max, FA_SHFL_XOR(tile_max, offset, kTileBc));
    const float alpha = online_rescale<Exp2Library>(m, l, tile_max), p = exp2f(s - m);
    l.add(p);
    Ps[r][lane] = p;
    FA_SYNC_WAVE();  // the row's probabilities, written by its 32 lanes, are read by all of them
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      acc[c] *= alpha;
#pragma unroll 8
      for (int j = 0; j < kTileBc; ++j) acc[c] = fmaf(Ps[r][j], Vs[j][lane + c * kTileBc], acc[c]);
    }
  }
  float row_sum = l.value();
#pragma unroll
  for (int offset = kTileBc / 2; offset > 0; offset >>= 1) row_sum += FA_SHFL_XOR(row_sum, offset, kTileBc);
  const int64_t row = row0 + r;
  if (row < N) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) out[b * N * D + row * D + lane + c * kTileBc] = acc[c] / row_sum;
  }
}
template <int D, int BR, bool kPadK>
__global__ void FA_LAUNCH_BOUNDS(kTileBc* BR, 1) smem_tiles(const AttentionParams p) {
  smem_tiles_rows<D, BR, kPadK>(p.qkv, p.out, p.N, p.row_tiles);
}

}  // namespace ladder
}  // namespace fa

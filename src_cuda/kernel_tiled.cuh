// kernel_tiled.cuh: the homework kernel, in plain fp32 on CUDA cores. Runs on every GPU the
// program builds for (sm_61 included) and is the fallback of the tensor-core kernel.
//
// Launch geometry: one block per (batch, tile of kBr = 16 query rows), blockDim = (32, 16).
//   threadIdx.y = query row of the tile: each warp owns one row of Q and of O;
//   threadIdx.x = key of the current K/V tile: each lane computes one score per tile.
// Shared memory, two buffers so that one barrier per tile suffices:
//   Ks[2][32][D + 1]  K tile; the +1 pitch puts lane j's reads Ks[j][k] in 32 distinct banks
//   Vs[2][32][D]      V tile; lanes read consecutive columns of one row (no conflicts)
//   Ps[16][32]        the tile's probabilities, one row per warp, read back as float4 broadcasts
// Per tile: scores s = q . k_j (q held in registers, pre-scaled by log2(e)/sqrt(d), so that
// exp2 gives e^x); row max by an xor butterfly over the warp; online softmax (running max m,
// running per-lane sum l, accumulator rescaled by 2^(m_old - m_new)); O row += P V with lane x
// owning columns x and x + 32. The next tile's K and V are loaded from global memory into
// registers (float4) before the current tile is computed, and stored after it.
// O is written once, at the end. Keys past N score -inf; rows past N compute but never store.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fa {

constexpr int kTiledBr = 16;  // query rows per block (one warp each)
constexpr int kTiledBc = 32;  // keys per tile (one per lane)

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// `decline`: nullptr to always run; otherwise the kernel runs only where the tensor-core
// path declined this chunk (*decline != 0: values it cannot represent exactly enough).
template <int D>
__global__ void __launch_bounds__(kTiledBr * kTiledBc, D == 32 ? 2 : 1)
    attention_tiled(const float* __restrict__ qkv, float* __restrict__ out, int64_t N, int64_t row_tiles,
                    const int* __restrict__ decline) {
  if (decline != nullptr && *decline == 0) return;
  constexpr int kPitch = D + 1;
  constexpr int kVec = D / 4;                               // float4 per K/V row
  constexpr int kLoaders = kTiledBc * kVec;                  // threads that load one float4 of K and V
  __shared__ float Ks[2][kTiledBc][kPitch];
  __shared__ float Vs[2][kTiledBc][D];
  __shared__ __align__(16) float Ps[kTiledBr][kTiledBc];

  const int lane = threadIdx.x, row_in_tile = threadIdx.y;
  const int tid = row_in_tile * kTiledBc + lane;
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t row = (blockIdx.x % row_tiles) * kTiledBr + row_in_tile;
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

  // --- K/V tile loads: thread tid < kLoaders moves one float4 of K and one of V.
  const int load_row = tid / kVec, load_col = (tid % kVec) * 4;
  float4 k_next = make_float4(0, 0, 0, 0), v_next = k_next;
  auto fetch = [&](int64_t key0) {
    const int64_t key = key0 + load_row;
    if (tid < kLoaders && key < N) {
      k_next = *reinterpret_cast<const float4*>(K + key * D + load_col);
      v_next = *reinterpret_cast<const float4*>(V + key * D + load_col);
    } else {
      k_next = v_next = make_float4(0, 0, 0, 0);  // keys past N: zeros, never NaN from garbage
    }
  };
  auto stash = [&](int buf) {
    if (tid < kLoaders) {
      float* k = &Ks[buf][load_row][load_col];
      k[0] = k_next.x, k[1] = k_next.y, k[2] = k_next.z, k[3] = k_next.w;
      *reinterpret_cast<float4*>(&Vs[buf][load_row][load_col]) = v_next;
    }
  };

  float m = -INFINITY, l = 0.f;  // running max (base 2) and this lane's share of the running sum
  float acc[D / 32] = {};        // O row: lane owns columns lane + 32 * c
  fetch(0);
  stash(0);
  __syncthreads();
  int buf = 0;
  for (int64_t key0 = 0; key0 < N; key0 += kTiledBc) {
    const bool more = key0 + kTiledBc < N;
    if (more) fetch(key0 + kTiledBc);  // in flight while this tile is computed

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
    const float m_new = fmaxf(m, warp_max(s));
    const float alpha = exp2f(m - m_new);
    const float p = exp2f(s - m_new);
    l = l * alpha + p;
    m = m_new;
#pragma unroll
    for (int c = 0; c < D / 32; ++c) acc[c] *= alpha;

    // --- Output: O row += P V over the tile's 32 keys.
    Ps[row_in_tile][lane] = p;
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kTiledBc; j += 4) {
      const float4 pj = *reinterpret_cast<const float4*>(&Ps[row_in_tile][j]);
#pragma unroll
      for (int c = 0; c < D / 32; ++c) {
        const int x = lane + 32 * c;
        acc[c] = fmaf(pj.x, Vs[buf][j][x], acc[c]);
        acc[c] = fmaf(pj.y, Vs[buf][j + 1][x], acc[c]);
        acc[c] = fmaf(pj.z, Vs[buf][j + 2][x], acc[c]);
        acc[c] = fmaf(pj.w, Vs[buf][j + 3][x], acc[c]);
      }
    }
    __syncwarp();  // Ps is rewritten by the next tile

    if (more) stash(buf ^ 1);  // the other buffer: every warp finished it before the last barrier
    __syncthreads();
    buf ^= 1;
  }

  // --- O written once.
  const float inv_l = 1.f / warp_sum(l);
  if (row < N) {
#pragma unroll
    for (int c = 0; c < D / 32; ++c) out[b * N * D + row * D + lane + 32 * c] = acc[c] * inv_l;
  }
}

template <int D>
void launch_tiled(const float* qkv, float* out, int64_t batches, int64_t N, const int* decline, cudaStream_t stream) {
  const int64_t row_tiles = (N + kTiledBr - 1) / kTiledBr;
  attention_tiled<D><<<(unsigned)(batches * row_tiles), dim3(kTiledBc, kTiledBr), 0, stream>>>(qkv, out, N, row_tiles,
                                                                                                decline);
}

}  // namespace fa

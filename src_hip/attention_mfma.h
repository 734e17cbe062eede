// attention_mfma.h: FlashAttention forward on the matrix cores of CDNA GPUs (MI100 gfx908, MI210
// gfx90a): both products on v_mfma_f32_32x32x2f32, fp32 inputs and fp32 accumulation (the MI210's
// 45.3 TFLOP/s fp32 matrix peak, twice its 22.6 of plain v_fma_f32). On NVIDIA (nvcc through
// hip_on_cuda.h) the builtin and the 64-lane shuffle are emulated exactly in their lane layout
// (mfma_on_cuda.h), so this source is checked there like every kernel.
//
// The instruction, per wavefront of 64 lanes (l = 32 h + j, h = l / 32, j = l % 32):
//   D[32][32] = C + A[32][2] B[2][32]; lane l gives A[j][h] and B[h][j], and holds
//   D[8 (r / 4) + 4 h + r % 4][j] in register r < 16.
// Both products are computed transposed, so that each lane owns one query row j throughout:
//   S^T = K Q^T   A = K (keys x dims), B = Q^T: lane l gives K[j][dim] and Q[j][dim] for its
//                 half h of the dims (step t < D/2 takes dim h D/2 + t), and holds the scores
//                 of its query j against keys 8 (r / 4) + 4 h + r % 4 of the tile.
//   O^T += V^T P^T   A = V^T (dims x keys), B = P^T: step r (16 of them, 2 keys each) takes the
//                 keys lane l's register r holds, so P is the S accumulator itself, never moved;
//                 lane l gives V[key][32 b + j] and holds O[j][32 b + 8 (r / 4) + 4 h + r % 4].
// So the online softmax is per lane: a query's 32 scores of a tile are 16 registers in each of
// lanes j and j + 32, its row max one shuffle (xor 32) away, its row sum kept per lane until the
// end, and the rescaling of O a multiply of the lane's own registers.
//
// Launch geometry: a block of 4 wavefronts (256 threads) owns Br = 128 query rows (32 per
// wavefront) and streams key tiles of Bc = 32 keys; grid = batches x ceil(N / 128).
// LDS (static), pitches in floats:
//   Ks[32][D + 4]  the K tile; lanes j read float4 at row j: the pad puts rows 4 banks apart
//   Vs[32][D]      the V tile; a half-wavefront reads 32 consecutive floats of one row
// 8.5 KB (d = 32) or 16.5 KB (d = 64) per block: three blocks (12 wavefronts) fit the 64 KB of a
// CU at d = 64, so at least two wavefronts per SIMD hide each other's latency. One buffer each
// (two would cost the third block): the next K is fetched into registers during S^T and stored
// once every wavefront is past it, the next V likewise during P V; two barriers per tile.
// Keys past N load as zeros and score -inf; rows past N are computed from zero Q and never
// stored. NaN and inf propagate as in the other kernels (same max/exp2/compensated-sum steps).
#pragma once

#include <cstdint>
#include <string>

#include "mfma_primitives.h"
#include "../src_common/attention_params.h"
#include "../src_common/compensated_sum.h"
#include "../src_common/online_softmax.h"

// Where the kernel has its matrix-core body: CDNA1/CDNA2 (hipcc's device pass for those
// targets) and the NVIDIA emulation. Other targets (RDNA, hipcc's host pass) get an empty body.
#if defined(__NVCC__) || defined(__gfx908__) || defined(__gfx90a__)
#define FA_MFMA_BODY 1
#else
#define FA_MFMA_BODY 0
#endif

namespace fa {

// Three blocks' wavefronts per SIMD, as the LDS allows at d = 64: the register budget that
// leaves (512 / 3 -> 168 of gfx90a's unified VGPR+AGPR file) told to the compiler. gfx908's
// separate files leave 85 VGPRs at three: the Q row, the P V operands and the softmax spill
// there at d = 64, so it is asked for two.
#if defined(__gfx908__)
#define FA_MFMA_OCCUPANCY __attribute__((amdgpu_waves_per_eu(2)))
#elif defined(__HIP__) && !defined(__NVCC__)
#define FA_MFMA_OCCUPANCY __attribute__((amdgpu_waves_per_eu(3)))
#else
#define FA_MFMA_OCCUPANCY
#endif

constexpr int kMfmaWaves = 4, kMfmaThreads = 64 * kMfmaWaves;
constexpr int kMfmaBr = 32 * kMfmaWaves, kMfmaBc = 32;

// A float4 of Q, K or V. Built by nvcc (the emulation), an explicit ld.global.nc (LDG.CONSTANT):
// past the scheduling barrier's inline assembly nvcc does not prove the pointers read-only.
__device__ __forceinline__ float4 mfma_load4(const float* __restrict__ p) {
#ifdef __CUDA_ARCH__
  return __ldg(reinterpret_cast<const float4*>(p));
#else
  return *reinterpret_cast<const float4*>(p);
#endif
}

template <int D>
__device__ __forceinline__ void mfma_rows(const float* __restrict__ qkv, float* __restrict__ out, int64_t N,
                                          int64_t row_tiles) {
#if FA_MFMA_BODY
  constexpr int KP = D + 4, VP = D;
  constexpr int kHalf = D / 2;                       // dims per half-wavefront in S^T
  constexpr int kBlocks = D / 32;                    // 32-dim blocks of O^T
  constexpr int kLoads = kMfmaBc * D / 4 / kMfmaThreads;  // float4 of K (and of V) per thread per tile
  static_assert(kLoads * kMfmaThreads * 4 == kMfmaBc * D, "every thread loads the same number of float4");
  __shared__ __align__(16) float Ks[kMfmaBc * KP];
  __shared__ __align__(16) float Vs[kMfmaBc * VP];

  const int tid = threadIdx.x, wave = tid / 64, lane = tid % 64, h = lane / 32, j = lane % 32;
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t row = (blockIdx.x % row_tiles) * kMfmaBr + 32 * wave + j;  // this lane's query
  const float* Q = qkv + b * 3 * N * D;
  const float* K = Q + N * D;
  const float* V = K + N * D;

  // --- Q: this lane's half of its query row, in registers, scaled by log2(e) / sqrt(d) so that
  // exp2 gives e^x; rows past N are zeros.
  const float q_scale = 1.4426950408889634f / sqrtf((float)D);
  float q[kHalf];
#pragma unroll
  for (int t = 0; t < kHalf; t += 4) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row < N) v = mfma_load4(Q + row * D + h * kHalf + t);
    q[t] = v.x * q_scale, q[t + 1] = v.y * q_scale, q[t + 2] = v.z * q_scale, q[t + 3] = v.w * q_scale;
  }

  // --- K/V tiles: load l of a thread is float4 number tid + l * 256 of the tile; keys past N
  // are zeros, never garbage. One tile of K or of V is in flight at a time (in registers).
  float4 next[kLoads];
  auto fetch = [&](const float* src, int64_t key0) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int i = tid + l * kMfmaThreads;
      const int64_t key = key0 + i / (D / 4);
      next[l] = key < N ? mfma_load4(src + key * D + (i % (D / 4)) * 4)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto stash = [&](float* dst, int pitch) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int i = tid + l * kMfmaThreads;
      *reinterpret_cast<float4*>(dst + (i / (D / 4)) * pitch + (i % (D / 4)) * 4) = next[l];
    }
  };

  float m = -INFINITY;  // running max of the query's scores (base 2), the same in lanes j, j + 32
  CompensatedSum l;     // this lane's share of the row sum
  fa_f32x16 o[kBlocks];  // O^T: o[b][r] = O[j][32 b + 8 (r / 4) + 4 h + r % 4]
#pragma unroll
  for (int bk = 0; bk < kBlocks; ++bk)
#pragma unroll
    for (int r = 0; r < 16; ++r) o[bk][r] = 0.f;

  fetch(K, 0);
  stash(Ks, KP);
  fetch(V, 0);
  stash(Vs, VP);
  __syncthreads();
  for (int64_t key0 = 0; key0 < N; key0 += kMfmaBc) {
    const bool more = key0 + kMfmaBc < N;
    if (more) fetch(K, key0 + kMfmaBc);  // lands while S^T is computed

    // --- S^T = K Q^T: D/2 steps of two dims each, K read as float4 along its row.
    fa_f32x16 s;
#pragma unroll
    for (int r = 0; r < 16; ++r) s[r] = 0.f;
#pragma unroll
    for (int t = 0; t < kHalf; t += 4) {
      const float4 kv = *reinterpret_cast<const float4*>(Ks + j * KP + h * kHalf + t);
      s = __builtin_amdgcn_mfma_f32_32x32x2f32(kv.x, q[t], s, 0, 0, 0);
      s = __builtin_amdgcn_mfma_f32_32x32x2f32(kv.y, q[t + 1], s, 0, 0, 0);
      s = __builtin_amdgcn_mfma_f32_32x32x2f32(kv.z, q[t + 2], s, 0, 0, 0);
      s = __builtin_amdgcn_mfma_f32_32x32x2f32(kv.w, q[t + 3], s, 0, 0, 0);
    }
    if (key0 + kMfmaBc > N) {  // the last, partial tile: keys past N score -inf
#pragma unroll
      for (int r = 0; r < 16; ++r)
        if (key0 + 8 * (r / 4) + 4 * h + r % 4 >= N) s[r] = -INFINITY;
    }
    // Every wavefront has read Ks: it takes the next tile's K; the next V is fetched meanwhile.
    if (more) {
      __syncthreads();
      stash(Ks, KP);
      fetch(V, key0 + kMfmaBc);
    }

    // --- Online softmax of the lane's query: 16 scores here, 16 in the other half-wavefront.
    float mx = s[0];
#pragma unroll
    for (int r = 1; r < 16; ++r) mx = fmaxf(mx, s[r]);
    mx = fmaxf(mx, fa_wave64_shfl_xor(mx, 32));
    const float alpha = online_rescale(m, l, mx);  // rescaling of O and l by 2^(m_old - m_new)
    float sum = 0.f;
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      s[r] = exp2_approx(s[r] - m);  // P^T, in place
      sum += s[r];
    }
    l.add(sum);

    // --- O^T = alpha O^T + V^T P^T. The tile's product is summed on its own first, then added
    // (as in the SIMT kernel: O's N terms added in blocks of 32 keys, not one by one).
#pragma unroll
    for (int bk = 0; bk < kBlocks; ++bk) {
      fa_f32x16 t;
#pragma unroll
      for (int r = 0; r < 16; ++r) t[r] = 0.f;
#pragma unroll
      for (int r = 0; r < 16; ++r)
        t = __builtin_amdgcn_mfma_f32_32x32x2f32(Vs[(8 * (r / 4) + 4 * h + r % 4) * VP + 32 * bk + j], s[r], t,
                                                 0, 0, 0);
#pragma unroll
      for (int r = 0; r < 16; ++r) o[bk][r] = fmaf(o[bk][r], alpha, t[r]);
      // The next block's V reads stay below this point: hoisted above these products they hold
      // 16 more registers, which at d = 64 spill on gfx90a at three wavefronts per SIMD.
      asm volatile("" ::: "memory");
    }

    // Every wavefront has read Vs: it takes the next tile's V. The barrier also makes the next K
    // visible before it is read; the next V is made visible by the next tile's first barrier.
    if (more) {
      __syncthreads();
      stash(Vs, VP);
    }
  }

  // --- O written once: the two halves' row sums combined; lane l writes its 16 dims of each block.
  const float part = l.value();
  const float inv_l = 1.f / (part + fa_wave64_shfl_xor(part, 32));
  if (row < N) {
    float* dst = out + (b * N + row) * D;
#pragma unroll
    for (int bk = 0; bk < kBlocks; ++bk)
#pragma unroll
      for (int g = 0; g < 4; ++g)
        *reinterpret_cast<float4*>(dst + 32 * bk + 8 * g + 4 * h) =
            make_float4(o[bk][4 * g] * inv_l, o[bk][4 * g + 1] * inv_l, o[bk][4 * g + 2] * inv_l,
                        o[bk][4 * g + 3] * inv_l);
  }
#else
  (void)qkv, (void)out, (void)N, (void)row_tiles;  // no fp32 MFMA on this target: never launched
#endif
}

// p: qkv, out, N, row_tiles.
template <int D>
__global__ void __launch_bounds__(kMfmaThreads) FA_MFMA_OCCUPANCY attention_mfma(const AttentionParams p) {
  mfma_rows<D>(p.qkv, p.out, p.N, p.row_tiles);
}

// Whether a device runs the MFMA kernel: CDNA1/CDNA2 by their gfx names; NVIDIA GPUs through the
// emulation (nvcc builds).
inline bool mfma_native(const std::string& arch) { return arch == "gfx908" || arch == "gfx90a"; }

}  // namespace fa

// split3xfp16.cuh: fp32 products on fp16 tensor cores ("3xFP16"), shared by the mma.sync and
// wgmma kernels.
//
// Each fp32 operand x is split into fp16 hi = fp16(x) and lo = fp16(x - hi), 22 significant
// bits together; a product is a_hi b_hi + a_hi b_lo + a_lo b_hi, three fp16 MMAs with fp32
// accumulation (the dropped a_lo b_lo is below 2^-22 |a b|). Exact power-of-two scales keep the
// low parts normal in fp16: Q, K and V by 2^6, P by 2^12.
// Range: the split needs |x| <= 64; a chunk holding a larger or non-finite value is flagged
// (decline_chunk) and the fp32 tiled kernel computes that chunk instead (fallback.cuh).
// Here: the scales, the splits of pairs and float4s, the range check, the three-term mma.sync
// product and split_kv, the pass that splits a chunk's K and V once for the mma.sync kernel.
// The error budget behind these choices: docs/kernels.md, scripts/error_budget.py.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ptx/sm80.cuh"
#include "../src_common/attention_params.h"

namespace fa {

// Terms of each compensated product: 3 = a_hi b_hi + a_hi b_lo + a_lo b_hi, 2 = a_hi (b_hi + b_lo),
// 1 = a_hi b_hi (plain fp16). Only the error budget (scripts/error_budget.py) builds with fewer.
#ifndef FA_TC_QK_TERMS
#define FA_TC_QK_TERMS 3
#endif
#ifndef FA_TC_PV_TERMS
#define FA_TC_PV_TERMS 3
#endif

constexpr float kLimit = 64.f;                 // largest |x| the split represents safely
constexpr float kQKScale = 64.f;               // 2^6 on Q and on K
constexpr float kVScale = 64.f;                // 2^6 on V
constexpr float kLog2PScale = 12.f;            // 2^12 on P, applied by the exponential itself
[[maybe_unused]] constexpr float kUnscaleS = 1.f / (kQKScale * kQKScale);
[[maybe_unused]] constexpr float kUnscaleO = 1.f / kVScale;  // P's scale cancels in O / l

// ------------------------------------------------------------------------- the splits
// x, y -> fp16 pairs hi and lo with x ~ hi + lo (packed as the 32-bit registers mma takes).
__device__ __forceinline__ void split_pair(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x, y);
  const float2 back = __half22float2(h);
  const __half2 l = __floats2half2_rn(x - back.x, y - back.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// The same split with hi = x truncated to fp16's 11 significant bits by a mask instead of a
// round trip through fp16 (for P, whose scaled values are normal in fp16).
__device__ __forceinline__ void split_pair_masked(float x, float y, uint32_t& hi, uint32_t& lo) {
  const float xh = __uint_as_float(__float_as_uint(x) & 0xffffe000u);
  const float yh = __uint_as_float(__float_as_uint(y) & 0xffffe000u);
  const __half2 h = __floats2half2_rn(xh, yh);
  const __half2 l = __floats2half2_rn(x - xh, y - yh);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// float4 of scaled values -> hi and lo halves.
__device__ __forceinline__ void split_float4(float4 x, float scale, uint2& hi, uint2& lo) {
  split_pair(x.x * scale, x.y * scale, hi.x, lo.x);
  split_pair(x.z * scale, x.w * scale, hi.y, lo.y);
}

// ------------------------------------------------------------------------- the range check
// True when the split represents these values safely: |x| <= kLimit (false for NaN and inf too;
// an fmaxf-based maximum would skip a NaN).
__device__ __forceinline__ bool splittable(float x) { return fabsf(x) <= kLimit; }
__device__ __forceinline__ bool splittable(float2 x) { return splittable(x.x) && splittable(x.y); }
__device__ __forceinline__ bool splittable(float4 x) {
  return splittable(x.x) && splittable(x.y) && splittable(x.z) && splittable(x.w);
}

// A chunk holds values the split cannot represent: the tiled kernel recomputes it (decline), and
// the host learns that some chunk did (declined_ever, mapped host memory).
__device__ __forceinline__ void decline_chunk(int* decline, volatile int* declined_ever) {
  *decline = 1;
  *declined_ever = 1;
}

// ------------------------------------------------------------------------- the product
// c += (a_hi + a_lo) (b_hi + b_lo) to `Terms` terms, dropping a_lo b_lo at most.
template <int Terms>
__device__ __forceinline__ void mma3(float (&c)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                     uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  if (Terms >= 3) mma16816(c, a_lo, bh0, bh1);  // small terms first
  if (Terms >= 2) mma16816(c, a_hi, bl0, bl1);
  mma16816(c, a_hi, bh0, bh1);
}

// ------------------------------------------------------------------------- the split pass
// K and V -> scaled hi and lo halves, per batch [K_hi | K_lo | V_hi | V_lo], each N x D; Q, K and
// V range-checked. One float4 of each per thread and step (grid-stride).
constexpr int kSplitThreads = 256;

__device__ __forceinline__ void split_kv_pass(const float* __restrict__ qkv, __half* __restrict__ kv, int64_t batches,
                                              int64_t ND, int* __restrict__ decline, volatile int* declined_ever) {
  const int64_t quads = batches * ND / 4;  // float4 groups of one of Q, K, V
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < quads; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = (4 * i) / ND, e = 4 * i - b * ND;
    const float* base = qkv + b * 3 * ND + e;
    const float4 q = *reinterpret_cast<const float4*>(base);
    const float4 k = *reinterpret_cast<const float4*>(base + ND);
    const float4 v = *reinterpret_cast<const float4*>(base + 2 * ND);
    if (!splittable(q) || !splittable(k) || !splittable(v)) decline_chunk(decline, declined_ever);
    uint2 kh, kl, vh, vl;
    split_float4(k, kQKScale, kh, kl);
    split_float4(v, kVScale, vh, vl);
    __half* dst = kv + b * 4 * ND + e;
    *reinterpret_cast<uint2*>(dst) = kh;
    *reinterpret_cast<uint2*>(dst + ND) = kl;
    *reinterpret_cast<uint2*>(dst + 2 * ND) = vh;
    *reinterpret_cast<uint2*>(dst + 3 * ND) = vl;
  }
}

__global__ void __launch_bounds__(kSplitThreads) split_kv(const AttentionParams p) {
  split_kv_pass(p.qkv, p.kv, p.batches, p.nd, p.decline, p.declined_ever);
}

}  // namespace fa

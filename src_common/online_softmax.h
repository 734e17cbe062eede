// online_softmax.h: the step every kernel's softmax takes per row and tile, written once.
//
// A row keeps a running max m (base 2: Q, S or the exponent's FFMA carries log2(e) / sqrt(d))
// and a running sum l of 2^(s - m). A tile whose largest score is tile_max moves the max to m_new = max(m, tile_max);
// what was summed (l, and the kernel's O row) shrinks by alpha = 2^(m - m_new), and the tile's
// probabilities are 2^(s - m_new). m = -inf before the first tile gives alpha = 0 (nothing
// summed yet); NaN scores propagate through fmaxf and exp2 as in the float64 reference.
#pragma once

#include "compensated_sum.h"
#include "inline_fn.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#include "gpu_primitives.h"
#endif

namespace fa {

#if defined(__CUDACC__) || defined(__HIPCC__)

// 2^x for x <= 0 (or NaN) on the hardware's approximation (2 ulp, as exp2f), without exp2f's
// rescaling of results below 2^-126: those become 0, an error under 1e-38 of a row sum whose
// largest term is 1. exp2f spends four more instructions per probability on it.
__device__ __forceinline__ float exp2_approx(float x) {
#if FA_AMD_CODE
  return exp2f(x);  // ROCm 5.2's clang has no __builtin_amdgcn_exp2f
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// Which 2^x a kernel's softmax takes: the approximation above, or the library's exp2f (the
// homework kernel and the ladder's steps, written as a student would).
struct Exp2Approx {
  __device__ __forceinline__ float operator()(float x) const { return exp2_approx(x); }
};
struct Exp2Library {
  __device__ __forceinline__ float operator()(float x) const { return exp2f(x); }
};

#else
struct Exp2Approx;  // a GPU's: the CPU program names its own
#endif

// The rescale: m moves to max(m, tile_max), and the returned alpha = Exp(m_old - m_new) is
// what the running sum l and the kernel's O row shrink by; the tile's probabilities are then
// Exp(s - m). Exp: a 2^x above on the GPUs (scores in base 2), e^x in the CPU program (base e).
template <class Exp = Exp2Approx>
FA_INLINE_FN float online_rescale(float& m, CompensatedSum& l, float tile_max) {
  const float m_new = fmaxf(m, tile_max);
  const float alpha = Exp()(m - m_new);
  m = m_new;
  l.scale(alpha);
  return alpha;
}
// The same step for the CPU program's plain float sum (a compensated sum with nothing lost).
template <class Exp>
FA_INLINE_FN float online_rescale(float& m, float& l, float tile_max) {
  CompensatedSum sum;
  sum.sum = l;
  const float alpha = online_rescale<Exp>(m, sum, tile_max);
  l = sum.sum;
  return alpha;
}

}  // namespace fa

// compensated_sum.h: the softmax denominator as a compensated (Kahan) running sum.
//
// At N = 32768 most of a row's probabilities are tiny next to its running sum l, and adding
// them one by one into a float loses each one's low bits with the same sign: 4e-5 of l, 1e-4
// in O, in both GPU kernels. `lost` keeps what each addition drops and gives it back to the
// next. Built without fast-math (which would fold (t - sum) - y to zero).
#pragma once

#include "inline_fn.h"

namespace fa {

struct CompensatedSum {
  float sum = 0.f, lost = 0.f;

  FA_INLINE_FN void add(float x) {
    const float y = x - lost, t = sum + y;
    lost = (t - sum) - y;
    sum = t;
  }
  FA_INLINE_FN void scale(float a) {  // the online softmax's rescaling
    sum *= a;
    lost *= a;
  }
  FA_INLINE_FN float value() const { return sum - lost; }
};

}  // namespace fa

// inline_fn.h: FA_INLINE_FN, for the few functions that the GPU kernels and the CPU program
// share (the online softmax's step, the compensated sum): device functions, always inlined, for
// nvcc and hipcc (the GPU programs call them only from kernels); plain inline functions for the
// CPU program's C++ compiler.
#pragma once

#if defined(__HIPCC__) && !defined(__NVCC__)
#include <hip/hip_runtime.h>  // __forceinline__ (nvcc has it built in)
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_INLINE_FN __device__ __forceinline__
#else
#define FA_INLINE_FN inline
#endif

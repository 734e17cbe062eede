// mfma_primitives.h: what attention_mfma.h is written against besides the shared primitives:
// the accumulator of v_mfma_f32_32x32x2f32 (fa_f32x16: 16 floats per lane) and a shuffle across
// the whole 64-lane wavefront. hipcc's for AMD; for nvcc (the HIP port on NVIDIA, and the MI210
// emulation) the instruction and the wavefront in software (mfma_on_cuda.h).
#pragma once

#include "primitives.h"

#if defined(__NVCC__)
#include "mfma_on_cuda.h"
#else
typedef float fa_f32x16 __attribute__((ext_vector_type(16)));
__device__ inline float fa_wave64_shfl_xor(float v, int mask) { return __shfl_xor(v, mask, 64); }
#endif

// hip/hip_fp16.h of fa's MI210 emulation: HIP's half-precision types and functions (__half,
// __half2, __float2half, __half2float, __hadd, __hmul, __hfma2, __floats2half2_rn, half, half2, ...)
// carry CUDA's names and meaning, so CUDA's own header gives them. Rounding is IEEE fp16's on both.
// Included only where the program includes this header, as on the MI210. CUDA's header declares
// 32-lane __shfl overloads of its own: the layer's 64-lane macros (wave64_device.h) are set aside
// while it is read, and come back after.
#pragma once

#pragma push_macro("__shfl")
#pragma push_macro("__shfl_up")
#pragma push_macro("__shfl_down")
#pragma push_macro("__shfl_xor")
#undef __shfl
#undef __shfl_up
#undef __shfl_down
#undef __shfl_xor
#include <cuda_fp16.h>
#pragma pop_macro("__shfl")
#pragma pop_macro("__shfl_up")
#pragma pop_macro("__shfl_down")
#pragma pop_macro("__shfl_xor")

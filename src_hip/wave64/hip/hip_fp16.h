// hip/hip_fp16.h of fa's MI210 emulation: HIP's half-precision types and functions (__half,
// __half2, __float2half, __half2float, __hadd, __hmul, __hfma2, __floats2half2_rn, ...) carry
// CUDA's names and meaning, so CUDA's own header gives them. Rounding is IEEE fp16's on both.
#pragma once

#include <cuda_fp16.h>

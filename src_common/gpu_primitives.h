// gpu_primitives.h: what the shared kernels are written against, for the compiler at hand:
//   FA_SHFL_XOR(v, mask, width)   a butterfly shuffle inside groups of `width` lanes
//   FA_SYNC_WAVE()                the warp's (wavefront's) lanes meet; shared memory ordered
//   FA_WAVE                       lanes of a warp (32) or wavefront (64 on CDNA)
//   FA_LAUNCH_BOUNDS(t, blocks)   the compiler's register budget for t threads
//   FA_AMD_CODE                   1 where the code is AMD's: hipcc for AMD GPUs, or nvcc through
//                                 the MI210 emulation (src_hip/wave64); 0 for NVIDIA's code
// nvcc's (fa-cuda, and the HIP port built by nvcc) are in src_cuda/kernel_primitives.cuh, AMD's
// in src_hip/hip_primitives.h.
#pragma once

#if defined(__HIP_PLATFORM_AMD__) || (defined(__HIP__) && !defined(__NVCC__)) || defined(FA_WAVE64_LAYER)
#include "../src_hip/hip_primitives.h"
#define FA_AMD_CODE 1
#else
#include "../src_cuda/kernel_primitives.cuh"
#define FA_AMD_CODE 0
#endif

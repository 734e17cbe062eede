// kernel_primitives.cuh: what the shared kernels are written against (src_common/gpu_primitives.h),
// for nvcc. Both programs nvcc builds take them from here: the CUDA program (cuda_api.cuh) and
// the HIP source compiled for NVIDIA (src_hip/hip_api.h). hipcc's for AMD: src_hip/hip_primitives.h.
#pragma once

// HIP's __shfl_xor takes no lane mask, and CUDA still declares a legacy __shfl_xor of its own:
// the shared kernel calls this macro instead of either.
#define FA_SHFL_XOR(v, mask, width) __shfl_xor_sync(0xffffffffu, (v), (mask), (width))
#define FA_SYNC_WAVE() __syncwarp()
#define FA_WAVE 32
#define FA_LAUNCH_BOUNDS(threads, blocks_per_sm) __launch_bounds__(threads, blocks_per_sm)
#define FA_AMD_CODE 0  // NVIDIA's code (the HIP port built by nvcc included)

// Copies from global to shared memory that need no registers and no wait until they are used
// (cp.async: sm_80 and later; ptx/sm80.cuh). FA_ASYNC_COPY says whether this pass has them.
#include "ptx/sm80.cuh"
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FA_ASYNC_COPY 1
#else
#define FA_ASYNC_COPY 0
#endif

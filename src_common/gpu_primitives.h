// gpu_primitives.h: what the shared kernels are written against. The common layer sits below
// both backends and includes neither: the backend defines these before it includes a shared
// kernel (nvcc's in src_cuda/kernel_primitives.cuh, for fa-cuda and the HIP port built by nvcc;
// AMD's in src_hip/hip_primitives.h, for hipcc and the MI210 emulation).
//   FA_SHFL_XOR(v, mask, width)   a butterfly shuffle inside groups of `width` lanes
//   FA_SYNC_WAVE()                the warp's (wavefront's) lanes meet; shared memory ordered
//   FA_WAVE                       lanes of a warp (32) or wavefront (64 on CDNA)
//   FA_LAUNCH_BOUNDS(t, blocks)   the compiler's register budget for t threads
//   FA_AMD_CODE                   1 where the code is AMD's: hipcc for AMD GPUs, or nvcc through
//                                 the MI210 emulation (src_hip/wave64); 0 for NVIDIA's code
//   FA_ASYNC_COPY                 1 where this pass has copies to shared memory without
//                                 registers, as fa::cp_async16(dst, src, bytes),
//                                 fa::cp_async_commit() and fa::cp_async_wait<pending>()
#pragma once

#if !defined(FA_SHFL_XOR) || !defined(FA_SYNC_WAVE) || !defined(FA_WAVE) || !defined(FA_LAUNCH_BOUNDS) || \
    !defined(FA_AMD_CODE) || !defined(FA_ASYNC_COPY)
#error "a shared kernel needs its backend's primitives first: src_cuda/kernel_primitives.cuh or src_hip/hip_primitives.h"
#endif

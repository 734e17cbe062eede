// hip_primitives.h: the shared kernels' primitives (src_common/gpu_primitives.h) on AMD GPUs,
// and for nvcc through fa's MI210 emulation (FA_WAVE64_LAYER: src_hip/wave64 first on the
// include path, so <hip/hip_runtime.h> is the emulation's): 64-lane wavefronts.
#pragma once

#include <hip/hip_runtime.h>

// HIP's __shfl_xor takes the width explicitly; the wavefront is 64 lanes on CDNA (gfx9) and 32
// on RDNA.
#define FA_SHFL_XOR(v, mask, width) __shfl_xor((v), (mask), (width))
// A wavefront runs in lockstep; the fences keep the compiler from moving shared-memory traffic
// across the point where another lane's writes must be visible.
#ifdef FA_WAVE64_LAYER
// The emulated wavefront is two warps: a vote makes both halves meet, fenced (wave64_device.h).
#define FA_SYNC_WAVE() ((void)__all(1))
#else
#define FA_SYNC_WAVE()                                       \
  do {                                                       \
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");   \
    __builtin_amdgcn_wave_barrier();                         \
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");   \
  } while (0)
#endif
#ifdef __AMDGCN_WAVEFRONT_SIZE
#define FA_WAVE __AMDGCN_WAVEFRONT_SIZE
#else
#define FA_WAVE 64  // host pass (and the emulation): no AMD device code is generated there
#endif
// HIP's second launch bound means something else (waves per execution unit): give only the first.
#define FA_LAUNCH_BOUNDS(threads, blocks_per_sm) __launch_bounds__(threads)
#define FA_AMD_CODE 1  // AMD's code: hipcc, or nvcc through the MI210 emulation
// No global-to-LDS copies without registers here: the kernels stage tiles through registers.
#define FA_ASYNC_COPY 0

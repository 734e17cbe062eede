// primitives.h: the shared kernels' primitives (src_common/gpu_primitives.h) for the HIP source,
// whichever compiler builds it: nvcc's where it is built as CUDA (hip_on_cuda.h), AMD's for
// hipcc and for the MI210 emulation (FA_WAVE64_LAYER: 64-lane wavefronts on an NVIDIA GPU).
#pragma once

#if defined(__NVCC__) && !defined(FA_WAVE64_LAYER)
#include "../src_cuda/kernel_primitives.cuh"
#else
#include "hip_primitives.h"
#endif

// cuda_api.cuh: the CUDA program's platform: CUDA's names for the one GpuApi
// (src_common/host/gpu_api.h), every CUDA call checked, and nvcc's kernel primitives.
#pragma once

#include <cuda_runtime.h>

#include "cuda_hooks.cuh"
#include "kernel_primitives.cuh"

#define FA_GPU(name) cuda##name
// The names the kernel registry (src_common/registry.h) is written against.
#define FA_CHECK(call) CUDA_CHECK(call)
#define FA_CHECK_LAUNCH(name) CUDA_CHECK_LAUNCH(name)

namespace fa {
using GpuHooks = CudaHooks;
}  // namespace fa

#include "../src_common/host/gpu_api.h"

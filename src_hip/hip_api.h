// hip_api.h: the HIP program's platform: HIP's names for the one GpuApi
// (src_common/host/gpu_api.h), every HIP call checked, and the hooks where HIP differs. Built by
// hipcc for AMD GPUs, by nvcc through hip_on_cuda.h (HIP's calls onto CUDA's), or by nvcc
// through fa's MI210 emulation (FA_WAVE64_LAYER: src_hip/wave64, the layer a student's hw4.hip
// gets, which takes the AMD side below: 64-lane wavefronts on an NVIDIA GPU).
#pragma once

#include <string>

#define FA_HIP_PROGRAM 1

#include "../src_common/host/pipeline.h"

#if defined(__NVCC__) && !defined(FA_WAVE64_LAYER)
#define FA_HIP_ON_CUDA 1
#include "hip_on_cuda.h"
#include "../src_cuda/cuda_hooks.cuh"
#else
#define FA_HIP_ON_CUDA 0
#include <hip/hip_runtime.h>
#endif

#include "primitives.h"  // the shared kernels' primitives, for the compiler at hand

#define HIP_CHECK(call) fa::hip_check((call), #call, __FILE__, __LINE__)
#define HIP_CHECK_LAUNCH(name) fa::hip_check(hipGetLastError(), name, __FILE__, __LINE__)
#define FA_GPU(name) hip##name
// The names the kernel registry (src_common/registry.h) is written against.
#define FA_CHECK(call) HIP_CHECK(call)
#define FA_CHECK_LAUNCH(name) HIP_CHECK_LAUNCH(name)

namespace fa {

inline void hip_check(hipError_t err, const char* what, const char* file, int line) {
  if (err != hipSuccess)
    fail(kExitFailure, "HIP error: %s (%s, at %s:%d)", hipGetErrorString(err), what, file, line);
}

// What HIP 5.2, the oldest HIP the port builds with, lacks: read-only registration. Every slot
// is registered as device-writable, and pages of a mapped file are never locked (without a
// read-only flag the lock asks for device-writable pages, which a read-only mapping refuses):
// the input is read instead.
struct HipRegistration {
  static const char* runtime() { return "HIP"; }
  static void after_init() {}
  static unsigned register_flags(bool /*device_reads_only*/) { return hipHostRegisterDefault; }
  static bool locks_file_pages() { return false; }
  static std::string lock_file_pages(void*, size_t) { return "HIP 5.2 cannot lock pages read-only"; }
};

#if FA_HIP_ON_CUDA
// On NVIDIA: CUDA's start-up settings, architecture name, driver files and shared-memory opt-in.
struct GpuHooks : CudaHooks, HipRegistration {
  using HipRegistration::runtime;
  using HipRegistration::after_init;
  using HipRegistration::register_flags;
  using HipRegistration::locks_file_pages;
  using HipRegistration::lock_file_pages;
};
#else
struct GpuHooks : HipRegistration {
  using DeviceProp = hipDeviceProp_t;
  // Start-up settings: none on AMD. ROCm's counterpart of CUDA's hardware work queues
  // (GPU_MAX_HW_QUEUES) may shorten its start-up the same way, but no AMD GPU was at hand to
  // measure it, so ROCm's default stays.
  static void configure() {}
  static std::string arch(const hipDeviceProp_t& p) {
    std::string arch = p.gcnArchName;  // "gfx90a:sramecc+:xnack-" -> "gfx90a"
    return arch.substr(0, arch.find(':'));
  }
  // After the reset: nothing more on AMD, where exit closes the driver's files. ROCm's runtime
  // has threads of its own that use its driver file (/dev/kfd) until exit; whether closing it
  // early, as the CUDA side does, is safe and pays there cannot be checked without an AMD GPU.
  static bool close_files() { return false; }
  // The kernels' shared memory is sized for a CU's 64 KB of LDS (attention_simt.h's AMD tiles):
  // no opt-in to ask for.
  static bool allow_shared_bytes(const void*, int bytes) { return bytes <= 65536; }
};
#endif

}  // namespace fa

#include "../src_common/host/gpu_api.h"

// cuda_hooks.cuh: where the CUDA runtime differs from HIP's under the one GpuApi
// (src_common/host/gpu_api.h): start-up settings, the architecture's name, read-only page
// locks, the driver's files, a block's opt-in shared memory. fa-cuda's, and the HIP port's when
// nvcc builds it (src_hip/hip_api.h takes most of them).
#pragma once

#include <cstdlib>
#include <string>

#include <cuda_runtime.h>

#include "../src_common/host/pipeline.h"

// Any failed CUDA call ends the program with one line naming the call and the reason.
#define CUDA_CHECK(call) fa::cuda_check((call), #call, __FILE__, __LINE__)
// Kernel launches report configuration errors only through cudaGetLastError.
#define CUDA_CHECK_LAUNCH(name) fa::cuda_check(cudaGetLastError(), name, __FILE__, __LINE__)

namespace fa {

inline void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess)
    fail(kExitFailure, "CUDA error: %s (%s, at %s:%d)", cudaGetErrorString(err), what, file, line);
}

struct CudaHooks {
  static const char* runtime() { return "CUDA"; }
  using DeviceProp = cudaDeviceProp;

  // One hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS, default 8) unless the user set one:
  // the driver then creates the context in 0.06 s instead of 0.11 and tears it down faster
  // (H100, CUDA 13: scripts/startup_floor.py). The pipeline runs one kernel stream, and its
  // copies still overlap the kernels with one queue: at 26 x 32768 x 64, first copy in to last
  // copy back took 0.035 s for 0.031 s of kernels and 0.04 s of copies. Read at start-up.
  static void configure() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 0); }
  static std::string arch(const cudaDeviceProp& p) { return "sm_" + std::to_string(p.major) + std::to_string(p.minor); }
  static int& read_only_registration() {  // set by after_init()
    static int supported = 0;
    return supported;
  }
  static void after_init() {
#if CUDART_VERSION >= 11010  // read-only registration came with CUDA 11.1; the course's may be older
    CUDA_CHECK(cudaDeviceGetAttribute(&read_only_registration(), cudaDevAttrHostRegisterReadOnlySupported, 0));
#endif
  }
  // Memory the device only reads is locked read-only where the device allows it: on the H100's
  // host that registered 12% faster and unregistered twice as fast (100 GB/s against 49).
  static unsigned register_flags(bool device_reads_only) {
#if CUDART_VERSION >= 11010
    if (device_reads_only && read_only_registration()) return cudaHostRegisterReadOnly;
#else
    (void)device_reads_only;
#endif
    return cudaHostRegisterDefault;
  }
  // Pages of a mapped file, locked read-only (the mapping is read-only, and a device-writable
  // lock of a read-only mapping is refused): "" or why not; a refusal is not fatal.
  static bool locks_file_pages() { return CUDART_VERSION >= 11010; }
  static std::string lock_file_pages(void* p, size_t bytes) {
#if CUDART_VERSION >= 11010
    if (!read_only_registration()) return "the device cannot lock pages read-only";
    const cudaError_t err = cudaHostRegister(p, bytes, cudaHostRegisterReadOnly);
    if (err == cudaSuccess) return "";
    cudaGetLastError();  // not sticky: cleared, the run goes on with the input read
    return cudaGetErrorString(err);
#else
    (void)p, (void)bytes;
    return "CUDA before 11.1 cannot lock pages read-only";
#endif
  }
  static bool close_files() { return close_device_files("/dev/nvidia"); }
  // Lets `kernel` have `bytes` of dynamic shared memory (over 48 KB takes an opt-in, sm_70 and
  // later); false where this GPU cannot give a block that much.
  static bool allow_shared_bytes(const void* kernel, int bytes) {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
      return false;
    if (optin < bytes) return false;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess;
  }
};

}  // namespace fa

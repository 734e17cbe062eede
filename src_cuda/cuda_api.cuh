// cuda_api.cuh: every CUDA call checked, and the CUDA side of the streamed pipeline.
#pragma once

#include <cstdlib>
#include <string>

#include <cuda_runtime.h>

#include "../src_common/host/pipeline.h"

#include "kernel_primitives.cuh"

// Any failed CUDA call ends the program with one line naming the call and the reason.
#define CUDA_CHECK(call) fa::cuda_check((call), #call, __FILE__, __LINE__)
// Kernel launches report configuration errors only through cudaGetLastError.
#define CUDA_CHECK_LAUNCH(name) fa::cuda_check(cudaGetLastError(), name, __FILE__, __LINE__)
// The names the kernel registry (src_common/registry.h) is written against.
#define FA_CHECK(call) CUDA_CHECK(call)
#define FA_CHECK_LAUNCH(name) CUDA_CHECK_LAUNCH(name)
using GpuStream = cudaStream_t;
using GpuFuncAttributes = cudaFuncAttributes;
template <class F>
cudaError_t gpu_func_attributes(GpuFuncAttributes* attr, F* kernel) {
  return cudaFuncGetAttributes(attr, kernel);
}

namespace fa {

inline void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
  if (err != cudaSuccess)
    fail(kExitFailure, "CUDA error: %s (%s, at %s:%d)", cudaGetErrorString(err), what, file, line);
}

// The API traits that host/pipeline.h is written against.
struct CudaApi {
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;

  // One hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS, default 8) unless the user set one:
  // the driver then creates the context in 0.06 s instead of 0.11 and tears it down faster
  // (H100, CUDA 13: scripts/startup_floor.py). The pipeline runs one kernel stream, and its
  // copies still overlap the kernels with one queue: at 26 x 32768 x 64, first copy in to last
  // copy back took 0.035 s for 0.031 s of kernels and 0.04 s of copies. Read at start-up.
  static void configure() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 0); }
  static DeviceInfo init() {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0)
      fail(kExitFailure, "no CUDA device available (%s)", err == cudaSuccess ? "none found" : cudaGetErrorString(err));
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaFree(nullptr));  // creates the context now, while the reader thread reads
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
#if CUDART_VERSION >= 11010  // read-only registration came with CUDA 11.1; the course's may be older
    CUDA_CHECK(cudaDeviceGetAttribute(&read_only_registration(), cudaDevAttrHostRegisterReadOnlySupported, 0));
#endif
    return {"sm_" + std::to_string(prop.major) + std::to_string(prop.minor), prop.name};
  }
  static void* device_alloc(size_t bytes) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess)
      fail(kExitFailure, "cannot allocate %zu bytes of GPU memory (one chunk of batches)", bytes);
    return p;
  }
  // The driver's teardown, done here (on the release thread) rather than at exit. The thread
  // names its device first: a thread that never did resets nothing.
  static std::string release() {
    cudaError_t err = cudaSetDevice(0);
    if (err == cudaSuccess) err = cudaDeviceReset();
    return err == cudaSuccess ? "" : cudaGetErrorString(err);
  }
  static bool close_files() { return close_device_files("/dev/nvidia"); }
  // Memory the device only reads is locked read-only where the device allows it: on the H100's
  // host that registered 12% faster and unregistered twice as fast (100 GB/s against 49).
  static void host_register(void* p, size_t bytes, bool device_reads_only) {
    unsigned flags = cudaHostRegisterDefault;
#if CUDART_VERSION >= 11010
    if (device_reads_only && read_only_registration()) flags = cudaHostRegisterReadOnly;
#else
    (void)device_reads_only;
#endif
    CUDA_CHECK(cudaHostRegister(p, bytes, flags));
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
  static int& read_only_registration() {  // set by init()
    static int supported = 0;
    return supported;
  }
  static Stream stream() {
    Stream s;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }
  static Event event() {
    Event e;
    CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  static void record(Event e, Stream s) { CUDA_CHECK(cudaEventRecord(e, s)); }
  static void wait(Stream s, Event e) { CUDA_CHECK(cudaStreamWaitEvent(s, e, 0)); }
  static void sync(Event e) { CUDA_CHECK(cudaEventSynchronize(e)); }
  static float elapsed_ms(Event a, Event b) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
  }
  static void h2d(void* dst, const void* src, size_t bytes, Stream s) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  }
  static void d2h(void* dst, const void* src, size_t bytes, Stream s) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  }
};

}  // namespace fa

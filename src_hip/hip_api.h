// hip_api.h: every HIP call checked, the HIP side of the streamed pipeline, and the primitives
// of the shared homework kernel. Built by hipcc for AMD GPUs, or by nvcc through hip_on_cuda.h.
#pragma once

#include <string>

// FA_WAVE64_LAYER: nvcc through fa's MI210 emulation (src_hip/wave64, the layer a student's
// hw4.hip gets), which takes the AMD side below: 64-lane wavefronts on an NVIDIA GPU.
#if defined(__NVCC__) && !defined(FA_WAVE64_LAYER)
#define FA_HIP_ON_CUDA 1
#include "hip_on_cuda.h"
#else
#define FA_HIP_ON_CUDA 0
#include <hip/hip_runtime.h>
inline std::string hip_device_arch(const hipDeviceProp_t& p) {
  std::string arch = p.gcnArchName;  // "gfx90a:sramecc+:xnack-" -> "gfx90a"
  return arch.substr(0, arch.find(':'));
}
// Start-up settings: none on AMD. ROCm's counterpart of CUDA's hardware work queues
// (GPU_MAX_HW_QUEUES) may shorten its start-up the same way, but no AMD GPU was at hand to
// measure it, so ROCm's default stays.
inline void hip_platform_configure() {}
// After the reset: nothing more on AMD, where exit closes the driver's files. ROCm's runtime has
// threads of its own that use its driver file (/dev/kfd) until exit; whether closing it early,
// as the CUDA side does, is safe and pays there cannot be checked without an AMD GPU.
inline bool hip_platform_close_files() { return false; }
#endif

#include "../src_common/host/pipeline.h"

#if FA_HIP_ON_CUDA
// After the reset: the CUDA driver's files closed, as fa-cuda does (cuda_api.cuh's close_files).
inline bool hip_platform_close_files() { return fa::close_device_files("/dev/nvidia"); }
#endif

// The primitives src_common/attention_tiled.h is written against (for nvcc: hip_on_cuda.h).
// HIP's __shfl_xor takes the width explicitly; the wavefront is 64 lanes on CDNA (gfx9) and 32
// on RDNA.
#if !FA_HIP_ON_CUDA
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
#define FA_WAVE 64  // host pass: no device code is generated there
#endif
// HIP's second launch bound means something else (waves per execution unit): give only the first.
#define FA_LAUNCH_BOUNDS(threads, blocks_per_sm) __launch_bounds__(threads)
// The MFMA kernel's (attention_mfma.h): the accumulator of v_mfma_f32_32x32x2f32 (16 floats per
// lane) and a shuffle across the whole 64-lane wavefront (for nvcc: mfma_on_cuda.h).
#ifdef FA_WAVE64_LAYER
#include "mfma_on_cuda.h"  // the MFMA instruction in software, as fa-hip-cuda has it
#else
typedef float fa_f32x16 __attribute__((ext_vector_type(16)));
__device__ inline float fa_wave64_shfl_xor(float v, int mask) { return __shfl_xor(v, mask, 64); }
#endif
#endif

#define HIP_CHECK(call) fa::hip_check((call), #call, __FILE__, __LINE__)
#define HIP_CHECK_LAUNCH(name) fa::hip_check(hipGetLastError(), name, __FILE__, __LINE__)
// The names the kernel registry (src_common/registry.h) is written against.
#define FA_CHECK(call) HIP_CHECK(call)
#define FA_CHECK_LAUNCH(name) HIP_CHECK_LAUNCH(name)
#define FA_HIP_PROGRAM 1
using GpuStream = hipStream_t;
using GpuFuncAttributes = hipFuncAttributes;
template <class F>
hipError_t gpu_func_attributes(GpuFuncAttributes* attr, F* kernel) {
  return hipFuncGetAttributes(attr, reinterpret_cast<const void*>(kernel));
}

namespace fa {

inline void hip_check(hipError_t err, const char* what, const char* file, int line) {
  if (err != hipSuccess)
    fail(kExitFailure, "HIP error: %s (%s, at %s:%d)", hipGetErrorString(err), what, file, line);
}

// The API traits that host/pipeline.h is written against.
struct HipApi {
  using Stream = hipStream_t;
  using Event = hipEvent_t;

  static void configure() { hip_platform_configure(); }
  static DeviceInfo init() {
    int count = 0;
    hipError_t err = hipGetDeviceCount(&count);
    if (err != hipSuccess || count == 0)
      fail(kExitFailure, "no HIP device available (%s)", err == hipSuccess ? "none found" : hipGetErrorString(err));
    HIP_CHECK(hipSetDevice(0));
    HIP_CHECK(hipFree(nullptr));  // creates the context now, while the reader thread reads
    hipDeviceProp_t prop;
    HIP_CHECK(hipGetDeviceProperties(&prop, 0));
    return {hip_device_arch(prop), prop.name};
  }
  static void* device_alloc(size_t bytes) {
    void* p = nullptr;
    if (hipMalloc(&p, bytes) != hipSuccess)
      fail(kExitFailure, "cannot allocate %zu bytes of GPU memory (one chunk of batches)", bytes);
    return p;
  }
  // The runtime's teardown, done here (on the release thread) rather than at exit. The thread
  // names its device first, as CUDA needs (cuda_api.cuh).
  static std::string release() {
    hipError_t err = hipSetDevice(0);
    if (err == hipSuccess) err = hipDeviceReset();
    return err == hipSuccess ? "" : hipGetErrorString(err);
  }
  static bool close_files() { return hip_platform_close_files(); }
  // HIP 5.2, the oldest HIP the port builds with, has no read-only registration: every slot is
  // registered as device-writable.
  static void host_register(void* p, size_t bytes, bool /*device_reads_only*/) {
    HIP_CHECK(hipHostRegister(p, bytes, hipHostRegisterDefault));
  }
  // Pages of a mapped file are never locked: without a read-only flag the lock asks for
  // device-writable pages, which a read-only mapping refuses; the input is read instead.
  static bool locks_file_pages() { return false; }
  static std::string lock_file_pages(void*, size_t) { return "HIP 5.2 cannot lock pages read-only"; }
  static Stream stream() {
    Stream s;
    HIP_CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
    return s;
  }
  static Event event() {
    Event e;
    HIP_CHECK(hipEventCreate(&e));
    return e;
  }
  static void record(Event e, Stream s) { HIP_CHECK(hipEventRecord(e, s)); }
  static void wait(Stream s, Event e) { HIP_CHECK(hipStreamWaitEvent(s, e, 0)); }
  static void sync(Event e) { HIP_CHECK(hipEventSynchronize(e)); }
  static float elapsed_ms(Event a, Event b) {
    float ms = 0;
    HIP_CHECK(hipEventElapsedTime(&ms, a, b));
    return ms;
  }
  static void h2d(void* dst, const void* src, size_t bytes, Stream s) {
    HIP_CHECK(hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, s));
  }
  static void d2h(void* dst, const void* src, size_t bytes, Stream s) {
    HIP_CHECK(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, s));
  }
};

}  // namespace fa

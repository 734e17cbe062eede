// hip/hip_runtime.h of fa's MI210 emulation: a student's hw4.hip compiled by nvcc for an NVIDIA
// GPU, with the MI210's rules where they differ from NVIDIA's. Not AMD's header: fa puts this
// folder (src_hip/wave64) first on the include path, so `#include <hip/hip_runtime.h>` finds it.
//
//   nvcc -std=c++14 -O3 -arch=sm_90 -x cu -cudart shared -I src_hip/wave64 -o hw4-emu hw4.hip -lm
//
// What it gives (fa_cli/programs/wave64.py builds with it; src_hip/README.md says what it is and is not):
//   host    the HIP runtime API a homework uses, onto CUDA (memory, copies, memset, streams,
//           events, errors, device properties reporting warpSize 64 and 64 KB of LDS,
//           hipLaunchKernelGGL and <<<>>>), every launch checked against the MI210's limits
//           (a block of at most 1024 threads and 64 KB of LDS, static + dynamic) and refused,
//           in one line, as the MI210 refuses it;
//   device  warpSize == 64 and the wavefront's cross-lane functions with HIP's own semantics
//           (wave64_device.h): __shfl, __shfl_up, __shfl_down, __shfl_xor at any width up to
//           64, __ballot and __activemask as 64-bit masks, __any, __all, __lane_id; the AMD
//           builtins a homework calls (ds_bpermute, readfirstlane, mbcnt, wave_barrier, s_barrier);
//           __gfx90a__ defined in the device pass only, as hipcc does;
//   half    <hip/hip_fp16.h>, where included: HIP's fp16 types and functions, CUDA's by the same names.
// Times measured through it are the NVIDIA GPU's, never an MI210's.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

// ---------------------------------------------------------------- types and constants
#include "../../hip_types_on_cuda.h"
#include "../../../src_cuda/launch_hook.h"
#include "../../../src_cuda/launch_log.h"  // every launch timed, for fa's estimate of the MI210's time

#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z

// The MI210's limits, what its runtime checks at a launch (and reports in the device properties).
// fa's experiments build a program a second time with 32 (-DFA_WAVE64_LANES=32): a program right
// with 32-lane wavefronts and wrong with 64 relies on 32 lanes (fa_cli/judge/probes/experiments.py).
#ifndef FA_WAVE64_LANES
#define FA_WAVE64_LANES 64
#endif
static_assert(FA_WAVE64_LANES == 64 || FA_WAVE64_LANES == 32, "the emulation runs 64- or 32-lane wavefronts");
// hipcc defines its target's macro in the device pass only, never in the host's: a program that
// picks its wavefront width by it has two widths there, and so here (the 32-lane build: none).
#if defined(__CUDA_ARCH__) && FA_WAVE64_LANES == 64 && !defined(__gfx90a__)
#define __gfx90a__ 1
#endif
namespace fa_wave64 {
constexpr int kWave = FA_WAVE64_LANES;     // lanes of a CDNA wavefront (64)
constexpr int kMaxThreads = 1024;          // threads of a workgroup
constexpr size_t kLdsBytes = 65536;        // LDS of a workgroup, static + dynamic
}  // namespace fa_wave64

#include "wave64_device.h"

// warpSize is 64, on the device and the host, as HIP's is on CDNA. CUDA's warpSize is a builtin
// variable, so the name is taken over by a macro; hipDeviceProp_t below is declared after it, so
// its field (and a student's prop.warpSize) are spelled through the same macro and still match.
#define warpSize fa_wave64_warp_size
constexpr int fa_wave64_warp_size = fa_wave64::kWave;

// ---------------------------------------------------------------- device properties
// HIP's fields that a homework reads, filled from the NVIDIA GPU except where the MI210's rules
// apply (warpSize, LDS per block, threads per block). name and gcnArchName say it is an emulation,
// so a program that prints them (the starter's fa-timing line) never passes for an MI210.
struct hipDeviceProp_t {
  char name[256];
  char gcnArchName[256];
  size_t totalGlobalMem, sharedMemPerBlock, totalConstMem, maxSharedMemoryPerMultiProcessor;
  int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], clockRate;
  int memoryClockRate, memoryBusWidth, major, minor, multiProcessorCount, l2CacheSize;
  int maxThreadsPerMultiProcessor, computeMode, concurrentKernels, pciBusID, pciDeviceID, pciDomainID;
  int integrated, canMapHostMemory, ECCEnabled, gcnArch, isMultiGpuBoard, asyncEngineCount;
};

inline hipError_t hipGetDeviceProperties(hipDeviceProp_t* p, int device) {
  cudaDeviceProp c;
  hipError_t e = cudaGetDeviceProperties(&c, device);
  if (e != cudaSuccess) return e;
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "%.200s emulating an MI210", c.name);  // 200: room for the words
  std::snprintf(p->gcnArchName, sizeof p->gcnArchName, "sm_%d%d:emulating-gfx90a", c.major, c.minor);
  p->totalGlobalMem = c.totalGlobalMem;
  p->sharedMemPerBlock = p->maxSharedMemoryPerMultiProcessor = fa_wave64::kLdsBytes;
  p->totalConstMem = c.totalConstMem;
  p->regsPerBlock = c.regsPerBlock;
  p->warpSize = fa_wave64::kWave;
  p->maxThreadsPerBlock = fa_wave64::kMaxThreads;
  for (int i = 0; i < 3; ++i) p->maxThreadsDim[i] = c.maxThreadsDim[i], p->maxGridSize[i] = c.maxGridSize[i];
  cudaDeviceGetAttribute(&p->clockRate, cudaDevAttrClockRate, device);
  cudaDeviceGetAttribute(&p->memoryClockRate, cudaDevAttrMemoryClockRate, device);
  p->memoryBusWidth = c.memoryBusWidth;
  p->major = 9, p->minor = 0, p->gcnArch = 910;  // what HIP reports for gfx90a
  p->multiProcessorCount = c.multiProcessorCount;
  p->l2CacheSize = c.l2CacheSize;
  p->maxThreadsPerMultiProcessor = c.maxThreadsPerMultiProcessor;
  p->concurrentKernels = c.concurrentKernels;
  p->pciBusID = c.pciBusID, p->pciDeviceID = c.pciDeviceID, p->pciDomainID = c.pciDomainID;
  p->integrated = c.integrated, p->canMapHostMemory = c.canMapHostMemory, p->ECCEnabled = c.ECCEnabled;
  p->isMultiGpuBoard = c.isMultiGpuBoard, p->asyncEngineCount = c.asyncEngineCount;
  return hipSuccess;
}

// hipDeviceGetAttribute for the attributes a homework asks: the MI210's limits, the rest the GPU's.
enum hipDeviceAttribute_t {
  hipDeviceAttributeMaxThreadsPerBlock,
  hipDeviceAttributeWarpSize,
  hipDeviceAttributeMaxSharedMemoryPerBlock,
  hipDeviceAttributeMultiprocessorCount,
  hipDeviceAttributeClockRate,
  hipDeviceAttributeMaxThreadsPerMultiProcessor,
};

inline hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attr, int device) {
  switch (attr) {
    case hipDeviceAttributeMaxThreadsPerBlock: *value = fa_wave64::kMaxThreads; return hipSuccess;
    case hipDeviceAttributeWarpSize: *value = fa_wave64::kWave; return hipSuccess;
    case hipDeviceAttributeMaxSharedMemoryPerBlock: *value = (int)fa_wave64::kLdsBytes; return hipSuccess;
    case hipDeviceAttributeMultiprocessorCount:
      return cudaDeviceGetAttribute(value, cudaDevAttrMultiProcessorCount, device);
    case hipDeviceAttributeClockRate: return cudaDeviceGetAttribute(value, cudaDevAttrClockRate, device);
    case hipDeviceAttributeMaxThreadsPerMultiProcessor:
      return cudaDeviceGetAttribute(value, cudaDevAttrMaxThreadsPerMultiProcessor, device);
  }
  return hipErrorInvalidValue;
}

// ---------------------------------------------------------------- what went wrong, in one line
namespace fa_wave64 {

// The kernel most recently launched, for the fault line (the device does not know its name).
inline std::string& last_kernel() {
  static std::string name;
  return name;
}

// The device's fault record (wave64_device.h), in host memory the device writes through: it
// stays readable after the trap that ends the kernel has made the CUDA context unusable. Made at
// the first launch of a context; a device reset frees it (hipDeviceReset forgets it), and the
// next launch makes another.
inline Fault*& fault_slot() {
  static Fault* record = nullptr;
  return record;
}

inline Fault* host_fault() {
  Fault*& record = fault_slot();
  if (record != nullptr) return record;
  Fault* f = nullptr;
  if (cudaHostAlloc(reinterpret_cast<void**>(&f), sizeof(Fault), cudaHostAllocMapped) != cudaSuccess) return nullptr;
  std::memset(f, 0, sizeof *f);
  Fault* device = nullptr;
  cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), f, 0);
  cudaMemcpyToSymbol(fault_record, &device, sizeof device);
  return record = f;
}

// The fault's one line on stderr, once, if a kernel ended with one (checked wherever the student's
// program can learn of the failure, and at exit for a program that checks nothing).
inline void report_fault() {
  static bool said = false;
  Fault* f = fault_slot();  // read, never made: a program that launched nothing has none
  if (said || !f || !*reinterpret_cast<volatile int*>(&f->kind)) return;
  said = true;
  std::fprintf(stderr, "fa-wave64: %s: %s\n", last_kernel().c_str(), describe(*f).c_str());
}

// A launch refused here never reaches CUDA, whose last error would not hold it.
inline hipError_t& refused_launch() {
  static hipError_t e = cudaSuccess;
  return e;
}

inline hipError_t checked(hipError_t e) {
  if (e != cudaSuccess) report_fault();
  return e;
}

inline void refuse(const std::string& kernel, const std::string& why) {
  std::fprintf(stderr, "fa-wave64: %s: launch refused, as the MI210 refuses it: %s\n", kernel.c_str(), why.c_str());
}

// Blocks whose size is not a multiple of 64 leave part of every wavefront idle on the MI210: said
// once per kernel, as a note (the program still runs).
inline void note_block(const std::string& kernel, unsigned threads) {
  static std::string noted;
  if (threads % kWave == 0 || noted.find("\n" + kernel + "\n") != std::string::npos) return;
  noted += "\n" + kernel + "\n";
  std::fprintf(stderr, "fa-wave64: note: %s: blocks of %u threads: on the MI210 %u of the 64 lanes of the last "
               "wavefront of each block stay idle\n", kernel.c_str(), threads, kWave - threads % kWave);
}

// Every launch, <<<>>> and hipLaunchKernelGGL alike, comes here (see __cudaLaunchKernel below):
// the MI210's limits first, then the scratch of the emulated wavefronts appended to the dynamic
// shared memory (wave64_device.h finds it there), then CUDA's launch.
inline cudaError_t launch(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t dynamic,
                          cudaStream_t stream, fa_launch_hook::LaunchFn forward) {
  static bool at_exit = (std::atexit(report_fault), true);
  (void)at_exit;
  // CUDA's runtime takes a cudaKernel_t where it asks for a kernel (cuda_runtime_api.h: "assumed
  // to be a cudaKernel_t and used as is") in cudaFuncGetAttributes and cudaFuncSetAttribute.
  const void* func = reinterpret_cast<const void*>(kernel);
  std::string name = fa_launch_hook::kernel_name(func);
  last_kernel() = name;
  if (fa_launch_hook::empty_launch("fa-wave64", name, grid, block)) return cudaErrorInvalidConfiguration;
  const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (threads > kMaxThreads) {
    refuse(name, "a block of " + std::to_string(threads) + " threads (at most 1024)");
    return cudaErrorInvalidConfiguration;
  }
  cudaFuncAttributes attr;
  cudaError_t e = cudaFuncGetAttributes(&attr, func);
  if (e != cudaSuccess) return e;
  const size_t lds = attr.sharedSizeBytes + dynamic;
  if (lds > kLdsBytes) {
    refuse(name, std::to_string(lds) + " bytes of LDS per block (" + std::to_string(attr.sharedSizeBytes) +
                     " static + " + std::to_string(dynamic) + " dynamic; the MI210 has 65536)");
    return cudaErrorInvalidConfiguration;
  }
  note_block(name, (unsigned)threads);
  if (!host_fault()) return cudaErrorMemoryAllocation;
  const size_t total = scratch_offset(dynamic) + scratch_bytes((unsigned)threads);
  // NVIDIA asks for an opt-in above 48 KB of dynamic shared memory (the MI210 takes up to 64 KB),
  // and a student's own hipFuncSetAttribute sized it without the scratch: the limit follows what
  // is launched.
  if ((int)total > attr.maxDynamicSharedSizeBytes) {
    e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)total);
    if (e != cudaSuccess) return e;
  }
  // Logged with the student's own LDS (the scratch is the emulation's, not the MI210's).
  return fa_launch_log::timed({name, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, lds, attr.numRegs}, stream,
                              [&] { return forward(kernel, grid, block, args, total, stream); });
}

}  // namespace fa_wave64

// Every <<<>>> launch comes here (src_cuda/launch_hook.h says how). Each student's hw4.hip is one
// translation unit, so the definition here is the program's only one.
extern "C" inline cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                                 size_t dynamic, cudaStream_t stream) {
  static const auto next = fa_launch_hook::runtime_launch("fa-wave64");
  if (!next) return cudaErrorNotSupported;
  cudaError_t e = fa_wave64::launch(kernel, grid, block, args, dynamic, stream, next);
  if (e != cudaSuccess) fa_wave64::refused_launch() = e;  // the stub drops it: hipGetLastError says it
  return e;
}

// As HIP's own NVIDIA platform defines it: a <<<>>> launch, so it takes the same path.
#define hipLaunchKernelGGL(kernel, grid, block, shared, stream, ...) \
  kernel<<<(grid), (block), (shared), (stream)>>>(__VA_ARGS__)

// ---------------------------------------------------------------- the runtime API
// Calls where a kernel's failure shows say the emulation's fault line first (checked()).
inline const char* hipGetErrorString(hipError_t e) { return cudaGetErrorString(e); }
inline const char* hipGetErrorName(hipError_t e) { return cudaGetErrorName(e); }
inline hipError_t hipGetLastError() {
  hipError_t refused = fa_wave64::refused_launch(), e = fa_wave64::checked(cudaGetLastError());
  fa_wave64::refused_launch() = cudaSuccess;
  return refused != cudaSuccess ? refused : e;
}
inline hipError_t hipPeekAtLastError() {
  hipError_t e = fa_wave64::checked(cudaPeekAtLastError());
  return fa_wave64::refused_launch() != cudaSuccess ? fa_wave64::refused_launch() : e;
}
inline hipError_t hipDeviceSynchronize() { return fa_wave64::checked(cudaDeviceSynchronize()); }
inline hipError_t hipDeviceReset() {
  fa_launch_log::before_reset();  // its launches printed while their events exist
  fa_wave64::report_fault();      // and a fault said while its record exists: the reset frees it
  fa_wave64::fault_slot() = nullptr;
  return cudaDeviceReset();
}
inline hipError_t hipGetDeviceCount(int* n) { return cudaGetDeviceCount(n); }
inline hipError_t hipSetDevice(int d) { return cudaSetDevice(d); }
inline hipError_t hipGetDevice(int* d) { return cudaGetDevice(d); }
inline hipError_t hipMemGetInfo(size_t* free, size_t* total) { return cudaMemGetInfo(free, total); }

inline hipError_t hipMalloc(void** p, size_t n) { return fa_wave64::checked(cudaMalloc(p, n)); }
template <class T>
inline hipError_t hipMalloc(T** p, size_t n) { return hipMalloc(reinterpret_cast<void**>(p), n); }
inline hipError_t hipFree(void* p) { return fa_wave64::checked(cudaFree(p)); }
inline hipError_t hipHostMalloc(void** p, size_t n, unsigned flags = 0) { return cudaHostAlloc(p, n, flags); }
template <class T>
inline hipError_t hipHostMalloc(T** p, size_t n, unsigned flags = 0) {
  return hipHostMalloc(reinterpret_cast<void**>(p), n, flags);
}
inline hipError_t hipHostFree(void* p) { return cudaFreeHost(p); }
inline hipError_t hipHostRegister(void* p, size_t n, unsigned flags) { return cudaHostRegister(p, n, flags); }
inline hipError_t hipHostUnregister(void* p) { return cudaHostUnregister(p); }
inline hipError_t hipMemcpy(void* dst, const void* src, size_t n, hipMemcpyKind kind) {
  return fa_wave64::checked(cudaMemcpy(dst, src, n, kind));
}
inline hipError_t hipMemcpyAsync(void* dst, const void* src, size_t n, hipMemcpyKind kind, hipStream_t s = 0) {
  return fa_wave64::checked(cudaMemcpyAsync(dst, src, n, kind, s));
}
inline hipError_t hipMemset(void* p, int value, size_t n) { return fa_wave64::checked(cudaMemset(p, value, n)); }
inline hipError_t hipMemsetAsync(void* p, int value, size_t n, hipStream_t s = 0) {
  return fa_wave64::checked(cudaMemsetAsync(p, value, n, s));
}
template <class T>
inline hipError_t hipMemcpyToSymbol(const T& symbol, const void* src, size_t n, size_t offset = 0,
                                    hipMemcpyKind kind = hipMemcpyHostToDevice) {
  return cudaMemcpyToSymbol(symbol, src, n, offset, kind);
}

inline hipError_t hipStreamCreate(hipStream_t* s) { return cudaStreamCreate(s); }
inline hipError_t hipStreamCreateWithFlags(hipStream_t* s, unsigned flags) { return cudaStreamCreateWithFlags(s, flags); }
inline hipError_t hipStreamDestroy(hipStream_t s) { return cudaStreamDestroy(s); }
inline hipError_t hipStreamSynchronize(hipStream_t s) { return fa_wave64::checked(cudaStreamSynchronize(s)); }
inline hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned flags) { return cudaStreamWaitEvent(s, e, flags); }
inline hipError_t hipEventCreate(hipEvent_t* e) { return cudaEventCreate(e); }
inline hipError_t hipEventCreateWithFlags(hipEvent_t* e, unsigned flags) { return cudaEventCreateWithFlags(e, flags); }
inline hipError_t hipEventRecord(hipEvent_t e, hipStream_t s = 0) { return cudaEventRecord(e, s); }
inline hipError_t hipEventSynchronize(hipEvent_t e) { return fa_wave64::checked(cudaEventSynchronize(e)); }
inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t a, hipEvent_t b) { return cudaEventElapsedTime(ms, a, b); }
inline hipError_t hipEventDestroy(hipEvent_t e) { return cudaEventDestroy(e); }

template <class F>
inline hipError_t hipFuncGetAttributes(hipFuncAttributes* a, F f) {
  return cudaFuncGetAttributes(a, reinterpret_cast<const void*>(f));
}
template <class F>
inline hipError_t hipFuncSetAttribute(F f, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(f), attr, value);
}
constexpr cudaFuncAttribute hipFuncAttributeMaxDynamicSharedMemorySize = cudaFuncAttributeMaxDynamicSharedMemorySize;

// fa_gtx1080.h: the GTX 1080's rules (sm_61, the course's judge) for a student's hw4.cu run on
// another NVIDIA GPU. fa builds the program with this header first and the shared CUDA runtime:
//
//   nvcc ... -cudart shared -include src_cuda/gtx1080/fa_gtx1080.h -o hw4 hw4.cu
//
// Every launch is checked against what the GTX 1080 gives a block, and refused in one line that
// names the judge's GPU, as its runtime refuses it (the program sees the error it would get there):
//   - at most 1024 threads a block, blocks of at most 1024 x 1024 x 64, grids of 65535 in y and z;
//   - at most 48 KB of shared memory a block, static and dynamic together (Pascal has no opt-in
//     above it: cudaFuncSetAttribute asking for more is refused too);
//   - registers: a block's warps, each allocated its threads' registers in units of 256, within
//     the 65536 of an SM. The count is this build's (this GPU's compiler), not sm_61's: said so;
//   - a block over the kernel's maxThreadsPerBlock (its __launch_bounds__): the runtime's own
//     refusal, with a line that says why.
// cudaGetDeviceProperties reports the GTX 1080's figures where a program may size its tiles by
// them (compute capability 6.1, 20 SMs, 48 KB a block, 96 KB an SM, 8 GB); cudaDeviceGetAttribute,
// which the device runtime also defines, stays this GPU's. Times measured through it are
// this GPU's, never a GTX 1080's. fa_cli/programs/gtx1080.py builds with it, and reads its lines.
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "../launch_hook.h"
#include "../launch_log.h"

namespace fa_gtx1080 {

// The GTX 1080's limits (CUDA Programming Guide, compute capability 6.1; NVIDIA's GTX 1080 spec).
constexpr unsigned long long kMaxThreads = 1024;
constexpr unsigned kMaxBlockX = 1024, kMaxBlockY = 1024, kMaxBlockZ = 64, kMaxGridYZ = 65535;
constexpr size_t kSmemPerBlock = 48 * 1024;
constexpr size_t kSmemPerSm = 96 * 1024;
constexpr int kRegsPerSm = 65536, kRegUnit = 256, kSms = 20;
constexpr size_t kMemory = 8ull << 30;

inline void refuse(const std::string& kernel, const std::string& why) {
  std::fprintf(stderr, "fa-gtx1080: %s: launch refused, as the GTX 1080 refuses it: %s\n", kernel.c_str(),
               why.c_str());
}

// A block's registers as the GTX 1080 allocates them: per warp, its threads' registers rounded up
// to 256; a block whose warps need more than an SM holds cannot launch.
inline long long block_registers(int regs_per_thread, unsigned long long threads) {
  const long long warps = (long long)((threads + 31) / 32);
  const long long per_warp = ((long long)regs_per_thread * 32 + kRegUnit - 1) / kRegUnit * kRegUnit;
  return warps * per_warp;
}

// The launch checked against the GTX 1080's limits; `attr` gets the kernel's attributes.
inline cudaError_t check(const void* func, dim3 grid, dim3 block, size_t dynamic, cudaFuncAttributes& attr) {
  const std::string name = fa_launch_hook::kernel_name(func);
  if (fa_launch_hook::empty_launch("fa-gtx1080", name, grid, block)) return cudaErrorInvalidConfiguration;
  const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (threads > kMaxThreads) {
    refuse(name, "a block of " + std::to_string(threads) + " threads (at most 1024)");
    return cudaErrorInvalidConfiguration;
  }
  if (block.x > kMaxBlockX || block.y > kMaxBlockY || block.z > kMaxBlockZ || grid.y > kMaxGridYZ ||
      grid.z > kMaxGridYZ) {
    refuse(name, "a block of " + std::to_string(block.x) + " x " + std::to_string(block.y) + " x " +
                     std::to_string(block.z) + " or a grid of " + std::to_string(grid.y) + " in y, " +
                     std::to_string(grid.z) + " in z (blocks up to 1024 x 1024 x 64, grids up to 65535 in y, z)");
    return cudaErrorInvalidConfiguration;
  }
  const cudaError_t e = cudaFuncGetAttributes(&attr, func);
  if (e != cudaSuccess) return e;
  const size_t smem = attr.sharedSizeBytes + dynamic;
  if (smem > kSmemPerBlock) {
    refuse(name, std::to_string(smem) + " bytes of shared memory a block (" + std::to_string(attr.sharedSizeBytes) +
                     " static + " + std::to_string(dynamic) + " dynamic; the GTX 1080 gives a block 49152)");
    return cudaErrorInvalidValue;
  }
  const long long regs = block_registers(attr.numRegs, threads);
  if (regs > kRegsPerSm) {
    refuse(name, std::to_string(attr.numRegs) + " registers a thread x " + std::to_string(threads) + " threads = " +
                     std::to_string(regs) + " registers a block, over the 65536 of an SM (the count is this GPU's "
                     "build; sm_61's can differ: fa resources --arch sm_61)");
    return cudaErrorLaunchOutOfResources;
  }
  return cudaSuccess;
}

// A block over the kernel's maxThreadsPerBlock (its __launch_bounds__, or the registers this GPU's
// build uses): handed to the runtime, whose own refusal is the program's error; the line says why.
inline cudaError_t over_the_kernels_bound(const void* func, unsigned long long threads, const cudaFuncAttributes& attr,
                                          cudaError_t refused) {
  if (refused != cudaSuccess)
    std::fprintf(stderr, "fa-gtx1080: %s: launch refused by the runtime (%s): a block of %llu threads, over the %d "
                 "this build of the kernel takes (its maxThreadsPerBlock: a __launch_bounds__ of %d, or the "
                 "registers it uses in this GPU's build; sm_61's can differ)\n",
                 fa_launch_hook::kernel_name(func).c_str(), cudaGetErrorString(refused), threads,
                 attr.maxThreadsPerBlock, attr.maxThreadsPerBlock);
  return refused;
}

}  // namespace fa_gtx1080

// Every <<<>>> launch comes here (launch_hook.h says how). The refusal is what cudaGetLastError
// and the next call then see.
extern "C" inline cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                                 size_t dynamic, cudaStream_t stream) {
  static const auto next = fa_launch_hook::runtime_launch("fa-gtx1080");
  if (!next) return cudaErrorNotSupported;
  const void* func = reinterpret_cast<const void*>(kernel);
  cudaFuncAttributes attr{};
  const cudaError_t e = fa_gtx1080::check(func, grid, block, dynamic, attr);
  const unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  if (e == cudaSuccess && threads > (unsigned long long)attr.maxThreadsPerBlock)
    return fa_gtx1080::over_the_kernels_bound(func, threads, attr, next(kernel, grid, block, args, dynamic, stream));
  if (e == cudaSuccess)
    return fa_launch_log::timed({fa_launch_hook::kernel_name(func), {grid.x, grid.y, grid.z},
                                 {block.x, block.y, block.z}, attr.sharedSizeBytes + dynamic, attr.numRegs},
                                stream, [&] { return next(kernel, grid, block, args, dynamic, stream); });
  // Refused: the runtime is handed a launch it refuses itself, so that its own last error (what
  // cudaGetLastError and cudaPeekAtLastError return) holds the refusal, as on the GTX 1080:
  // too much shared memory an invalid value, any other limit an invalid configuration.
  if (e == cudaErrorInvalidValue) return next(kernel, grid, block, args, size_t(1) << 31, stream);
  return next(kernel, grid, dim3(0, 1, 1), args, dynamic, stream);
}

// A kernel's shared-memory opt-in above what the GTX 1080 gives: refused there, refused here.
extern "C" inline cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr,
                                                             int value) {
  using SetFn = cudaError_t (*)(const void*, enum cudaFuncAttribute, int);
  static auto next = reinterpret_cast<SetFn>(dlsym(RTLD_NEXT, "cudaFuncSetAttribute"));
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize && value > (int)fa_gtx1080::kSmemPerBlock) {
    std::fprintf(stderr, "fa-gtx1080: %s: cudaFuncSetAttribute refused, as the GTX 1080 refuses it: %d bytes of "
                 "dynamic shared memory (the GTX 1080 gives a block 49152, with no opt-in above it)\n",
                 fa_launch_hook::kernel_name(func).c_str(), value);
    return cudaErrorInvalidValue;
  }
  return next ? next(func, attr, value) : cudaErrorNotSupported;
}

// The GTX 1080's figures where a program sizes its work by them. cudaGetDeviceProperties is a
// macro for the runtime's versioned symbol (cudaGetDeviceProperties_v2 from CUDA 12 on): the
// symbol looked up is the name it expands to.
#define FA_GTX1080_STRING(x) #x
#define FA_GTX1080_NAME(x) FA_GTX1080_STRING(x)
extern "C" inline cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  using PropFn = cudaError_t (*)(cudaDeviceProp*, int);
  static auto next = reinterpret_cast<PropFn>(dlsym(RTLD_NEXT, FA_GTX1080_NAME(cudaGetDeviceProperties)));
  const cudaError_t e = next ? next(prop, device) : cudaErrorNotSupported;
  if (e != cudaSuccess) return e;
  char real[sizeof prop->name];  // the name is read from where it is written: copied first
  std::memcpy(real, prop->name, sizeof real);
  real[sizeof real - 1] = '\0';
  std::snprintf(prop->name, sizeof prop->name, "NVIDIA GeForce GTX 1080 (fa: its rules on %s)", real);
  prop->major = 6, prop->minor = 1, prop->multiProcessorCount = fa_gtx1080::kSms;
  prop->sharedMemPerBlock = prop->sharedMemPerBlockOptin = fa_gtx1080::kSmemPerBlock;
  prop->sharedMemPerMultiprocessor = fa_gtx1080::kSmemPerSm;
  prop->regsPerBlock = prop->regsPerMultiprocessor = fa_gtx1080::kRegsPerSm;
  prop->maxThreadsPerMultiProcessor = 2048, prop->maxBlocksPerMultiProcessor = 32;
  prop->totalGlobalMem = fa_gtx1080::kMemory;
  return cudaSuccess;
}

// A program that resets the device before it exits: its launches are printed first.
extern "C" inline cudaError_t CUDARTAPI cudaDeviceReset(void) {
  using ResetFn = cudaError_t (*)(void);
  static auto next = reinterpret_cast<ResetFn>(dlsym(RTLD_NEXT, "cudaDeviceReset"));
  fa_launch_log::before_reset();
  return next ? next() : cudaErrorNotSupported;
}

// launch_log.h: what a student's kernels asked of the GPU and how long they took here, for fa's
// estimate of the time on the judge's GPU (fa_cli/measure/judge_time.py). The judges' layers
// (src_cuda/gtx1080/fa_gtx1080.h for hw4.cu, src_hip/wave64 for hw4.hip) time every launch they
// let through with two events on the launch's own stream (timed); at exit (or before a device
// reset: before_reset) the launches are added up per kernel and launch shape and printed on
// stderr, one line each, where fa asks for timing lines (FA_TIMING set, as fa's runs set it):
//
//   fa-launch: launches=54 ms=1.944 grid=20x8x1 block=128x1x1 smem=33280 regs=49 kernel=flash_fwd<64>
//
// smem is a block's static plus dynamic shared memory, regs this build's registers a thread, ms
// the launches' summed GPU time (launches on several streams may overlap: their sum is an upper
// bound on the span). error=NAME comes before the name where a launch's end was read with an
// error (cudaErrorMisalignedAddress: a kernel's fault, which the runtime keeps for every later
// call). The kernel's name comes last: it may hold spaces. One more line gives what
// an SM of the GPU at hand holds (cudaDeviceGetAttribute: the real GPU's, not the GTX 1080's):
//
//   fa-launch: gpu sms=132 smem_sm=233472 regs_sm=65536 threads_sm=2048 blocks_sm=32
#pragma once

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "../src_common/host/settings.h"  // FA_TIMING, read where every setting is read

namespace fa_launch_log {

struct Shape {  // what one kind of launch asks: the key its launches are added up under
  std::string kernel;
  unsigned grid[3], block[3];
  size_t smem;
  int regs;
  bool operator<(const Shape& o) const {
    return std::tie(kernel, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, regs) <
           std::tie(o.kernel, o.grid[0], o.grid[1], o.grid[2], o.block[0], o.block[1], o.block[2], o.smem, o.regs);
  }
};
struct Totals {
  long long launches = 0, untimed = 0;
  double ms = 0;
  cudaError_t failed = cudaSuccess;  // the first error its end was read with (a kernel's fault is sticky)
};
struct Pending {
  Shape shape;
  cudaEvent_t start, stop;
};

// Never destroyed: print() runs from atexit, after the program's own statics may be gone.
inline std::map<Shape, Totals>& totals() {
  static auto* t = new std::map<Shape, Totals>;
  return *t;
}
inline std::vector<Pending>& pending() {
  static auto* p = new std::vector<Pending>;
  return *p;
}
// Events are reused: a program of thousands of launches pays for creating a few.
inline std::vector<cudaEvent_t>& spare() {
  static auto* s = new std::vector<cudaEvent_t>;
  return *s;
}
inline cudaEvent_t take() {
  cudaEvent_t e = nullptr;
  if (!spare().empty()) {
    e = spare().back();
    spare().pop_back();
  } else if (cudaEventCreate(&e) != cudaSuccess) {
    return nullptr;
  }
  return e;
}
inline void give(cudaEvent_t e) {
  if (e != nullptr) spare().push_back(e);
}

inline bool wanted() {
  return fa::settings().timing != 0;
}

// Moves finished launches (all of them, waiting, where `wait`) from pending into their totals.
inline void collect(bool wait) {
  std::vector<Pending> still;
  for (Pending& p : pending()) {
    Totals& t = totals()[p.shape];
    const cudaError_t done = wait ? cudaEventSynchronize(p.stop) : cudaEventQuery(p.stop);
    if (done == cudaErrorNotReady) {
      still.push_back(p);
      continue;
    }
    float ms = 0;
    if (done == cudaSuccess && cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
      t.ms += ms;
    } else {
      ++t.untimed;  // a failed launch or a lost context: counted, not timed
      if (t.failed == cudaSuccess && done != cudaSuccess) t.failed = done;
    }
    give(p.start);
    give(p.stop);
  }
  pending().swap(still);
}

inline void print_gpu() {
  int device = 0, value[5] = {0, 0, 0, 0, 0};
  const cudaDeviceAttr asked[5] = {cudaDevAttrMultiProcessorCount, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                                   cudaDevAttrMaxRegistersPerMultiprocessor, cudaDevAttrMaxThreadsPerMultiProcessor,
                                   cudaDevAttrMaxBlocksPerMultiprocessor};
  if (cudaGetDevice(&device) != cudaSuccess) return;
  for (int i = 0; i < 5; ++i)
    if (cudaDeviceGetAttribute(&value[i], asked[i], device) != cudaSuccess) return;
  std::fprintf(stderr, "fa-launch: gpu sms=%d smem_sm=%d regs_sm=%d threads_sm=%d blocks_sm=%d\n", value[0], value[1],
               value[2], value[3], value[4]);
}

// The error's name as one word ("" for none): a code this runtime has no name for as its number.
inline std::string error_word(cudaError_t e) {
  if (e == cudaSuccess) return "";
  const std::string name = cudaGetErrorName(e);
  return name.find(' ') == std::string::npos ? name : "cudaError" + std::to_string((int)e);
}

inline void print() {
  collect(true);
  if (!totals().empty()) print_gpu();
  for (const auto& entry : totals()) {  // C++11: the course's line builds with -std=c++11
    const Shape& s = entry.first;
    const Totals& t = entry.second;
    // error=NAME only where the end of a launch was read with an error: the program's own checks
    // may have missed it (a kernel's fault reaches only the calls after it)
    std::fprintf(stderr, "fa-launch: launches=%lld untimed=%lld ms=%.6f grid=%ux%ux%u block=%ux%ux%u smem=%zu regs=%d%s%s kernel=%s\n",
                 t.launches, t.untimed, t.ms, s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1], s.block[2],
                 s.smem, s.regs, t.failed == cudaSuccess ? "" : " error=", error_word(t.failed).c_str(),
                 s.kernel.c_str());
  }
  totals().clear();
}

// Before a launch: its start event on its stream (null where nothing is logged or events fail).
inline cudaEvent_t begin(cudaStream_t stream) {
  if (!wanted()) return nullptr;
  cudaEvent_t start = take();  // the runtime is up after this, even where the launch is its first call
  static const bool registered = std::atexit(print) == 0;  // after the runtime's own: runs before it
  (void)registered;
  if (start != nullptr && cudaEventRecord(start, stream) != cudaSuccess) {
    give(start);
    return nullptr;
  }
  return start;
}

// After the launch was accepted: its stop event, and the launch counted under its shape.
inline void end(cudaEvent_t start, cudaStream_t stream, const Shape& shape) {
  if (start == nullptr) return;
  ++totals()[shape].launches;
  cudaEvent_t stop = take();
  if (stop == nullptr || cudaEventRecord(stop, stream) != cudaSuccess) {
    ++totals()[shape].untimed;
    give(start);
    give(stop);
    return;
  }
  pending().push_back({shape, start, stop});
  if (pending().size() >= 1024) collect(false);  // a program of many launches: keep the list short
}

// The device made slower (FA_DEVICE_DELAY_MS, set by fa's SlowDevice step): each of the first
// kDelayedLaunches launches preceded by a kernel that waits that long on the launch's stream, so
// that the student's kernel, and whatever is queued after it, comes that much later. A program
// that synchronizes before it writes its output is unchanged; one that reads before the device
// finished (a copy not waited for, a copy on a stream that does not wait for the kernel's) writes
// what was there. Only the first few: a program of thousands of launches stays quick, and stream
// order carries the wait to everything after.
constexpr int kDelayedLaunches = 4;

// static: every .cu of a student's Makefile includes the layer, each gets its own copy
static __global__ void fa_device_delay(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
#if __CUDA_ARCH__ >= 700
    __nanosleep(1000);
#endif
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

inline void delay_before(cudaStream_t stream) {
  static std::atomic<int> delayed(0);  // a program may launch from several threads
  const int ms = fa::settings().device_delay_ms;
  // counted before the launch: should the runtime route it back through the layer, it is not delayed again
  if (ms <= 0 || delayed.fetch_add(1) >= kDelayedLaunches) return;
  unsigned long long ns = (unsigned long long)ms * 1000000ull;
  void* args[] = {&ns};
  // the runtime's own entry, not the layer's __cudaLaunchKernel: this launch is fa's, not the student's
  if (cudaLaunchKernel(reinterpret_cast<const void*>(&fa_device_delay), dim3(1), dim3(1), args, 0, stream) !=
      cudaSuccess)
    std::fprintf(stderr, "fa-launch: FA_DEVICE_DELAY_MS: the wait could not be launched\n");
}

// Each SM's shared memory filled with FA_SHARED_POISON before every launch of a student's (fa's
// UnwrittenShared step): a block's shared memory starts with what the kernel before it on that SM
// left there, so a kernel that reads shared memory no thread of its block wrote reads the poison.
// One block of the most a block may have (the opt-in, asked of the runtime's own entry: the GTX
// 1080's layer refuses over 48 KB to the student's kernels) on each SM, twice over.
static __global__ void fa_shared_poison(float value, int floats) {
  extern __shared__ float fa_poisoned[];
  volatile float* words = fa_poisoned;  // stores nothing reads: volatile keeps them
  for (int i = threadIdx.x; i < floats; i += blockDim.x) words[i] = value;
}

inline int poison_bytes(int& sms) {  // the opt-in where the runtime grants it, else the default 48 KB
  using SetFn = cudaError_t (*)(const void*, enum cudaFuncAttribute, int);
  static const auto set = reinterpret_cast<SetFn>(dlsym(RTLD_NEXT, "cudaFuncSetAttribute"));
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) !=
      cudaSuccess)
    return 0;
  const void* poison = reinterpret_cast<const void*>(&fa_shared_poison);
  if (set && cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
      set(poison, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) == cudaSuccess)
    return optin;
  return 48 * 1024;
}

inline void poison_before(cudaStream_t stream) {
  if (!fa::settings().shared_poisoned) return;
  // An error the program has not read yet is left for it: fa's launch, which would replace it, is not made.
  if (cudaPeekAtLastError() != cudaSuccess) {
    std::fprintf(stderr, "fa-launch: FA_SHARED_POISON: shared memory could not be filled (an error pending)\n");
    return;
  }
  static int sms = 0;
  static const int bytes = poison_bytes(sms);
  float value = fa::settings().shared_poison;
  int floats = bytes / (int)sizeof(float);
  void* args[] = {&value, &floats};
  if (bytes <= 0 || cudaLaunchKernel(reinterpret_cast<const void*>(&fa_shared_poison), dim3(2 * sms), dim3(1024),
                                     args, bytes, stream) != cudaSuccess) {
    cudaGetLastError();  // fa's launch's own error (none was pending), not for the program's cudaGetLastError
    std::fprintf(stderr, "fa-launch: FA_SHARED_POISON: shared memory could not be filled\n");
  } else if (bytes < 64 * 1024) {
    static bool said = false;  // once: the runtime granted no opt-in above the default
    if (!said) std::fprintf(stderr, "fa-launch: FA_SHARED_POISON: only %d bytes a block filled\n", bytes);
    said = true;
  }
}

// One launch, timed and counted under its shape where it was accepted.
template <class Launch>
inline cudaError_t timed(const Shape& shape, cudaStream_t stream, Launch&& launch) {
  delay_before(stream);
  poison_before(stream);
  const cudaEvent_t start = begin(stream);
  const cudaError_t launched = launch();
  if (launched == cudaSuccess)
    end(start, stream, shape);
  else
    give(start);
  return launched;
}

// A program that resets the device before it exits: its launches are printed first, while their
// events still exist, and the spare events, which the reset destroys, are forgotten.
inline void before_reset() {
  if (wanted()) print();
  spare().clear();
}

}  // namespace fa_launch_log

// Every asynchronous copy waited for (FA_COPIES_WAITED=1, set beside CUDA_LAUNCH_BLOCKING=1 by
// fa's LaunchesWaited step): CUDA_LAUNCH_BLOCKING waits for kernels, not for cudaMemcpyAsync, so a
// host that writes its output before a copy into pinned memory has ended is right only with this.
// The device runtime defines cudaMemcpyAsync too, so the student's calls are renamed to this one
// (hipMemcpyAsync too, through the MI210 emulation, whose header includes this one first): host and
// device both, a device call (dynamic parallelism) passed on as it is. A stream being captured
// into a graph is not waited for: a synchronize there would end the capture.
//
// Every copy from the device to the host kept too, where fa asks (FA_COPIED_BACK: a folder): one file
// a copy, copy-0001.bin on, in the order they were made, an asynchronous one once its stream is
// waited for. fa's CopiedBack step compares them with the output file: a file that holds other
// values than the device sent back was written from other memory (or before the copy), where one
// that holds them got its wrong values from the device. cudaMemcpy is renamed for it (to a name no
// student's helper takes), as cudaMemcpyAsync is above.
namespace fa_launch_log {

constexpr size_t kCopiedBackBytes = size_t(512) << 20;  // kept at most, over all copies (a trial case is small)

inline bool device_to_host(void* dst, const void* src, cudaMemcpyKind kind) {
  if (kind == cudaMemcpyDeviceToHost) return true;
  // cudaMemcpyDefault: the pointers asked about, unless an error the program has not read is pending
  // (fa's questions could replace it)
  if (kind != cudaMemcpyDefault || cudaPeekAtLastError() != cudaSuccess) return false;
  cudaPointerAttributes from{}, to{};
  const bool known = cudaPointerGetAttributes(&from, src) == cudaSuccess &&
                     cudaPointerGetAttributes(&to, dst) == cudaSuccess;
  if (!known) cudaGetLastError();  // fa's question's own error: none was pending
  return known && from.type == cudaMemoryTypeDevice && to.type != cudaMemoryTypeDevice &&
         to.type != cudaMemoryTypeManaged;
}

inline void keep_copied_back(const void* dst, size_t count) {
  static std::mutex one_at_a_time;  // copies back from several host threads: each its own file, counted once
  static int copies = 0;
  static size_t kept = 0;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  const std::string& folder = fa::settings().copied_back;
  char name[32];
  std::snprintf(name, sizeof name, "/copy-%04d.bin", ++copies);
  if (kept + count > kCopiedBackBytes) {
    std::fprintf(stderr, "fa-launch: FA_COPIED_BACK: copy %d not kept: %zu bytes kept already\n", copies, kept);
    return;
  }
  FILE* f = std::fopen((folder + name).c_str(), "wb");
  const bool written = f != nullptr && std::fwrite(dst, 1, count, f) == count;
  if (f != nullptr && std::fclose(f) != 0 && written) std::remove((folder + name).c_str());
  if (written) kept += count;
  else std::fprintf(stderr, "fa-launch: FA_COPIED_BACK: copy %d not kept: %s%s could not be written\n", copies,
                    folder.c_str(), name);
}

}  // namespace fa_launch_log

__host__ __device__ inline cudaError_t fa_layer_memcpy_async(void* dst, const void* src, size_t count,
                                                             cudaMemcpyKind kind, cudaStream_t stream = 0) {
#ifdef __CUDA_ARCH__
  return cudaMemcpyAsync(dst, src, count, kind, stream);
#else
  const cudaError_t e = cudaMemcpyAsync(dst, src, count, kind, stream);
  const bool keep = !fa::settings().copied_back.empty() && fa_launch_log::device_to_host(dst, src, kind);
  if (e != cudaSuccess || !(fa::settings().copies_waited || keep)) return e;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) return e;
  const cudaError_t waited = cudaStreamSynchronize(stream);
  if (waited == cudaSuccess && keep) fa_launch_log::keep_copied_back(dst, count);
  return waited;
#endif
}
#define cudaMemcpyAsync fa_layer_memcpy_async

inline cudaError_t fa_layer_memcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  const cudaError_t e = cudaMemcpy(dst, src, count, kind);
  if (e == cudaSuccess && !fa::settings().copied_back.empty() && fa_launch_log::device_to_host(dst, src, kind))
    fa_launch_log::keep_copied_back(dst, count);
  return e;
}
#define cudaMemcpy fa_layer_memcpy

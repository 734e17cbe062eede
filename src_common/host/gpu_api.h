// host/gpu_api.h: the API traits that host/pipeline.h is written against, once for CUDA and
// HIP. Their calls have the same names but for the prefix: FA_GPU(Malloc) is cudaMalloc or
// hipMalloc. The program's platform header defines FA_GPU, FA_CHECK (every call checked: a
// failure ends the program with one line naming the call) and `GpuHooks`, what differs
// between the runtimes (start-up settings, the architecture's name, read-only page locks, the
// driver's files, opt-in shared memory): src_cuda/cuda_api.cuh, src_hip/hip_api.h.
// Include guards, not #pragma once: compiled after its platform header (tests/test_headers.py)
// the file is the main file, where clang ignores #pragma once, and the platform header includes
// it too.
#ifndef FA_HOST_GPU_API_H
#define FA_HOST_GPU_API_H

#ifndef FA_GPU  // the platform comes from above: src_common includes no backend
#error "host/gpu_api.h needs a platform header first: src_cuda/cuda_api.cuh or src_hip/hip_api.h"
#endif

#include <cstddef>
#include <string>

#include "pipeline.h"

using GpuStream = FA_GPU(Stream_t);
using GpuFuncAttributes = FA_GPU(FuncAttributes);
// Asks for a kernel's attributes (which also loads its code).
template <class F>
FA_GPU(Error_t) gpu_func_attributes(GpuFuncAttributes* attr, F* kernel) {
  return FA_GPU(FuncGetAttributes)(attr, reinterpret_cast<const void*>(kernel));
}

namespace fa {

struct GpuApi {
  using Stream = FA_GPU(Stream_t);
  using Event = FA_GPU(Event_t);

  static void configure() { GpuHooks::configure(); }
  static DeviceInfo init() {
    int count = 0;
    const FA_GPU(Error_t) err = FA_GPU(GetDeviceCount)(&count);
    if (err != FA_GPU(Success) || count == 0)
      fail(kExitFailure, "no %s device available (%s)", GpuHooks::runtime(),
           err == FA_GPU(Success) ? "none found" : FA_GPU(GetErrorString)(err));
    FA_CHECK(FA_GPU(SetDevice)(0));
    FA_CHECK(FA_GPU(Free)(nullptr));  // creates the context now, while the reader thread reads
    typename GpuHooks::DeviceProp prop;
    FA_CHECK(FA_GPU(GetDeviceProperties)(&prop, 0));
    GpuHooks::after_init();
    return {GpuHooks::arch(prop), prop.name};
  }
  static void* device_alloc(size_t bytes) {
    void* p = nullptr;
    if (FA_GPU(Malloc)(&p, bytes) != FA_GPU(Success))
      fail(kExitFailure, "cannot allocate %zu bytes of GPU memory (one chunk of batches)", bytes);
    return p;
  }
  // The driver's teardown, done here (on the release thread) rather than at exit. The thread
  // names its device first: a thread that never did resets nothing.
  static std::string release() {
    FA_GPU(Error_t) err = FA_GPU(SetDevice)(0);
    if (err == FA_GPU(Success)) err = FA_GPU(DeviceReset)();
    return err == FA_GPU(Success) ? "" : FA_GPU(GetErrorString)(err);
  }
  static bool close_files() { return GpuHooks::close_files(); }
  static void host_register(void* p, size_t bytes, bool device_reads_only) {
    FA_CHECK(FA_GPU(HostRegister)(p, bytes, GpuHooks::register_flags(device_reads_only)));
  }
  static bool locks_file_pages() { return GpuHooks::locks_file_pages(); }
  static std::string lock_file_pages(void* p, size_t bytes) { return GpuHooks::lock_file_pages(p, bytes); }
  static Stream stream() {
    Stream s;
    FA_CHECK(FA_GPU(StreamCreateWithFlags)(&s, FA_GPU(StreamNonBlocking)));
    return s;
  }
  static Event event() {
    Event e;
    FA_CHECK(FA_GPU(EventCreate)(&e));
    return e;
  }
  static void record(Event e, Stream s) { FA_CHECK(FA_GPU(EventRecord)(e, s)); }
  static void wait(Stream s, Event e) { FA_CHECK(FA_GPU(StreamWaitEvent)(s, e, 0)); }
  static void sync(Event e) { FA_CHECK(FA_GPU(EventSynchronize)(e)); }
  static float elapsed_ms(Event a, Event b) {
    float ms = 0;
    FA_CHECK(FA_GPU(EventElapsedTime)(&ms, a, b));
    return ms;
  }
  static void h2d(void* dst, const void* src, size_t bytes, Stream s) {
    FA_CHECK(FA_GPU(MemcpyAsync)(dst, src, bytes, FA_GPU(MemcpyHostToDevice), s));
  }
  static void d2h(void* dst, const void* src, size_t bytes, Stream s) {
    FA_CHECK(FA_GPU(MemcpyAsync)(dst, src, bytes, FA_GPU(MemcpyDeviceToHost), s));
  }
  // Lets a kernel have `bytes` of dynamic shared memory; false where this GPU cannot.
  template <class F>
  static bool allow_shared_bytes(F* kernel, int bytes) {
    return GpuHooks::allow_shared_bytes(reinterpret_cast<const void*>(kernel), bytes);
  }
};

}  // namespace fa

#endif  // FA_HOST_GPU_API_H

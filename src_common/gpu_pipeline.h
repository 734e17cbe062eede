// gpu_pipeline.h: the streamed host pipeline of the GPU programs (fa-cuda, fa-hip).
//
// The judge times the whole process, and on an H100 the device's start-up (about 0.3 s) costs
// more than reading the largest input from the page cache (about 0.08 s). So:
//
//   init thread     device start-up, device buffers, pinned output slots, streams, events
//   reader thread   starts at once: reads chunks of whole batches (about kChunkBytes each)
//                   into host slots while the device starts; inputs up to kPrefetchBytes are
//                   read whole, larger ones through a ring of kRingSlots slots
//   main thread     per chunk, on three streams so that copies overlap compute:
//                     h2d stream:     slot -> device input buffer (2 buffers, alternating)
//                     compute stream: the kernels of this chunk
//                     d2h stream:     device output buffer (2, alternating) -> pinned output slot
//                   events order the streams: a buffer is refilled only once its reader is done
//   writer thread   writes each finished chunk to the temporary output, in order
//
// Device memory holds 2 input chunks, 2 output chunks and the kernels' scratch for one
// chunk, whatever B is. Host slots are registered (page-locked) lazily, once the device is up.
//
// The pipeline is written once against an API traits type `Gpu` (CUDA or HIP) and a
// `Kernels` type that launches the kernels of one chunk; both are described below.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "fa_host.h"

namespace fa {

constexpr int64_t kChunkBytes = 48ll << 20;      // input bytes per chunk (at least one batch)
constexpr int64_t kPrefetchBytes = 3ll << 30;    // inputs up to this are read whole during init
constexpr int kRingSlots = 4;                    // host input slots for larger inputs
constexpr int kOutputSlots = 3;                  // pinned host output slots
constexpr int kReadThreads = 8;                  // a chunk is read by this many threads at once

// Gpu must provide (each call checks its own errors and fails with a one-line message):
//   struct Gpu {
//     using Stream = ...; using Event = ...;
//     static DeviceInfo init();                          // start the device, say what it is
//     static void* device_alloc(size_t);
//     static void* pinned_alloc(size_t);
//     static void host_register(void*, size_t);
//     static Stream stream(); static Event event();
//     static void record(Event, Stream); static void wait(Stream, Event);
//     static void sync(Event); static float elapsed_ms(Event, Event);
//     static void h2d(void* dst, const void* src, size_t, Stream);
//     static void d2h(void* dst, const void* src, size_t, Stream);
//   };
// Kernels must provide:
//   Kernels(const Shape&, const DeviceInfo&);                  // choose the kernel
//   size_t scratch_bytes(int64_t batches) const;
//   void launch(const float* qkv, float* out, void* scratch, int64_t batches, Stream);
//   std::string name() const;                                 // asked once the run is done
//   static std::vector<Launch> launches();                    // every kernel it may launch
//
// `PROGRAM --launches` prints those, one kernel a line, and starts no device: threads per
// block and dynamic shared memory are launch-time values that no compiler report holds, and
// `fa resources` needs them for the occupancy.

struct Launch {
  std::string kernel;  // as the compiler names it, without namespace and parameters: "split_kv"
  int threads;         // per block
  int dynamic_smem;    // bytes per block
};

inline void print_launches(const std::vector<Launch>& launches) {
  std::printf("kernel\tthreads\tdynamic_smem_bytes\n");
  for (const Launch& l : launches) std::printf("%s\t%d\t%d\n", l.kernel.c_str(), l.threads, l.dynamic_smem);
}

struct DeviceInfo {
  std::string arch;  // sm_90, gfx90a, ...
  std::string name;  // NVIDIA H100 80GB HBM3, ...
};

// A counter that one thread advances and others wait on.
class Progress {
 public:
  void advance() {
    { std::lock_guard<std::mutex> lock(m_); ++count_; }
    cv_.notify_all();
  }
  void wait_for(int64_t n) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return count_ >= n; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int64_t count_ = 0;
};

// Reads [offset, offset + bytes) with kReadThreads threads: copying out of the page cache and
// faulting in fresh pages both scale with cores.
inline void read_parallel(int fd, char* dst, int64_t bytes, int64_t offset, const char* path) {
  const int64_t part = ((bytes + kReadThreads - 1) / kReadThreads + 4095) / 4096 * 4096;
  std::vector<std::thread> threads;
  for (int64_t start = 0; start < bytes; start += part) {
    const int64_t n = std::min(part, bytes - start);
    threads.emplace_back([=] { read_exact(fd, dst + start, n, offset + start, path); });
  }
  for (auto& t : threads) t.join();
}

template <class Gpu, class Kernels>
int run_pipeline(int argc, char** argv) {
  using Stream = typename Gpu::Stream;
  using Event = typename Gpu::Event;
  if (argc == 2 && std::strcmp(argv[1], "--launches") == 0) {
    print_launches(Kernels::launches());
    return 0;
  }
  parse_args(argc, argv);
  const double start = now_seconds();
  Timing timing;
  const InputFile in = open_input(argv[1]);
  const Shape s = in.shape;
  OutputFile out(argv[2], in);

  // Chunks of whole batches.
  const int64_t batch_in = 12 * s.batch_elements(), batch_out = 4 * s.batch_elements();
  const int64_t per_chunk = std::max<int64_t>(1, std::min<int64_t>(s.B, kChunkBytes / batch_in));
  const int64_t chunks = (s.B + per_chunk - 1) / per_chunk;
  auto batches_in = [&](int64_t i) { return std::min(per_chunk, s.B - i * per_chunk); };
  const int64_t slots = chunks * per_chunk * batch_in <= kPrefetchBytes ? chunks : std::min<int64_t>(chunks, kRingSlots);
  const size_t slot_bytes = (size_t)(per_chunk * batch_in), out_slot_bytes = (size_t)(per_chunk * batch_out);

  // Host input slots: plain anonymous memory, so the reader can fill them before the device is
  // up; huge pages, because faulting in 4 KB pages one by one made the read the slowest stage.
  std::vector<char*> host_in(slots);
  for (auto& p : host_in) {
    void* m = mmap(nullptr, slot_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail(kExitFailure, "cannot allocate %zu bytes of host memory", slot_bytes);
    madvise(m, slot_bytes, MADV_HUGEPAGE);
    p = static_cast<char*>(m);
  }

  // Init thread: device, buffers, streams, events.
  DeviceInfo device;
  void* dev_in[2]; void* dev_out[2]; void* scratch = nullptr;
  std::vector<char*> host_out(kOutputSlots);
  Stream h2d_stream{}, compute_stream{}, d2h_stream{};
  std::vector<Event> h2d_start(chunks), h2d_end(chunks), k_start(chunks), k_end(chunks), d2h_start(chunks),
      d2h_end(chunks);
  Kernels* kernels = nullptr;
  double t_device = 0, t_kernels = 0;  // init's steps, for FA_TIMING=2
  std::thread init([&] {
    const double t = now_seconds();
    device = Gpu::init();
    t_device = now_seconds() - start;
    kernels = new Kernels(s, device);
    t_kernels = now_seconds() - start;
    for (int i = 0; i < 2; ++i) {
      dev_in[i] = Gpu::device_alloc(slot_bytes);
      dev_out[i] = Gpu::device_alloc(out_slot_bytes);
    }
    if (size_t bytes = kernels->scratch_bytes(per_chunk)) scratch = Gpu::device_alloc(bytes);
    for (auto& p : host_out) p = static_cast<char*>(Gpu::pinned_alloc(out_slot_bytes));
    h2d_stream = Gpu::stream(), compute_stream = Gpu::stream(), d2h_stream = Gpu::stream();
    for (int64_t i = 0; i < chunks; ++i) {
      h2d_start[i] = Gpu::event(), h2d_end[i] = Gpu::event(), k_start[i] = Gpu::event();
      k_end[i] = Gpu::event(), d2h_start[i] = Gpu::event(), d2h_end[i] = Gpu::event();
    }
    timing.init = now_seconds() - t;
  });

  // Reader thread: fills slots in order; a reused slot waits until its last copy finished.
  Progress read_done, init_done, submitted, written;
  // FA_TIMING=2 adds one trace line per chunk: when it was read, submitted and written.
  std::vector<double> t_read(chunks), t_submit(chunks), t_written(chunks);
  double t_init = 0;
  std::thread reader([&] {
    for (int64_t i = 0; i < chunks; ++i) {
      if (i >= slots) {
        init_done.wait_for(1);
        submitted.wait_for(i - slots + 1);
        Gpu::sync(h2d_end[i - slots]);
      }
      const double t = now_seconds();
      read_parallel(in.fd, host_in[i % slots], batches_in(i) * batch_in, batch_offset(s, i * per_chunk), argv[1]);
      timing.read += now_seconds() - t;
      t_read[i] = now_seconds() - start;
      read_done.advance();
    }
  });

  init.join();
  t_init = now_seconds() - start;
  init_done.advance();
  timing.arch = device.arch;
  timing.device = device.name;

  // Writer thread: writes chunks in order once their copy back has finished.
  std::thread writer([&] {
    for (int64_t i = 0; i < chunks; ++i) {
      submitted.wait_for(i + 1);
      Gpu::sync(d2h_end[i]);
      const double t = now_seconds();
      out.write(host_out[i % kOutputSlots], batches_in(i) * batch_out);
      timing.write += now_seconds() - t;
      t_written[i] = now_seconds() - start;
      written.advance();
    }
  });

  // Main thread: submit every chunk to the three streams.
  std::vector<bool> registered(slots, false);
  double register_seconds = 0;
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t n = batches_in(i), slot = i % slots, buf = i % 2;
    read_done.wait_for(i + 1);
    if (!registered[slot]) {
      const double t = now_seconds();
      Gpu::host_register(host_in[slot], slot_bytes);
      register_seconds += now_seconds() - t;
      registered[slot] = true;
    }
    if (i >= 2) Gpu::wait(h2d_stream, k_end[i - 2]);  // dev_in[buf] is free once kernel i-2 ran
    Gpu::record(h2d_start[i], h2d_stream);
    Gpu::h2d(dev_in[buf], host_in[slot], (size_t)(n * batch_in), h2d_stream);
    Gpu::record(h2d_end[i], h2d_stream);

    Gpu::wait(compute_stream, h2d_end[i]);
    if (i >= 2) Gpu::wait(compute_stream, d2h_end[i - 2]);  // dev_out[buf] is free once copied back
    Gpu::record(k_start[i], compute_stream);
    kernels->launch(static_cast<const float*>(dev_in[buf]), static_cast<float*>(dev_out[buf]), scratch, n,
                    compute_stream);
    Gpu::record(k_end[i], compute_stream);

    if (i >= kOutputSlots) written.wait_for(i - kOutputSlots + 1);  // pinned slot written out
    Gpu::wait(d2h_stream, k_end[i]);
    Gpu::record(d2h_start[i], d2h_stream);
    Gpu::d2h(host_out[i % kOutputSlots], dev_out[buf], (size_t)(n * batch_out), d2h_stream);
    Gpu::record(d2h_end[i], d2h_stream);
    t_submit[i] = now_seconds() - start;
    submitted.advance();
  }
  reader.join();
  writer.join();
  out.commit();

  for (int64_t i = 0; i < chunks; ++i) {
    timing.h2d += Gpu::elapsed_ms(h2d_start[i], h2d_end[i]) / 1e3;
    timing.kernel += Gpu::elapsed_ms(k_start[i], k_end[i]) / 1e3;
    timing.d2h += Gpu::elapsed_ms(d2h_start[i], d2h_end[i]) / 1e3;
  }
  timing.h2d += register_seconds;  // page-locking the input is part of getting it to the device
  timing.impl = kernels->name();   // after the run: a kernel may have handed chunks to another
  timing.total = now_seconds() - start;
  timing.print_if_asked();
  const char* level = std::getenv("FA_TIMING");
  if (level && std::strcmp(level, "2") == 0) {
    std::fprintf(stderr, "fa-trace: started at %.4f s of the monotonic clock\n", start);
    std::fprintf(stderr, "fa-trace: device up at %.4f s, kernels chosen at %.4f s, buffers ready at %.4f s\n", t_device,
                 t_kernels, t_init);
    std::fprintf(stderr, "fa-trace: %lld chunks of %lld batches\n", (long long)chunks, (long long)per_chunk);
    for (int64_t i = 0; i < chunks; ++i)
      std::fprintf(stderr, "fa-trace: chunk %lld read %.4f submitted %.4f written %.4f kernel %.2f ms\n", (long long)i,
                   t_read[i], t_submit[i], t_written[i], Gpu::elapsed_ms(k_start[i], k_end[i]));
    std::fprintf(stderr, "fa-trace: exiting at %.4f s\n", now_seconds() - start);
  }
  // Leave without the runtime's teardown: unpinning and freeing about a gigabyte took the
  // driver 0.1 s or more; the operating system reclaims all of it at exit anyway.
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace fa

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

// ------------------------------------------------------------------------- the pieces
// The chunking of one input: whole batches, about kChunkBytes of input each; inputs up to
// kPrefetchBytes get a host slot per chunk, larger ones a ring of kRingSlots.
struct ChunkPlan {
  int64_t B, batch_in, batch_out, per_chunk, chunks, slots;
  size_t slot_bytes, out_slot_bytes;
  explicit ChunkPlan(const Shape& s)
      : B(s.B), batch_in(12 * s.batch_elements()), batch_out(4 * s.batch_elements()),
        per_chunk(std::max<int64_t>(1, std::min<int64_t>(s.B, kChunkBytes / batch_in))),
        chunks((s.B + per_chunk - 1) / per_chunk),
        slots(chunks * per_chunk * batch_in <= kPrefetchBytes ? chunks : std::min<int64_t>(chunks, kRingSlots)),
        slot_bytes((size_t)(per_chunk * batch_in)), out_slot_bytes((size_t)(per_chunk * batch_out)) {}
  int64_t batches_in(int64_t i) const { return std::min(per_chunk, B - i * per_chunk); }
};

// Host input slots: plain anonymous memory, so the reader can fill them before the device is
// up; huge pages, because faulting in 4 KB pages one by one made the read the slowest stage.
inline std::vector<char*> map_input_slots(const ChunkPlan& plan) {
  std::vector<char*> slots(plan.slots);
  for (auto& p : slots) {
    void* m = mmap(nullptr, plan.slot_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail(kExitFailure, "cannot allocate %zu bytes of host memory", plan.slot_bytes);
    madvise(m, plan.slot_bytes, MADV_HUGEPAGE);
    p = static_cast<char*>(m);
  }
  return slots;
}

// What the init thread makes: the device, the chosen kernels, device buffers (2 input, 2
// output, scratch), pinned output slots, the three streams and each chunk's events.
template <class Gpu, class Kernels>
struct DeviceSide {
  using Stream = typename Gpu::Stream;
  using Event = typename Gpu::Event;
  DeviceInfo device;
  Kernels* kernels = nullptr;
  void* dev_in[2] = {};
  void* dev_out[2] = {};
  void* scratch = nullptr;
  std::vector<char*> host_out;
  Stream h2d_stream{}, compute_stream{}, d2h_stream{};
  std::vector<Event> h2d_start, h2d_end, k_start, k_end, d2h_start, d2h_end;
  double t_device = 0, t_kernels = 0;  // since start: device up, kernels chosen (FA_TIMING=2)

  void start(const Shape& s, const ChunkPlan& plan, double started, Timing& timing) {
    const double t = now_seconds();
    device = Gpu::init();
    t_device = now_seconds() - started;
    kernels = new Kernels(s, device);
    t_kernels = now_seconds() - started;
    for (int i = 0; i < 2; ++i) {
      dev_in[i] = Gpu::device_alloc(plan.slot_bytes);
      dev_out[i] = Gpu::device_alloc(plan.out_slot_bytes);
    }
    if (size_t bytes = kernels->scratch_bytes(plan.per_chunk)) scratch = Gpu::device_alloc(bytes);
    host_out.resize(kOutputSlots);
    for (auto& p : host_out) p = static_cast<char*>(Gpu::pinned_alloc(plan.out_slot_bytes));
    h2d_stream = Gpu::stream(), compute_stream = Gpu::stream(), d2h_stream = Gpu::stream();
    for (auto* events : {&h2d_start, &h2d_end, &k_start, &k_end, &d2h_start, &d2h_end}) {
      events->resize(plan.chunks);
      for (auto& e : *events) e = Gpu::event();
    }
    timing.init = now_seconds() - t;
  }
};

// The threads' progress: each counter is advanced by one piece and waited on by others.
struct PipelineProgress {
  Progress read_done, init_done, submitted, written;
};

// Reader thread: fills slots in order; a reused slot waits until its last copy finished.
template <class Gpu, class Kernels>
void read_chunks(const InputFile& in, const char* path, const ChunkPlan& plan, const std::vector<char*>& host_in,
                 const DeviceSide<Gpu, Kernels>& dev, PipelineProgress& progress, Timing& timing,
                 std::vector<double>& t_read, double started) {
  const Shape& s = in.shape;
  for (int64_t i = 0; i < plan.chunks; ++i) {
    if (i >= plan.slots) {
      progress.init_done.wait_for(1);
      progress.submitted.wait_for(i - plan.slots + 1);
      Gpu::sync(dev.h2d_end[i - plan.slots]);
    }
    const double t = now_seconds();
    read_parallel(in.fd, host_in[i % plan.slots], plan.batches_in(i) * plan.batch_in,
                  batch_offset(s, i * plan.per_chunk), path);
    timing.read += now_seconds() - t;
    t_read[i] = now_seconds() - started;
    progress.read_done.advance();
  }
}

// Main thread: each chunk to the three streams, in order. Input slots are page-locked lazily,
// at their first use, once the device is up.
template <class Gpu, class Kernels>
void submit_chunks(const ChunkPlan& plan, const std::vector<char*>& host_in, DeviceSide<Gpu, Kernels>& dev,
                   PipelineProgress& progress, Timing& timing, std::vector<double>& t_submit, double started) {
  std::vector<bool> registered(plan.slots, false);
  for (int64_t i = 0; i < plan.chunks; ++i) {
    const int64_t n = plan.batches_in(i), slot = i % plan.slots, buf = i % 2;
    progress.read_done.wait_for(i + 1);
    if (!registered[slot]) {
      const double t = now_seconds();
      Gpu::host_register(host_in[slot], plan.slot_bytes);
      timing.h2d += now_seconds() - t;  // page-locking the input is part of getting it to the device
      registered[slot] = true;
    }
    if (i >= 2) Gpu::wait(dev.h2d_stream, dev.k_end[i - 2]);  // dev_in[buf] is free once kernel i-2 ran
    Gpu::record(dev.h2d_start[i], dev.h2d_stream);
    Gpu::h2d(dev.dev_in[buf], host_in[slot], (size_t)(n * plan.batch_in), dev.h2d_stream);
    Gpu::record(dev.h2d_end[i], dev.h2d_stream);

    Gpu::wait(dev.compute_stream, dev.h2d_end[i]);
    if (i >= 2) Gpu::wait(dev.compute_stream, dev.d2h_end[i - 2]);  // dev_out[buf] is free once copied back
    Gpu::record(dev.k_start[i], dev.compute_stream);
    dev.kernels->launch(static_cast<const float*>(dev.dev_in[buf]), static_cast<float*>(dev.dev_out[buf]), dev.scratch,
                        n, dev.compute_stream);
    Gpu::record(dev.k_end[i], dev.compute_stream);

    if (i >= kOutputSlots) progress.written.wait_for(i - kOutputSlots + 1);  // pinned slot written out
    Gpu::wait(dev.d2h_stream, dev.k_end[i]);
    Gpu::record(dev.d2h_start[i], dev.d2h_stream);
    Gpu::d2h(dev.host_out[i % kOutputSlots], dev.dev_out[buf], (size_t)(n * plan.batch_out), dev.d2h_stream);
    Gpu::record(dev.d2h_end[i], dev.d2h_stream);
    t_submit[i] = now_seconds() - started;
    progress.submitted.advance();
  }
}

// Writer thread: writes chunks in order once their copy back has finished.
template <class Gpu, class Kernels>
void write_chunks(OutputFile& out, const ChunkPlan& plan, const DeviceSide<Gpu, Kernels>& dev,
                  PipelineProgress& progress, Timing& timing, std::vector<double>& t_written, double started) {
  for (int64_t i = 0; i < plan.chunks; ++i) {
    progress.submitted.wait_for(i + 1);
    Gpu::sync(dev.d2h_end[i]);
    const double t = now_seconds();
    out.write(dev.host_out[i % kOutputSlots], plan.batches_in(i) * plan.batch_out);
    timing.write += now_seconds() - t;
    t_written[i] = now_seconds() - started;
    progress.written.advance();
  }
}

// The device stages' times from the events, and FA_TIMING=2's trace: one line per chunk, when
// it was read, submitted and written.
struct Trace {
  std::vector<double> read, submit, written;
  double init_done = 0;
  explicit Trace(int64_t chunks) : read(chunks), submit(chunks), written(chunks) {}
};

template <class Gpu, class Kernels>
void add_device_times(const ChunkPlan& plan, const DeviceSide<Gpu, Kernels>& dev, Timing& timing) {
  for (int64_t i = 0; i < plan.chunks; ++i) {
    timing.h2d += Gpu::elapsed_ms(dev.h2d_start[i], dev.h2d_end[i]) / 1e3;
    timing.kernel += Gpu::elapsed_ms(dev.k_start[i], dev.k_end[i]) / 1e3;
    timing.d2h += Gpu::elapsed_ms(dev.d2h_start[i], dev.d2h_end[i]) / 1e3;
  }
}

template <class Gpu, class Kernels>
void print_trace(const ChunkPlan& plan, const DeviceSide<Gpu, Kernels>& dev, const Trace& trace, double started) {
  const char* level = std::getenv("FA_TIMING");
  if (!level || std::strcmp(level, "2") != 0) return;
  std::fprintf(stderr, "fa-trace: started at %.4f s of the monotonic clock\n", started);
  std::fprintf(stderr, "fa-trace: device up at %.4f s, kernels chosen at %.4f s, buffers ready at %.4f s\n",
               dev.t_device, dev.t_kernels, trace.init_done);
  std::fprintf(stderr, "fa-trace: %lld chunks of %lld batches\n", (long long)plan.chunks, (long long)plan.per_chunk);
  for (int64_t i = 0; i < plan.chunks; ++i)
    std::fprintf(stderr, "fa-trace: chunk %lld read %.4f submitted %.4f written %.4f kernel %.2f ms\n", (long long)i,
                 trace.read[i], trace.submit[i], trace.written[i], Gpu::elapsed_ms(dev.k_start[i], dev.k_end[i]));
  std::fprintf(stderr, "fa-trace: exiting at %.4f s\n", now_seconds() - started);
}

// ------------------------------------------------------------------------- the pipeline
template <class Gpu, class Kernels>
int run_pipeline(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--launches") == 0) {
    print_launches(Kernels::launches());
    return 0;
  }
  parse_args(argc, argv);
  const double started = now_seconds();
  Timing timing;
  const InputFile in = open_input(argv[1]);
  OutputFile out(argv[2], in);
  const ChunkPlan plan(in.shape);
  const std::vector<char*> host_in = map_input_slots(plan);
  DeviceSide<Gpu, Kernels> dev;
  PipelineProgress progress;
  Trace trace(plan.chunks);

  std::thread init([&] { dev.start(in.shape, plan, started, timing); });
  std::thread reader([&] { read_chunks(in, argv[1], plan, host_in, dev, progress, timing, trace.read, started); });
  init.join();
  trace.init_done = now_seconds() - started;
  progress.init_done.advance();
  timing.arch = dev.device.arch;
  timing.device = dev.device.name;
  std::thread writer([&] { write_chunks(out, plan, dev, progress, timing, trace.written, started); });
  submit_chunks(plan, host_in, dev, progress, timing, trace.submit, started);
  reader.join();
  writer.join();
  out.commit();

  add_device_times(plan, dev, timing);
  timing.impl = dev.kernels->name();  // after the run: a kernel may have handed chunks to another
  timing.total = now_seconds() - started;
  timing.print_if_asked();
  print_trace(plan, dev, trace, started);
  // Leave without the runtime's teardown: unpinning and freeing about a gigabyte took the
  // driver 0.1 s or more; the operating system reclaims all of it at exit anyway.
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace fa

// host/pipeline.h: the streamed host pipeline of the GPU programs (fa-cuda, fa-hip).
//
// The judge times the whole process, and on an H100 device start-up (about 0.16 to 0.23 s) and
// the driver's teardown at exit (0.04 to 0.10 s) cost more than reading the largest course
// input from the page cache (about 0.1 s). So every step that needs no device runs beside
// those two, and the process's time is start-up + the device's own work + what exit leaves:
//
//   main thread      checks the input's header and the output's place, then starts:
//   init thread      device start-up, the chosen kernels, device buffers, streams, events
//   reader thread    at once, while the device starts: maps the pages of the input file, whose
//                    chunks of whole batches (about kChunkBytes each) the device then copies in
//                    place (HostInput); or, where that cannot be, reads the chunks into host
//                    slots: inputs up to kPrefetchBytes whole, larger ones through a ring of
//                    kRingSlots slots
//   populate thread  once the device is up: faults in the host output slots ahead of the main
//                    thread, so that locking them is cheap
//   main thread      per chunk, on three streams so that copies overlap compute:
//                      h2d stream:     slot -> device input buffer (2 buffers, alternating)
//                      compute stream: the kernels of this chunk
//                      d2h stream:     device output buffer (2, alternating) -> host output slot
//                    events order the streams: a buffer is refilled only once its reader is done
//   watcher thread   waits for each chunk's copy back and says so to the writer; drops the
//                    page-table entries of the chunk's input pages
//   writer thread    writes each copied chunk to the temporary output, in order
//   release thread   once the last chunk is back on the host, releases the device (the
//                    driver's teardown, which exit would otherwise do) while the writer
//                    finishes and the output is committed; if the writer is still at work
//                    then, it closes the driver's files too (close_device_files)
//   drop thread      once the output is committed: drops the output it replaced, if any
//
// Device memory holds 2 input chunks, 2 output chunks and the kernels' scratch for one chunk,
// whatever B is. Host memory: the input file's own pages (or input slots), and output slots
// that hold the whole output up to kHeldOutputBytes (so the device never waits for the file
// system, and can be released before the last write), a ring of kOutputRingSlots beyond. Host
// slots are plain anonymous huge-page memory, page-locked (registered) at their first use once
// the device is up: registering costs about 5 ms per 218 MB on an H100 host, where pinned
// allocations (cudaMallocHost) cost 19 ms per 48 MB. Input pages, the file's or the slots', are
// locked read-only where the device allows it: the device only reads them, and the release
// then unpins them in half the time. Locking stays on the main thread: a thread that registers
// memory holds up every other thread's driver calls (on a locker thread of their own, the
// kernels' launches waited).
//
// The pipeline is written once against an API traits type `Gpu` (CUDA or HIP) and a
// `Kernels` type that launches the kernels of one chunk; both are described below.
// Its parts: host/input.h (the format), host/output.h (the output rule), host/plan.h (chunks),
// host/slots.h and host/host_input.h (host memory), host/threads.h, host/timing.h, host/trace.h,
// host/settings.h (every FA_* setting), host/program.h (name, usage, errors).
#pragma once

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>

#include "host_input.h"
#include "input.h"
#include "output.h"
#include "plan.h"
#include "program.h"
#include "settings.h"
#include "slots.h"
#include "threads.h"
#include "timing.h"
#include "trace.h"

namespace fa {

// Gpu must provide (each call checks its own errors and fails with a one-line message):
//   struct Gpu {
//     using Stream = ...; using Event = ...;
//     static void configure();                           // before any thread: settings read at start-up
//     static DeviceInfo init();                          // start the device, say what it is
//     static std::string release();                      // tear the device down; "" or what failed
//     static bool close_files();                         // after release: the driver's files; false
//                                                        // where the platform leaves them to exit
//     static void* device_alloc(size_t);
//     static void host_register(void*, size_t, bool device_reads_only);
//     static bool locks_file_pages();                    // whether this API locks a file's pages read-only
//     static std::string lock_file_pages(void*, size_t); // lock them (mapped): "" or why not (not fatal)
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
//   static void listing();                                    // the kernel registry (--kernels)
//
// `PROGRAM --launches` prints the launches, one kernel a line, and starts no device: threads per
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

// `PROGRAM --launches | --kernels | --settings`: the listings a GPU program answers without
// starting a device. True when `arg` was one.
template <class LaunchesFn, class ListingFn>
bool answer_listing(const char* arg, LaunchesFn launches, ListingFn kernels) {
  if (std::strcmp(arg, "--launches") == 0) print_launches(launches());
  else if (std::strcmp(arg, "--kernels") == 0) kernels();
  else if (std::strcmp(arg, "--settings") == 0) print_settings();
  else return false;
  return true;
}

struct DeviceInfo {
  std::string arch;  // sm_90, gfx90a, ...
  std::string name;  // NVIDIA H100 80GB HBM3, ...
};

// The driver's files of this process (its device nodes, named by `prefix`), closed once the
// device is reset: their last close ends the driver's per-process state (on the H100's host the
// unified-memory driver's), which exit would otherwise do after the last instruction (0.045 to
// 0.055 s there). Closed by the release thread it costs more (0.04 to 0.07 s: the driver unmaps
// from an address space still alive), so the pipeline does it only while the writer is still at
// work, which it then overlaps. Nothing calls the device afterwards. Without /proc nothing is
// closed: exit does it. Says whether it closed any.
inline bool close_device_files(const char* prefix) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return false;
  std::vector<int> fds;
  const size_t prefix_len = std::strlen(prefix);
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end || fd == dirfd(dir)) continue;
    char link[64], target[256];
    std::snprintf(link, sizeof link, "/proc/self/fd/%ld", fd);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::strncmp(target, prefix, prefix_len) == 0) fds.push_back((int)fd);
  }
  closedir(dir);
  for (int fd : fds) close(fd);
  return !fds.empty();
}


// What the init thread makes: the device, the chosen kernels, device buffers (2 input, 2
// output, scratch), the three streams and each chunk's events.
template <class Gpu, class Kernels>
struct DeviceSide {
  using Stream = typename Gpu::Stream;
  using Event = typename Gpu::Event;
  DeviceInfo device;
  Kernels* kernels = nullptr;
  void* dev_in[2] = {};
  void* dev_out[2] = {};
  void* scratch = nullptr;
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
  Progress read_done, populated, init_done, submitted, copied, written;
};

// Reader thread: a mapped input is read ahead into the page cache and its pages mapped
// (HostInput::prefetch); once the main thread has decided (HostInput::decide), every chunk of it
// is ready. Otherwise (or if its pages were refused) it fills slots in order; a reused slot
// waits until its last copy finished.
template <class Gpu, class Kernels>
void read_chunks(const InputFile& in, const char* path, const ChunkPlan& plan, const HostInput<Gpu>& host_in,
                 const DeviceSide<Gpu, Kernels>& dev, PipelineProgress& progress, Timing& timing, Trace& trace,
                 double started) {
  const Shape& s = in.shape;
  trace.read_start = now_seconds() - started;
  if (host_in.has_mapping()) {
    host_in.prefetch();
    progress.init_done.wait_for(1);
    for (int64_t i = 0; host_in.mapped() && i < plan.chunks; ++i) {
      trace.read[i] = now_seconds() - started;
      progress.read_done.advance();
    }
    if (host_in.mapped()) return;
  }
  for (int64_t i = 0; i < plan.chunks; ++i) {
    if (i >= plan.slots) {
      progress.init_done.wait_for(1);
      progress.submitted.wait_for(i - plan.slots + 1);
      Gpu::sync(dev.h2d_end[i - plan.slots]);
    }
    const double t = now_seconds();
    read_parallel(in.fd, host_in.slot(i), plan.batches_in(i) * plan.batch_in, batch_offset(s, i * plan.per_chunk),
                  path);
    timing.read += now_seconds() - t;
    trace.read[i] = now_seconds() - started;
    progress.read_done.advance();
  }
}

// Main thread: each chunk to the three streams, in order. Host slots are page-locked at their
// first use (HostSlots::locked).
template <class Gpu, class Kernels>
void submit_chunks(const ChunkPlan& plan, HostInput<Gpu>& host_in, HostSlots<Gpu>& host_out,
                   DeviceSide<Gpu, Kernels>& dev, PipelineProgress& progress, Timing& timing, Trace& trace,
                   double started) {
  for (int64_t i = 0; i < plan.chunks; ++i) {
    const int64_t n = plan.batches_in(i), buf = i % 2;
    progress.read_done.wait_for(i + 1);
    const auto in = host_in.locked(i, timing.h2d);  // locking the input is part of getting it there
    if (i >= 2) Gpu::wait(dev.h2d_stream, dev.k_end[i - 2]);  // dev_in[buf] is free once kernel i-2 ran
    Gpu::record(dev.h2d_start[i], dev.h2d_stream);
    char* dst = static_cast<char*>(dev.dev_in[buf]);
    if (in.body_bytes) Gpu::h2d(dst, in.body, in.body_bytes, dev.h2d_stream);
    if (in.tail_bytes) Gpu::h2d(dst + in.body_bytes, in.tail, in.tail_bytes, dev.h2d_stream);
    Gpu::record(dev.h2d_end[i], dev.h2d_stream);
    if (i == 0) trace.first_h2d = now_seconds() - started;

    Gpu::wait(dev.compute_stream, dev.h2d_end[i]);
    if (i >= 2) Gpu::wait(dev.compute_stream, dev.d2h_end[i - 2]);  // dev_out[buf] is free once copied back
    Gpu::record(dev.k_start[i], dev.compute_stream);
    dev.kernels->launch(static_cast<const float*>(dev.dev_in[buf]), static_cast<float*>(dev.dev_out[buf]), dev.scratch,
                        n, dev.compute_stream);
    Gpu::record(dev.k_end[i], dev.compute_stream);

    if (i >= plan.out_slots) progress.written.wait_for(i - plan.out_slots + 1);  // ring slot written out
    progress.populated.wait_for(std::min(i + 1, plan.out_slots));
    char* out = host_out.locked(i, timing.d2h);
    Gpu::wait(dev.d2h_stream, dev.k_end[i]);
    Gpu::record(dev.d2h_start[i], dev.d2h_stream);
    Gpu::d2h(out, dev.dev_out[buf], (size_t)(n * plan.batch_out), dev.d2h_stream);
    Gpu::record(dev.d2h_end[i], dev.d2h_stream);
    trace.submit[i] = now_seconds() - started;
    progress.submitted.advance();
  }
}

// Watcher thread: each chunk's copy back, in order. After the last one nothing waits on the
// device any more, and the writer never calls it: the device can be released while it writes.
template <class Gpu, class Kernels>
void watch_copies(const ChunkPlan& plan, const HostInput<Gpu>& host_in, const DeviceSide<Gpu, Kernels>& dev,
                  PipelineProgress& progress, Trace& trace, double started) {
  for (int64_t i = 0; i < plan.chunks; ++i) {
    progress.submitted.wait_for(i + 1);
    Gpu::sync(dev.d2h_end[i]);
    trace.copied[i] = now_seconds() - started;
    progress.copied.advance();
    host_in.forget(i);
  }
}

// Writer thread: writes chunks in order once they are back on the host.
template <class Gpu>
void write_chunks(OutputFile& out, const ChunkPlan& plan, const HostSlots<Gpu>& host_out, PipelineProgress& progress,
                  Timing& timing, Trace& trace, double started) {
  for (int64_t i = 0; i < plan.chunks; ++i) {
    progress.copied.wait_for(i + 1);
    const double t = now_seconds();
    out.write(host_out[i], plan.batches_in(i) * plan.batch_out);
    timing.write += now_seconds() - t;
    trace.written[i] = now_seconds() - started;
    progress.written.advance();
  }
}

// The device stages' times from the events (before the device is released).
template <class Gpu, class Kernels>
void add_device_times(const ChunkPlan& plan, const DeviceSide<Gpu, Kernels>& dev, Timing& timing, Trace& trace) {
  for (int64_t i = 0; i < plan.chunks; ++i) {
    timing.h2d += Gpu::elapsed_ms(dev.h2d_start[i], dev.h2d_end[i]) / 1e3;
    trace.kernel_ms[i] = Gpu::elapsed_ms(dev.k_start[i], dev.k_end[i]);
    timing.kernel += trace.kernel_ms[i] / 1e3;
    timing.d2h += Gpu::elapsed_ms(dev.d2h_start[i], dev.d2h_end[i]) / 1e3;
  }
}

// ------------------------------------------------------------------------- the pipeline
template <class Gpu, class Kernels>
int run_pipeline(int argc, char** argv) {
  name_program(argv);
  if (argc == 2 && answer_listing(argv[1], Kernels::launches, Kernels::listing)) return 0;
  check_usage(argc, "--kernels | --launches | --settings");
  const double started = now_seconds();
  settings();  // read once, before any thread starts: a bad value is an error before any work
  Gpu::configure();
  Timing timing;
  const InputFile in = open_input(argv[1]);  // validated before the device is touched
  OutputFile out(argv[2], in);
  const ChunkPlan plan(in.shape);
  HostInput<Gpu> host_in(in, argv[1], plan);
  HostSlots<Gpu> host_out(plan.out_slots, plan.out_slot_bytes, false);
  DeviceSide<Gpu, Kernels> dev;
  PipelineProgress progress;
  Trace trace(plan.chunks);

  std::thread init = start_thread([&] { dev.start(in.shape, plan, started, timing); });
  std::thread reader = start_thread([&] { read_chunks(in, argv[1], plan, host_in, dev, progress, timing, trace, started); });
  std::thread populate = start_thread([&] { populate_slots(host_out.slot, host_out.bytes, progress.populated,
                                                           progress.init_done); });
  std::thread writer = start_thread([&] { write_chunks(out, plan, host_out, progress, timing, trace, started); });
  init.join();
  trace.init_done = now_seconds() - started;
  trace.device_up = dev.t_device, trace.kernels_chosen = dev.t_kernels;
  host_in.decide(timing.h2d);  // mapped or read: the reader waits for this
  progress.init_done.advance();
  timing.arch = dev.device.arch;
  timing.device = dev.device.name;
  std::thread watcher = start_thread([&] { watch_copies(plan, host_in, dev, progress, trace, started); });
  submit_chunks(plan, host_in, host_out, dev, progress, timing, trace, started);
  reader.join();
  populate.join();
  watcher.join();  // every chunk is back on the host: the device's part is done

  add_device_times(plan, dev, timing, trace);
  timing.impl = dev.kernels->name();  // after the run: a kernel may have handed chunks to another
  std::atomic<bool> committed(false);
  std::thread release = start_thread([&] {
    trace.release_error = Gpu::release();
    trace.released = now_seconds() - started;
    if (trace.release_error.empty() && !committed.load() && Gpu::close_files())
      trace.files_closed = now_seconds() - started;
    if (trace.release_error.empty()) {  // nothing is locked any more
      host_in.release();
      trace.input_released = now_seconds() - started;
    }
  });
  writer.join();
  out.commit();
  committed.store(true);
  trace.committed = now_seconds() - started;
  std::thread drop = start_thread([&] { out.drop_replaced(); });
  release.join();
  drop.join();
  // The output is complete and in place: a device that would not come down cleanly changes
  // nothing in it, so that is a warning, not a failure.
  if (!trace.release_error.empty())
    std::fprintf(stderr, "%s: warning: releasing the device: %s\n", program_name(), trace.release_error.c_str());
  timing.total = now_seconds() - started;
  timing.print_if_asked();
  print_trace(plan, host_in.how(), trace, started);
  // Leave without the runtime's own teardown (the device is released already); the operating
  // system reclaims the host memory at exit anyway.
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace fa

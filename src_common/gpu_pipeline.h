// gpu_pipeline.h: the streamed host pipeline of the GPU programs (fa-cuda, fa-hip).
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
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <dirent.h>
#include <sys/mman.h>

#include "fa_host.h"

namespace fa {

constexpr int64_t kChunkBytes = 48ll << 20;      // input bytes per chunk (at least one batch)
constexpr int64_t kPrefetchBytes = 3ll << 30;    // inputs up to this are read whole during init
constexpr int kRingSlots = 4;                    // host input slots for larger inputs
constexpr int64_t kHeldOutputBytes = 1ll << 30;  // outputs up to this are held whole on the host
constexpr int kOutputRingSlots = 4;              // host output slots for larger outputs
constexpr int kReadThreads = 8;                  // a chunk is read by this many threads at once

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

// Every thread of the pipeline starts here: a system that will not start one (a process limit)
// is a one-line error, not std::terminate's abort, which would leave a named temporary output.
template <class F>
std::thread start_thread(F&& body) {
  try {
    return std::thread(std::forward<F>(body));
  } catch (const std::system_error& e) {
    fail(kExitFailure, "cannot start a thread: %s", e.what());
  }
}

// Reads [offset, offset + bytes) with kReadThreads threads: copying out of the page cache and
// faulting in fresh pages both scale with cores.
inline void read_parallel(int fd, char* dst, int64_t bytes, int64_t offset, const char* path) {
  const int64_t part = ((bytes + kReadThreads - 1) / kReadThreads + 4095) / 4096 * 4096;
  std::vector<std::thread> threads;
  for (int64_t start = 0; start < bytes; start += part) {
    const int64_t n = std::min(part, bytes - start);
    threads.push_back(start_thread([=] { read_exact(fd, dst + start, n, offset + start, path); }));
  }
  for (auto& t : threads) t.join();
}

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

// ------------------------------------------------------------------------- the pieces
// The chunking of one input: whole batches, about kChunkBytes of input each; inputs up to
// kPrefetchBytes get a host slot per chunk, larger ones a ring of kRingSlots; outputs up to
// kHeldOutputBytes a host slot per chunk, larger ones a ring of kOutputRingSlots.
struct ChunkPlan {
  int64_t B, batch_in, batch_out, per_chunk, chunks, slots, out_slots;
  size_t slot_bytes, out_slot_bytes;
  explicit ChunkPlan(const Shape& s)
      : B(s.B), batch_in(12 * s.batch_elements()), batch_out(4 * s.batch_elements()),
        per_chunk(std::max<int64_t>(1, std::min<int64_t>(s.B, kChunkBytes / batch_in))),
        chunks((s.B + per_chunk - 1) / per_chunk),
        slots(chunks * per_chunk * batch_in <= kPrefetchBytes ? chunks : std::min<int64_t>(chunks, kRingSlots)),
        out_slots(chunks * per_chunk * batch_out <= kHeldOutputBytes ? chunks
                                                                      : std::min<int64_t>(chunks, kOutputRingSlots)),
        slot_bytes((size_t)(per_chunk * batch_in)), out_slot_bytes((size_t)(per_chunk * batch_out)) {}
  int64_t batches_in(int64_t i) const { return std::min(per_chunk, B - i * per_chunk); }
};

// Host slots: plain anonymous memory, so the reader can fill them before the device is up;
// huge pages, because faulting in 4 KB pages one by one made the read the slowest stage, and
// registered 4 KB pages cost the exit 0.07 s per 654 MB where huge pages cost nothing.
inline std::vector<char*> map_slots(int64_t count, size_t bytes) {
  std::vector<char*> slots(count);
  for (auto& p : slots) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) fail(kExitFailure, "cannot allocate %zu bytes of host memory", bytes);
    madvise(m, bytes, MADV_HUGEPAGE);
    p = static_cast<char*>(m);
  }
  return slots;
}

// Populate thread: once the device is up, faults the output slots in, in order, ahead of the
// main thread, so that locking them is cheap; the main thread locks slot i only once
// `populated` says so, so no copy can land in a slot before its zeros. Not during start-up:
// faulting in fresh memory slows the driver's start-up (at 60 x 32768 x 64, 2 GB faulted in
// beside it delayed it by 0.03 to 0.06 s on the H100's host; the input must be read then, the
// output need not be touched). A store per 4 KB page, not madvise's MADV_POPULATE_WRITE, which
// holds the address space's lock and delayed start-up by 0.04 s by itself.
inline void populate_slots(const std::vector<char*>& slots, size_t bytes, Progress& populated, Progress& init_done) {
  init_done.wait_for(1);
  for (char* slot : slots) {
    for (size_t at = 0; at < bytes; at += 4096) static_cast<volatile char*>(slot)[at] = 0;
    populated.advance();
  }
}

// Host slots page-locked at their first use, once the device is up: the main thread locks each
// slot just before its first copy, so that locking overlaps the copies and kernels before it.
template <class Gpu>
struct HostSlots {
  std::vector<char*> slot;
  std::vector<bool> registered;
  size_t bytes;
  bool device_reads_only;  // input slots: locked read-only where the device allows it
  HostSlots(int64_t count, size_t slot_bytes, bool device_reads_only)
      : slot(map_slots(count, slot_bytes)), registered(count), bytes(slot_bytes),
        device_reads_only(device_reads_only) {}
  // The slot of chunk i, locked; the seconds spent locking it are added to `seconds`.
  char* locked(int64_t i, double& seconds) {
    const size_t k = (size_t)(i % (int64_t)slot.size());
    if (!registered[k]) {
      const double t = now_seconds();
      Gpu::host_register(slot[k], bytes, device_reads_only);
      seconds += now_seconds() - t;
      registered[k] = true;
    }
    return slot[k];
  }
  char* operator[](int64_t i) const { return slot[(size_t)(i % (int64_t)slot.size())]; }
  // Once the device is reset (nothing is locked any more): the memory given back.
  void unmap() {
    for (char* p : slot) munmap(p, bytes);
    slot.clear();
  }
};

// The input on the host, page-locked for the copies in, in one of two ways:
//   mapped  the input file's own pages: mapped, and each chunk's pages locked read-only in
//           place at its first use, so the device copies straight from the page cache. The
//           CPU reads one byte per page and each chunk's tail, nothing more: on the H100's host,
//           reading 1.5 GB beside start-up delayed the device by 0.03 to 0.05 s, and locking
//           the copy read paced the kernels.
//           The data starts 12 bytes into the file (the header), so each chunk's last page is
//           also the next chunk's first, and the driver refuses a page locked twice: chunk i
//           locks its whole pages [page(start), page(end)), and its last bytes (less than a
//           page, from page(end) on) go through a small locked tail slot.
//   read    host slots that the reader thread fills (read_chunks), as described above: where
//           file pages cannot be locked read-only (HIP 5.2 has no such flag; a device or file
//           system that refuses them), for inputs over kPrefetchBytes (locking them all would
//           pin that much page cache), or when FA_INPUT=read asks for it.
// The choice is made once the device is up (decide), by locking chunk 0's pages; until then
// the reader thread brings the file into the page cache and maps its pages (prefetch). A later
// chunk whose pages are refused is read into its slot by the main thread.
template <class Gpu>
class HostInput {
 public:
  // A chunk's bytes on the host: `body` then `tail`, both locked.
  struct Chunk {
    const char* body;
    size_t body_bytes;
    const char* tail;
    size_t tail_bytes;
  };

  HostInput(const InputFile& in, const char* path, const ChunkPlan& plan)
      : in_(in), path_(path), plan_(plan), slots_(plan.slots, plan.slot_bytes, true) {
    const char* forced = std::getenv("FA_INPUT");
    const bool force_read = forced && std::strcmp(forced, "read") == 0;
    refuse_first_ = forced && std::strcmp(forced, "refused") == 0;
    refuse_later_ = forced && std::strcmp(forced, "refused-later") == 0;
    if (forced && *forced && !force_read && !refuse_first_ && !refuse_later_)
      fail(kExitUsage, "FA_INPUT=%s: expected read, refused or refused-later (or unset)", forced);
    if (force_read) how_ = "read: FA_INPUT=read";
    else if (!Gpu::locks_file_pages()) how_ = "read: this platform cannot lock a file's pages read-only";
    else if (plan.slots < plan.chunks) how_ = "read: larger than the input kept on the host";
    else map_file();
  }
  // Set when the HostInput is made, before any thread starts: the reader asks it first.
  bool has_mapping() const { return map_ != nullptr; }
  // Known once decide() has run (the reader and the watcher ask it after init_done).
  bool mapped() const { return map_ != nullptr && !refused_; }
  const std::string& how() const { return how_; }  // "mapped ..." or "read: why" (FA_TIMING=2)

  // Reader thread, mapped input, while the device starts: the file read ahead into the page
  // cache (a file not there yet), then its pages mapped by touching one byte of each, so that
  // locking a chunk later finds them mapped: at 13000 x 128 x 32 on the H100's host, the first
  // copy in to the last copy back took 0.048 s instead of 0.075. A touch, not MADV_POPULATE_READ,
  // which holds the address space's lock throughout and would hold up the driver's start-up.
  void prefetch() const {
    posix_fadvise(in_.fd, 0, 0, POSIX_FADV_WILLNEED);
    for (size_t at = 0; at < map_bytes_; at += kPage) (void)static_cast<volatile const char*>(map_)[at];
  }

  // Watcher thread, once chunk i is copied back (its copy in long done): its page-table entries
  // dropped (the pages stay locked and in the page cache), so that unmapping the input at the
  // end (release) costs nothing: 0.011 to 0.014 s for 639 MB on the H100's host, on the
  // critical path after the device's reset.
  void forget(int64_t i) const {
    if (!mapped()) return;
    const size_t first = page_of(start_of(i)), last = page_of(end_of(i));
    if (last > first) madvise(map_ + first, last - first, MADV_DONTNEED);
  }

  // Main thread, once the device is up: locks chunk 0's pages. If the device or the file
  // system refuses them, the input is read instead (the reader thread is waiting to know).
  void decide(double& seconds) {
    if (!mapped()) return;
    const double t = now_seconds();
    const std::string refused = refuse_first_ ? "FA_INPUT=refused" : lock_pages(0);
    seconds += now_seconds() - t;
    if (refused.empty()) return;
    refused_ = true;  // unmapped by release(): the reader may still be touching the pages
    how_ = "read: the file's pages could not be locked (" + refused + ")";
  }

  // Reader thread: the slot chunk i is read into (read input).
  char* slot(int64_t i) const { return slots_[i]; }

  // Main thread: chunk i, locked; the seconds spent locking are added to `seconds`.
  Chunk locked(int64_t i, double& seconds) {
    if (!mapped()) return from_slot(i, seconds);
    const size_t start = start_of(i), end = end_of(i), body_end = std::max(start, page_of(end));
    if (i > 0) {
      const double t = now_seconds();
      const std::string refused = refuse_later_ ? "FA_INPUT=refused-later" : lock_pages(i);
      seconds += now_seconds() - t;
      if (!refused.empty()) return read_instead(i, refused, seconds);
    }
    // The tail's bytes are read by the CPU: past the end of a file cut short while running,
    // that raises SIGBUS (fail_on_sigbus), as the reader's touches do.
    char* tail = tails_.locked(0, seconds) + i * kPage;
    std::memcpy(tail, map_ + body_end, end - body_end);
    return {map_ + start, body_end - start, tail, end - body_end};
  }

  // Release thread, after the device is reset (which unlocks every page): the mapping or the
  // slots given back, while the writer still works, rather than by exit.
  void release() {
    if (map_) munmap(map_, map_bytes_);
    map_ = nullptr;
    slots_.unmap();
    tails_.unmap();
  }

 private:
  static constexpr size_t kPage = 4096;
  static size_t page_of(size_t offset) { return offset / kPage * kPage; }
  // Chunk i's bytes in the file: [start_of(i), end_of(i)).
  size_t start_of(int64_t i) const { return (size_t)batch_offset(in_.shape, i * plan_.per_chunk); }
  size_t end_of(int64_t i) const { return start_of(i) + (size_t)(plan_.batches_in(i) * plan_.batch_in); }

  void map_file() {
    map_bytes_ = (size_t)in_.shape.input_bytes();
    void* m = mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, in_.fd, 0);
    if (m == MAP_FAILED) {
      how_ = std::string("read: the file cannot be mapped (") + std::strerror(errno) + ")";
      return;
    }
    map_ = static_cast<char*>(m);
    how_ = "mapped: the file's pages locked read-only in place";
    // The tails are written by the CPU after the slot is locked: faulted in first, and locked
    // device-readable and CPU-writable, so that the lock holds the pages the CPU then writes
    // (a read-only lock of untouched memory may hold the kernel's shared zero page instead).
    tails_ = HostSlots<Gpu>(1, (size_t)plan_.chunks * kPage, false);
    for (size_t at = 0; at < tails_.bytes; at += kPage) tails_[0][at] = 0;
    fail_on_sigbus(path_, map_, map_bytes_);
  }
  // Chunk i's whole pages, [page(start), page(end)), locked: "" or why not.
  std::string lock_pages(int64_t i) {
    const size_t first = page_of(start_of(i)), last = page_of(end_of(i));
    return last > first ? Gpu::lock_file_pages(map_ + first, last - first) : "";
  }
  // A later chunk whose pages were refused: read into its slot here, unless the file changed.
  Chunk read_instead(int64_t i, const std::string& refused, double& seconds) {
    struct stat st;
    if (fstat(in_.fd, &st) == 0 && st.st_size != in_.shape.input_bytes())
      fail(kExitFailure, "%s: input changed while running (now %lld bytes)", path_, (long long)st.st_size);
    if (how_.find("; chunk") == std::string::npos)
      how_ += "; chunk " + std::to_string(i) + " on read: its pages could not be locked (" + refused + ")";
    read_parallel(in_.fd, slots_[i], (int64_t)(end_of(i) - start_of(i)), (int64_t)start_of(i), path_);
    return from_slot(i, seconds);
  }
  // Chunk i from its slot (read into it), locked there.
  Chunk from_slot(int64_t i, double& seconds) {
    return {slots_.locked(i, seconds), end_of(i) - start_of(i), nullptr, 0};
  }

  const InputFile& in_;
  const char* path_;
  const ChunkPlan& plan_;
  HostSlots<Gpu> slots_;
  HostSlots<Gpu> tails_{0, 0, true};
  char* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::string how_;
  bool refuse_first_ = false;  // FA_INPUT=refused, refused-later: as if the device refused chunk 0's
  bool refuse_later_ = false;  // pages, or every later chunk's (the two fallbacks, for tests)
  bool refused_ = false;       // chunk 0's pages were refused: the input is read
};

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

// When each step happened, in seconds since the start (FA_TIMING=2's trace).
struct Trace {
  std::vector<double> read, submit, copied, written;
  std::vector<float> kernel_ms;  // each chunk's kernels, from the events (add_device_times)
  double read_start = 0, init_done = 0, first_h2d = 0, released = 0, files_closed = 0, input_released = 0,
         committed = 0;
  std::string release_error;
  explicit Trace(int64_t chunks)
      : read(chunks), submit(chunks), copied(chunks), written(chunks), kernel_ms(chunks) {}
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

// FA_TIMING=2: when each step happened, so that the overlaps can be seen.
template <class Gpu, class Kernels>
void print_trace(const ChunkPlan& plan, const DeviceSide<Gpu, Kernels>& dev, const std::string& input_how,
                 const Trace& trace, double started) {
  const char* level = std::getenv("FA_TIMING");
  if (!level || std::strcmp(level, "2") != 0) return;
  std::fprintf(stderr, "fa-trace: started at %.4f s of the monotonic clock\n", started);
  std::fprintf(stderr, "fa-trace: input %s\n", input_how.c_str());
  std::fprintf(stderr, "fa-trace: read started at %.4f s, input read at %.4f s\n", trace.read_start,
               trace.read[plan.chunks - 1]);
  std::fprintf(stderr, "fa-trace: device up at %.4f s, kernels chosen at %.4f s, buffers ready at %.4f s\n",
               dev.t_device, dev.t_kernels, trace.init_done);
  std::fprintf(stderr, "fa-trace: first h2d at %.4f s, last chunk copied back at %.4f s\n", trace.first_h2d,
               trace.copied[plan.chunks - 1]);
  std::fprintf(stderr, "fa-trace: %lld chunks of %lld batches; host output slots %lld\n", (long long)plan.chunks,
               (long long)plan.per_chunk, (long long)plan.out_slots);
  for (int64_t i = 0; i < plan.chunks; ++i)
    std::fprintf(stderr, "fa-trace: chunk %lld read %.4f submitted %.4f copied %.4f written %.4f kernel %.2f ms\n",
                 (long long)i, trace.read[i], trace.submit[i], trace.copied[i], trace.written[i], trace.kernel_ms[i]);
  std::fprintf(stderr, "fa-trace: output committed at %.4f s, device released at %.4f s%s%s\n", trace.committed,
               trace.released, trace.release_error.empty() ? "" : ": ", trace.release_error.c_str());
  if (trace.files_closed > 0) std::fprintf(stderr, "fa-trace: driver's files closed at %.4f s\n", trace.files_closed);
  else std::fprintf(stderr, "fa-trace: driver's files left to exit\n");
  if (trace.input_released > 0)
    std::fprintf(stderr, "fa-trace: input memory given back at %.4f s\n", trace.input_released);
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
  print_trace(plan, dev, host_in.how(), trace, started);
  // Leave without the runtime's own teardown (the device is released already); the operating
  // system reclaims the host memory at exit anyway.
  std::fflush(nullptr);
  std::_Exit(0);
}

}  // namespace fa

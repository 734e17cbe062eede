// host/host_input.h: the input on the host for the copies in: the file's own pages mapped and
// locked in place, or read into host slots; the choice, its fallbacks and their SIGBUS guard.
#pragma once

#include <algorithm>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "input.h"
#include "plan.h"
#include "settings.h"
#include "slots.h"
#include "threads.h"
#include "timing.h"

namespace fa {

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
    const InputMode mode = settings().input;
    refuse_first_ = mode == InputMode::kRefused;
    refuse_later_ = mode == InputMode::kRefusedLater;
    if (mode == InputMode::kRead) how_ = "read: FA_INPUT=read";
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

}  // namespace fa

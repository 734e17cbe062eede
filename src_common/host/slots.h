// host/slots.h: host memory for the chunks: anonymous huge-page slots, faulted in ahead of use
// and page-locked at their first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <sys/mman.h>

#include "program.h"
#include "threads.h"
#include "timing.h"

namespace fa {

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

}  // namespace fa

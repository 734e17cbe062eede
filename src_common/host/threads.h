// host/threads.h: the pipeline's threads: how each starts, how they wait on one another, and
// the parallel read.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "input.h"
#include "plan.h"
#include "program.h"

namespace fa {

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

}  // namespace fa

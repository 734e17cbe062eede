// host/trace.h: FA_TIMING=2's trace of the GPU pipeline: when each step happened, in seconds
// since the start, so that what overlaps what can be seen (scripts/startup_floor.py reads it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "plan.h"
#include "settings.h"
#include "timing.h"

namespace fa {

// When each step happened, in seconds since the start (FA_TIMING=2's trace).
struct Trace {
  std::vector<double> read, submit, copied, written;
  std::vector<float> kernel_ms;  // each chunk's kernels, from the events (add_device_times)
  double read_start = 0, device_up = 0, kernels_chosen = 0, init_done = 0, first_h2d = 0, released = 0, files_closed = 0, input_released = 0,
         committed = 0;
  std::string release_error;
  explicit Trace(int64_t chunks)
      : read(chunks), submit(chunks), copied(chunks), written(chunks), kernel_ms(chunks) {}
};


// FA_TIMING=2: when each step happened, so that the overlaps can be seen.
inline void print_trace(const ChunkPlan& plan, const std::string& input_how, const Trace& trace, double started) {
  if (settings().timing != 2) return;
  std::fprintf(stderr, "fa-trace: started at %.4f s of the monotonic clock\n", started);
  std::fprintf(stderr, "fa-trace: input %s\n", input_how.c_str());
  std::fprintf(stderr, "fa-trace: read started at %.4f s, input read at %.4f s\n", trace.read_start,
               trace.read[plan.chunks - 1]);
  std::fprintf(stderr, "fa-trace: device up at %.4f s, kernels chosen at %.4f s, buffers ready at %.4f s\n",
               trace.device_up, trace.kernels_chosen, trace.init_done);
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

}  // namespace fa

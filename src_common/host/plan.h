// host/plan.h: how the GPU programs cut an input into chunks, and the host memory they use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "input.h"

namespace fa {

constexpr int64_t kChunkBytes = 48ll << 20;      // input bytes per chunk (at least one batch)
constexpr int64_t kPrefetchBytes = 3ll << 30;    // inputs up to this are read whole during init
constexpr int kRingSlots = 4;                    // host input slots for larger inputs
constexpr int64_t kHeldOutputBytes = 1ll << 30;  // outputs up to this are held whole on the host
constexpr int kOutputRingSlots = 4;              // host output slots for larger outputs
constexpr int kReadThreads = 8;                  // a chunk is read by this many threads at once

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

}  // namespace fa

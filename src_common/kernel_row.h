// kernel_row.h: what one row of the kernel registry (registry.h) holds, and the state and
// arguments its launch gets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "host/gpu_api.h"
#include "host/input.h"
#include "host/pipeline.h"

#define FA_STRING_OF(x) #x
#define FA_STRING(x) FA_STRING_OF(x)
#ifndef FA_HIP_PROGRAM
#define FA_HIP_PROGRAM 0  // src_hip/hip_api.h sets it to 1
#endif

namespace fa {

// What the chosen kernel keeps between chunks.
struct KernelState {
  Shape shape;
  int tiled_bc = 32;        // the homework kernel's key tile (HIP: the wavefront, or FA_HIP_BC)
  bool native_mfma = false; // an AMD GPU with fp32 matrix cores (gfx908, gfx90a)
  int sms = 0;              // multiprocessors: grids of one block each (persistent kernels) or 8 (split passes)
  bool pdl = false;         // programmatic dependent launch (sm_90 and later)
  int declined_blocks = 0;  // attention_tiled_declined's grid, for this input's d
  volatile int* declined_host = nullptr;  // mapped flag: some chunk ran on the tiled kernel
  int* declined_device = nullptr;
  int64_t chunks = 0;  // chunks launched so far
};

// One chunk's launch arguments.
struct Chunk {
  const float* qkv;
  float* out;
  void* scratch;
  int64_t batches;
  GpuStream stream;
};

// What a row needs besides a GPU of its platform: the code the build must hold for this GPU.
enum class Needs { kAnyGpu, kSm80Code, kSm90aCode, kMfmaCode };
inline const char* needs_text(Needs needs) {
  switch (needs) {
    case Needs::kSm80Code: return "sm_80+ code";
    case Needs::kSm90aCode: return "sm_90a code";
    case Needs::kMfmaCode: return "gfx908/gfx90a code";
    default: return "any GPU";
  }
}

// A row's place on fa ladder's ladder, which climbs the table from its end (the slowest row
// first): its step number is its place among the rows that have one, counted from the last
// (registry.h's ladder_step). `env`: settings the step runs with besides FA_KERNEL=<the row's
// FA_KERNEL value>, "NAME=VALUE" or "". A row with an empty label is not on the ladder.
struct LadderRung {
  const char* label;
  const char* idea;  // what it changes from the step before
  const char* env;
  bool on_ladder() const { return label[0] != '\0'; }
};
const LadderRung kNoRung = {"", "", ""};

struct KernelEntry {
  const char* name;      // impl=, as FA_TIMING and fa's records show it
  const char* asked_as;  // the FA_KERNEL value of its family (the name asks for it too)
  Needs needs;
  const char* takes_text;                         // for --kernels: "N <= 128"
  bool (*takes)(const KernelState&, bool asked);  // chosen for this input (asked: FA_KERNEL named it)
  bool tensor_cores;                              // splits to 3xFP16; declines to the tiled kernel
  size_t (*scratch)(const Shape&, int64_t batches);  // device bytes for one chunk
  void (*prepare)(KernelState&);                     // before the first chunk, in the init thread
  void (*launch)(KernelState&, const Chunk&);
  void (*kernels)(std::vector<Launch>&);  // what it launches (`--launches`)
  std::string (*tiles)();                 // its tile parameters per d, for --kernels; "-": none
  std::string (*sweep)();                 // how fa sweep builds variants (registry.h); "-": none
  LadderRung ladder;
};

// The families of fa-cuda's tensor-core rows, named also where those rows are not built (a
// C++11 build, fa-hip), so that asking for one gets a one-line reason.
constexpr const char* kTensorcoreFamily = "tensorcore";
constexpr const char* kWgmmaFamily = "wgmma";
inline bool tensor_core_family(const std::string& asked) { return asked == kTensorcoreFamily || asked == kWgmmaFamily; }

inline bool any_n(const KernelState&, bool) { return true; }
inline bool only_asked(const KernelState&, bool asked) { return asked; }
template <int BC>
bool tiled_bc_is(const KernelState& s, bool) { return s.tiled_bc == BC; }
inline size_t no_scratch(const Shape&, int64_t) { return 0; }

// Each kernel as a struct K: template <int D> static launch_d(state, chunk), and the row's
// other functions (prepare, kernels, tiles, sweep; scratch for the tensor-core ones).
template <class K>
void launch_by_d(KernelState& state, const Chunk& c) {
  if (state.shape.d == 32)
    K::template launch_d<32>(state, c);
  else
    K::template launch_d<64>(state, c);
}

template <class K>
KernelEntry fp32_row(const char* name, const char* takes_text, bool (*takes)(const KernelState&, bool),
                     LadderRung rung = kNoRung, const char* family = nullptr, Needs needs = Needs::kAnyGpu) {
  KernelEntry e = {name, family ? family : name, needs, takes_text, takes, false, no_scratch, K::prepare,
                   launch_by_d<K>, K::kernels, K::tiles, K::sweep, rung};
  return e;
}

}  // namespace fa

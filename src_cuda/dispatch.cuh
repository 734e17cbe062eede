// dispatch.cuh: the table of fa-cuda's kernels. One entry per way of computing a chunk says
// what it is called (the impl= name, and the FA_KERNEL value that asks for it), what it needs
// (code for sm_80, sm_90a), for which N it is taken, its scratch memory, how it is prepared and
// launched, and the kernels it launches (for `fa-cuda --launches`). The default is the first
// entry, in table order (fastest first), that this GPU and program can run and that takes N;
// FA_KERNEL=name takes the first entry of that name that takes N. Adding a kernel is one entry.
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_api.cuh"
#include "../src_common/attention_simt.h"
#include "../src_common/attention_tiled.h"
#include "../src_common/ladder.h"
// The tensor-core kernels are written in C++17. A build as C++11 or C++14, such as the course's
// example Makefile makes (nvcc -std=c++11 ... hw4.cu), leaves them out and runs the tiled kernel,
// the only kind the course's GTX 1080 (sm_61) can run anyway. Everything else here is C++11.
#if __cplusplus >= 201703L
#define FA_TENSOR_CORES 1
#include "fallback.cuh"
#include "tensorcore/kernel.cuh"
#include "wgmma/kernel_long.cuh"
#include "wgmma/kernel_short.cuh"
#else
#define FA_TENSOR_CORES 0
#endif

namespace fa {

// The homework kernel's Bc: one key per lane of a warp; FA_TILED_BC=N builds another (fa sweep).
#ifndef FA_TILED_BC
#define FA_TILED_BC 32
#endif
constexpr int kTiledBc = FA_TILED_BC;

// What the chosen kernel keeps between chunks.
struct KernelState {
  Shape shape;
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
  cudaStream_t stream;
};

enum class Needs { kAnyGpu, kSm80Code, kSm90aCode };

struct KernelEntry {
  const char* name;                                  // impl=, as FA_TIMING and fa's records show it
  const char* asked_as;                              // the FA_KERNEL value that asks for it
  Needs needs;
  bool (*takes)(int64_t N, bool asked);              // chosen for N (asked: FA_KERNEL named it)
  bool tensor_cores;                                 // splits to 3xFP16; declines to the tiled kernel
  size_t (*scratch)(const Shape&, int64_t batches);  // device bytes for one chunk
  void (*prepare)();                                 // before the first chunk (shared-memory limits)
  void (*launch)(KernelState&, const Chunk&);
  void (*kernels)(std::vector<Launch>&);             // what it launches (`--launches`)
};

template <class Kernel>
void allow_smem(Kernel kernel, int bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Each kernel as a struct: template <int D> launch_d, and the entry's other functions.
template <class K>
void launch_by_d(KernelState& state, const Chunk& c) {
  if (state.shape.d == 32)
    K::template launch_d<32>(state, c);
  else
    K::template launch_d<64>(state, c);
}
inline bool any_n(int64_t, bool) { return true; }
inline bool only_asked(int64_t, bool asked) { return asked; }
inline size_t no_scratch(const Shape&, int64_t) { return 0; }

// ------------------------------------------------------------------------- the fp32 kernels
struct Simt {  // register-blocked (src_common/attention_simt.h): the default without tensor cores
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    launch_simt<D>(c.qkv, c.out, c.batches, state.shape.N, c.stream);
    CUDA_CHECK_LAUNCH("attention_simt");
  }
  static void prepare() { prepare_simt(); }
  static void kernels(std::vector<Launch>& all) {
    for (const SimtLaunch& l : simt_launches()) all.push_back({l.kernel, l.threads, l.smem_bytes});
  }
};

struct Tiled {  // the homework kernel (src_common/attention_tiled.h)
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    launch_tiled<D, kTiledBc>(c.qkv, c.out, c.batches, state.shape.N, c.stream);
    CUDA_CHECK_LAUNCH("attention_tiled");
  }
  static void prepare() {
    cudaFuncAttributes attr;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_tiled<32, kTiledBc>));
    CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_tiled<64, kTiledBc>));
  }
  static void kernels(std::vector<Launch>& all) {
    const std::string bc = std::to_string(kTiledBc);
    all.push_back({"attention_tiled<32, " + bc + ">", kTiledBc * kTiledBr, 0});
    all.push_back({"attention_tiled<64, " + bc + ">", kTiledBc * kTiledBr, 0});
  }
};

template <int kStep>  // ladder-kStep (src_common/ladder.h)
struct LadderStep {
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    CUDA_CHECK_LAUNCH(ladder::launch<D>(kStep, c.qkv, c.out, c.batches, state.shape.N, c.stream));
  }
  static void prepare() {}  // its kernels load at their first launch
  static void kernels(std::vector<Launch>& all) {  // kLaunches: two per step, d = 32 and 64
    for (int i = 2 * kStep - 2; i < 2 * kStep; ++i) all.push_back({ladder::kLaunches[i].kernel, ladder::kLaunches[i].threads, 0});
  }
};

#if FA_TENSOR_CORES
// ------------------------------------------------------------------------- the tensor-core kernels
constexpr int64_t kFusedMaxN = 256;        // the mma.sync kernel splits K and V itself up to here
constexpr size_t kFlagBytes = 256;         // the decline flags; keeps split K and V aligned

// Scratch of every tensor-core kernel: the decline flags of even and odd chunks, then split K
// and V where a split pass makes them. A chunk's fallback clears the next chunk's flag (the
// previous chunk, its last reader, has finished), which saves a memset launch per chunk.
struct TensorChunk {
  int* decline;
  int* decline_next;
  __half* kv;
  TensorChunk(KernelState& state, const Chunk& c) {
    int* flags = static_cast<int*>(c.scratch);
    kv = reinterpret_cast<__half*>(static_cast<char*>(c.scratch) + kFlagBytes);
    if (state.chunks == 0) CUDA_CHECK(cudaMemsetAsync(flags, 0, 2 * sizeof(int), c.stream));
    decline = flags + state.chunks % 2;
    decline_next = flags + (state.chunks + 1) % 2;
    ++state.chunks;
  }
};

// The tiled kernel for a declined chunk: returns at once unless declined. On Hopper it is
// launched programmatically dependent on the kernel before it (PDL): its launch is prepared
// while that kernel runs.
template <int D>
void launch_declined(const KernelState& state, const Chunk& c, const TensorChunk& t) {
  const int64_t row_tiles = (state.shape.N + kTiledBr - 1) / kTiledBr;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(state.declined_blocks);
  config.blockDim = dim3(kTiledBc, kTiledBr);
  config.stream = c.stream;
  cudaLaunchAttribute after;
  after.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  after.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &after;
  config.numAttrs = state.pdl ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, attention_tiled_declined<D, kTiledBc>, c.qkv, c.out, state.shape.N, row_tiles,
                                c.batches * row_tiles, (const int*)t.decline, t.decline_next));
}
inline void declined_kernels(std::vector<Launch>& all) {
  const std::string bc = std::to_string(kTiledBc);
  all.push_back({"attention_tiled_declined<32, " + bc + ">", kTiledBc * kTiledBr, 0});
  all.push_back({"attention_tiled_declined<64, " + bc + ">", kTiledBc * kTiledBr, 0});
}

template <bool kFused>  // mma.sync; kFused: K and V split in the kernel, else by split_kv first
struct MmaSync {
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    const TensorChunk t(state, c);
    const int64_t N = state.shape.N;
    if (!kFused) {
      split_kv<<<8 * state.sms, kSplitThreads, 0, c.stream>>>(c.qkv, t.kv, c.batches, N * D, t.decline,
                                                              state.declined_device);
      CUDA_CHECK_LAUNCH("split_kv");
    }
    constexpr int rows = tc_rows<D, kFused>();
    const int64_t row_tiles = (N + rows - 1) / rows;
    attention_tensorcore<D, kFused><<<(unsigned)(c.batches * row_tiles), tc_warps<D, kFused>() * 32,
                                      tc_smem_bytes<D>(), c.stream>>>(c.qkv, t.kv, c.out, N, row_tiles, t.decline,
                                                                      state.declined_device);
    CUDA_CHECK_LAUNCH("attention_tensorcore");
    launch_declined<D>(state, c, t);
  }
  static size_t scratch(const Shape& s, int64_t batches) {  // 4 fp16 arrays of N x d per batch
    return kFlagBytes + (kFused ? 0 : (size_t)(batches * s.N * s.d * 8));
  }
  static void prepare() {
    allow_smem(attention_tensorcore<32, kFused>, tc_smem_bytes<32>());
    allow_smem(attention_tensorcore<64, kFused>, tc_smem_bytes<64>());
  }
  static void kernels(std::vector<Launch>& all) {
    const char* fused = kFused ? "true" : "false";
    if (!kFused) all.push_back({"split_kv", kSplitThreads, 0});
    all.push_back({std::string("attention_tensorcore<32, ") + fused + ">", tc_warps<32, kFused>() * 32, tc_smem_bytes<32>()});
    all.push_back({std::string("attention_tensorcore<64, ") + fused + ">", tc_warps<64, kFused>() * 32, tc_smem_bytes<64>()});
    declined_kernels(all);
  }
};

struct WgmmaLong {  // split_kv_blocked, then attention_wgmma (persistent, one block per SM)
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    const TensorChunk t(state, c);
    const int64_t N = state.shape.N;
    split_kv_blocked<D><<<8 * state.sms, kSplitThreads, 0, c.stream>>>(c.qkv, t.kv, c.batches, N, t.decline,
                                                                       state.declined_device);
    CUDA_CHECK_LAUNCH("split_kv_blocked");
    const int64_t row_tiles = (N + wg_rows<D>() - 1) / wg_rows<D>(), items = c.batches * row_tiles;
    attention_wgmma<D><<<(unsigned)std::min<int64_t>(items, state.sms), wg_threads<D>(), wg_smem_bytes<D>(),
                         c.stream>>>(c.qkv, t.kv, c.out, N, row_tiles, items, t.decline, state.declined_device);
    CUDA_CHECK_LAUNCH("attention_wgmma");
    launch_declined<D>(state, c, t);
  }
  static size_t scratch(const Shape& s, int64_t batches) {  // split K and V, N padded to whole tiles
    return kFlagBytes + (size_t)(batches * wg_tiles(s.N) * kTcBc * s.d * 8);
  }
  static void prepare() {  // up to 224 KB: more than any GPU before Hopper can give a block
    allow_smem(attention_wgmma<32>, wg_smem_bytes<32>());
    allow_smem(attention_wgmma<64>, wg_smem_bytes<64>());
  }
  static void kernels(std::vector<Launch>& all) {
    all.push_back({"split_kv_blocked<32>", kSplitThreads, 0});
    all.push_back({"split_kv_blocked<64>", kSplitThreads, 0});
    all.push_back({"attention_wgmma<32>", wg_threads<32>(), wg_smem_bytes<32>()});
    all.push_back({"attention_wgmma<64>", wg_threads<64>(), wg_smem_bytes<64>()});
    declined_kernels(all);
  }
};

struct WgmmaShort {  // attention_wgmma_short: K and V split in the kernel, a batch per work item
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    const TensorChunk t(state, c);
    attention_wgmma_short<D><<<(unsigned)std::min<int64_t>(c.batches, state.sms), wg_threads<D>(),
                               wg_short_smem_bytes<D>(), c.stream>>>(c.qkv, c.out, state.shape.N, c.batches, t.decline,
                                                                     state.declined_device);
    CUDA_CHECK_LAUNCH("attention_wgmma_short");
    launch_declined<D>(state, c, t);
  }
  static size_t scratch(const Shape&, int64_t) { return kFlagBytes; }
  static void prepare() {
    allow_smem(attention_wgmma_short<32>, wg_short_smem_bytes<32>());
    allow_smem(attention_wgmma_short<64>, wg_short_smem_bytes<64>());
  }
  static void kernels(std::vector<Launch>& all) {
    all.push_back({"attention_wgmma_short<32>", wg_threads<32>(), wg_short_smem_bytes<32>()});
    all.push_back({"attention_wgmma_short<64>", wg_threads<64>(), wg_short_smem_bytes<64>()});
    declined_kernels(all);
  }
};
#endif

// ------------------------------------------------------------------------- the table
template <class K>
KernelEntry fp32_entry(const char* name, bool (*takes)(int64_t, bool)) {
  return {name, name, Needs::kAnyGpu, takes, false, no_scratch, K::prepare, launch_by_d<K>, K::kernels};
}
#if FA_TENSOR_CORES
template <class K>
KernelEntry tensor_entry(const char* name, const char* asked_as, Needs needs, bool (*takes)(int64_t, bool)) {
  return {name, asked_as, needs, takes, true, K::scratch, K::prepare, launch_by_d<K>, K::kernels};
}
#endif

inline const std::vector<KernelEntry>& kernel_table() {
  static const std::vector<KernelEntry> table = {
#if FA_TENSOR_CORES
      // Hopper: the short fused-split kernel up to N = 128, the long one past N = 256; in
      // between (and before Hopper) mma.sync, whose fused split saves the split pass.
      tensor_entry<WgmmaShort>("wgmma-fused", "wgmma", Needs::kSm90aCode,
                               [](int64_t n, bool) { return n <= kWgShortMaxN; }),
      tensor_entry<WgmmaLong>("wgmma", "wgmma", Needs::kSm90aCode,
                              [](int64_t n, bool asked) { return asked || n > kFusedMaxN; }),
      tensor_entry<MmaSync<true>>("tensorcore-fused", "tensorcore", Needs::kSm80Code,
                                  [](int64_t n, bool) { return n <= kFusedMaxN; }),
      tensor_entry<MmaSync<false>>("tensorcore", "tensorcore", Needs::kSm80Code, any_n),
#endif
      fp32_entry<Simt>("simt", any_n),
      fp32_entry<Tiled>("tiled", only_asked),
      fp32_entry<LadderStep<1>>("ladder-1", only_asked),
      fp32_entry<LadderStep<2>>("ladder-2", only_asked),
      fp32_entry<LadderStep<3>>("ladder-3", only_asked),
      fp32_entry<LadderStep<4>>("ladder-4", only_asked),
      fp32_entry<LadderStep<5>>("ladder-5", only_asked),
  };
  return table;
}

// Every kernel any entry launches, each once.
inline std::vector<Launch> every_launch() {
  std::vector<Launch> all, unique;
  for (const KernelEntry& e : kernel_table()) e.kernels(all);
  for (const Launch& l : all) {
    bool seen = false;
    for (const Launch& u : unique) seen = seen || u.kernel == l.kernel;
    if (!seen) unique.push_back(l);
  }
  return unique;
}

}  // namespace fa

// tensorcore_launches.cuh: how the kernel registry (src_common/registry.h) launches fa-cuda's
// tensor-core kernels: mma.sync (tensorcore/) and Hopper's warpgroup MMA (wgmma/), each with the
// tiled kernel that takes a chunk the 3xFP16 split cannot represent (fallback.cuh).
// They are written in C++17. A build as C++11 or C++14, such as the course's example Makefile
// makes (nvcc -std=c++11 ... hw4.cu), leaves them out (FA_TENSOR_CORES 0) and runs the fp32
// kernels, the only kind the course's GTX 1080 (sm_61) can run anyway.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_api.cuh"
#include "../src_common/fp32_launches.h"
#include "../src_common/kernel_row.h"

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

#if FA_TENSOR_CORES
template <class Kernel>
void allow_smem(Kernel kernel, int bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

constexpr int64_t kFusedMaxN = 256;        // the mma.sync kernel splits K and V itself up to here
constexpr size_t kFlagBytes = 256;         // the decline flags; keeps split K and V aligned

// Scratch of every tensor-core kernel: the decline flags of even and odd chunks, then split K
// and V where a split pass makes them. A chunk's fallback clears the next chunk's flag (the
// previous chunk, its last reader, has finished), which saves a memset launch per chunk.
// params: what every kernel of the chunk reads (the launches add their grid's row_tiles, items).
struct TensorChunk {
  AttentionParams params;
  TensorChunk(KernelState& state, const Chunk& c) {
    int* flags = static_cast<int*>(c.scratch);
    if (state.chunks == 0) CUDA_CHECK(cudaMemsetAsync(flags, 0, 2 * sizeof(int), c.stream));
    params.qkv = c.qkv, params.out = c.out;
    params.kv = reinterpret_cast<__half*>(static_cast<char*>(c.scratch) + kFlagBytes);
    params.N = state.shape.N, params.batches = c.batches;
    params.decline = flags + state.chunks % 2;
    params.decline_next = flags + (state.chunks + 1) % 2;
    params.declined_ever = state.declined_device;
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
  AttentionParams p = t.params;
  p.row_tiles = row_tiles, p.items = c.batches * row_tiles;
  CUDA_CHECK(cudaLaunchKernelEx(&config, attention_tiled_declined<D, kTiledBc>, p));
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
    AttentionParams p = t.params;
    if (!kFused) {
      p.nd = p.N * D;
      split_kv<<<8 * state.sms, kSplitThreads, 0, c.stream>>>(p);
      CUDA_CHECK_LAUNCH("split_kv");
    }
    constexpr int rows = tc_rows<D, kFused>();
    p.row_tiles = (p.N + rows - 1) / rows;
    attention_tensorcore<D, kFused><<<(unsigned)(c.batches * p.row_tiles), tc_warps<D, kFused>() * 32,
                                      tc_smem_bytes<D>(), c.stream>>>(p);
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
  static std::string tiles() {  // query rows per block (16 per warp) and keys per K/V tile
    return "d=32: Br=" + std::to_string(tc_rows<32, kFused>()) + ",Bc=" + std::to_string(kTcBc) +
           ";d=64: Br=" + std::to_string(tc_rows<64, kFused>()) + ",Bc=" + std::to_string(kTcBc);
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
    AttentionParams p = t.params;
    split_kv_blocked<D><<<8 * state.sms, kSplitThreads, 0, c.stream>>>(p);
    CUDA_CHECK_LAUNCH("split_kv_blocked");
    p.row_tiles = (p.N + wg_rows<D>() - 1) / wg_rows<D>(), p.items = c.batches * p.row_tiles;
    attention_wgmma<D><<<(unsigned)std::min<int64_t>(p.items, state.sms), wg_threads<D>(), wg_smem_bytes<D>(),
                         c.stream>>>(p);
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
  static std::string tiles() {  // query rows per block (64 per consumer warpgroup), keys per tile, tiles in flight
    return "d=32: Br=" + std::to_string(wg_rows<32>()) + ",Bc=" + std::to_string(kTcBc) + ",stages=" +
           std::to_string(kWgStages) + ";d=64: Br=" + std::to_string(wg_rows<64>()) + ",Bc=" + std::to_string(kTcBc) +
           ",stages=" + std::to_string(kWgStages);
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
                               wg_short_smem_bytes<D>(), c.stream>>>(t.params);
    CUDA_CHECK_LAUNCH("attention_wgmma_short");
    launch_declined<D>(state, c, t);
  }
  static size_t scratch(const Shape&, int64_t) { return kFlagBytes; }
  static void prepare() {
    allow_smem(attention_wgmma_short<32>, wg_short_smem_bytes<32>());
    allow_smem(attention_wgmma_short<64>, wg_short_smem_bytes<64>());
  }
  static std::string tiles() {  // a whole batch (N <= 128) per work item
    return "d=32: Br=" + std::to_string(wg_rows<32>()) + ",Bc=" + std::to_string(kWgShortMaxN) + ";d=64: Br=" +
           std::to_string(wg_rows<64>()) + ",Bc=" + std::to_string(kWgShortMaxN);
  }
  static void kernels(std::vector<Launch>& all) {
    all.push_back({"attention_wgmma_short<32>", wg_threads<32>(), wg_short_smem_bytes<32>()});
    all.push_back({"attention_wgmma_short<64>", wg_threads<64>(), wg_short_smem_bytes<64>()});
    declined_kernels(all);
  }
};

// A program built only for targets below sm_80 (the course's sm_61, say) runs here from its
// PTX, JIT-compiled: its tensor-core kernel was compiled empty (#if __CUDA_ARCH__ >= 800).
inline bool tensorcore_compiled() {
  cudaFuncAttributes attr;
  CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_tensorcore<64, false>));
  return attr.ptxVersion >= 80;
}

// Whether the loaded code is sm_90a's (only there does wgmma exist): asked of the GPU once.
inline bool wgmma_compiled_here() {
  static int found = -1;
  if (found >= 0) return found == 1;
  int* flag = nullptr;
  CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  wgmma_compiled<<<1, 1>>>(flag);
  CUDA_CHECK_LAUNCH("wgmma_compiled");
  CUDA_CHECK(cudaMemcpy(&found, flag, sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(flag));
  return found == 1;
}

// The tiled kernel that takes declined chunks: its grid (as many blocks as the GPU holds at
// once), the mapped flag that tells the host, the split passes' grid.
inline void prepare_fallback(KernelState& state, int cc) {
  cudaFuncAttributes attr;
  CUDA_CHECK(cudaFuncGetAttributes(&attr, split_kv));  // loads the split passes' code
  int* flag = nullptr;
  CUDA_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  state.declined_host = flag;
  CUDA_CHECK(cudaHostGetDevicePointer(&state.declined_device, flag, 0));
  CUDA_CHECK(cudaDeviceGetAttribute(&state.sms, cudaDevAttrMultiProcessorCount, 0));
  state.pdl = cc >= 90;
  int blocks = 0;
  if (state.shape.d == 32)
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attention_tiled_declined<32, kTiledBc>,
                                                             kTiledBc * kTiledBr, 0));
  else
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attention_tiled_declined<64, kTiledBc>,
                                                             kTiledBc * kTiledBr, 0));
  state.declined_blocks = state.sms * std::max(blocks, 1);
}

inline int compute_capability() {  // of device 0, which the pipeline runs on
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  return 10 * major + minor;
}

template <class K>
void prepare_tensor_row(KernelState& state) {
  K::prepare();
  prepare_fallback(state, compute_capability());
}

inline std::string no_tiles() { return "-"; }

template <class K>
KernelEntry tensor_row(const char* name, const char* family, Needs needs, const char* takes_text,
                       bool (*takes)(const KernelState&, bool), LadderRung rung = kNoRung) {
  KernelEntry e = {name,        family,        needs,     takes_text, takes, true, K::scratch, prepare_tensor_row<K>,
                   launch_by_d<K>, K::kernels, K::tiles, no_tiles, rung};
  return e;
}
#else
inline bool tensorcore_compiled() { return false; }
inline bool wgmma_compiled_here() { return false; }
#endif

// fa-cuda's own rows of the registry, fastest first: src_common/registry.h puts them before the
// fp32 rows every GPU program has (fa_cuda.cu hands them over). None in a C++11 or C++14 build.
inline std::vector<KernelEntry> tensorcore_rows() {
#if FA_TENSOR_CORES
  return {
      // Hopper: the short fused-split kernel up to N = 128, the long one past N = 256; in
      // between (and before Hopper) mma.sync, whose fused split saves the split pass.
      tensor_row<WgmmaShort>("wgmma-fused", kWgmmaFamily, Needs::kSm90aCode, "N <= 128",
                             [](const KernelState& s, bool) { return s.shape.N <= kWgShortMaxN; }),
      tensor_row<WgmmaLong>("wgmma", kWgmmaFamily, Needs::kSm90aCode, "N > 256 (any N when asked)",
                            [](const KernelState& s, bool asked) { return asked || s.shape.N > kFusedMaxN; }),
      tensor_row<MmaSync<true>>("tensorcore-fused", kTensorcoreFamily, Needs::kSm80Code, "N <= 256",
                                [](const KernelState& s, bool) { return s.shape.N <= kFusedMaxN; },
                                {"tensor cores", "3xFP16 mma.sync, fp32-accurate (sm_80 and later)", ""}),
      tensor_row<MmaSync<false>>("tensorcore", kTensorcoreFamily, Needs::kSm80Code, "any N", any_n),
  };
#else
  return {};
#endif
}

}  // namespace fa

// registry.h: the one table of kernels, for fa-cuda and fa-hip alike. A row says what a way of
// computing a chunk is called (the impl= name, and the FA_KERNEL value that asks for it), what
// it needs (code for sm_80, sm_90a, gfx90a's matrix cores), for which N it is taken, its tiles,
// its scratch memory, how it is prepared and launched, the kernels it launches, its step on fa
// ladder's ladder and how fa sweep builds variants of it.
//
// The default is the first row, in table order (fastest first), that this GPU and program run
// and that takes N; FA_KERNEL=NAME takes the first row of that name or family that takes N
// (kernel_choice.h). `PROGRAM --kernels` prints the table (print_kernels): fa ladder and fa
// sweep read their listings from it, and tests/test_docs.py checks docs/kernels.md's table
// against it. Adding a kernel: its file, and one row below.
//
// The includer first includes its platform's API header (src_cuda/cuda_api.cuh, or
// src_hip/hip_api.h, which define GpuStream and FA_CHECK_LAUNCH) and its own rows' launches:
// fa-cuda's tensor-core rows (src_cuda/tensorcore_launches.cuh: FA_TENSOR_CORES), fa-hip's
// matrix-core row (src_hip/mfma_launches.h).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "fp32_launches.h"
#include "host/pipeline.h"
#include "kernel_row.h"

namespace fa {

inline const std::vector<KernelEntry>& kernel_table() {
  static const std::vector<KernelEntry> table = {
#if FA_TENSOR_CORES
      // Hopper: the short fused-split kernel up to N = 128, the long one past N = 256; in
      // between (and before Hopper) mma.sync, whose fused split saves the split pass.
      tensor_row<WgmmaShort>("wgmma-fused", "wgmma", Needs::kSm90aCode, "N <= 128",
                             [](const KernelState& s, bool) { return s.shape.N <= kWgShortMaxN; }),
      tensor_row<WgmmaLong>("wgmma", "wgmma", Needs::kSm90aCode, "N > 256 (any N when asked)",
                            [](const KernelState& s, bool asked) { return asked || s.shape.N > kFusedMaxN; }),
      tensor_row<MmaSync<true>>("tensorcore-fused", "tensorcore", Needs::kSm80Code, "N <= 256",
                                [](const KernelState& s, bool) { return s.shape.N <= kFusedMaxN; },
                                {8, "tensor cores", "3xFP16 mma.sync, fp32-accurate (sm_80 and later)", ""}),
      tensor_row<MmaSync<false>>("tensorcore", "tensorcore", Needs::kSm80Code, "any N", any_n),
#endif
#if FA_HIP_PROGRAM
      // gfx908/gfx90a: both products on the fp32 matrix cores (src_hip/attention_mfma.h).
      fp32_row<Mfma>("mfma", "any N (on NVIDIA: when asked, emulated)", mfma_taken,
                     {9, "matrix cores", "S and P V on fp32 MFMA, softmax in the accumulator layout (gfx908/gfx90a; "
                      "on NVIDIA through the emulation)", ""}, nullptr, Needs::kMfmaCode),
#endif
      fp32_row<Simt>("simt", "any N", any_n, {FA_HIP_PROGRAM ? 8 : 7, "register blocked", "micro-tiles of S and O per thread, Q, K, V "
                     "read as float4 from padded shared memory, K/V double-buffered (SGEMM-style)", ""}),
#if FA_HIP_PROGRAM && !FA_TILED_BC_BUILT
      // The homework kernel with the key tile of the wavefront (FA_HIP_BC forces one).
      fp32_row<TiledBc<32>>("tiled-bc32", "when asked, on a 32-lane wave", tiled_bc_is<32>,
                            {6, "tiled Bc 32", "the homework kernel with Bc = 32 (NVIDIA's warp)", "FA_HIP_BC=32"}, "tiled"),
      fp32_row<TiledBc<64>>("tiled-bc64", "when asked, on a 64-lane wave", tiled_bc_is<64>,
                            {7, "tiled Bc 64", "Bc = 64, a row per 64-lane wavefront (the AMD step)", "FA_HIP_BC=64"},
                            "tiled"),
#elif FA_HIP_PROGRAM
      fp32_row<TiledBc<kTiledBc>>("tiled-bc" FA_STRING(FA_TILED_BC), "when asked", only_asked,
                                  {6, "tiled", "the homework kernel with a swept tile width", ""}, "tiled"),
#else
      fp32_row<TiledBc<kTiledBc>>("tiled", "when asked", only_asked,
                                  {6, "tiled", "Q and O in registers, float4 loads, next tile prefetched (the homework "
                                   "kernel)", ""}),
#endif
      fp32_row<LadderStep<1>>("ladder-1", "when asked", only_asked,
                              {1, "naive", "one thread per query row; K and V read from global memory", ""}),
      fp32_row<LadderStep<2>>("ladder-2", "when asked", only_asked,
                              {2, "warp per row", "a warp per row, lanes across d: coalesced loads", ""}),
      fp32_row<LadderStep<3>>("ladder-3", "when asked", only_asked,
                              {3, "smem tiles", "K/V tiles in shared memory for 4 rows (K unpadded: bank conflicts)", ""}),
      fp32_row<LadderStep<4>>("ladder-4", "when asked", only_asked,
                              {4, "padded K", "K tile rows padded to d + 1: conflict-free reads", ""}),
      fp32_row<LadderStep<5>>("ladder-5", "when asked", only_asked,
                              {5, "Br 16", "16 rows per block: each tile serves 4x the rows", ""}),
  };
  return table;
}

// Every kernel any row launches, each once (`PROGRAM --launches`).
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

// `PROGRAM --kernels`: one row a line, tab-separated; "-" where a row has nothing to say.
//   ladder: STEP|LABEL|IDEA|ENV (ENV: settings the step runs with besides FA_KERNEL)
//   sweep:  FLAGS|KERNEL|BR|BC, templates over the tile parameters ({d}, {Br}, ...): the -D
//           flags of a variant, its kernel's name in resource reports, its tile's rows and keys
inline void print_kernels() {
  std::printf("name\tFA_KERNEL\tneeds\ttakes\ttiles\tladder\tsweep\n");
  for (const KernelEntry& e : kernel_table()) {
    std::string ladder = "-";
    if (e.ladder.step > 0)
      ladder = std::to_string(e.ladder.step) + "|" + e.ladder.label + "|" + e.ladder.idea + "|" + e.ladder.env;
    const std::string tiles = e.tiles(), sweep = e.sweep();
    std::printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.name, e.asked_as, needs_text(e.needs), e.takes_text, tiles.c_str(),
                ladder.c_str(), sweep.c_str());
  }
}

}  // namespace fa

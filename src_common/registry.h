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
// Besides the fp32 rows every GPU program has (fp32_launches.h), each program's own rows:
// fa-cuda's tensor-core rows (src_cuda/tensorcore_launches.cuh: FA_TENSOR_CORES), fa-hip's
// matrix-core row (src_hip/mfma_launches.h), handed over by backend_kernel_rows below. The
// program's platform header (src_cuda/cuda_api.cuh, src_hip/hip_api.h) comes before this file.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "host/gpu_api.h"  // the platform's (FA_HIP_PROGRAM too) came before it
#include "fp32_launches.h"
#include "host/pipeline.h"
#include "kernel_row.h"

namespace fa {

// The backend's own rows, fastest first, which come before the fp32 rows every GPU program has:
// fa-cuda's tensor-core rows (src_cuda/tensorcore_launches.cuh), fa-hip's matrix-core row
// (src_hip/mfma_launches.h). Defined by the program's own file (fa_cuda.cu, fa_hip.hip).
std::vector<KernelEntry> backend_kernel_rows();

inline const std::vector<KernelEntry>& kernel_table() {
  static const std::vector<KernelEntry> table = [] {
    std::vector<KernelEntry> rows = backend_kernel_rows();
    const std::vector<KernelEntry> fp32_rows = {
        fp32_row<Simt>("simt", "any N", any_n,
                       {"register blocked", "micro-tiles of S and O per thread, Q, K, V read as float4 from padded "
                        "shared memory, K/V double-buffered (one stage on AMD) (SGEMM-style)", ""}),
#if FA_HIP_PROGRAM && !FA_TILED_BC_BUILT
        // The homework kernel with the key tile of the wavefront (FA_HIP_BC forces one).
        fp32_row<TiledBc<64>>("tiled-bc64", "when asked, on a 64-lane wave", tiled_bc_is<64>,
                              {"tiled Bc 64", "Bc = 64, a row per 64-lane wavefront (the AMD step)", "FA_HIP_BC=64"},
                              "tiled"),
        fp32_row<TiledBc<32>>("tiled-bc32", "when asked, on a 32-lane wave", tiled_bc_is<32>,
                              {"tiled Bc 32", "the homework kernel with Bc = 32 (NVIDIA's warp)", "FA_HIP_BC=32"},
                              "tiled"),
#elif FA_HIP_PROGRAM
        fp32_row<TiledBc<kTiledBc>>("tiled-bc" FA_STRING(FA_TILED_BC), "when asked", only_asked,
                                    {"tiled", "the homework kernel with a swept tile width", ""}, "tiled"),
#else
        fp32_row<TiledBc<kTiledBc>>("tiled", "when asked", only_asked,
                                    {"tiled", "Q and O in registers, float4 loads, next tile prefetched (the homework "
                                     "kernel)", ""}),
#endif
        // The ladder's first steps, the last rows: the ladder climbs the table from its end.
        fp32_row<LadderSmemTiles<16, true>>("ladder-5", "when asked", only_asked,
                                            {"Br 16", "16 rows per block: each tile serves 4x the rows", ""}),
        fp32_row<LadderSmemTiles<4, true>>("ladder-4", "when asked", only_asked,
                                           {"padded K", "K tile rows padded to d + 1: conflict-free reads", ""}),
        fp32_row<LadderSmemTiles<4, false>>("ladder-3", "when asked", only_asked,
                                            {"smem tiles", "K/V tiles in shared memory for 4 rows (K unpadded: bank "
                                             "conflicts)", ""}),
        fp32_row<LadderWarpPerRow<>>("ladder-2", "when asked", only_asked,
                                   {"warp per row", "a warp per row, lanes across d: coalesced loads", ""}),
        fp32_row<LadderNaive<>>("ladder-1", "when asked", only_asked,
                              {"naive", "one thread per query row; K and V read from global memory", ""}),
    };
    rows.insert(rows.end(), fp32_rows.begin(), fp32_rows.end());
    return rows;
  }();
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

// Row i's step on the ladder: its place among the rows on it, counted from the table's end.
inline int ladder_step(const std::vector<KernelEntry>& table, size_t i) {
  int step = 0;
  for (size_t j = i; j < table.size(); ++j) step += table[j].ladder.on_ladder();
  return step;
}

// `PROGRAM --kernels`: one row a line, tab-separated; "-" where a row has nothing to say.
//   ladder: STEP|LABEL|IDEA|ENV (ENV: settings the step runs with besides FA_KERNEL)
//   sweep:  FLAGS|KERNEL|BR|BC, templates over the tile parameters ({d}, {Br}, ...): the -D
//           flags of a variant, its kernel's name in resource reports, its tile's rows and keys
inline void print_kernels() {
  std::printf("name\tFA_KERNEL\tneeds\ttakes\ttiles\tladder\tsweep\n");
  const std::vector<KernelEntry>& table = kernel_table();
  for (size_t i = 0; i < table.size(); ++i) {
    const KernelEntry& e = table[i];
    std::string ladder = "-";
    if (e.ladder.on_ladder())
      ladder = std::to_string(ladder_step(table, i)) + "|" + e.ladder.label + "|" + e.ladder.idea + "|" + e.ladder.env;
    const std::string tiles = e.tiles(), sweep = e.sweep();
    std::printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.name, e.asked_as, needs_text(e.needs), e.takes_text, tiles.c_str(),
                ladder.c_str(), sweep.c_str());
  }
}

}  // namespace fa

// fp32_launches.h: how the registry launches the fp32 kernels that every GPU program has: simt
// (attention_simt.h), the homework kernel (attention_tiled.h) and the ladder's steps (ladder.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention_simt.h"
#include "attention_tiled.h"
#include "host/gpu_api.h"
#include "host/settings.h"
#include "kernel_row.h"
#include "ladder.h"

// The homework kernel's Bc: one key per lane of a warp (fa-hip: the wavefront's); FA_TILED_BC=N
// builds one other (fa sweep).
#ifdef FA_TILED_BC
#define FA_TILED_BC_BUILT 1
#else
#define FA_TILED_BC_BUILT 0
#define FA_TILED_BC 32
#endif

namespace fa {

constexpr int kTiledBc = FA_TILED_BC;

// A chunk's arguments for a kernel whose blocks own `rows` query rows each; its 1-D grid.
inline AttentionParams params_for(const Chunk& c, int64_t N, int64_t rows) {
  AttentionParams p;
  p.qkv = c.qkv, p.out = c.out, p.N = N, p.row_tiles = (N + rows - 1) / rows;
  return p;
}
inline unsigned blocks_for(const AttentionParams& p, const Chunk& c) { return (unsigned)(c.batches * p.row_tiles); }

// --- simt (attention_simt.h): the tiles' kernels, names and launches.

// The kernel of a tile.
template <class T>
struct SimtKernel {
  static decltype(&attention_simt<T::d, T::rows_per_thread, T::keys_per_thread, T::threads_per_row, T::row_groups, T::min_blocks, T::stages>) get() {
    return &attention_simt<T::d, T::rows_per_thread, T::keys_per_thread, T::threads_per_row, T::row_groups, T::min_blocks, T::stages>;
  }
  // Its name as `fa resources` reads the compiler's reports: attention_simt<d, TM, ...>.
  static std::string name() {
#define FA_SIMT_VALUE(short_name, suffix, member) + ", " + std::to_string(T::member)
    return "attention_simt<" + std::to_string(T::d) FA_SIMT_PARAMETERS(FA_SIMT_VALUE) + ">";
#undef FA_SIMT_VALUE
  }
  // --kernels' tiles column: "d=64: TM=8,TN=8,C=8,R=16,MB=2,ST=1".
  static std::string text() {
    std::string t;
#define FA_SIMT_TEXT(short_name, suffix, member) t += (t.empty() ? "" : ",") + std::string(#short_name "=") + std::to_string(T::member);
    FA_SIMT_PARAMETERS(FA_SIMT_TEXT)
#undef FA_SIMT_TEXT
    return "d=" + std::to_string(T::d) + ": " + t;
  }
};

// fa sweep's template of a variant: FLAGS|KERNEL|BR|BC over {d} and the short names.
inline std::string simt_sweep_template() {
  std::string flags, kernel = "attention_simt<{d}";
#define FA_SIMT_SWEEP(short_name, suffix, member) \
  flags += (flags.empty() ? "" : " ") + std::string("-DFA_SIMT{d}_" #suffix "={" #short_name "}"); \
  kernel += ", {" #short_name "}";
  FA_SIMT_PARAMETERS(FA_SIMT_SWEEP)
#undef FA_SIMT_SWEEP
  return flags + "|" + kernel + ">|R*TM|C*TN";
}

template <class T>
void launch_simt_tile(const Chunk& c, int64_t N) {
  AttentionParams p = params_for(c, N, T::rows);
  attention_simt<T::d, T::rows_per_thread, T::keys_per_thread, T::threads_per_row, T::row_groups, T::min_blocks, T::stages>
      <<<blocks_for(p, c), T::threads, T::smem_bytes, c.stream>>>(p);
}

// Whether the big tile runs: the first call lets it use more than 48 KB of shared memory where
// the GPU allows it (sm_70 and later); a GPU that does not (sm_61) runs the small tile, as does
// any GPU with FA_SIMT_SMALL=1 (for the tests). AMD's one tile fits a CU's LDS.
template <int D>
bool simt_big() {
  typedef typename SimtBig<D>::type Big;
  static const bool big = !settings().simt_small && GpuApi::allow_shared_bytes(SimtKernel<Big>::get(), Big::smem_bytes);
  return FA_SIMT_AMD || big;
}

struct Simt {  // register-blocked (src_common/attention_simt.h): the default without tensor cores
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    if (simt_big<D>())
      launch_simt_tile<typename SimtBig<D>::type>(c, state.shape.N);
    else
      launch_simt_tile<typename SimtSmall<D>::type>(c, state.shape.N);
    FA_CHECK_LAUNCH("attention_simt");
  }
  // Chooses the tiles and loads the kernels' code, in the init thread, so that the first
  // chunk's kernel time does not include it: asking for a kernel's attributes loads it (on
  // NVIDIA the big tile's opt-in in simt_big did).
  template <int D>
  static void prepare_d() {
    GpuFuncAttributes attr;
    if (!simt_big<D>())
      FA_CHECK(gpu_func_attributes(&attr, SimtKernel<typename SimtSmall<D>::type>::get()));
    else if (FA_SIMT_AMD)
      FA_CHECK(gpu_func_attributes(&attr, SimtKernel<typename SimtBig<D>::type>::get()));
  }
  static void prepare(KernelState&) {
    prepare_d<32>();
    prepare_d<64>();
  }
  template <class T>
  static void add(std::vector<Launch>& all) {
    all.push_back({SimtKernel<T>::name(), T::threads, T::smem_bytes});
  }
  static void kernels(std::vector<Launch>& all) {
    add<SimtBig<32>::type>(all);
    add<SimtBig<64>::type>(all);
    if (!FA_SIMT_AMD) {
      add<SimtSmall<32>::type>(all);
      add<SimtSmall<64>::type>(all);
    }
  }
  // TM x TN scores per thread, C threads per row, R row groups, MB blocks per SM budgeted for, ST K/V stages
  static std::string tiles() { return SimtKernel<SimtBig<32>::type>::text() + ";" + SimtKernel<SimtBig<64>::type>::text(); }
  static std::string sweep() {  // AMD's tile is fixed (attention_simt.h): no variants to build there
    return FA_SIMT_AMD ? "-" : simt_sweep_template();
  }
};

template <int BC>
struct TiledBc {  // the homework kernel (src_common/attention_tiled.h) with key tiles of BC
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    AttentionParams p = params_for(c, state.shape.N, kTiledBr);
    attention_tiled<D, BC><<<blocks_for(p, c), dim3(BC, kTiledBr), 0, c.stream>>>(p);
    FA_CHECK_LAUNCH("attention_tiled");
  }
  static void prepare(KernelState&) {
    GpuFuncAttributes attr;  // asked for now, so that the code loads here, not at the first launch
    FA_CHECK(gpu_func_attributes(&attr, attention_tiled<32, BC>));
    FA_CHECK(gpu_func_attributes(&attr, attention_tiled<64, BC>));
  }
  static void kernels(std::vector<Launch>& all) {
    const std::string bc = std::to_string(BC);
    all.push_back({"attention_tiled<32, " + bc + ">", BC * kTiledBr, 0});
    all.push_back({"attention_tiled<64, " + bc + ">", BC * kTiledBr, 0});
  }
  static std::string tiles() {
    const std::string t = "Br=" + std::to_string(kTiledBr) + ",Bc=" + std::to_string(BC);
    return "d=32: " + t + ";d=64: " + t;
  }
  static std::string sweep() { return "-DFA_TILED_BR={Br} -DFA_TILED_BC={Bc}|attention_tiled<{d}, {Bc}>|Br|Bc"; }
};

// --- The ladder's steps (ladder.h), one struct each: its kernels, block and rows per block.
// Their rungs follow from the registry's order (registry.h).
struct LadderStep {
  static void prepare(KernelState&) {}  // its kernels load at their first launch
  static std::string tiles() { return "-"; }
  static std::string sweep() { return "-"; }
};

// A step's block size is its launcher's template parameter: another size is another row
// (fp32_row<LadderNaive<64>>), the kernel given the same constant the launch uses.
template <int Threads = 128>
struct LadderNaive : LadderStep {  // 1: a thread per query row
  static constexpr int kThreads = Threads;  // query rows per block
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    AttentionParams p = params_for(c, state.shape.N, kThreads);
    ladder::naive<D, kThreads><<<blocks_for(p, c), kThreads, 0, c.stream>>>(p);
    FA_CHECK_LAUNCH("ladder naive");
  }
  static void kernels(std::vector<Launch>& all) {
    for (const char* d : {"32", "64"})
      all.push_back({std::string("naive<") + d + ", " + std::to_string(kThreads) + ">", kThreads, 0});
  }
};

template <int Threads = 128>
struct LadderWarpPerRow : LadderStep {  // 2: a warp (wavefront) per query row
  static constexpr int kThreads = Threads;  // per block: Threads / FA_WAVE query rows
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    AttentionParams p = params_for(c, state.shape.N, kThreads / FA_WAVE);
    ladder::warp_per_row<D, kThreads><<<blocks_for(p, c), kThreads, 0, c.stream>>>(p);
    FA_CHECK_LAUNCH("ladder warp_per_row");
  }
  static void kernels(std::vector<Launch>& all) {
    for (const char* d : {"32", "64"})
      all.push_back({std::string("warp_per_row<") + d + ", " + std::to_string(kThreads) + ">", kThreads, 0});
  }
};

template <int BR, bool kPadK>  // 3, 4, 5: K/V tiles in shared memory for BR rows, K padded or not
struct LadderSmemTiles : LadderStep {
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    AttentionParams p = params_for(c, state.shape.N, BR);
    ladder::smem_tiles<D, BR, kPadK><<<blocks_for(p, c), dim3(ladder::kTileBc, BR), 0, c.stream>>>(p);
    FA_CHECK_LAUNCH(BR == 16 ? "ladder smem_tiles (Br 16)" : kPadK ? "ladder smem_tiles (padded K)" : "ladder smem_tiles");
  }
  static void kernels(std::vector<Launch>& all) {
    const std::string rest = ", " + std::to_string(BR) + (kPadK ? ", true>" : ", false>");
    all.push_back({"smem_tiles<32" + rest, BR * ladder::kTileBc, 0});
    all.push_back({"smem_tiles<64" + rest, BR * ladder::kTileBc, 0});
  }
};

}  // namespace fa

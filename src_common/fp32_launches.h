// fp32_launches.h: how the registry launches the fp32 kernels that every GPU program has: simt
// (attention_simt.h), the homework kernel (attention_tiled.h) and the ladder's steps (ladder.h).
#pragma once

#include <string>
#include <vector>

#include "attention_simt.h"
#include "attention_tiled.h"
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

template <class T>
std::string simt_tile_text() {
  return "d=" + std::to_string(T::d) + ": TM=" + std::to_string(T::rows_per_thread) +
         ",TN=" + std::to_string(T::keys_per_thread) + ",C=" + std::to_string(T::threads_per_row) +
         ",R=" + std::to_string(T::row_groups) + ",MB=" + std::to_string(T::min_blocks);
}

struct Simt {  // register-blocked (src_common/attention_simt.h): the default without tensor cores
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    launch_simt<D>(c.qkv, c.out, c.batches, state.shape.N, c.stream);
    FA_CHECK_LAUNCH("attention_simt");
  }
  static void prepare(KernelState&) { prepare_simt(); }
  static void kernels(std::vector<Launch>& all) {
    for (const SimtLaunch& l : simt_launches()) all.push_back({l.kernel, l.threads, l.smem_bytes});
  }
  // TM x TN scores per thread, C threads per row, R row groups, MB blocks per SM budgeted for
  static std::string tiles() {
    return simt_tile_text<SimtBig<32>::type>() + ";" + simt_tile_text<SimtBig<64>::type>();
  }
  static std::string sweep() {  // AMD's tile is fixed (attention_simt.h): no variants to build there
    return FA_SIMT_AMD ? "-"
                       : "-DFA_SIMT{d}_ROWS_PER_THREAD={TM} -DFA_SIMT{d}_KEYS_PER_THREAD={TN} -DFA_SIMT{d}_THREADS_PER_ROW={C} "
                         "-DFA_SIMT{d}_ROW_GROUPS={R} -DFA_SIMT{d}_MIN_BLOCKS={MB}"
                         "|attention_simt<{d}, {TM}, {TN}, {C}, {R}, {MB}>|R*TM|C*TN";
  }
};

template <int BC>
struct TiledBc {  // the homework kernel (src_common/attention_tiled.h) with key tiles of BC
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    launch_tiled<D, BC>(c.qkv, c.out, c.batches, state.shape.N, c.stream);
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

template <int kStep>  // ladder-kStep (src_common/ladder.h)
struct LadderStep {
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    FA_CHECK_LAUNCH(ladder::launch<D>(kStep, c.qkv, c.out, c.batches, state.shape.N, c.stream));
  }
  static void prepare(KernelState&) {}  // its kernels load at their first launch
  static void kernels(std::vector<Launch>& all) {  // kLaunches: two per step, d = 32 and 64
    for (int i = 2 * kStep - 2; i < 2 * kStep; ++i) all.push_back({ladder::kLaunches[i].kernel, ladder::kLaunches[i].threads, 0});
  }
  static std::string tiles() { return "-"; }
  static std::string sweep() { return "-"; }
};

}  // namespace fa

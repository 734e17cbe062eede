// mfma_launches.h: how the kernel registry (src_common/registry.h) launches fa-hip's
// matrix-core kernel (attention_mfma.h): the default on gfx908/gfx90a, whose code objects carry
// its MFMA body; elsewhere only when asked, and on NVIDIA through the emulation.
#pragma once

#include <string>
#include <vector>

#include "attention_mfma.h"
#include "../src_common/fp32_launches.h"  // params_for, blocks_for
#include "../src_common/kernel_row.h"

namespace fa {

struct Mfma {
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    AttentionParams p = params_for(c, state.shape.N, kMfmaBr);
    attention_mfma<D><<<blocks_for(p, c), kMfmaThreads, 0, c.stream>>>(p);
    FA_CHECK_LAUNCH("attention_mfma");
  }
  static void prepare(KernelState&) {
    GpuFuncAttributes attr;  // asked for now, so that the code loads here, not at the first launch
    FA_CHECK(gpu_func_attributes(&attr, attention_mfma<32>));
    FA_CHECK(gpu_func_attributes(&attr, attention_mfma<64>));
  }
  static void kernels(std::vector<Launch>& all) {
    all.push_back({"attention_mfma<32>", kMfmaThreads, 0});
    all.push_back({"attention_mfma<64>", kMfmaThreads, 0});
  }
  static std::string tiles() {  // query rows per block (32 per wavefront), keys per K/V tile
    const std::string t = "Br=" + std::to_string(kMfmaBr) + ",Bc=" + std::to_string(kMfmaBc);
    return "d=32: " + t + ";d=64: " + t;
  }
  static std::string sweep() { return "-"; }
};

inline bool mfma_taken(const KernelState& s, bool asked) { return asked || s.native_mfma; }

// fa-hip's own row of the registry: src_common/registry.h puts it before the fp32 rows every GPU
// program has (fa_hip.hip hands it over). gfx908/gfx90a: both products on the fp32 matrix cores.
inline std::vector<KernelEntry> mfma_rows() {
  return {fp32_row<Mfma>("mfma", "any N (on NVIDIA: when asked, emulated)", mfma_taken,
                         {"matrix cores", "S and P V on fp32 MFMA, softmax in the accumulator layout (gfx908/gfx90a; "
                          "on NVIDIA through the emulation)", ""}, nullptr, Needs::kMfmaCode)};
}

}  // namespace fa

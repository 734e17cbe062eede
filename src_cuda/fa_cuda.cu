// fa-cuda (also built as the course's hw4): FlashAttention forward on an NVIDIA GPU.
//
//   fa-cuda INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b, course binary format
//   fa-cuda --kernels          the kernel registry: each kernel, what it needs, what it takes
//   fa-cuda --launches         every kernel it may launch, with threads and shared memory
//   fa-cuda --settings         every FA_* setting, its value here and what it does
//
// Kernels: the registry (src_common/registry.h; `fa-cuda --kernels` lists them, FA_KERNEL=NAME
// or FAMILY forces one; the default is the fastest accurate one this GPU and program can run):
// the fp32 kernels every GPU program has (src_common/attention_simt.h, attention_tiled.h,
// ladder.h) and the tensor-core kernels of this folder (tensorcore/: mma.sync, sm_80 and later;
// wgmma/: Hopper's warpgroup MMA, sm_90a code only), which run a chunk with values they cannot
// represent (|x| > 64, NaN, inf) on the tiled kernel (fallback.cuh).
// The pieces the tensor-core kernels share: ptx/ (the instructions), split3xfp16.cuh (the
// numerics), fragments.cuh, softmax.cuh, epilogue.cuh.
// Host side: src_common/host/ (pipeline.h: streamed chunks, device start-up overlapped with the
// read; input.h and output.h: format checks, atomic output; settings.h; timing.h).
#include <cstdlib>
#include <string>

#include "cuda_api.cuh"
#include "tensorcore_launches.cuh"
#include "../src_common/kernel_choice.h"

namespace fa {

// This program's own rows of the registry, before the fp32 rows (src_common/registry.h).
std::vector<KernelEntry> backend_kernel_rows() { return tensorcore_rows(); }

// What only fa-cuda knows of its kernels (kernel_choice.h).
struct CudaPlatform {
  static void init_state(KernelState& state, const DeviceInfo&) { state.tiled_bc = kTiledBc; }

  static std::string cannot_run(Needs needs, const DeviceInfo& device) {
    const int cc = std::atoi(device.arch.c_str() + 3);  // "sm_90" -> 90
    if (needs == Needs::kSm90aCode) {
      if (cc != 90) return "needs an sm_90 GPU (Hopper); this GPU is " + device.arch;
      if (!wgmma_compiled_here()) return "this program has no sm_90a code; rebuild it with CUDA_ARCH=sm_90a";
    } else if (needs == Needs::kSm80Code) {
      if (cc < 80) return "needs sm_80 or later; this GPU is " + device.arch;
      if (!tensorcore_compiled()) return "this program was built without sm_80+ code; rebuild it for " + device.arch;
    } else if (needs == Needs::kMfmaCode) {
      return "needs an AMD gfx908 or gfx90a GPU";
    }
    return "";
  }

  static std::string not_built(const std::string& asked) {
    if (!FA_TENSOR_CORES && tensor_core_family(asked))
      return "this program was compiled as C++" + std::to_string(__cplusplus / 100 % 100) +
             ", without the tensor-core kernels (they need -std=c++17)";
    return "";
  }

  // FA_TC_SPLIT=fused|prepass: the mma.sync row with that split, for measurements.
  static const KernelEntry* adjust(const KernelEntry* entry, const std::string& asked) {
    const std::string& split = settings().tc_split;
    if (split.empty() || !entry->tensor_cores) return entry;
    if (asked == kWgmmaFamily) fail(kExitUsage, "FA_TC_SPLIT=%s applies to the mma.sync kernel, not wgmma", split.c_str());
#if FA_TENSOR_CORES
    const auto launch = split == "fused" ? launch_by_d<MmaSync<true>> : launch_by_d<MmaSync<false>>;
    for (const KernelEntry& e : kernel_table())
      if (e.launch == launch) return &e;
#endif
    fail(kExitFailure, "no mma.sync kernel with the %s split in this program", split.c_str());
  }
};

}  // namespace fa

int main(int argc, char** argv) {
  return fa::run_pipeline<fa::GpuApi, fa::RegistryKernels<fa::CudaPlatform>>(argc, argv);
}

// kernel_choice.h: the Kernels of host/pipeline.h, for every GPU program: the registry's row
// chosen for this input and GPU (registry.h says how), launched chunk by chunk.
//
// A platform (CudaPlatform in src_cuda/fa_cuda.cu, HipPlatform in src_hip/fa_hip.hip) says
// what only it knows:
//   static void init_state(KernelState&, const DeviceInfo&);  // before the choice (tile widths)
//   static std::string cannot_run(Needs, const DeviceInfo&);   // "" or why this GPU and build cannot
//   static std::string not_built(const std::string& asked);    // "" or why this build has no such kernel
//   static const KernelEntry* adjust(const KernelEntry*, const std::string& asked);  // e.g. FA_TC_SPLIT
#pragma once

#include <string>
#include <vector>

#include "host/pipeline.h"
#include "host/settings.h"
#include "registry.h"

namespace fa {

template <class Platform>
class RegistryKernels {
 public:
  RegistryKernels(const Shape& s, const DeviceInfo& device) : device_(device) {
    state_.shape = s;
    Platform::init_state(state_, device);
    const std::string& asked = settings().kernel;
    entry_ = asked.empty() ? &by_default() : &by_name(asked);
    entry_ = Platform::adjust(entry_, asked);
    entry_->prepare(state_);  // loads its kernels' code now, in the init thread, rather than at the first launch
  }

  size_t scratch_bytes(int64_t batches) const { return entry_->scratch(state_.shape, batches); }

  void launch(const float* qkv, float* out, void* scratch, int64_t batches, GpuStream stream) {
    entry_->launch(state_, Chunk{qkv, out, scratch, batches, stream});
  }

  static std::vector<Launch> launches() { return every_launch(); }
  static void listing() { print_kernels(); }

  std::string name() const {  // "+tiled": some chunk held values the split cannot take
    return std::string(entry_->name) + (state_.declined_host && *state_.declined_host ? "+tiled" : "");
  }

 private:
  // FA_KERNEL=NAME: the first row of that family that takes this input, else the row of that
  // name (wgmma-fused, say), on a GPU and build that run it.
  const KernelEntry& by_name(const std::string& asked) {
    const std::string missing = Platform::not_built(asked);
    if (!missing.empty()) fail(kExitUsage, "FA_KERNEL=%s: %s", asked.c_str(), missing.c_str());
    for (int pass = 0; pass < 2; ++pass) {  // the family first, then the name
      bool named = false;
      for (const KernelEntry& e : kernel_table()) {
        if (asked != (pass == 0 ? e.asked_as : e.name)) continue;
        if (!named) {
          const std::string why = Platform::cannot_run(e.needs, device_);
          if (!why.empty()) fail(kExitUsage, "FA_KERNEL=%s: %s", asked.c_str(), why.c_str());
        }
        named = true;
        if (e.takes(state_, true)) return e;
      }
      if (named)
        fail(kExitUsage, "FA_KERNEL=%s does not take this input (N = %lld, d = %lld; see --kernels)", asked.c_str(),
             (long long)state_.shape.N, (long long)state_.shape.d);
    }
    fail(kExitUsage, "FA_KERNEL=%s: expected one of %s", asked.c_str(), families().c_str());
  }

  // The default: the first row this GPU runs that takes the input.
  const KernelEntry& by_default() {
    for (const KernelEntry& e : kernel_table())
      if (e.takes(state_, false) && Platform::cannot_run(e.needs, device_).empty()) return e;
    fail(kExitFailure, "no kernel of this program takes N = %lld", (long long)state_.shape.N);
  }

  // "wgmma, tensorcore, simt, ...": every FA_KERNEL value, each once, for errors.
  static std::string families() {
    std::vector<std::string> seen;
    std::string all;
    for (const KernelEntry& e : kernel_table()) {
      bool again = false;
      for (const std::string& s : seen) again = again || s == e.asked_as;
      if (again) continue;
      seen.push_back(e.asked_as);
      all += (all.empty() ? "" : ", ") + seen.back();
    }
    return all;
  }

  const DeviceInfo device_;
  const KernelEntry* entry_ = nullptr;
  KernelState state_;
};

}  // namespace fa

// fa-hip (also built as the course's hw4-amd): FlashAttention forward on an AMD GPU with HIP.
//
//   fa-hip INPUT OUTPUT        O_b = softmax(Q_b K_b^T / sqrt(d)) V_b, course binary format
//   fa-hip --kernels | --launches | --settings   as fa-cuda's (src_cuda/fa_cuda.cu)
//
// Kernels (the registry, src_common/registry.h, shared with fa-cuda): on MI100/MI210
// (gfx908/gfx90a) by default the matrix-core kernel (attention_mfma.h: both products on fp32
// MFMA; FA_KERNEL=mfma runs it on an NVIDIA GPU through the emulation of mfma_on_cuda.h).
// Elsewhere by default the register-blocked fp32 kernel (src_common/attention_simt.h, shared with the CUDA program, its
// geometry keeping each row's threads inside one wavefront); FA_KERNEL=tiled
// runs the homework kernel (src_common/attention_tiled.h, shared likewise) with its
// tile width Bc following the wavefront: 64 on CDNA GPUs (MI100 gfx908, MI210 gfx90a, MI300
// gfx94x), 32 on RDNA and NVIDIA. FA_HIP_BC=32|64 forces one (FA_HIP_BC=64 on an NVIDIA GPU
// runs the AMD tile shape there, its rows spanning two warps). FA_KERNEL=ladder-N runs a step
// of the optimization ladder (src_common/ladder.h) instead. See src_hip/README.md for what is
// AMD-specific and why.
//
// Built two ways from this one file: hipcc for AMD targets (make hip -> bin/fa-hip), and nvcc
// through hip_on_cuda.h (make hip-cuda -> bin/fa-hip-cuda) to run it on an NVIDIA GPU.
#include <string>

#include "hip_api.h"
#include "mfma_launches.h"
#include "../src_common/kernel_choice.h"

namespace fa {

// This program's own rows of the registry, before the fp32 rows (src_common/registry.h).
std::vector<KernelEntry> backend_kernel_rows() { return mfma_rows(); }

// What only fa-hip knows of its kernels (kernel_choice.h).
struct HipPlatform {
  // The homework kernel's key tile: the wavefront (64 on CDNA, 32 on RDNA and NVIDIA), or FA_HIP_BC.
  static void init_state(KernelState& state, const DeviceInfo& device) {
    hipDeviceProp_t prop;
    HIP_CHECK(hipGetDeviceProperties(&prop, 0));
    state.tiled_bc = settings().hip_bc ? settings().hip_bc : prop.warpSize >= 64 ? 64 : 32;
    state.native_mfma = mfma_native(device.arch);
  }
  static std::string cannot_run(Needs needs, const DeviceInfo& device) {
    if (needs == Needs::kAnyGpu) return "";
#ifdef __NVCC__
    if (needs == Needs::kMfmaCode) return "";  // the emulation runs it (mfma_on_cuda.h), when asked
#else
    if (needs == Needs::kMfmaCode)
      return mfma_native(device.arch) ? "" : device.arch + " has no fp32 matrix cores (gfx908 or gfx90a needed)";
#endif
    return "a kernel of fa-cuda's (this is the HIP program)";
  }
  static std::string not_built(const std::string& asked) {
    return tensor_core_family(asked) ? "a kernel of fa-cuda's (this is the HIP program)" : "";
  }
  static const KernelEntry* adjust(const KernelEntry* entry, const std::string&) { return entry; }
};

}  // namespace fa

int main(int argc, char** argv) {
  return fa::run_pipeline<fa::GpuApi, fa::RegistryKernels<fa::HipPlatform>>(argc, argv);
}

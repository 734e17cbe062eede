// fa-hip (also built as the course's hw4-amd): FlashAttention forward on an AMD GPU with HIP.
//
//   fa-hip INPUT OUTPUT        O_b = softmax(Q_b K_b^T / sqrt(d)) V_b, course binary format
//
// Kernels: on MI100/MI210 (gfx908/gfx90a) by default the matrix-core kernel (attention_mfma.h:
// both products on fp32 MFMA; FA_KERNEL=mfma runs it on an NVIDIA GPU through the emulation of
// hip_on_cuda.h). Elsewhere by default the register-blocked fp32 kernel (src_common/attention_simt.h, shared with
// the CUDA program, its geometry keeping each row's threads inside one wavefront); FA_KERNEL=tiled
// runs the homework kernel (src_common/attention_tiled.h, shared likewise) with its
// tile width Bc following the wavefront: 64 on CDNA GPUs (MI100 gfx908, MI210 gfx90a, MI300
// gfx94x), 32 on RDNA and NVIDIA. FA_HIP_BC=32|64 forces one (FA_HIP_BC=64 on an NVIDIA GPU
// runs the AMD tile shape there, its rows spanning two warps). FA_KERNEL=ladder-N runs a step
// of the optimization ladder (src_common/ladder.h) instead. See src_hip/README.md for what is
// AMD-specific and why.
//
// Built two ways from this one file: hipcc for AMD targets (make hip -> bin/fa-hip), and nvcc
// through hip_on_cuda.h (make hip-cuda -> bin/fa-hip-cuda) to run it on an NVIDIA GPU.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hip_api.h"
#include "../src_common/attention_tiled.h"
#include "../src_common/attention_simt.h"
#include "../src_common/ladder.h"
#include "attention_mfma.h"

namespace fa {

class HipKernels {
 public:
  HipKernels(const Shape& s, const DeviceInfo& device) : shape_(s) {
    hipDeviceProp_t prop;
    HIP_CHECK(hipGetDeviceProperties(&prop, 0));
    bc_ = prop.warpSize >= 64 ? 64 : 32;
    const char* forced_bc = std::getenv("FA_HIP_BC");
    if (forced_bc && *forced_bc) {
      if (std::strcmp(forced_bc, "32") != 0 && std::strcmp(forced_bc, "64") != 0)
        fail(kExitUsage, "FA_HIP_BC=%s: expected 32 or 64", forced_bc);
      bc_ = std::atoi(forced_bc);
    }
#ifdef FA_TILED_BC
    bc_ = FA_TILED_BC;  // a block-size sweep's build: one tile width, whatever the wavefront
#endif
    const char* forced = std::getenv("FA_KERNEL");
    if (!choose_mfma(forced, device) && forced && *forced && std::strcmp(forced, "tiled") != 0 &&
        std::strcmp(forced, "simt") != 0) {
      ladder_step_ = ladder::parse_step(forced);
      if (ladder_step_ <= 0)
        fail(kExitUsage, "FA_KERNEL=%s: expected simt, tiled, mfma or ladder-1..%d", forced, ladder::kSteps);
    }
    simt_ = !mfma_ && !ladder_step_ && !(forced && std::strcmp(forced, "tiled") == 0);
    if (simt_) prepare_simt();  // loads its code now, in the init thread
  }

  size_t scratch_bytes(int64_t) const { return 0; }

  void launch(const float* qkv, float* out, void*, int64_t batches, hipStream_t stream) {
    const int64_t N = shape_.N;
    if (mfma_) {
      if (shape_.d == 32) launch_mfma<32>(qkv, out, batches, N, stream);
      if (shape_.d == 64) launch_mfma<64>(qkv, out, batches, N, stream);
      HIP_CHECK_LAUNCH("attention_mfma");
      return;
    }
    if (ladder_step_) {
      const char* kernel = shape_.d == 32 ? ladder::launch<32>(ladder_step_, qkv, out, batches, N, stream)
                                          : ladder::launch<64>(ladder_step_, qkv, out, batches, N, stream);
      HIP_CHECK_LAUNCH(kernel);
      return;
    }
    if (simt_) {
      if (shape_.d == 32) launch_simt<32>(qkv, out, batches, N, stream);
      if (shape_.d == 64) launch_simt<64>(qkv, out, batches, N, stream);
      HIP_CHECK_LAUNCH("attention_simt");
      return;
    }
#ifdef FA_TILED_BC
    if (shape_.d == 32) launch_tiled<32, FA_TILED_BC>(qkv, out, batches, N, stream);
    if (shape_.d == 64) launch_tiled<64, FA_TILED_BC>(qkv, out, batches, N, stream);
#else
    if (shape_.d == 32 && bc_ == 32) launch_tiled<32, 32>(qkv, out, batches, N, stream);
    if (shape_.d == 32 && bc_ == 64) launch_tiled<32, 64>(qkv, out, batches, N, stream);
    if (shape_.d == 64 && bc_ == 32) launch_tiled<64, 32>(qkv, out, batches, N, stream);
    if (shape_.d == 64 && bc_ == 64) launch_tiled<64, 64>(qkv, out, batches, N, stream);
#endif
    HIP_CHECK_LAUNCH("attention_tiled");
  }

  std::string name() const {
    if (mfma_) return "mfma";
    if (ladder_step_) return "ladder-" + std::to_string(ladder_step_);
    return simt_ ? "simt" : "tiled-bc" + std::to_string(bc_);
  }

  static std::vector<Launch> launches() {
#ifdef FA_TILED_BC
    const std::string bc = std::to_string(FA_TILED_BC);
    std::vector<Launch> all = {{"attention_tiled<32, " + bc + ">", FA_TILED_BC * kTiledBr, 0},
                               {"attention_tiled<64, " + bc + ">", FA_TILED_BC * kTiledBr, 0}};
#else
    std::vector<Launch> all = {{"attention_tiled<32, 32>", 32 * kTiledBr, 0}, {"attention_tiled<32, 64>", 64 * kTiledBr, 0},
                               {"attention_tiled<64, 32>", 32 * kTiledBr, 0}, {"attention_tiled<64, 64>", 64 * kTiledBr, 0}};
#endif
    for (const auto& l : ladder::kLaunches) all.push_back({l.kernel, l.threads, 0});
    for (const SimtLaunch& l : simt_launches()) all.push_back({l.kernel, l.threads, l.smem_bytes});
    all.push_back({"attention_mfma<32>", kMfmaThreads, 0});
    all.push_back({"attention_mfma<64>", kMfmaThreads, 0});
    return all;
  }

 private:
  // The matrix-core kernel (attention_mfma.h): the default on MI100/MI210 (gfx908/gfx90a, whose
  // code objects carry its MFMA body); FA_KERNEL=mfma elsewhere runs it only through the NVIDIA
  // emulation (fa-hip-cuda), other AMD targets having no fp32 MFMA.
  bool choose_mfma(const char* forced, const DeviceInfo& device) {
#ifdef __NVCC__
    const bool can = true;
#else
    const bool can = mfma_native(device.arch);
#endif
    const bool asked = forced && std::strcmp(forced, "mfma") == 0;
    if (asked && !can) fail(kExitUsage, "FA_KERNEL=mfma: %s has no fp32 matrix cores (gfx908 or gfx90a needed)", device.arch.c_str());
    mfma_ = asked || (!(forced && *forced) && mfma_native(device.arch));
    return asked;
  }

  Shape shape_;
  bool mfma_ = false;  // FA_KERNEL=mfma, or the default on gfx908/gfx90a
  int bc_ = 32;
  int ladder_step_ = 0;  // FA_KERNEL=ladder-N
  bool simt_ = true;     // attention_simt.h, the default; FA_KERNEL=tiled runs the homework kernel
};

}  // namespace fa

int main(int argc, char** argv) { return fa::run_pipeline<fa::HipApi, fa::HipKernels>(argc, argv); }

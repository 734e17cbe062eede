// fa-cuda (also built as the course's hw4): FlashAttention forward on an NVIDIA GPU.
//
//   fa-cuda INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b, course binary format
//   fa-cuda --launches         every kernel it may launch, with threads and shared memory
//
// Kernels (dispatch.cuh's table; FA_KERNEL=simt|tiled|tensorcore|wgmma|ladder-N forces one; the
// default is the fastest accurate one this GPU and program can run):
//   simt        src_common/attention_simt.h: fp32 on the CUDA cores, register-blocked like an
//               SGEMM; the default where the tensor-core kernels do not run (sm_61, sm_70,
//               sm_75, C++11 builds such as the course's);
//   tiled       src_common/attention_tiled.h: the homework design in fp32 (Br = 16, Bc = 32,
//               padded K), every GPU (sm_61 and later);
//   tensorcore  tensorcore/: 3xFP16 mma.sync, fp32-class accuracy, sm_80 and later, with K and
//               V split in the kernel up to N = 256 (tensorcore-fused);
//   wgmma       wgmma/: the same algorithm and precision on Hopper's warpgroup MMA (sm_90a code
//               only), with K and V split in the kernel up to N = 128 (wgmma-fused); the
//               default on Hopper where N <= 128 or N > 256;
//               tensorcore and wgmma run a chunk with values they cannot represent (|x| > 64,
//               NaN, inf) on the tiled kernel (fallback.cuh);
//   ladder-1..5 src_common/ladder.h: the optimization steps that lead to the tiled kernel.
// The pieces the tensor-core kernels share: ptx/ (the instructions), split3xfp16.cuh (the
// numerics), fragments.cuh, softmax.cuh, epilogue.cuh.
// Host side: src_common/gpu_pipeline.h (streamed chunks, device start-up overlapped with the
// read) and src_common/fa_host.h (format checks, atomic output, FA_TIMING=1 breakdown).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../src_common/gpu_pipeline.h"
#include "dispatch.cuh"

namespace fa {

// The Kernels of gpu_pipeline.h: the table's entry chosen for this input and GPU.
class CudaKernels {
 public:
  CudaKernels(const Shape& s, const DeviceInfo& device) : cc_(std::atoi(device.arch.c_str() + 3)), arch_(device.arch) {
    state_.shape = s;
    const char* forced = std::getenv("FA_KERNEL");
    if (forced && !*forced) forced = nullptr;
    entry_ = forced ? &asked(forced) : &by_default();
    if (entry_->tensor_cores) apply_split_override(forced);
    entry_->prepare();  // loads its kernels' code now, in the init thread, rather than at the first launch
    if (entry_->tensor_cores) prepare_fallback();
  }

  size_t scratch_bytes(int64_t batches) const { return entry_->scratch(state_.shape, batches); }

  void launch(const float* qkv, float* out, void* scratch, int64_t batches, cudaStream_t stream) {
    entry_->launch(state_, Chunk{qkv, out, scratch, batches, stream});
  }

  static std::vector<Launch> launches() { return every_launch(); }

  std::string name() const {  // "+tiled": some chunk held values the split cannot take
    return std::string(entry_->name) + (state_.declined_host && *state_.declined_host ? "+tiled" : "");
  }

 private:
  // The entry FA_KERNEL names: the first of that name that takes this N, on a GPU that runs it.
  const KernelEntry& asked(const char* forced) {
    if (ladder::parse_step(forced) < 0)
      fail(kExitUsage, "FA_KERNEL=%s: the ladder's steps are ladder-1 to ladder-%d", forced, ladder::kSteps);
    if (!FA_TENSOR_CORES && (std::strcmp(forced, "tensorcore") == 0 || std::strcmp(forced, "wgmma") == 0))
      fail(kExitUsage, "FA_KERNEL=%s: this program was compiled as C++%ld, without the tensor-core kernels (they "
           "need -std=c++17)", forced, (long)(__cplusplus / 100 % 100));
    bool named = false;
    for (const KernelEntry& e : kernel_table()) {
      if (std::strcmp(e.asked_as, forced) != 0) continue;
      if (!named) check_runs_here(e.needs, forced);
      named = true;
      if (e.takes(state_.shape.N, true)) return e;
    }
    fail(kExitUsage, "FA_KERNEL=%s: expected simt, tiled, tensorcore, wgmma or ladder-1..%d", forced,
         ladder::kSteps);
  }

  // The default: the first entry this GPU runs that takes N.
  const KernelEntry& by_default() {
    for (const KernelEntry& e : kernel_table())
      if (e.takes(state_.shape.N, false) && runs_here(e.needs)) return e;
    fail(kExitFailure, "no kernel of this program takes N = %lld", (long long)state_.shape.N);
  }

  // The entry of this name (FA_TC_SPLIT's choice among the mma.sync entries).
  static const KernelEntry& named(const char* name) {
    for (const KernelEntry& e : kernel_table())
      if (std::strcmp(e.name, name) == 0) return e;
    fail(kExitFailure, "no kernel named %s in this program", name);
  }

  // FA_TC_SPLIT=fused|prepass: the mma.sync kernel with that split, for measurements.
  void apply_split_override(const char* forced) {
    const char* split = std::getenv("FA_TC_SPLIT");
    if (!split || !*split) return;
    if (std::strcmp(split, "fused") != 0 && std::strcmp(split, "prepass") != 0)
      fail(kExitUsage, "FA_TC_SPLIT=%s: expected fused or prepass", split);
    if (forced && std::strcmp(forced, "wgmma") == 0)
      fail(kExitUsage, "FA_TC_SPLIT=%s applies to the mma.sync kernel, not wgmma", split);
    entry_ = &named(std::strcmp(split, "fused") == 0 ? "tensorcore-fused" : "tensorcore");
  }

  bool runs_here(Needs needs) {
    switch (needs) {
      case Needs::kSm80Code:
        return cc_ >= 80 && tensorcore_compiled();
      case Needs::kSm90aCode:
        return cc_ == 90 && wgmma_compiled_here();
      default:
        return true;
    }
  }
  void check_runs_here(Needs needs, const char* forced) {
    if (needs == Needs::kSm90aCode) {
      if (cc_ != 90) fail(kExitUsage, "FA_KERNEL=%s needs an sm_90 GPU (Hopper); this GPU is %s", forced, arch_.c_str());
      if (!wgmma_compiled_here())
        fail(kExitUsage, "FA_KERNEL=%s: this program has no sm_90a code; rebuild it with CUDA_ARCH=sm_90a", forced);
    } else if (needs == Needs::kSm80Code) {
      if (cc_ < 80) fail(kExitUsage, "FA_KERNEL=%s needs sm_80 or later; this GPU is %s", forced, arch_.c_str());
      if (!tensorcore_compiled())
        fail(kExitUsage, "FA_KERNEL=%s: this program was built without sm_80+ code; rebuild it for %s", forced,
             arch_.c_str());
    }
  }

#if FA_TENSOR_CORES
  // A program built only for targets below sm_80 (the course's sm_61, say) runs here from its
  // PTX, JIT-compiled: its tensor-core kernel was compiled empty (#if __CUDA_ARCH__ >= 800).
  static bool tensorcore_compiled() {
    cudaFuncAttributes attr;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_tensorcore<64, false>));
    return attr.ptxVersion >= 80;
  }

  // Whether the loaded code is sm_90a's (only there does wgmma exist): asked of the GPU once.
  static bool wgmma_compiled_here() {
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
  void prepare_fallback() {
    cudaFuncAttributes attr;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, split_kv));  // loads the split passes' code
    int* flag = nullptr;
    CUDA_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
    *flag = 0;
    state_.declined_host = flag;
    CUDA_CHECK(cudaHostGetDevicePointer(&state_.declined_device, flag, 0));
    CUDA_CHECK(cudaDeviceGetAttribute(&state_.sms, cudaDevAttrMultiProcessorCount, 0));
    state_.pdl = cc_ >= 90;
    int blocks = 0;
    if (state_.shape.d == 32)
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attention_tiled_declined<32, kTiledBc>,
                                                               kTiledBc * kTiledBr, 0));
    else
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attention_tiled_declined<64, kTiledBc>,
                                                               kTiledBc * kTiledBr, 0));
    state_.declined_blocks = state_.sms * std::max(blocks, 1);
  }
#else
  static bool tensorcore_compiled() { return false; }
  static bool wgmma_compiled_here() { return false; }
  void prepare_fallback() {}
#endif

  const int cc_;  // "sm_90" -> 90
  const std::string arch_;
  const KernelEntry* entry_ = nullptr;
  KernelState state_;
};

}  // namespace fa

int main(int argc, char** argv) { return fa::run_pipeline<fa::CudaApi, fa::CudaKernels>(argc, argv); }

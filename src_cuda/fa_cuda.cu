// fa-cuda (also built as the course's hw4): FlashAttention forward on an NVIDIA GPU.
//
//   fa-cuda INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b, course binary format
//
// Kernels (FA_KERNEL=simt|tiled|tensorcore|wgmma|ladder-N forces one; the default is the fastest
// accurate one: wgmma on Hopper where N <= 128 or N > 256 and the program has sm_90a code, else
// tensorcore on sm_80 and later, else simt):
//   simt        src_common/attention_simt.h: fp32 on the CUDA cores, register-blocked like an
//               SGEMM (micro-tiles of scores and of O per thread), every GPU;
//   tiled       src_common/attention_tiled.h: the homework design in fp32 (Br = 16, Bc = 32,
//               padded K), every GPU (sm_61 and later);
//   tensorcore  kernel_tensorcore.cuh: 3xFP16 mma.sync, fp32-class accuracy, sm_80 and later;
//   wgmma       kernel_wgmma.cuh: the same algorithm and precision on Hopper's warpgroup MMA
//               (sm_90a code only), with K and V split in the kernel up to N = 128 (wgmma-fused);
//               tensorcore and wgmma run a chunk with values they cannot represent (|x| > 64,
//               NaN, inf) on the tiled kernel;
//   ladder-1..5 src_common/ladder.h: the optimization steps that lead to the tiled kernel.
// Host side: src_common/gpu_pipeline.h (streamed chunks, device start-up overlapped with the
// read) and src_common/fa_host.h (format checks, atomic output, FA_TIMING=1 breakdown).
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../src_common/gpu_pipeline.h"
#include "cuda_api.cuh"
#include "../src_common/attention_tiled.h"
#include "../src_common/attention_simt.h"
#include "../src_common/ladder.h"
// The tensor-core kernels are written in C++17. A build as C++11 or C++14, such as the course's
// example Makefile makes (nvcc -std=c++11 ... hw4.cu), leaves them out and runs the tiled kernel,
// the only kind the course's GTX 1080 (sm_61) can run anyway. Everything else here is C++11.
#if __cplusplus >= 201703L
#define FA_TENSOR_CORES 1
#include "kernel_tensorcore.cuh"
#include "kernel_wgmma.cuh"
#else
#define FA_TENSOR_CORES 0
#endif

namespace fa {

// The homework kernel's Bc: one key per lane of a warp; FA_TILED_BC=N builds another (fa sweep).
#ifndef FA_TILED_BC
#define FA_TILED_BC 32
#endif
constexpr int kTiledBc = FA_TILED_BC;

class CudaKernels {
 public:
  CudaKernels(const Shape& s, const DeviceInfo& device) : shape_(s) {
    const std::string& arch = device.arch;
    const int cc = std::atoi(arch.c_str() + 3);  // "sm_90" -> 90
    const char* forced = std::getenv("FA_KERNEL");
    if (forced && !*forced) forced = nullptr;
    const int step = forced ? ladder::parse_step(forced) : 0;
    if (step < 0) fail(kExitUsage, "FA_KERNEL=%s: the ladder's steps are ladder-1 to ladder-%d", forced, ladder::kSteps);
    if (step > 0) {
      ladder_step_ = step;
    } else if (forced && std::strcmp(forced, "tiled") != 0 && std::strcmp(forced, "tensorcore") != 0 &&
               std::strcmp(forced, "wgmma") != 0 && std::strcmp(forced, "simt") != 0) {
      fail(kExitUsage, "FA_KERNEL=%s: expected simt, tiled, tensorcore, wgmma or ladder-1..%d", forced,
           ladder::kSteps);
    } else if (!forced || (std::strcmp(forced, "tiled") != 0 && std::strcmp(forced, "simt") != 0)) {
      choose_tensor_kernels(forced, cc, arch);
    }
    simt_ = !ladder_step_ && !tensorcore_ && !(forced && std::strcmp(forced, "tiled") == 0);
    if (simt_) prepare_simt();
    // Load every kernel's code now, in the init thread, rather than at its first launch.
    cudaFuncAttributes attr;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_tiled<32, kTiledBc>));
    CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_tiled<64, kTiledBc>));
#if FA_TENSOR_CORES
    if (tensorcore_) CUDA_CHECK(cudaFuncGetAttributes(&attr, split_kv));
#endif
  }

  size_t scratch_bytes(int64_t batches) const {
#if FA_TENSOR_CORES
    // The chunks' decline flags, then split K and V (4 fp16 arrays of N x d per batch; not when fused).
    if (tensorcore_) return kFlagBytes + split_bytes(batches);
#endif
    (void)batches;
    return 0;
  }

  void launch(const float* qkv, float* out, void* scratch, int64_t batches, cudaStream_t stream) {
    if (shape_.d == 32)
      launch_d<32>(qkv, out, scratch, batches, stream);
    else
      launch_d<64>(qkv, out, scratch, batches, stream);
  }

  static std::vector<Launch> launches() {
    constexpr int tiled_threads = kTiledBc * kTiledBr;
    const std::string bc = std::to_string(kTiledBc);
    std::vector<Launch> all = {
        {"attention_tiled<32, " + bc + ">", tiled_threads, 0},
        {"attention_tiled<64, " + bc + ">", tiled_threads, 0}};
    for (size_t i = 0; i < sizeof ladder::kLaunches / sizeof ladder::kLaunches[0]; ++i)
      all.push_back({ladder::kLaunches[i].kernel, ladder::kLaunches[i].threads, 0});
    for (const SimtLaunch& l : simt_launches()) all.push_back({l.kernel, l.threads, l.smem_bytes});
#if FA_TENSOR_CORES
    const std::vector<Launch> tensor = {
        {"attention_tiled_declined<32, " + bc + ">", tiled_threads, 0},
        {"attention_tiled_declined<64, " + bc + ">", tiled_threads, 0},
        {"split_kv", kSplitThreads, 0},
        {"attention_tensorcore<32, false>", tc_warps<32, false>() * 32, tc_smem_bytes<32>()},
        {"attention_tensorcore<32, true>", tc_warps<32, true>() * 32, tc_smem_bytes<32>()},
        {"attention_tensorcore<64, false>", tc_warps<64, false>() * 32, tc_smem_bytes<64>()},
        {"attention_tensorcore<64, true>", tc_warps<64, true>() * 32, tc_smem_bytes<64>()},
        {"split_kv_blocked<32>", kSplitThreads, 0},
        {"split_kv_blocked<64>", kSplitThreads, 0},
        {"attention_wgmma<32>", wg_threads<32>(), wg_smem_bytes<32>()},
        {"attention_wgmma<64>", wg_threads<64>(), wg_smem_bytes<64>()},
        {"attention_wgmma_short<32>", wg_threads<32>(), wg_short_smem_bytes<32>()},
        {"attention_wgmma_short<64>", wg_threads<64>(), wg_short_smem_bytes<64>()}};
    all.insert(all.end(), tensor.begin(), tensor.end());
#endif
    return all;
  }

  std::string name() const {
    if (ladder_step_) return "ladder-" + std::to_string(ladder_step_);
    if (!tensorcore_) return simt_ ? "simt" : "tiled";
    if (wgmma_) return std::string(wgmma_short_ ? "wgmma-fused" : "wgmma") + (*declined_host_ ? "+tiled" : "");
    return std::string(fused_ ? "tensorcore-fused" : "tensorcore") + (*declined_host_ ? "+tiled" : "");
  }

 private:
  template <int D>
  void launch_d(const float* qkv, float* out, void* scratch, int64_t batches, cudaStream_t stream) {
    const int64_t N = shape_.N;
    if (ladder_step_) {
      CUDA_CHECK_LAUNCH(ladder::launch<D>(ladder_step_, qkv, out, batches, N, stream));
      return;
    }
    if (simt_) {
      launch_simt<D>(qkv, out, batches, N, stream);
      CUDA_CHECK_LAUNCH("attention_simt");
      return;
    }
    if (!tensorcore_) {
      launch_tiled<D, kTiledBc>(qkv, out, batches, N, stream);
      CUDA_CHECK_LAUNCH("attention_tiled");
      return;
    }
#if FA_TENSOR_CORES
    launch_tensor<D>(qkv, out, scratch, batches, stream);
#else
    (void)scratch;
#endif
  }

#if FA_TENSOR_CORES
  static constexpr int64_t kFusedMaxN = 256;
  static constexpr size_t kFlagBytes = 256;  // keeps split K and V aligned

  // The default: tensor cores from sm_80 on where the program has their code; FA_KERNEL=tensorcore
  // or wgmma forces one (forced is null for the default).
  void choose_tensor_kernels(const char* forced, int cc, const std::string& arch) {
    const Shape& s = shape_;
    if (forced && std::strcmp(forced, "wgmma") == 0) {
      if (cc != 90) fail(kExitUsage, "FA_KERNEL=wgmma needs an sm_90 GPU (Hopper); this GPU is %s", arch.c_str());
      if (!wgmma_compiled_here())
        fail(kExitUsage, "FA_KERNEL=wgmma: this program has no sm_90a code; rebuild it with CUDA_ARCH=sm_90a");
      tensorcore_ = wgmma_ = true;
      wgmma_short_ = s.N <= kWgShortMaxN;
    } else if (forced) {
      if (cc < 80) fail(kExitUsage, "FA_KERNEL=tensorcore needs sm_80 or later; this GPU is %s", arch.c_str());
      if (!tensorcore_compiled())
        fail(kExitUsage, "FA_KERNEL=tensorcore: this program was built without sm_80+ code; rebuild it for %s",
             arch.c_str());
      tensorcore_ = true;
    } else {
      tensorcore_ = cc >= 80 && tensorcore_compiled();
      // Hopper: the long-sequence wgmma kernel past N = 256, its short fused-split variant up to
      // N = 128; in between (and before Hopper) mma.sync, whose fused split saves the split pass.
      wgmma_ = cc == 90 && (s.N > kFusedMaxN || s.N <= kWgShortMaxN) && wgmma_compiled_here();
      wgmma_short_ = wgmma_ && s.N <= kWgShortMaxN;
    }
    if (!tensorcore_) return;
    allow_smem(attention_tensorcore<32, false>, tc_smem_bytes<32>());
    allow_smem(attention_tensorcore<32, true>, tc_smem_bytes<32>());
    allow_smem(attention_tensorcore<64, false>, tc_smem_bytes<64>());
    allow_smem(attention_tensorcore<64, true>, tc_smem_bytes<64>());
    if (wgmma_) {  // up to 224 KB: more than any GPU before Hopper can give a block
      allow_smem(attention_wgmma<32>, wg_smem_bytes<32>());
      allow_smem(attention_wgmma<64>, wg_smem_bytes<64>());
      allow_smem(attention_wgmma_short<32>, wg_short_smem_bytes<32>());
      allow_smem(attention_wgmma_short<64>, wg_short_smem_bytes<64>());
    }
    // Short sequences split K and V inside the main kernel (see kernel_tensorcore.cuh);
    // FA_TC_SPLIT=fused|prepass forces one way, for measurements (on the mma.sync kernel).
    fused_ = s.N <= kFusedMaxN && !wgmma_;
    const char* split = std::getenv("FA_TC_SPLIT");
    if (split && *split) {
      if (std::strcmp(split, "fused") != 0 && std::strcmp(split, "prepass") != 0)
        fail(kExitUsage, "FA_TC_SPLIT=%s: expected fused or prepass", split);
      if (wgmma_ && forced) fail(kExitUsage, "FA_TC_SPLIT=%s applies to the mma.sync kernel, not wgmma", split);
      fused_ = std::strcmp(split, "fused") == 0;
      wgmma_ = wgmma_short_ = false;
    }
    // Mapped host flag: set by the split pass if any chunk had to run on the tiled kernel.
    int* flag = nullptr;
    CUDA_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
    *flag = 0;
    declined_host_ = flag;
    CUDA_CHECK(cudaHostGetDevicePointer(&declined_device_, flag, 0));
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    sms_ = sms;
    pdl_ = cc >= 90;
    declined_blocks_ = sms * (s.d == 32 ? resident_blocks(attention_tiled_declined<32, kTiledBc>)
                                        : resident_blocks(attention_tiled_declined<64, kTiledBc>));
  }

  // A program built only for targets below sm_80 (the course's sm_61, say) runs here from its
  // PTX, JIT-compiled: its tensor-core kernel was compiled empty (#if __CUDA_ARCH__ >= 800).
  static bool tensorcore_compiled() {
    cudaFuncAttributes attr;
    CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_tensorcore<64, false>));
    return attr.ptxVersion >= 80;
  }

  // Whether the loaded code is sm_90a's (only there does wgmma exist): asked of the GPU once.
  static bool wgmma_compiled_here() {
    int* flag = nullptr;
    int found = 0;
    CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
    wgmma_compiled<<<1, 1>>>(flag);
    CUDA_CHECK_LAUNCH("wgmma_compiled");
    CUDA_CHECK(cudaMemcpy(&found, flag, sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaFree(flag));
    return found == 1;
  }

  // Blocks of `kernel` (the tiled kernel's shape) that one SM holds at once.
  template <class Kernel>
  static int resident_blocks(Kernel kernel) {
    int blocks = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kTiledBc * kTiledBr, 0));
    return std::max(blocks, 1);
  }

  template <class Kernel>
  static void allow_smem(Kernel kernel, int bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
  size_t split_bytes(int64_t batches) const {  // 4 fp16 arrays of N x d per batch (wgmma: N padded to tiles)
    if (fused_ || wgmma_short_) return 0;
    const int64_t keys = wgmma_ ? wg_tiles(shape_.N) * kTcBc : shape_.N;
    return (size_t)(batches * keys * shape_.d * 8);
  }

  template <int D>
  void launch_tensor(const float* qkv, float* out, void* scratch, int64_t batches, cudaStream_t stream) {
    const int64_t N = shape_.N;
    // Scratch: the decline flags of even and odd chunks, then split K and V. A chunk's fallback
    // clears the next chunk's flag (the previous chunk, its last reader, has finished), which
    // saves a memset launch per chunk.
    int* flags = static_cast<int*>(scratch);
    __half* kv = reinterpret_cast<__half*>(static_cast<char*>(scratch) + kFlagBytes);
    if (chunks_ == 0) CUDA_CHECK(cudaMemsetAsync(flags, 0, 2 * sizeof(int), stream));
    int* decline = flags + chunks_ % 2;
    int* decline_next = flags + (chunks_ + 1) % 2;
    ++chunks_;
    if (wgmma_short_) {
      attention_wgmma_short<D><<<(unsigned)std::min<int64_t>(batches, sms_), wg_threads<D>(), wg_short_smem_bytes<D>(),
                                 stream>>>(qkv, out, N, batches, decline, declined_device_);
    } else if (wgmma_) {
      split_kv_blocked<D><<<8 * sms_, kSplitThreads, 0, stream>>>(qkv, kv, batches, N, decline, declined_device_);
      CUDA_CHECK_LAUNCH("split_kv_blocked");
      const int64_t row_tiles = (N + wg_rows<D>() - 1) / wg_rows<D>(), items = batches * row_tiles;
      attention_wgmma<D><<<(unsigned)std::min<int64_t>(items, sms_), wg_threads<D>(), wg_smem_bytes<D>(), stream>>>(
          qkv, kv, out, N, row_tiles, items, decline, declined_device_);
    } else if (fused_) {
      launch_tensorcore<D, true>(qkv, kv, out, batches, decline, stream);
    } else {
      split_kv<<<8 * sms_, kSplitThreads, 0, stream>>>(qkv, kv, batches, N * D, decline, declined_device_);
      CUDA_CHECK_LAUNCH("split_kv");
      launch_tensorcore<D, false>(qkv, kv, out, batches, decline, stream);
    }
    CUDA_CHECK_LAUNCH("attention_tensorcore");
    // Returns at once unless declined. On Hopper it is launched programmatically dependent on the
    // kernel before it (PDL): its launch is prepared while that kernel runs.
    const int64_t row_tiles = (N + kTiledBr - 1) / kTiledBr;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(declined_blocks_);
    config.blockDim = dim3(kTiledBc, kTiledBr);
    config.stream = stream;
    cudaLaunchAttribute after;
    after.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    after.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &after;
    config.numAttrs = pdl_ ? 1 : 0;
    CUDA_CHECK(cudaLaunchKernelEx(&config, attention_tiled_declined<D, kTiledBc>, qkv, out, N, row_tiles,
                                  batches * row_tiles, (const int*)decline, decline_next));
  }

  template <int D, bool kFused>
  void launch_tensorcore(const float* qkv, const __half* kv, float* out, int64_t batches, int* decline,
                         cudaStream_t stream) {
    constexpr int rows = tc_rows<D, kFused>();
    const int64_t row_tiles = (shape_.N + rows - 1) / rows;
    attention_tensorcore<D, kFused><<<(unsigned)(batches * row_tiles), tc_warps<D, kFused>() * 32, tc_smem_bytes<D>(),
                                      stream>>>(qkv, kv, out, shape_.N, row_tiles, decline, declined_device_);
  }
#else
  void choose_tensor_kernels(const char* forced, int, const std::string&) {
    if (forced)
      fail(kExitUsage, "FA_KERNEL=%s: this program was compiled as C++%ld, without the tensor-core kernels (they "
           "need -std=c++17)", forced, (long)(__cplusplus / 100 % 100));
  }
#endif

  Shape shape_;
  bool tensorcore_ = false;
  bool simt_ = false;         // attention_simt.h: the default where the tensor-core kernels do not run
  bool wgmma_ = false;        // Hopper's kernels (kernel_wgmma.cuh)
  bool wgmma_short_ = false;  // its fused-split variant for N <= 128
  int ladder_step_ = 0;  // FA_KERNEL=ladder-N
  bool fused_ = false;
  int sms_ = 0;  // multiprocessors: grids of one block each (persistent kernels) or 8 (split passes)
  int64_t chunks_ = 0;  // chunks launched so far
  bool pdl_ = false;    // programmatic dependent launch (sm_90 and later)
  int declined_blocks_ = 0;  // attention_tiled_declined's grid, for this input's d
  volatile int* declined_host_ = nullptr;
  int* declined_device_ = nullptr;
};

}  // namespace fa

int main(int argc, char** argv) { return fa::run_pipeline<fa::CudaApi, fa::CudaKernels>(argc, argv); }

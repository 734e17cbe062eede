// attention_params.h: the kernels' arguments as one struct (as FA3's Flash_fwd_params), taken by
// every kernel of the programs: attention_tiled (attention_tiled.h), attention_simt
// (attention_simt.h), the ladder's steps (ladder.h), attention_mfma (src_hip/attention_mfma.h),
// and in src_cuda/ attention_tensorcore, attention_tiled_declined, attention_wgmma,
// attention_wgmma_short, split_kv and split_kv_blocked. The launches fill what their kernel reads
// (the headers above, src_cuda/tensorcore_launches.cuh); the rest stays zero.
//
// Such a kernel hands the pointers on to a __device__ function whose parameters are __restrict__:
// restrict is ignored on struct members (nvcc, clang) and on local variables (clang), and the
// read-only loads it allows (NVIDIA's LDG.CONSTANT, AMD's scalar loads) would be lost.
// Where the loads follow inline assembly that may write memory (cp.async in
// attention_tensorcore, griddepcontrol.wait in attention_tiled_declined, the scheduling barrier
// of attention_mfma built by nvcc), nvcc proves even those parameters read-only no more, and
// those loads are explicit __ldg (ld.global.nc): tiled_load4, QFragments::load<true>,
// split_kv_tiles, mfma_load4.
#pragma once

#include <cstdint>

struct __half;  // cuda_fp16.h's or hip_fp16.h's; only src_cuda's kernels dereference it

namespace fa {

struct AttentionParams {
  const float* qkv = nullptr;  // the chunk's input: per batch Q, K, V, each N x d, row-major
  float* out = nullptr;        // O: per batch N x d
  __half* kv = nullptr;        // K and V split to fp16 halves: written by the split passes, read by
                               // the tensor-core kernels (split3xfp16.cuh, wgmma/split.cuh)
  int64_t N = 0;               // rows (queries, keys) per batch
  int64_t nd = 0;              // N * d: floats of one of Q, K, V per batch (split_kv)
  int64_t batches = 0;         // batches in the chunk
  int64_t row_tiles = 0;       // blocks (or work items) per batch: ceil(N / the kernel's rows)
  int64_t items = 0;           // work items of a persistent kernel: batches * row_tiles
  int* decline = nullptr;              // set: this chunk's values are outside the 3xFP16 split's
                                       // range, the tiled kernel computes it (split3xfp16.cuh)
  int* decline_next = nullptr;         // the next chunk's flag, cleared by the fallback kernel
  volatile int* declined_ever = nullptr;  // mapped to the host: some chunk was declined
};

}  // namespace fa

// attention_params.h: the kernels' arguments as one struct (as FA3's Flash_fwd_params), taken by
// attention_simt (attention_simt.h) and by attention_wgmma, attention_wgmma_short, split_kv and
// split_kv_blocked (src_cuda/). The launches fill what their kernel reads (attention_simt.h,
// src_cuda/tensorcore_launches.cuh); the rest stays zero.
//
// Such a kernel hands the pointers on to a __device__ function whose parameters are __restrict__:
// restrict is ignored on struct members (nvcc, clang) and on local variables (clang), and the
// read-only loads it allows (NVIDIA's LDG.CONSTANT, AMD's scalar loads) would be lost.
//
// The others keep their parameters, because read from a struct they compile to other machine
// code: attention_tiled and ladder-2 to -5 (N and row_tiles become loaded values, not arguments:
// other compare operand order and registers, 696 instructions instead of 704 for
// attention_tiled<32, 32> on sm_90a); attention_tensorcore, attention_tiled_declined and
// attention_mfma on NVIDIA (past inline assembly that may write memory, cp.async,
// griddepcontrol.wait or attention_mfma's scheduling barrier, nvcc proves Q, K, V read-only only
// for kernel parameters: their loads lose LDG.CONSTANT); ladder-1 and attention_mfma on AMD
// (hipcc's registers and kernel-argument loads change).
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

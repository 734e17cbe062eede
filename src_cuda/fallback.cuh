// fallback.cuh: the fp32 tiled kernel for a chunk the tensor-core kernels declined (values
// outside the 3xFP16 split's range, NaN or inf: split3xfp16.cuh).
#pragma once

#include <cstdint>

#include "kernel_primitives.cuh"
#include "ptx/sm90.cuh"
#include "../src_common/attention_params.h"
#include "../src_common/attention_tiled.h"

namespace fa {

// Launched after every tensor-core launch and returning at once unless *decline is set. A grid
// of one block per row tile made that empty launch cost 10 us a chunk on an H100 (4096 blocks of
// 512 threads at 64 x 4096 x 64, 2.6% of the chunk); this grid holds only as many blocks as fit
// the GPU at once, and each strides over the row tiles. It also clears the next chunk's flag
// (decline_next), whose last reader has finished.
// p: qkv, out, N, row_tiles, items (the row tiles of the chunk), decline, decline_next.
template <int D, int BC>
__global__ void FA_LAUNCH_BOUNDS(kTiledBr* BC, (tiled_min_blocks<D, BC>())) attention_tiled_declined(const AttentionParams p) {
#if __CUDA_ARCH__ >= 900
  grid_dependency_wait();  // launched dependent on the kernel before it (PDL)
#endif
  if (blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) *p.decline_next = 0;
  if (*p.decline == 0) return;
  for (int64_t tile = blockIdx.x; tile < p.items; tile += gridDim.x) {
    tiled_rows<TiledTile<D, BC, true> >(p.qkv, p.out, p.N, p.row_tiles, tile);
    __syncthreads();  // the next tile refills the shared tiles
  }
}

}  // namespace fa

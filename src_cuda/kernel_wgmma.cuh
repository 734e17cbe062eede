// kernel_wgmma.cuh: the tensor-core kernel's products on Hopper's warpgroup MMA (sm_90a).
// Experimental (FA_KERNEL=wgmma, programs built with CUDA_ARCH=sm_90a): correct, but slower
// than attention_tensorcore as it stands, since each product waits for its wgmma before the
// softmax runs (docs/kernels.md); overlapping them is the next step.
//
// The same algorithm and precision as attention_tensorcore (kernel_tensorcore.cuh: 3xFP16 split,
// online softmax, P kept in registers, per-tile P V folded into O with round-to-nearest FMAs),
// with each product issued as wgmma by the block's one warpgroup (4 warps, 64 query rows):
// S = Q K^T as m64n64k16 with Q's hi/lo fragments from registers and K's from shared memory,
// P V as m64nDk16 with P's from registers and V's from shared memory (transposed operand).
// wgmma's register fragments are mma.sync's, so Q, S and P keep their layout and code.
// Shared memory holds K and V tiles in the operands' canonical no-swizzle layout: 8 x 8 core
// matrices of 8 keys x 8 dimensions, 128 contiguous bytes each, dimension blocks innermost.
#pragma once

#include "kernel_tensorcore.cuh"

namespace fa {

// 1 where this program carries sm_90a code (wgmma exists only there), else 0.
__global__ void wgmma_compiled(int* yes) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *yes = 1;
#else
  *yes = 0;
#endif
}

template <int D>
__host__ __device__ constexpr int wg_stage_halves() { return 4 * kTcBc * D; }
template <int D>
__host__ __device__ constexpr int wg_smem_bytes() { return 2 * wg_stage_halves<D>() * 2; }

// Offset (halves) of element (key, dim) of one K or V array in the blocked layout.
template <int D>
__device__ __forceinline__ int wg_offset(int key, int dim) {
  return ((key / 8) * (D / 8) + dim / 8) * 64 + (key % 8) * 8 + dim % 8;
}

// Shared-memory matrix descriptor: start address, leading and stride byte offsets, no swizzle.
__device__ __forceinline__ uint64_t wg_desc(const void* p, uint32_t lbo, uint32_t sbo) {
  const uint64_t addr = smem_addr(p);
  return ((addr & 0x3ffff) >> 4) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 | (uint64_t)((sbo >> 4) & 0x3fff) << 32;
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
template <int R>
__device__ __forceinline__ void wg_keep(float (&d)[R][4]) {  // no compiler moves across issue and wait
#pragma unroll
  for (int i = 0; i < R; ++i)
    asm volatile("" : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])::"memory");
}

// d (+)= a b: m64n64k16 (d: 8 n-tiles x 4) or m64n32k16 (4 n-tiles x 4), A from registers.
template <int kTransB>
__device__ __forceinline__ void wgmma_n64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
      "%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),
        "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]),
        "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB), "r"(accumulate));
}
template <int kTransB>
__device__ __forceinline__ void wgmma_n32(float (&d)[4][4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %22, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, %21;\n}\n"
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),
        "+f"(d[3][2]), "+f"(d[3][3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB), "r"(accumulate));
}
template <int kTransB, int R>
__device__ __forceinline__ void wgmma_rs(float (&d)[R][4], const uint32_t (&a)[4], uint64_t b, int accumulate) {
  if constexpr (R == 8) wgmma_n64<kTransB>(d, a, b, accumulate);
  else wgmma_n32<kTransB>(d, a, b, accumulate);
}

// The split K and V tile (4 arrays of kTcBc keys x D) into one stage, by cp.async: 16-byte
// chunks, eight consecutive threads filling one 128-byte core matrix.
template <int D>
__device__ __forceinline__ void wg_load_tile(__half* stage, const __half* KV, int64_t key0, int64_t N, int tid) {
  constexpr int kBlocks = D / 8, kChunks = 4 * kTcBc * kBlocks;
  const int64_t ND = N * D;
  const __half* src0 = KV + key0 * D;
  const bool full = key0 + kTcBc <= N;
#pragma unroll
  for (int c = tid; c < kChunks; c += 128) {
    const int r8 = c % 8, db = (c / 8) % kBlocks, kb = (c / (8 * kBlocks)) % (kTcBc / 8),
              array = c / (kTcBc * kBlocks);
    const int key = kb * 8 + r8, dim = db * 8;
    __half* dst = stage + array * kTcBc * D + wg_offset<D>(key, dim);
    const bool valid = full || key0 + key < N;
    cp_async16(dst, valid ? src0 + array * ND + key * D + dim : KV, valid ? 16 : 0);
  }
  cp_async_commit();
}

template <int D>
__global__ void __launch_bounds__(128, FA_TC_MIN_BLOCKS)
    attention_wgmma(const float* __restrict__ qkv, const __half* __restrict__ kv, float* __restrict__ out,
                    int64_t N, int64_t row_tiles, int* __restrict__ decline, volatile int* declined_ever) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (*decline) return;
  extern __shared__ __align__(16) __half smem[];
  const int tid = threadIdx.x, lane = tid % 32;
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t row0 = (blockIdx.x % row_tiles) * 64 + tid / 32 * 16;
  const int64_t ND = N * D;
  const float* Q = qkv + b * 3 * ND;
  const __half* KV = kv + b * 4 * ND;
  const int64_t tiles = (N + kTcBc - 1) / kTcBc;
  constexpr int kArray = kTcBc * D;  // halves of one of K_hi, K_lo, V_hi, V_lo
  // Descriptors' byte offsets between core matrices: the leading offset runs along the
  // product's reduction, the stride offset along N. K as B (K-major, reducing over dims): 128 B
  // to the next dimension block, D / 8 * 128 B to the next key block. V as B (transposed,
  // reducing over keys): the other way round. (Measured: the swapped pairs give wrong results.)
  constexpr uint32_t kNearDim = 128, kNearKey = D / 8 * 128;
  constexpr uint32_t kLboK = kNearDim, kSboK = kNearKey, kLboV = kNearKey, kSboV = kNearDim;

  wg_load_tile<D>(smem, KV, 0, N, tid);
  QFragments<D> q;
  q.load(Q, row0, N, lane);
  q.split();

  float o[D / 8][4] = {};
  OnlineSoftmax softmax;
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t key0 = j * kTcBc;
    if (j + 1 < tiles) {
      wg_load_tile<D>(smem + ((j + 1) & 1) * wg_stage_halves<D>(), KV, key0 + kTcBc, N, tid);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // cp.async's writes, read by wgmma
    __syncthreads();
    const __half* Kh = smem + (j & 1) * wg_stage_halves<D>();
    const __half *Kl = Kh + kArray, *Vh = Kl + kArray, *Vl = Vh + kArray;

    ScoreTile s;
    wg_keep(s);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      const int dim_off = ks * 2 * 64;  // two dimension blocks per k16 step
      wgmma_rs<0>(s, q.lo[ks], wg_desc(Kh + dim_off, kLboK, kSboK), ks > 0);
      wgmma_rs<0>(s, q.hi[ks], wg_desc(Kl + dim_off, kLboK, kSboK), 1);
      wgmma_rs<0>(s, q.hi[ks], wg_desc(Kh + dim_off, kLboK, kSboK), 1);
    }
    wg_commit();
    wg_wait<0>();
    wg_keep(s);

    if (key0 + kTcBc > N) mask_keys_past(s, (int)(N - key0), lane);
    float alpha[2];
    softmax.update(s, alpha);

    // P split for all 64 keys first: wgmma reads its A registers asynchronously, so none may be
    // rewritten before the wait.
    uint32_t p_hi[kTcBc / 16][4], p_lo[kTcBc / 16][4];
#pragma unroll
    for (int kk = 0; kk < kTcBc / 16; ++kk) split_p(s, kk, p_hi[kk], p_lo[kk]);
    float pv[D / 8][4];
    wg_keep(pv);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < kTcBc / 16; ++kk) {
      const int key_off = kk * 2 * (D / 8) * 64;  // two key blocks per k16 step
      wgmma_rs<1>(pv, p_lo[kk], wg_desc(Vh + key_off, kLboV, kSboV), kk > 0);
      wgmma_rs<1>(pv, p_hi[kk], wg_desc(Vl + key_off, kLboV, kSboV), 1);
      wgmma_rs<1>(pv, p_hi[kk], wg_desc(Vh + key_off, kLboV, kSboV), 1);
    }
    wg_commit();
    wg_wait<0>();
    wg_keep(pv);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) o[nt][c] = fmaf(o[nt][c], alpha[c >> 1], pv[nt][c]);
    }
    __syncthreads();  // this stage is refilled by the next iteration's load
  }
  store_o<D>(out + b * ND, o, softmax, row0, N, lane);
  (void)declined_ever;
#endif
}

}  // namespace fa

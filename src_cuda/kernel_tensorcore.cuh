// kernel_tensorcore.cuh: fp32-accurate attention on tensor cores (sm_80 and later).
//
// Precision ("3xFP16"): each fp32 operand x is split into fp16 hi = fp16(x) and lo = fp16(x - hi),
// 22 significant bits together; a product is a_hi b_hi + a_hi b_lo + a_lo b_hi, three
// mma.sync.m16n8k16 with fp32 accumulation (the dropped a_lo b_lo is below 2^-22 |a b|). Exact
// power-of-two scales keep the low parts normal in fp16: Q, K and V by 2^6, P by 2^12.
// Range: the split needs |x| <= 64; a chunk holding a larger or non-finite value is flagged and
// the fp32 tiled kernel (attention_tiled.h) computes that chunk instead.
// Layout: split_kv splits K and V once per chunk; attention_tensorcore gives each warp 16 query
// rows, keeps Q's fragments in registers and streams K/V tiles of 64 keys through shared memory.
// The score accumulator has the A-operand layout of P V, so P never leaves registers. For short
// sequences (kFused) the block splits fp32 K and V itself, saving split_kv's round trip.
// Measurements behind these choices (error budget, profiles, what was tried): docs/kernels.md.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../src_common/compensated_sum.h"
#include "kernel_primitives.cuh"
#include "../src_common/attention_tiled.h"

namespace fa {

// ------------------------------------------------------------------------- build settings
// Blocks per SM the register allocation must allow: 2 lets d = 64 keep all its registers.
#ifndef FA_TC_MIN_BLOCKS
#define FA_TC_MIN_BLOCKS 2
#endif
// The fused d = 32 kernel is latency-bound: more warps per SM at a few spilled registers pay.
#ifndef FA_TC_FUSED32_WARPS
#define FA_TC_FUSED32_WARPS 8
#endif
#ifndef FA_TC_FUSED32_WARPS_PER_SM
#define FA_TC_FUSED32_WARPS_PER_SM 16
#endif
// Terms of each compensated product: 3 = a_hi b_hi + a_hi b_lo + a_lo b_hi, 2 = a_hi (b_hi + b_lo),
// 1 = a_hi b_hi (plain fp16). Only the error budget (scripts/error_budget.py) builds with fewer.
#ifndef FA_TC_QK_TERMS
#define FA_TC_QK_TERMS 3
#endif
#ifndef FA_TC_PV_TERMS
#define FA_TC_PV_TERMS 3
#endif

// ------------------------------------------------------------------------- launch geometry
// One block per (batch, tc_rows query rows), one warp per 16 rows: 4 warps, or
// FA_TC_FUSED32_WARPS for the fused kernel at d = 32 (one block per batch at N = 128).
template <int D, bool kFused>
__host__ __device__ constexpr int tc_warps() { return kFused && D == 32 ? FA_TC_FUSED32_WARPS : 4; }
template <int D, bool kFused>
__host__ __device__ constexpr int tc_rows() { return 16 * tc_warps<D, kFused>(); }
template <int D, bool kFused>
__host__ __device__ constexpr int tc_min_blocks() {
  return kFused && D == 32 ? FA_TC_FUSED32_WARPS_PER_SM / FA_TC_FUSED32_WARPS : FA_TC_MIN_BLOCKS;
}

constexpr int kTcBc = 64;                      // keys per tile
constexpr float kLimit = 64.f;                 // largest |x| the split represents safely
constexpr float kQKScale = 64.f;               // 2^6 on Q and on K
constexpr float kVScale = 64.f;                // 2^6 on V
constexpr float kLog2PScale = 12.f;            // 2^12 on P, applied by the exponential itself
[[maybe_unused]] constexpr float kUnscaleS = 1.f / (kQKScale * kQKScale);
[[maybe_unused]] constexpr float kUnscaleO = 1.f / kVScale;  // P's scale cancels in O / l

// Shared memory: two stages (double buffering), each [K_hi | K_lo | V_hi | V_lo] of kTcBc rows
// of D + 8 halves. The 16-byte pad puts the 8 rows one ldmatrix reads in 8 distinct 4-bank groups.
template <int D>
__host__ __device__ constexpr int tc_pitch() { return D + 8; }  // halves per shared-memory row
template <int D>
__host__ __device__ constexpr int tc_stage_halves() { return 4 * kTcBc * tc_pitch<D>(); }
template <int D>
__host__ __device__ constexpr int tc_smem_bytes() { return 2 * tc_stage_halves<D>() * 2; }

template <int D>
struct KVStage {
  static constexpr int kArrayHalves = kTcBc * tc_pitch<D>();  // one of K_hi, K_lo, V_hi, V_lo
  __half* k_hi;
  __device__ __forceinline__ KVStage(__half* smem, int stage) : k_hi(smem + stage * tc_stage_halves<D>()) {}
  __device__ __forceinline__ __half* array(int a) const { return k_hi + a * kArrayHalves; }  // 0..3 as above
  __device__ __forceinline__ const __half* k_lo() const { return array(1); }
  __device__ __forceinline__ const __half* v_hi() const { return array(2); }
  __device__ __forceinline__ const __half* v_lo() const { return array(3); }
};

// ------------------------------------------------------------------------- the split
// x, y -> fp16 pairs hi and lo with x ~ hi + lo (packed as the 32-bit registers mma takes).
__device__ __forceinline__ void split_pair(float x, float y, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x, y);
  const float2 back = __half22float2(h);
  const __half2 l = __floats2half2_rn(x - back.x, y - back.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// The same split with hi = x truncated to fp16's 11 significant bits by a mask instead of a
// round trip through fp16 (for P, whose scaled values are normal in fp16).
__device__ __forceinline__ void split_pair_masked(float x, float y, uint32_t& hi, uint32_t& lo) {
  const float xh = __uint_as_float(__float_as_uint(x) & 0xffffe000u);
  const float yh = __uint_as_float(__float_as_uint(y) & 0xffffe000u);
  const __half2 h = __floats2half2_rn(xh, yh);
  const __half2 l = __floats2half2_rn(x - xh, y - yh);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// float4 of scaled values -> hi and lo halves.
__device__ __forceinline__ void split_float4(float4 x, float scale, uint2& hi, uint2& lo) {
  split_pair(x.x * scale, x.y * scale, hi.x, lo.x);
  split_pair(x.z * scale, x.w * scale, hi.y, lo.y);
}

// A chunk holds values the split cannot represent: the tiled kernel recomputes it (decline), and
// the host learns that some chunk did (declined_ever, mapped host memory).
__device__ __forceinline__ void decline_chunk(int* decline, volatile int* declined_ever) {
  *decline = 1;
  *declined_ever = 1;
}

// The tiled kernel for a declined chunk, launched after every tensor-core launch and returning at
// once unless *decline is set. A grid of one block per row tile made that empty launch cost 10 us
// a chunk on an H100 (4096 blocks of 512 threads at 64 x 4096 x 64, 2.6% of the chunk); this grid
// holds only as many blocks as fit the GPU at once, and each strides over the row tiles. It also
// clears the next chunk's flag (decline_next), whose last reader has finished.
template <int D, int BC>
__global__ void FA_LAUNCH_BOUNDS(kTiledBr* BC, (tiled_min_blocks<D, BC>()))
    attention_tiled_declined(const float* __restrict__ qkv, float* __restrict__ out, int64_t N, int64_t row_tiles,
                             int64_t tiles, const int* decline, int* decline_next) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");  // launched dependent on the kernel before it (PDL)
#endif
  if (blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) *decline_next = 0;
  if (*decline == 0) return;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    tiled_rows<D, BC>(qkv, out, N, row_tiles, tile);
    __syncthreads();  // the next tile refills the shared tiles
  }
}

// True when the split represents these values safely: |x| <= kLimit (false for NaN and inf too;
// an fmaxf-based maximum would skip a NaN).
__device__ __forceinline__ bool splittable(float x) { return fabsf(x) <= kLimit; }
__device__ __forceinline__ bool splittable(float2 x) { return splittable(x.x) && splittable(x.y); }
__device__ __forceinline__ bool splittable(float4 x) {
  return splittable(x.x) && splittable(x.y) && splittable(x.z) && splittable(x.w);
}

// ------------------------------------------------------------------------- the split pass
// K and V -> scaled hi and lo halves, per batch [K_hi | K_lo | V_hi | V_lo], each N x D; Q, K and
// V range-checked. One float4 of each per thread and step (grid-stride).
constexpr int kSplitThreads = 256;

__global__ void __launch_bounds__(kSplitThreads)
    split_kv(const float* __restrict__ qkv, __half* __restrict__ kv, int64_t batches, int64_t ND,
             int* __restrict__ decline, volatile int* declined_ever) {
  const int64_t quads = batches * ND / 4;  // float4 groups of one of Q, K, V
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < quads; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t b = (4 * i) / ND, e = 4 * i - b * ND;
    const float* base = qkv + b * 3 * ND + e;
    const float4 q = *reinterpret_cast<const float4*>(base);
    const float4 k = *reinterpret_cast<const float4*>(base + ND);
    const float4 v = *reinterpret_cast<const float4*>(base + 2 * ND);
    if (!splittable(q) || !splittable(k) || !splittable(v)) decline_chunk(decline, declined_ever);
    uint2 kh, kl, vh, vl;
    split_float4(k, kQKScale, kh, kl);
    split_float4(v, kVScale, vh, vl);
    __half* dst = kv + b * 4 * ND + e;
    *reinterpret_cast<uint2*>(dst) = kh;
    *reinterpret_cast<uint2*>(dst + ND) = kl;
    *reinterpret_cast<uint2*>(dst + 2 * ND) = vh;
    *reinterpret_cast<uint2*>(dst + 3 * ND) = vl;
  }
}

// ------------------------------------------------------------------------- PTX wrappers
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; src_bytes = 0 fills zeros (keys past N).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// 2^x on the special-function unit; results below 2^-126 flush to zero (harmless for P).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// c += a * b for one 16x8x16 tile: a = 4 registers of fp16 pairs, b = 2, c = 4 fp32.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += (a_hi + a_lo) (b_hi + b_lo) to `Terms` terms, dropping a_lo b_lo at most.
template <int Terms>
__device__ __forceinline__ void mma3(float (&c)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                     uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  if (Terms >= 3) mma16816(c, a_lo, bh0, bh1);  // small terms first
  if (Terms >= 2) mma16816(c, a_hi, bl0, bl1);
  mma16816(c, a_hi, bh0, bh1);
}

// ------------------------------------------------------------------------- the main kernel's steps
// Fragment coordinates of a lane in mma.m16n8k16: g = lane / 4 (row group: rows g and g + 8),
// t = lane % 4 (column pair 2t, 2t + 1).
using ScoreTile = float[kTcBc / 8][4];  // 16 x 64 scores of a warp: 8 n-tiles of 8 keys

// K/V tile load (split K and V): 4 arrays x kTcBc rows x D / 8 chunks of 16 bytes spread over
// the block's threads, by cp.async. Only a tile reaching past N checks its keys and zero-fills
// the rest (full tiles load unchecked: fewer registers).
template <int D, int kThreads>
__device__ __forceinline__ void load_kv_tile(KVStage<D> stage, const __half* KV, int64_t key0, int64_t N, int tid) {
  constexpr int kChunksPerRow = D / 8, kChunks = 4 * kTcBc * kChunksPerRow;
  const int64_t ND = N * D;
  const __half* src0 = KV + key0 * D;
  auto locate = [&](int c, int& array, int& r, int& col) {
    array = c / (kTcBc * kChunksPerRow), r = (c / kChunksPerRow) % kTcBc, col = (c % kChunksPerRow) * 8;
  };
  if (key0 + kTcBc <= N) {
#pragma unroll
    for (int c = tid; c < kChunks; c += kThreads) {
      int array, r, col;
      locate(c, array, r, col);
      cp_async16(stage.array(array) + r * tc_pitch<D>() + col, src0 + array * ND + r * D + col, 16);
    }
  } else {
#pragma unroll
    for (int c = tid; c < kChunks; c += kThreads) {
      int array, r, col;
      locate(c, array, r, col);
      const bool valid = key0 + r < N;
      cp_async16(stage.array(array) + r * tc_pitch<D>() + col, valid ? src0 + array * ND + r * D + col : KV,
                 valid ? 16 : 0);
    }
  }
  cp_async_commit();
}

// Fused K/V tile load: fp32 K and V of kTiles consecutive tiles -> scaled hi and lo halves in
// consecutive stages from `first_stage`, as split_kv would write them. Loads are issued kGroup
// float4 at a time before any of them is split, so a short sequence pays the global-memory
// latency once. Returns false when a value is outside the split's range.
template <int D, int kThreads, int kTiles, int kGroupWanted>
__device__ __forceinline__ bool split_kv_tiles(__half* smem, int first_stage, const float* K, int64_t key0, int64_t N,
                                               int tid) {
  constexpr int kQuads = kTcBc * D / 4;              // float4 per tile of K (and of V)
  constexpr int kPerThread = 2 * kQuads / kThreads;  // float4 of one tile's K and V per thread
  constexpr int kAll = kTiles * kPerThread;
  constexpr int kGroup = kGroupWanted < kAll ? kGroupWanted : kAll;
  static_assert(kAll % kGroup == 0, "loads come in whole groups");
  const int64_t ND = N * D;
  bool in_range = true;
#pragma unroll
  for (int first = 0; first < kAll; first += kGroup) {
    // the i-th float4 of this group: which tile, K or V, row in the tile, column
    auto locate = [&](int i, int& tile, int& is_v, int& r, int& col) {
      const int c = tid + ((first + i) % kPerThread) * kThreads;
      tile = (first + i) / kPerThread, is_v = c / kQuads, r = (c % kQuads) / (D / 4), col = (c % (D / 4)) * 4;
    };
    float4 x[kGroup];
    auto load = [&](int i, bool check) {
      int tile, is_v, r, col;
      locate(i, tile, is_v, r, col);
      const int64_t key = key0 + tile * kTcBc + r;
      x[i] = !check || key < N ? *reinterpret_cast<const float4*>(K + is_v * ND + key * D + col)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
    };
    if (key0 + kTiles * kTcBc <= N) {  // as in load_kv_tile: only tiles reaching past N check keys
#pragma unroll
      for (int i = 0; i < kGroup; ++i) load(i, false);
    } else {
#pragma unroll
      for (int i = 0; i < kGroup; ++i) load(i, true);
    }
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      int tile, is_v, r, col;
      locate(i, tile, is_v, r, col);
      in_range &= splittable(x[i]);
      uint2 hi, lo;
      split_float4(x[i], is_v ? kVScale : kQKScale, hi, lo);
      __half* dst = KVStage<D>(smem, (first_stage + tile) & 1).array(2 * is_v) + r * tc_pitch<D>() + col;
      *reinterpret_cast<uint2*>(dst) = hi;
      *reinterpret_cast<uint2*>(dst + KVStage<D>::kArrayHalves) = lo;
    }
  }
  return in_range;
}

// Q as A fragments of this warp's 16 rows (rows row0 + g and row0 + g + 8 in each lane), split
// into hi and lo after scaling by 2^6 log2(e) / sqrt(d), so that scores come out in base 2.
template <int D>
struct QFragments {
  float2 raw[D / 16][4];
  uint32_t hi[D / 16][4], lo[D / 16][4];

  __device__ __forceinline__ void load(const float* Q, int64_t row0, int64_t N, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int64_t row = row0 + g + (r & 1) * 8;
        const int col = ks * 16 + 2 * t + (r >> 1) * 8;
        raw[ks][r] = row < N ? *reinterpret_cast<const float2*>(Q + row * D + col) : make_float2(0.f, 0.f);
      }
    }
  }
  // Returns false when a value is outside the split's range.
  __device__ __forceinline__ bool split() {
    const float scale = kQKScale * 1.4426950408889634f / sqrtf((float)D);
    bool in_range = true;
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        in_range &= splittable(raw[ks][r]);
        split_pair(raw[ks][r].x * scale, raw[ks][r].y * scale, hi[ks][r], lo[ks][r]);
      }
    }
    return in_range;
  }
};

// S = Q K^T for the warp's 16 rows and the tile's 64 keys (2^12-scaled, base 2); ldmatrix.x4
// gives the B fragments of two n-tiles at once.
template <int D>
__device__ __forceinline__ void tile_scores(ScoreTile& s, const QFragments<D>& q, const KVStage<D>& stage, int lane) {
#pragma unroll
  for (int nt = 0; nt < kTcBc / 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
#pragma unroll
    for (int np = 0; np < kTcBc / 16; ++np) {
      const int key = np * 16 + (lane & 7) + (lane >> 4) * 8, dim = ks * 16 + ((lane >> 3) & 1) * 8;
      uint32_t kh[4], kl[4];
      ldmatrix_x4(kh, stage.array(0) + key * tc_pitch<D>() + dim);
      ldmatrix_x4(kl, stage.k_lo() + key * tc_pitch<D>() + dim);
      mma3<FA_TC_QK_TERMS>(s[2 * np], q.hi[ks], q.lo[ks], kh[0], kh[1], kl[0], kl[1]);
      mma3<FA_TC_QK_TERMS>(s[2 * np + 1], q.hi[ks], q.lo[ks], kh[2], kh[3], kl[2], kl[3]);
    }
  }
}

// Keys at or past `valid_keys` of the tile score -inf (the last tile only).
__device__ __forceinline__ void mask_keys_past(ScoreTile& s, int valid_keys, int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kTcBc / 8; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c)
      if (nt * 8 + 2 * t + (c & 1) >= valid_keys) s[nt][c] = -INFINITY;
  }
}

// Online softmax of a lane's two rows (g and g + 8: h = 0, 1); the quad of lanes sharing a row
// exchanges maxima by shuffles, and each lane keeps its own share of the row's sum.
struct OnlineSoftmax {
  float m[2] = {-INFINITY, -INFINITY};  // running max (base 2, unscaled)
  CompensatedSum l[2];                  // this lane's share of the running sums

  // Scores -> probabilities (times 2^12) in place; alpha[h] = the factor by which row h of O shrinks.
  __device__ __forceinline__ void update(ScoreTile& s, float (&alpha)[2]) {
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kTcBc / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) tile_max[c >> 1] = fmaxf(tile_max[c >> 1], s[nt][c]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
      tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
      const float m_new = fmaxf(m[h], tile_max[h] * kUnscaleS);
      alpha[h] = fast_exp2(m[h] - m_new);
      m[h] = m_new;
      l[h].scale(alpha[h]);
    }
    // The tile's 16 probabilities per lane are summed first, then added to l with compensation:
    // one by one, probabilities far below l would be rounded away together (N = 32768).
    float tile_sum[2] = {0.f, 0.f};
    // P = 2^(s - m) 2^12: unscale S, subtract the max and scale P in one FMA.
    const float shift[2] = {kLog2PScale - m[0], kLog2PScale - m[1]};
#pragma unroll
    for (int nt = 0; nt < kTcBc / 8; ++nt) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[nt][c] = fast_exp2(fmaf(s[nt][c], kUnscaleS, shift[c >> 1]));
        tile_sum[c >> 1] += s[nt][c];
      }
    }
    l[0].add(tile_sum[0]);
    l[1].add(tile_sum[1]);
  }

  // Row h's whole sum: the quad's shares added.
  __device__ __forceinline__ float row_sum(int h) const {
    float sum = l[h].value();
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    return sum;
  }
};

// P's A fragments for keys 16kk..16kk+15 (the score n-tiles 2kk and 2kk+1), split into hi and lo
// (P is already scaled by 2^12).
__device__ __forceinline__ void split_p(const ScoreTile& p, int kk, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
  split_pair_masked(p[2 * kk][0], p[2 * kk][1], hi[0], lo[0]);
  split_pair_masked(p[2 * kk][2], p[2 * kk][3], hi[1], lo[1]);
  split_pair_masked(p[2 * kk + 1][0], p[2 * kk + 1][1], hi[2], lo[2]);
  split_pair_masked(p[2 * kk + 1][2], p[2 * kk + 1][3], hi[3], lo[3]);
}

// pv = P V for the tile, accumulated from zero in fresh registers (the kernel folds it into O
// with round-to-nearest FMAs: the tensor core's fp32 accumulation truncates, and O accumulated
// inside it over every tile drifts at N = 32768). P never leaves registers (split_p).
template <int D>
__device__ __forceinline__ void tile_pv(float (&pv)[D / 8][4], const ScoreTile& p, const KVStage<D>& stage, int lane) {
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) pv[nt][0] = pv[nt][1] = pv[nt][2] = pv[nt][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < kTcBc / 16; ++kk) {
    uint32_t p_hi[4], p_lo[4];
    split_p(p, kk, p_hi, p_lo);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dim = dp * 16 + (lane >> 4) * 8;
      uint32_t vh[4], vl[4];
      ldmatrix_x4_trans(vh, stage.v_hi() + key * tc_pitch<D>() + dim);
      ldmatrix_x4_trans(vl, stage.v_lo() + key * tc_pitch<D>() + dim);
      mma3<FA_TC_PV_TERMS>(pv[2 * dp], p_hi, p_lo, vh[0], vh[1], vl[0], vl[1]);
      mma3<FA_TC_PV_TERMS>(pv[2 * dp + 1], p_hi, p_lo, vh[2], vh[3], vl[2], vl[3]);
    }
  }
}

// O's rows below N, normalized by the row sums and unscaled, written once.
template <int D>
__device__ __forceinline__ void store_o(float* O, const float (&o)[D / 8][4], const OnlineSoftmax& softmax,
                                        int64_t row0, int64_t N, int lane) {
  const int g = lane / 4, t = lane % 4;
  const float row_sum[2] = {softmax.row_sum(0), softmax.row_sum(1)};  // every lane shuffles
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = row0 + g + h * 8;
    if (row >= N) continue;
    const float inv = kUnscaleO / row_sum[h];
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
      *reinterpret_cast<float2*>(O + row * D + nt * 8 + 2 * t) = make_float2(o[nt][2 * h] * inv, o[nt][2 * h + 1] * inv);
  }
}

// ------------------------------------------------------------------------- the main kernel
// Per K/V tile: wait for it in shared memory, scores, online softmax, P V; the next tile's
// load is in flight meanwhile (cp.async, two stages). kFused: the block splits fp32 K and V
// itself (all of N <= 128 up front, later tiles one at a time) and range-checks what it reads.
template <int D, bool kFused>
__global__ void __launch_bounds__(tc_warps<D, kFused>() * 32, tc_min_blocks<D, kFused>())
    attention_tensorcore(const float* __restrict__ qkv, const __half* __restrict__ kv, float* __restrict__ out,
                         int64_t N, int64_t row_tiles, int* __restrict__ decline, volatile int* declined_ever) {
#if __CUDA_ARCH__ >= 800
  if (!kFused && *decline) return;  // values the split cannot take: the tiled kernel runs this chunk
  constexpr int kThreads = tc_warps<D, kFused>() * 32;
  extern __shared__ __align__(16) __half smem[];
  const int tid = threadIdx.x, lane = tid % 32;
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t row0 = (blockIdx.x % row_tiles) * tc_rows<D, kFused>() + tid / 32 * 16;  // this warp's rows
  const int64_t ND = N * D;
  const float* Q = qkv + b * 3 * ND;
  const float* K = Q + ND;             // fp32 K, then V (kFused)
  const __half* KV = kv + b * 4 * ND;  // split K and V from split_kv
  const int64_t tiles = (N + kTcBc - 1) / kTcBc;

  // Q is loaded while the first K/V tiles are on their way (after them where the fused d = 64
  // kernel has no registers to hold Q across its split).
  QFragments<D> q;
  bool in_range = true;
  if (kFused) {
    if (D == 32) q.load(Q, row0, N, lane);
    in_range = split_kv_tiles<D, kThreads, 2, 16>(smem, 0, K, 0, N, tid);
    if (D != 32) q.load(Q, row0, N, lane);
  } else {
    load_kv_tile<D, kThreads>(KVStage<D>(smem, 0), KV, 0, N, tid);
    q.load(Q, row0, N, lane);
  }
  const bool q_in_range = q.split();
  if (kFused) in_range &= q_in_range;  // otherwise split_kv checked Q

  float o[D / 8][4] = {};  // O fragments: 16 rows x D, fp32, not yet normalized
  OnlineSoftmax softmax;
  for (int64_t j = 0; j < tiles; ++j) {
    const int64_t key0 = j * kTcBc;
    if (kFused) {
      if (j >= 2) in_range &= split_kv_tiles<D, kThreads, 1, 4>(smem, j & 1, K, key0, N, tid);
    } else if (j + 1 < tiles) {
      load_kv_tile<D, kThreads>(KVStage<D>(smem, (j + 1) & 1), KV, key0 + kTcBc, N, tid);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const KVStage<D> stage(smem, j & 1);

    ScoreTile s;
    tile_scores(s, q, stage, lane);
    if (key0 + kTcBc > N) mask_keys_past(s, (int)(N - key0), lane);
    float alpha[2];
    softmax.update(s, alpha);  // s now holds P
    float pv[D / 8][4];
    tile_pv<D>(pv, s, stage, lane);
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {  // O = O * alpha + P V
#pragma unroll
      for (int c = 0; c < 4; ++c) o[nt][c] = fmaf(o[nt][c], alpha[c >> 1], pv[nt][c]);
    }
    __syncthreads();  // this stage is refilled by the next iteration's load
  }

  if (kFused && !in_range) decline_chunk(decline, declined_ever);
  store_o<D>(out + b * ND, o, softmax, row0, N, lane);
#endif
}

}  // namespace fa

// kernel_wgmma.cuh: the tensor-core kernel on Hopper's warpgroup MMA (sm_90a only).
//
// The algorithm and precision of attention_tensorcore (3xFP16 split, online softmax, P in
// registers, each tile's P V folded into O with round-to-nearest FMAs; kernel_tensorcore.cuh),
// with each product issued as wgmma by a warpgroup (4 warps, 64 query rows) and each K/V tile
// shared by the block's kGroups = wg_groups<D>() consumer warpgroups (L2 serves K and V once per
// 64 kGroups rows). A producer thread streams the tiles with bulk copies. A consumer issues the
// next tile's S and the previous tile's P V before it runs the current tile's softmax, and the
// consumers take turns at the tensor cores, so that products and softmax overlap. Blocks are
// persistent (one per SM) and take work items in turn. Two kernels: attention_wgmma for long
// sequences, on K and V split beforehand by split_kv_blocked, and attention_wgmma_short for
// N <= 128, whose producer warpgroup splits each batch's K and V itself (docs/kernels.md has
// the measurements).
#pragma once

#include <type_traits>

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

// ------------------------------------------------------------------------- launch geometry
// Block: kGroups consumer warpgroups (warps 0 .. 4 kGroups - 1, 64 query rows each), then one
// producer warpgroup. Grid: one block per SM (fewer where there is less work), each taking the
// work items blockIdx.x, + gridDim.x, ...: a batch's 64 kGroups rows (long), a batch (short).
#ifndef FA_WG_GROUPS32
#define FA_WG_GROUPS32 2
#endif
template <int D>
__host__ __device__ constexpr int wg_groups() { return D == 32 ? FA_WG_GROUPS32 : 2; }
template <int D>
__host__ __device__ constexpr int wg_threads() { return 128 * (wg_groups<D>() + 1); }
// Registers per thread after the producer hands its share over: 24 for the producer, the rest
// of the SM's 64 K split among the consumers (a multiple of 8).
constexpr int kWgProducerRegs = 24;
template <int D>
__host__ __device__ constexpr int wg_consumer_regs() {
  return (65536 / 128 - kWgProducerRegs) / wg_groups<D>() / 8 * 8;
}
template <int D>
__host__ __device__ constexpr int wg_rows() { return 64 * wg_groups<D>(); }

// ------------------------------------------------------------------------- memory layout
// Split K and V in global memory (written by split_kv_blocked) and in shared memory alike: per
// batch, tiles of kTcBc keys (the last zero-padded), each [K_hi | K_lo | V_hi | V_lo], each
// array in wgmma's canonical no-swizzle layout: 8 x 8 core matrices (8 keys x 8 dimensions,
// 128 contiguous bytes), dimension blocks innermost. A tile is one contiguous copy.
// Shared memory of the long-sequence kernel: kWgStages such tiles in a ring, two slots of Q
// (fp32, a work item's wg_rows rows), then the barriers (the ring's full and empty, Q's).
#ifndef FA_WG_STAGES
#define FA_WG_STAGES 4
#endif
constexpr int kWgStages = FA_WG_STAGES;
template <int D>
__host__ __device__ constexpr int wg_tile_halves() { return 4 * kTcBc * D; }
template <int D>
__host__ __device__ constexpr int wg_q_floats() { return wg_rows<D>() * D; }
template <int D>
__host__ __device__ constexpr int wg_smem_bytes() {
  return kWgStages * wg_tile_halves<D>() * 2 + 2 * wg_q_floats<D>() * 4 + (2 * kWgStages + 4) * 8;
}
__host__ __device__ constexpr int64_t wg_tiles(int64_t N) { return (N + kTcBc - 1) / kTcBc; }

// Offset (halves) of element (key, dim) of one array of a tile.
template <int D>
__host__ __device__ __forceinline__ int wg_offset(int key, int dim) {
  return ((key / 8) * (D / 8) + dim / 8) * 64 + (key % 8) * 8 + dim % 8;
}

// ------------------------------------------------------------------------- the split pass
// Dimensions dim .. dim + 7 of one key of K (x[0]) and V (x[1]), scaled and split into the
// tile's four arrays at `tile` (K -> arrays 0 and 1, V -> 2 and 3). False when a value is
// outside the split's range.
template <int D>
__device__ __forceinline__ bool wg_store_split(__half* tile, int key, int dim, const float4 (&x)[2][2]) {
  const bool in_range = splittable(x[0][0]) && splittable(x[0][1]) && splittable(x[1][0]) && splittable(x[1][1]);
  __half* dst = tile + wg_offset<D>(key, dim);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const float scale = m == 0 ? kQKScale : kVScale;
    uint2 hi0, lo0, hi1, lo1;
    split_float4(x[m][0], scale, hi0, lo0);
    split_float4(x[m][1], scale, hi1, lo1);
    *reinterpret_cast<uint4*>(dst + 2 * m * kTcBc * D) = make_uint4(hi0.x, hi0.y, hi1.x, hi1.y);
    *reinterpret_cast<uint4*>(dst + (2 * m + 1) * kTcBc * D) = make_uint4(lo0.x, lo0.y, lo1.x, lo1.y);
  }
  return in_range;
}

// K and V -> scaled hi and lo halves in the tiled layout above, range-checked (Q is checked by
// the kernel, which loads it anyway). One thread per 8 dimensions of one key (one core-matrix
// row), in destination order.
template <int D>
__global__ void __launch_bounds__(kSplitThreads)
    split_kv_blocked(const float* __restrict__ qkv, __half* __restrict__ kv, int64_t batches, int64_t N,
                     int* __restrict__ decline, volatile int* declined_ever) {
  const int64_t tiles = wg_tiles(N), ND = N * D;
  const int64_t rows = batches * tiles * kTcBc;  // padded keys of every batch
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < rows * (D / 8);
       c += (int64_t)gridDim.x * blockDim.x) {
    const int r8 = c % 8, dim = (c / 8) % (D / 8) * 8;
    const int64_t key_block = c / (8 * (D / 8)), padded_key = key_block * 8 + r8;
    const int64_t b = padded_key / (tiles * kTcBc), tile = padded_key / kTcBc % tiles;
    const int64_t key = padded_key % (tiles * kTcBc);
    float4 x[2][2] = {};  // K, V: 8 dimensions each (zeros past N)
    if (key < N) {
      const float* src = qkv + (b * 3 + 1) * ND + key * D + dim;
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        x[m][0] = *reinterpret_cast<const float4*>(src + m * ND);
        x[m][1] = *reinterpret_cast<const float4*>(src + m * ND + 4);
      }
    }
    if (!wg_store_split<D>(kv + (b * tiles + tile) * wg_tile_halves<D>(), (int)(key % kTcBc), dim, x))
      decline_chunk(decline, declined_ever);
  }
}

// ------------------------------------------------------------------------- PTX wrappers
// mbarriers (shared-memory arrival counters with a phase bit) and the bulk copy that completes on one.
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// Returns once the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
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
// Register fences: wgmma reads and writes its registers after the instruction has issued, so
// accumulators are pinned across the wait and A fragments kept alive until it.
template <int R>
__device__ __forceinline__ void wg_keep(float (&d)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
    asm volatile("" : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])::"memory");
}
template <int R>
__device__ __forceinline__ void wg_keep(uint32_t (&a)[R][4]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i][0]), "+r"(a[i][1]), "+r"(a[i][2]), "+r"(a[i][3])::"memory");
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

// ------------------------------------------------------------------------- the kernel's steps
// Descriptors' byte offsets between core matrices: the leading offset runs along the product's
// reduction, the stride offset along N. K as B (K-major, reducing over dims): 128 B to the next
// dimension block, D / 8 * 128 B to the next key block. V as B (transposed, reducing over
// keys): the other way round. (Measured: the swapped pairs give wrong results.)
template <int D>
struct WgTile {
  static constexpr int kArray = kTcBc * D;  // halves of one of K_hi, K_lo, V_hi, V_lo
  static constexpr uint32_t kNearDim = 128, kNearKey = D / 8 * 128;
  const __half* k_hi;
  __device__ __forceinline__ uint64_t k(int array, int ks) const {  // dims 16 ks.. of K_hi (0) or K_lo (1)
    return wg_desc(k_hi + array * kArray + ks * 2 * 64, kNearDim, kNearKey);
  }
  __device__ __forceinline__ uint64_t v(int array, int kk) const {  // keys 16 kk.. of V_hi (0) or V_lo (1)
    return wg_desc(k_hi + (2 + array) * kArray + kk * 2 * (D / 8) * 64, kNearKey, kNearDim);
  }
};

// Issues S = Q K^T for the warpgroup's 64 rows and the tile's keys (3 products per k16 step,
// small terms first), as one wgmma group.
template <int D>
__device__ __forceinline__ void wg_issue_scores(ScoreTile& s, const QFragments<D>& q, WgTile<D> tile) {
  wg_fence();
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    wgmma_rs<0>(s, q.lo[ks], tile.k(0, ks), ks > 0);
    wgmma_rs<0>(s, q.hi[ks], tile.k(1, ks), 1);
    wgmma_rs<0>(s, q.hi[ks], tile.k(0, ks), 1);
  }
  wg_commit();
}

// Issues pv = P V for the tile from P's split fragments, as one wgmma group; pv starts from zero.
template <int D>
__device__ __forceinline__ void wg_issue_pv(float (&pv)[D / 8][4], const uint32_t (&p_hi)[kTcBc / 16][4],
                                            const uint32_t (&p_lo)[kTcBc / 16][4], WgTile<D> tile) {
  wg_fence();
#pragma unroll
  for (int kk = 0; kk < kTcBc / 16; ++kk) {
    wgmma_rs<1>(pv, p_lo[kk], tile.v(0, kk), kk > 0);
    wgmma_rs<1>(pv, p_hi[kk], tile.v(1, kk), 1);
    wgmma_rs<1>(pv, p_hi[kk], tile.v(0, kk), 1);
  }
  wg_commit();
}

// P's split fragments for the whole tile: wgmma reads its A registers after issuing, so all
// four k16 steps' fragments must exist before the first is issued.
__device__ __forceinline__ void wg_split_p(const ScoreTile& p, uint32_t (&hi)[kTcBc / 16][4],
                                           uint32_t (&lo)[kTcBc / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kTcBc / 16; ++kk) split_p(p, kk, hi[kk], lo[kk]);
}

// O = O * alpha + P V, with round-to-nearest FMAs.
template <int D>
__device__ __forceinline__ void fold_pv(float (&o)[D / 8][4], const float (&pv)[D / 8][4], const float (&alpha)[2]) {
#pragma unroll
  for (int nt = 0; nt < D / 8; ++nt) {
#pragma unroll
    for (int c = 0; c < 4; ++c) o[nt][c] = fmaf(o[nt][c], alpha[c >> 1], pv[nt][c]);
  }
}

// Turns at the tensor cores, round robin over the consumer warpgroups: a group issues its
// products only after the previous one has issued its own, so one group's softmax runs while
// the other's products run instead of all of them waiting together. Named barrier 1 + g is
// group g's turn (256 threads: g's own 128 wait, the previous group's 128 arrive).
template <int kGroups>
struct TensorTurns {
  int group;
  __device__ __forceinline__ void start() const {  // group 0 goes first
    if (group == kGroups - 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
  }
  __device__ __forceinline__ void wait() const { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + group) : "memory"); }
  __device__ __forceinline__ void pass(bool last) const {  // last: no one waits for this turn
    if (!(last && group == kGroups - 1))
      asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (group + 1) % kGroups) : "memory");
  }
};

// ------------------------------------------------------------------------- one warpgroup's pass
// A work item's K/V tiles as a consumer sees them: ring slots that the producer fills (WgRing,
// the long-sequence kernel; the ring runs on across the block's items, `base` is the ring index
// of this item's first tile) or split tiles already in shared memory (WgSplitTiles, the short one).
template <int D>
struct WgRing {
  __half* smem;
  uint64_t* full;
  uint64_t* empty;
  int64_t base;
  __device__ __forceinline__ WgTile<D> tile(int64_t j) const {
    return {smem + (base + j) % kWgStages * wg_tile_halves<D>()};
  }
  __device__ __forceinline__ void wait(int64_t j) const {
    mbar_wait(&full[(base + j) % kWgStages], ((base + j) / kWgStages) & 1);
  }
  __device__ __forceinline__ void release(int64_t j, int lane) const {  // one arrival per consumer warp
    if (lane == 0) mbar_arrive(&empty[(base + j) % kWgStages]);
  }
};
template <int D>
struct WgSplitTiles {
  __half* smem;
  __device__ __forceinline__ WgTile<D> tile(int64_t j) const { return {smem + j * wg_tile_halves<D>()}; }
};

// One consumer warpgroup over the N keys of a work item: O (not yet normalized) and the softmax
// state of its 64 rows. Per tile j (S of tile j already in flight): in its turn, issue P V of
// tile j - 1 and S of tile j + 1 (once the ring says that tile is there); softmax of tile j while
// they run; fold tile j - 1 into O, release it, split P of tile j. `last_turn`: this is the
// block's last item (no one waits for the last group's last turn).
template <int D, int kGroups>
__device__ __forceinline__ void wg_attend(float (&o)[D / 8][4], OnlineSoftmax& softmax, const QFragments<D>& q,
                                          const WgRing<D>& tiles_at, int64_t N, TensorTurns<kGroups> turns,
                                          bool last_turn, int lane) {
  const int64_t tiles = wg_tiles(N);
  ScoreTile even, odd;                                // S of the even and odd tiles, then their P
  uint32_t p_hi[kTcBc / 16][4], p_lo[kTcBc / 16][4];  // P of the tile last through the softmax, split
  float pv[D / 8][4];                                 // that tile's P V
  float alpha_prev[2];                                // and its rescaling of O

  auto step = [&](auto has_pv, auto has_next, int64_t j, ScoreTile& s, ScoreTile& s_next) {
    constexpr bool kPv = decltype(has_pv)::value, kNext = decltype(has_next)::value;
    if constexpr (kNext) tiles_at.wait(j + 1);
    turns.wait();
    if constexpr (kPv) wg_issue_pv<D>(pv, p_hi, p_lo, tiles_at.tile(j - 1));
    if constexpr (kNext) wg_issue_scores<D>(s_next, q, tiles_at.tile(j + 1));
    turns.pass(false);
    wg_wait<kPv + kNext>();  // S of tile j
    wg_keep(s);
    if (j * kTcBc + kTcBc > N) mask_keys_past(s, (int)(N - j * kTcBc), lane);
    float alpha[2];
    softmax.update(s, alpha);
    if constexpr (kPv) {
      wg_wait<kNext>();  // P V of tile j - 1
      wg_keep(pv);
      wg_keep(p_hi);
      wg_keep(p_lo);
      tiles_at.release(j - 1, lane);
      fold_pv<D>(o, pv, alpha_prev);
    }
    alpha_prev[0] = alpha[0];
    alpha_prev[1] = alpha[1];
    wg_split_p(s, p_hi, p_lo);
  };
  const std::true_type yes;
  const std::false_type no;

  tiles_at.wait(0);
  turns.wait();
  wg_issue_scores<D>(even, q, tiles_at.tile(0));
  turns.pass(false);
  if (tiles == 1) {
    step(no, no, 0, even, odd);
  } else {  // tile j's S is in `odd` for odd j (registers are named, not indexed: unrolled by two)
    step(no, yes, 0, even, odd);
    int64_t j = 1;
    for (; j + 2 < tiles; j += 2) {
      step(yes, yes, j, odd, even);
      step(yes, yes, j + 1, even, odd);
    }
    if (j + 1 < tiles) {
      step(yes, yes, j, odd, even);
      step(yes, no, j + 1, even, odd);
    } else {
      step(yes, no, j, odd, even);
    }
  }
  turns.wait();  // the last tile's P V
  wg_issue_pv<D>(pv, p_hi, p_lo, tiles_at.tile(tiles - 1));
  turns.pass(last_turn);
  wg_wait<0>();
  wg_keep(pv);
  wg_keep(p_hi);
  wg_keep(p_lo);
  tiles_at.release(tiles - 1, lane);  // the ring runs on into the block's next item
  fold_pv<D>(o, pv, alpha_prev);
}

// One consumer warpgroup over a short work item's keys (one or two tiles, kTwo), all products
// of a kind at once: S of both tiles as one issue, both softmax updates, P V of both tiles as
// the next. Two waits per item instead of wg_attend's four: with two tiles there is nothing for
// its pipeline to overlap, and each wait exposed a product's latency.
template <int D, int kGroups, bool kTwo>
__device__ __forceinline__ void wg_attend_short(float (&o)[D / 8][4], OnlineSoftmax& softmax, const QFragments<D>& q,
                                                WgSplitTiles<D> tiles, int64_t N, TensorTurns<kGroups> turns,
                                                bool last_turn, int lane) {
  ScoreTile s0, s1;
  turns.wait();
  wg_issue_scores<D>(s0, q, tiles.tile(0));
  if constexpr (kTwo) wg_issue_scores<D>(s1, q, tiles.tile(1));
  turns.pass(false);
  wg_wait<0>();
  wg_keep(s0);
  if constexpr (kTwo) wg_keep(s1);
  const int64_t last_keys = N - (kTwo ? kTcBc : 0);  // keys of the last tile
  float alpha0[2], alpha1[2];
  if constexpr (kTwo) {
    softmax.update(s0, alpha0);
    if (last_keys < kTcBc) mask_keys_past(s1, (int)last_keys, lane);
    softmax.update(s1, alpha1);
  } else {
    if (last_keys < kTcBc) mask_keys_past(s0, (int)last_keys, lane);
    softmax.update(s0, alpha0);
  }
  uint32_t p0_hi[kTcBc / 16][4], p0_lo[kTcBc / 16][4], p1_hi[kTcBc / 16][4], p1_lo[kTcBc / 16][4];
  wg_split_p(s0, p0_hi, p0_lo);
  if constexpr (kTwo) wg_split_p(s1, p1_hi, p1_lo);
  float pv1[D / 8][4];
  turns.wait();
  wg_issue_pv<D>(o, p0_hi, p0_lo, tiles.tile(0));  // O starts as tile 0's P V
  if constexpr (kTwo) wg_issue_pv<D>(pv1, p1_hi, p1_lo, tiles.tile(1));
  turns.pass(last_turn);
  wg_wait<0>();
  wg_keep(o);
  wg_keep(p0_hi);
  wg_keep(p0_lo);
  if constexpr (kTwo) {
    wg_keep(pv1);
    wg_keep(p1_hi);
    wg_keep(p1_lo);
    fold_pv<D>(o, pv1, alpha1);
  }
}

// A block's barriers: pairs full[s] / empty[s] with their arrival counts, initialized by thread 0
// (wg_init_pairs, once per set), then published to the block (wg_barriers_ready).
__device__ __forceinline__ void wg_init_pairs(uint64_t* full, uint64_t* empty, int n, int full_count, int empty_count) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < n; ++s) {
      mbar_init(&full[s], full_count);
      mbar_init(&empty[s], empty_count);
    }
  }
}
__device__ __forceinline__ void wg_barriers_ready() {
  if (threadIdx.x == 0) asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncthreads();
}

// ------------------------------------------------------------------------- the kernels
// Long sequences (split K/V from split_kv_blocked). A persistent block takes work items (a
// batch's wg_rows query rows) item = blockIdx.x, + gridDim.x, ... The producer warpgroup's first
// thread copies each item's Q rows into a Q slot (q_full / q_empty, two slots) and its K/V tiles
// into the ring (tile t of the block's stream into slot t % kWgStages once the consumers released
// it), each with one bulk copy completing on the slot's barrier; it gives up registers
// (setmaxnreg) to the consumers. Each consumer warpgroup, per item: its Q rows from the slot,
// then wg_attend over the item's tiles for its 64 rows. The ring runs on from one item to the
// next, so the next item's first tiles and Q arrive while this one finishes (one block per item
// waited for them at every start: 10% at 512 x 1024 x 32, 16 tiles per item).
template <int D>
__global__ void __launch_bounds__(wg_threads<D>(), 1)
    attention_wgmma(const float* __restrict__ qkv, const __half* __restrict__ kv, float* __restrict__ out,
                    int64_t N, int64_t row_tiles, int64_t items, int* __restrict__ decline,
                    volatile int* declined_ever) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (*decline) return;  // values the split cannot take: the tiled kernel runs this chunk
  constexpr int kConsumerWarps = 4 * wg_groups<D>(), kRows = wg_rows<D>();
  constexpr uint32_t kTileBytes = wg_tile_halves<D>() * 2;
  extern __shared__ __align__(128) __half wg_smem[];
  float* q_slots = reinterpret_cast<float*>(wg_smem + kWgStages * wg_tile_halves<D>());
  uint64_t* full = reinterpret_cast<uint64_t*>(q_slots + 2 * wg_q_floats<D>());
  uint64_t* empty = full + kWgStages;
  uint64_t* q_full = empty + kWgStages;
  uint64_t* q_empty = q_full + 2;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t tiles = wg_tiles(N);
  wg_init_pairs(full, empty, kWgStages, 1, kConsumerWarps);
  wg_init_pairs(q_full, q_empty, 2, 1, kConsumerWarps);
  wg_barriers_ready();
  auto item_rows = [&](int64_t item) {  // query rows of an item (the last of a batch may be short)
    const int64_t left = N - item % row_tiles * kRows;
    return (int)(left < kRows ? left : kRows);
  };

  if (warp >= kConsumerWarps) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWgProducerRegs));
    if (tid == kConsumerWarps * 32) {
      int64_t k = 0, t = 0;  // the block's item and tile counts so far
      for (int64_t item = blockIdx.x; item < items; item += gridDim.x, ++k) {
        const int64_t b = item / row_tiles, row0 = item % row_tiles * kRows;
        const int qs = k & 1;
        if (k >= 2) mbar_wait(&q_empty[qs], (k / 2 - 1) & 1);
        const uint32_t q_bytes = item_rows(item) * D * 4;
        mbar_arrive_expect_tx(&q_full[qs], q_bytes);
        bulk_copy(q_slots + qs * wg_q_floats<D>(), qkv + (b * 3 * N + row0) * D, q_bytes, &q_full[qs]);
        const __half* src = kv + b * tiles * wg_tile_halves<D>();
        for (int64_t j = 0; j < tiles; ++j, ++t) {
          const int slot = t % kWgStages;
          if (t >= kWgStages) mbar_wait(&empty[slot], (t / kWgStages - 1) & 1);
          mbar_arrive_expect_tx(&full[slot], kTileBytes);
          bulk_copy(wg_smem + slot * wg_tile_halves<D>(), src + j * wg_tile_halves<D>(), kTileBytes, &full[slot]);
        }
      }
    }
  } else {  // consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(wg_consumer_regs<D>()));
    const TensorTurns<wg_groups<D>()> turns{warp / 4};
    turns.start();
    int64_t k = 0;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x, ++k) {
      const int64_t b = item / row_tiles, row0 = item % row_tiles * kRows;
      const int qs = k & 1;
      mbar_wait(&q_full[qs], (k / 2) & 1);
      QFragments<D> q;
      q.load(q_slots + qs * wg_q_floats<D>(), warp * 16, item_rows(item), lane);  // this warp's 16 rows
      if (!q.split()) decline_chunk(decline, declined_ever);
      __syncwarp();
      if (lane == 0) mbar_arrive(&q_empty[qs]);
      float o[D / 8][4] = {};  // O: 16 rows x D per warp, fp32, not yet normalized
      OnlineSoftmax softmax;
      wg_attend<D>(o, softmax, q, WgRing<D>{wg_smem, full, empty, k * tiles}, N, turns, item + gridDim.x >= items,
                   lane);
      store_o<D>(out + b * N * D, o, softmax, row0 + warp * 16, N, lane);
    }
  }
#endif
}

// Short sequences (N <= kWgShortMaxN: one block holds a batch's rows and keys), K and V split
// in the kernel: a persistent block takes batches b = blockIdx.x, + gridDim.x, ... Three stages
// run at once on different batches:
//   copy     the producer's first thread copies a batch's fp32 Q, K and V (contiguous in the
//            input) into a staging slot with one bulk copy (full[slot]);
//   split    the producer warpgroup splits K and V from the slot into split tiles (two buffers,
//            alternating per batch; split_full[buf]) and range-checks them;
//   attend   the consumers load and split their Q rows from the slot, release it (empty[slot],
//            one arrival per warp of both kinds), run wg_attend_short on the split tiles and
//            release them (split_empty[buf]).
// One block per batch that loaded, split and computed in turn left DRAM and the tensor cores
// idle in turn (docs/kernels.md).
constexpr int64_t kWgShortMaxN = 2 * kTcBc;
constexpr int kWgShortProducerRegs = 56;  // the split's registers
template <int D>
__host__ __device__ constexpr int wg_short_consumer_regs() {
  return (65536 / 128 - kWgShortProducerRegs) / wg_groups<D>() / 8 * 8;
}
// Staging slots: as many batches as shared memory holds beside the split tiles (48 KB each at
// d = 32, 96 KB at d = 64).
#ifndef FA_WG_SHORT_STAGES32
#define FA_WG_SHORT_STAGES32 3
#endif
template <int D>
__host__ __device__ constexpr int wg_short_stages() { return D == 32 ? FA_WG_SHORT_STAGES32 : 1; }
template <int D>
__host__ __device__ constexpr int wg_short_stage_floats() { return 3 * kWgShortMaxN * D; }
template <int D>
__host__ __device__ constexpr int wg_short_split_halves() { return 2 * wg_tile_halves<D>(); }  // both tiles
template <int D>
__host__ __device__ constexpr int wg_short_smem_bytes() {
  return wg_short_stages<D>() * wg_short_stage_floats<D>() * 4 + 2 * wg_short_split_halves<D>() * 2 +
         (2 * wg_short_stages<D>() + 4) * 8;
}

template <int D>
__global__ void __launch_bounds__(wg_threads<D>(), 1)
    attention_wgmma_short(const float* __restrict__ qkv, float* __restrict__ out, int64_t N, int64_t batches,
                          int* __restrict__ decline, volatile int* declined_ever) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kStages = wg_short_stages<D>(), kConsumerWarps = 4 * wg_groups<D>();
  constexpr int kConsumers = 32 * kConsumerWarps;
  // Shared memory: staging [kStages][Q | K | V] (fp32, N <= 128), split tiles [2][2 tiles], barriers.
  extern __shared__ __align__(128) float wg_staging[];
  __half* split = reinterpret_cast<__half*>(wg_staging + kStages * wg_short_stage_floats<D>());
  uint64_t* full = reinterpret_cast<uint64_t*>(split + 2 * wg_short_split_halves<D>());
  uint64_t* empty = full + kStages;
  uint64_t* split_full = empty + kStages;
  uint64_t* split_empty = split_full + 2;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t ND = N * D;
  wg_init_pairs(full, empty, kStages, 1, kConsumerWarps + 4);
  wg_init_pairs(split_full, split_empty, 2, 4, kConsumerWarps);
  wg_barriers_ready();
  auto staged = [&](int64_t k) { return wg_staging + k % kStages * wg_short_stage_floats<D>(); };
  auto tiles_of = [&](int64_t k) { return split + (k & 1) * wg_short_split_halves<D>(); };
  bool in_range = true;

  if (warp >= kConsumerWarps) {  // producer warpgroup: copy and split
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWgShortProducerRegs));
    const int ptid = tid - kConsumers;
    auto copy = [&](int64_t k) {  // batch k of this block into its slot, once the slot is free
      const int64_t b = blockIdx.x + k * gridDim.x;
      if (b >= batches) return;
      const int slot = k % kStages;
      if (k >= kStages) mbar_wait(&empty[slot], (k / kStages - 1) & 1);
      mbar_arrive_expect_tx(&full[slot], (uint32_t)(3 * ND * 4));
      bulk_copy(wg_staging + slot * wg_short_stage_floats<D>(), qkv + b * 3 * ND, (uint32_t)(3 * ND * 4), &full[slot]);
    };
    // The batches ahead are asked for once this one has arrived: all slots of every block asked
    // for at once made the first batch of each block (and of each chunk) arrive later.
    int64_t issued = 0;
    auto copy_upto = [&](int64_t last) {
      for (; issued <= last; ++issued) copy(issued);
    };
    int64_t k = 0;
    for (int64_t b = blockIdx.x; b < batches; b += gridDim.x, ++k) {
      if (ptid == 0) copy_upto(k);  // not yet asked for at the start, or with a single slot
      mbar_wait(&full[k % kStages], (k / kStages) & 1);
      if (ptid == 0) copy_upto(k + kStages - 1);
      if (k >= 2) mbar_wait(&split_empty[k & 1], (k / 2 - 1) & 1);
      const float* stage = staged(k);
      __half* tiles = tiles_of(k);
      // One key's 8 dimensions of K and V per step, keys past N as zeros.
      for (int c = ptid; c < (int)wg_tiles(N) * kTcBc * (D / 8); c += 128) {
        const int key = c / (D / 8), dim = c % (D / 8) * 8;
        float4 x[2][2] = {};
        if (key < N) {
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            const float* src = stage + (1 + m) * ND + key * D + dim;
            x[m][0] = *reinterpret_cast<const float4*>(src);
            x[m][1] = *reinterpret_cast<const float4*>(src + 4);
          }
        }
        in_range &= wg_store_split<D>(tiles + key / kTcBc * wg_tile_halves<D>(), key % kTcBc, dim, x);
      }
      // The split tiles are written by the generic proxy and read by wgmma (the async proxy).
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncwarp();
      if (lane == 0) {
        mbar_arrive(&split_full[k & 1]);
        mbar_arrive(&empty[k % kStages]);
      }
    }
  } else {  // consumers: attend
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(wg_short_consumer_regs<D>()));
    const TensorTurns<wg_groups<D>()> turns{warp / 4};
    turns.start();
    const int64_t row0 = warp * 16;  // this warp's 16 rows of the batch
    int64_t k = 0;
    for (int64_t b = blockIdx.x; b < batches; b += gridDim.x, ++k) {
      mbar_wait(&full[k % kStages], (k / kStages) & 1);
      QFragments<D> q;
      q.load(staged(k), row0, N, lane);
      in_range &= q.split();
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[k % kStages]);  // this warp is done with the slot
      mbar_wait(&split_full[k & 1], (k / 2) & 1);
      float o[D / 8][4];
      OnlineSoftmax softmax;
      const WgSplitTiles<D> tiles{tiles_of(k)};
      if (N > kTcBc)
        wg_attend_short<D, wg_groups<D>(), true>(o, softmax, q, tiles, N, turns, b + gridDim.x >= batches, lane);
      else
        wg_attend_short<D, wg_groups<D>(), false>(o, softmax, q, tiles, N, turns, b + gridDim.x >= batches, lane);
      __syncwarp();
      if (lane == 0) mbar_arrive(&split_empty[k & 1]);  // its products are done (waited for)
      store_o<D>(out + b * ND, o, softmax, row0, N, lane);
    }
  }
  if (!in_range) decline_chunk(decline, declined_ever);
#endif
}

}  // namespace fa

// tensorcore/mainloop.cuh: the mma.sync kernel's work per K/V tile.
//
// Shared memory (TcShared): two stages (double buffering), each [K_hi | K_lo | V_hi | V_lo] of
// kTcBc rows of D + 8 halves. The 16-byte pad puts the 8 rows one ldmatrix reads in 8 distinct
// 4-bank groups.
// Producer side (every thread of the block): load_kv_tile copies a tile of split K and V from
// split_kv's output by cp.async; split_kv_tiles (the fused kernel) splits fp32 K and V itself.
// Consumer side (each warp, its 16 rows): attend_tile = scores, mask, online softmax, P V, fold.
#pragma once

#include <cstdint>

#include "../epilogue.cuh"

namespace fa {

template <int D>
__host__ __device__ constexpr int tc_pitch() { return D + 8; }  // halves per shared-memory row
template <int D>
__host__ __device__ constexpr int tc_stage_halves() { return 4 * kTcBc * tc_pitch<D>(); }

template <int D>
struct TcShared {
  __half stage[2][tc_stage_halves<D>()];
};

// One stage's four arrays.
template <int D>
struct KVStage {
  static constexpr int kArrayHalves = kTcBc * tc_pitch<D>();  // one of K_hi, K_lo, V_hi, V_lo
  __half* k_hi;
  // The stage's address by arithmetic on the struct's base: indexing shared.stage[] instead cost
  // the fused d = 64 kernel 12 more bytes of spills on sm_90a (same instructions otherwise).
  __device__ __forceinline__ KVStage(TcShared<D>& shared, int stage) : k_hi(reinterpret_cast<__half*>(&shared) + stage * tc_stage_halves<D>()) {}
  __device__ __forceinline__ __half* array(int a) const { return k_hi + a * kArrayHalves; }  // 0..3 as above
  __device__ __forceinline__ const __half* k_lo() const { return array(1); }
  __device__ __forceinline__ const __half* v_hi() const { return array(2); }
  __device__ __forceinline__ const __half* v_lo() const { return array(3); }
};

// ------------------------------------------------------------------------- producer
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
__device__ __forceinline__ bool split_kv_tiles(TcShared<D>& shared, int first_stage, const float* K, int64_t key0,
                                               int64_t N, int tid) {
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
      x[i] = !check || key < N ? __ldg(reinterpret_cast<const float4*>(K + is_v * ND + key * D + col))
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
      __half* dst = KVStage<D>(shared, (first_stage + tile) & 1).array(2 * is_v) + r * tc_pitch<D>() + col;
      *reinterpret_cast<uint2*>(dst) = hi;
      *reinterpret_cast<uint2*>(dst + KVStage<D>::kArrayHalves) = lo;
    }
  }
  return in_range;
}

// ------------------------------------------------------------------------- consumer
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

// pv = P V for the tile, accumulated from zero in fresh registers (fold_pv adds it to O with
// round-to-nearest FMAs). P never leaves registers (split_p).
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

// One warp's pass over a tile in shared memory: O and the softmax state of its 16 rows advance
// by the tile's keys (key0 .. key0 + kTcBc - 1, those past N masked).
template <int D>
__device__ __forceinline__ void attend_tile(float (&o)[D / 8][4], OnlineSoftmax& softmax, const QFragments<D>& q,
                                            const KVStage<D>& stage, int64_t key0, int64_t N, int lane) {
  ScoreTile s;
  tile_scores(s, q, stage, lane);
  if (key0 + kTcBc > N) mask_keys_past(s, (int)(N - key0), lane);
  float alpha[2];
  softmax.update(s, alpha);  // s now holds P
  float pv[D / 8][4];
  tile_pv<D>(pv, s, stage, lane);
  fold_pv<D>(o, pv, alpha);
}

}  // namespace fa

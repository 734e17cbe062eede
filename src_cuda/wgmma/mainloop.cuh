// wgmma/mainloop.cuh: one consumer warpgroup's pass over a work item's K/V tiles on Hopper's
// warpgroup MMA: the products issued as wgmma groups (S = Q K^T and P V, 3xFP16 each), the
// turns the consumer warpgroups take at the tensor cores, and the pass itself, overlapping a
// tile's softmax (softmax.cuh) with the products of its neighbours. The producers that fill
// the tiles are in kernel_long.cuh and kernel_short.cuh.
#pragma once

#include <type_traits>

#include "../epilogue.cuh"
#include "layout.cuh"

namespace fa {

// ------------------------------------------------------------------------- the products
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

// ------------------------------------------------------------------------- turns
// Turns at the tensor cores, round robin over the consumer warpgroups: a group issues its
// products only after the previous one has issued its own, so one group's softmax runs while
// the other's products run instead of all of them waiting together. Named barrier 1 + g is
// group g's turn (256 threads: g's own 128 wait, the previous group's 128 arrive).
template <int kGroups>
struct TensorTurns {
  int group;
  __device__ __forceinline__ void start() const {  // group 0 goes first
    if (group == kGroups - 1) bar_arrive<256>(1);
  }
  __device__ __forceinline__ void wait() const { bar_sync<256>(1 + group); }
  __device__ __forceinline__ void pass(bool last) const {  // last: no one waits for this turn
    if (!(last && group == kGroups - 1))
      bar_arrive<256>(1 + (group + 1) % kGroups);
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

}  // namespace fa

// attention_simt.h: FlashAttention forward on the CUDA cores (fp32), register-blocked like an
// SGEMM. One source for nvcc and hipcc, written against the same primitives as
// attention_tiled.h: FA_SHFL_XOR(v, mask, width), FA_SYNC_WAVE(), FA_WAVE, FA_LAUNCH_BOUNDS.
//
// Geometry and shared-memory layout: simt_tile.h (SimtTile). A block of R x C threads owns
// Br = R TM query rows; thread (g, x) owns rows g + R i, keys x + C j and O columns 4 (x + C q)
// .. +3, so the C threads that share a row are consecutive lanes of one warp (wavefront): the row
// max is a C-lane butterfly of shuffles, and each thread keeps its own share of the row sum until
// the end. Per tile:
//   S = Q K^T    Q and K from shared memory as float4 along d: TM + TN 16-byte loads per 4 TM TN FMA
//   online softmax: running max m (base 2: of s log2(e) / sqrt(d)), p = exp2(s log2(e) / sqrt(d) - m)
//                (the scale on Q as it is loaded, or in the FFMA that subtracts m: q_copied),
//                the tile's TN probabilities of a row summed, then added to a compensated l
//   P -> shared  (the warp's own rows: a wave barrier, no block barrier)
//   O = alpha O + P V   P as float4 along keys, V as float4 along d: TM + TD 16-byte loads per
//                4 TM TD FMA, summed per tile in registers before it is added to O (blocked sum)
// K/V streaming, by tile kind. cp.async (sm_80 and later), two stages: tile t + 1 is copied into
// the other stage at the start of tile t and awaited at its end (Q with the first tile); one block
// barrier per tile. cp.async, one stage (d = 64 on NVIDIA, to hold a 64-key tile): K of tile t + 1
// is copied once every warp's S has read K (the first barrier, which also awaits V of tile t), V
// of tile t + 1 once every warp's P V has read V (the second, which awaits that K); two barriers
// per tile, each copy flying during half a tile. Through registers (older GPUs and AMD): K of tile
// t + 1 is fetched into registers (float4) before S of tile t and stored into the other stage
// after it, V likewise around the softmax and P V; one barrier per tile with two stages, three
// with one (the AMD tiles, to fit two blocks in a CU's LDS: each stash waits for a barrier that
// ends the reads of the tile it replaces).
// Keys past N load as zeros and score -inf; rows past N are computed from zero Q and never
// stored. NaN and inf propagate as in the tiled kernel (same max/exp2/compensated-sum steps).
#pragma once

#include <cstdint>

#include "attention_params.h"
#include "compensated_sum.h"
#include "gpu_primitives.h"
#include "online_softmax.h"
#include "simt_tile.h"

// The k loop of S and the key loop of P V. With cp.async, the k loop unrolled by two (fully
// unrolled, the tile's loop outgrew the instruction cache: ncu sampled 26% of the warps waiting
// for instructions at 4 x 8192 x 32; by two measured 1.7 to 4.5% faster, H100); without it (sm_75
// and older) fully, as measured before. On AMD fully unrolled loops let LLVM's scheduler hoist
// every shared-memory load of the tile and spill hundreds of registers.
#ifndef FA_SIMT_UNROLL_K
#if FA_SIMT_AMD
#define FA_SIMT_UNROLL_K _Pragma("unroll 1")
#define FA_SIMT_UNROLL_PV _Pragma("unroll 1")
#elif FA_SIMT_ASYNC
#define FA_SIMT_UNROLL_K _Pragma("unroll 2")
#define FA_SIMT_UNROLL_PV _Pragma("unroll 2")
#else
#define FA_SIMT_UNROLL_K _Pragma("unroll")
#define FA_SIMT_UNROLL_PV _Pragma("unroll 2")
#endif
#endif

namespace fa {

// The scale log2(e) / sqrt(d) that makes exp2 give e^x: on Q as it is loaded (q_scale), or on the
// scores in the softmax (score_scale); the other one is 1 (folded away by the compiler).
template <class T>
__device__ __forceinline__ float simt_q_scale() {
  return T::q_copied ? 1.f : T::log2e / sqrtf((float)T::d);
}
template <class T>
__device__ __forceinline__ float simt_score_scale() {
  return T::q_copied ? T::log2e / sqrtf((float)T::d) : 1.f;
}

// --- Load Q through registers: the block's rows into shared memory (rows past N are zeros),
// scaled by simt_q_scale.
template <class T>
__device__ __forceinline__ void simt_load_q(float* Qs, const float* Q, int64_t row0, int64_t N, int tid) {
  constexpr int d = T::d;
  const float scale = simt_q_scale<T>();
  for (int i = tid; i < T::rows * d / 4; i += T::threads) {
    const int r = i / (d / 4), c = (i % (d / 4)) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < N) v = *reinterpret_cast<const float4*>(Q + (row0 + r) * d + c);
    v.x *= scale, v.y *= scale, v.z *= scale, v.w *= scale;
    *reinterpret_cast<float4*>(Qs + r * T::q_pitch + c) = v;
  }
}

// --- Load a K/V tile: fetch from global memory into registers (next), later stash into a stage
// of shared memory. Load l of a thread is float4 number tid + l * threads of the tile. K of the
// next tile is in flight while S is computed, V while P V is: half the staging registers of
// fetching both at once.
template <class T>
__device__ __forceinline__ void simt_fetch(float4 (&next)[T::loads_per_thread], const float* src, int64_t key0,
                                           int64_t N, int tid) {
  constexpr int d = T::d;
#pragma unroll
  for (int l = 0; l < T::loads_per_thread; ++l) {
    const int i = tid + l * T::threads;
    const int64_t key = key0 + i / (d / 4);
    next[l] = key < N ? *reinterpret_cast<const float4*>(src + key * d + (i % (d / 4)) * 4)
                      : make_float4(0.f, 0.f, 0.f, 0.f);  // keys past N: zeros, never garbage
  }
}
template <class T>
__device__ __forceinline__ void simt_stash(const float4 (&next)[T::loads_per_thread], float* dst, int pitch, int tid) {
  constexpr int d = T::d;
#pragma unroll
  for (int l = 0; l < T::loads_per_thread; ++l) {
    const int i = tid + l * T::threads;
    *reinterpret_cast<float4*>(dst + (i / (d / 4)) * pitch + (i % (d / 4)) * 4) = next[l];
  }
}

// Rows first .. first + Rows - 1 (a K/V tile, or Q) copied straight into shared memory
// (FA_SIMT_ASYNC); rows past N are zero-filled (a copy of 0 source bytes, from a row inside the
// matrix). Copy l of a thread is float4 number tid + l * threads: a thread copies one column of
// float4, rows threads / (d / 4) apart. One-stage tiles issue their copies mid-tile, where S or O
// holds most registers: there a thread's addresses are one base and constant offsets, 32-bit (the
// general form below spilled). Two-stage tiles issue theirs at the tile's start and keep the
// general form: the constant offsets measured 2% slower at 13000 x 128 x 32 there (H100).
// Awaited by simt_wait_copies.
template <class T, int Rows>
__device__ __forceinline__ void simt_copy_async(float* dst, int pitch, const float* src, int64_t first, int64_t N,
                                                int tid) {
#if FA_SIMT_ASYNC
  constexpr int d = T::d, quads = d / 4, copies = Rows * quads / T::threads, row_step = T::threads / quads;
  static_assert(Rows * quads % T::threads == 0, "every thread copies the same number of float4");
  static_assert(T::stages == 2 || T::threads % quads == 0, "a thread of a one-stage tile copies one column");
  if (T::stages == 1) {
    const int r0 = tid / quads, c = (tid % quads) * 4;
    float* to = dst + r0 * pitch + c;
    const float* from = src + (first + r0) * d + c;
    const bool all_inside = first + Rows <= N;
    const int inside = all_inside ? Rows : (int)(N - first) - r0;  // row r0 + k is inside N for k < inside
#pragma unroll
    for (int l = 0; l < copies; ++l) {
      const bool valid = all_inside || l * row_step < inside;
      cp_async16(to + l * row_step * pitch, valid ? from + l * row_step * d : src, valid ? 16 : 0);
    }
  } else {
#pragma unroll
    for (int l = 0; l < copies; ++l) {
      const int i = tid + l * T::threads;
      const int64_t row = first + i / quads;
      const bool valid = row < N;
      cp_async16(dst + (i / quads) * pitch + (i % quads) * 4, valid ? src + row * d + (i % quads) * 4 : src,
                 valid ? 16 : 0);
    }
  }
  cp_async_commit();
#endif
}
__device__ __forceinline__ void simt_wait_copies() {
#if FA_SIMT_ASYNC
  cp_async_wait<0>();
#endif
}

// A thread's micro-tiles: scores of its rows x keys, and O of its rows x columns.
template <class T>
struct SimtFragments {
  typedef float Scores[T::rows_per_thread][T::keys_per_thread];
  typedef float Out[T::rows_per_thread][T::cols_per_thread];
  typedef float Rows[T::rows_per_thread];
};

// Keys past N score -inf (only the last, partial tile has any).
template <class T>
__device__ __forceinline__ void simt_mask_keys(typename SimtFragments<T>::Scores& s, int64_t key0, int64_t N, int x) {
  if (key0 + T::keys > N) {
#pragma unroll
    for (int j = 0; j < T::keys_per_thread; ++j)
      if (key0 + x + T::threads_per_row * j >= N) {
#pragma unroll
        for (int i = 0; i < T::rows_per_thread; ++i) s[i][j] = -INFINITY;
      }
  }
}

// --- Online softmax per row: the running max m (the same in the row's C threads: a C-lane
// butterfly), alpha = 2^(m_old - m_new) to rescale O, p = 2^(s c - m) into this warp's rows of Ps
// (c = simt_score_scale: 1 where Q carries the scale; m is of the scaled scores),
// the tile's TN probabilities of a row summed, then added to this thread's compensated share l.
template <class T>
__device__ __forceinline__ void simt_online_softmax(const typename SimtFragments<T>::Scores& s,
                                                    typename SimtFragments<T>::Rows& m, CompensatedSum (&l)[T::rows_per_thread],
                                                    typename SimtFragments<T>::Rows& alpha, float* Ps, int x, int g) {
  constexpr int TN = T::keys_per_thread, C = T::threads_per_row, R = T::row_groups;
  const float scale = simt_score_scale<T>();  // log2(e) / sqrt(d) where Q does not carry it, else 1
#pragma unroll
  for (int i = 0; i < T::rows_per_thread; ++i) {
    float mx = s[i][0];
#pragma unroll
    for (int j = 1; j < TN; ++j) mx = fmaxf(mx, s[i][j]);
#pragma unroll
    for (int off = C / 2; off > 0; off >>= 1) mx = fmaxf(mx, FA_SHFL_XOR(mx, off, C));
    alpha[i] = online_rescale(m[i], l[i], mx * scale);  // scale > 0: the max of the scaled scores
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const float p = exp2_approx(T::q_copied ? fmaf(s[i][j], scale, -m[i]) : s[i][j] - m[i]);
      sum += p;
      Ps[(g + R * i) * T::p_pitch + x + C * j] = p;
    }
    l[i].add(sum);
  }
  FA_SYNC_WAVE();  // Ps rows are written and read by the same warp: no block barrier
}

// --- Store O, once: the row sums combined across the row's C threads; rows past N not stored.
template <class T>
__device__ __forceinline__ void simt_store_o(float* out, const typename SimtFragments<T>::Out& o,
                                             const CompensatedSum (&l)[T::rows_per_thread], int64_t b, int64_t row0,
                                             int64_t N, int x, int g) {
  constexpr int C = T::threads_per_row;
#pragma unroll
  for (int i = 0; i < T::rows_per_thread; ++i) {
    float sum = l[i].value();
#pragma unroll
    for (int off = C / 2; off > 0; off >>= 1) sum += FA_SHFL_XOR(sum, off, C);
    const float inv_l = 1.f / sum;
    const int64_t row = row0 + g + T::row_groups * i;
    if (row < N) {
      float* dst = out + (b * N + row) * T::d;
#pragma unroll
      for (int q = 0; q < T::quads_per_thread; ++q)
        *reinterpret_cast<float4*>(dst + 4 * (x + C * q)) =
            make_float4(o[i][4 * q] * inv_l, o[i][4 * q + 1] * inv_l, o[i][4 * q + 2] * inv_l,
                        o[i][4 * q + 3] * inv_l);
    }
  }
}

// One block: query rows row0 .. row0 + Br - 1 of batch b (blockIdx.x = b * row_tiles + row tile).
// K/V stream as the file's header says: with two stages the one block barrier per tile orders
// this tile's reads (K, V, and each warp's Ps) before the next tile's writes, and the next tile's
// stores (or awaited copies) before its reads; with one stage a barrier after S frees K and one
// after P V frees V.
template <class T>
__device__ __forceinline__ void simt_rows(const float* __restrict__ qkv, float* __restrict__ out, int64_t N,
                                          int64_t row_tiles) {
  constexpr int TM = T::rows_per_thread, TN = T::keys_per_thread, TD = T::cols_per_thread;
  constexpr int C = T::threads_per_row, R = T::row_groups, kQuads = T::quads_per_thread;
  extern __shared__ float4 simt_smem4[];
  const SimtShared<T> smem(reinterpret_cast<float*>(simt_smem4));
  const int tid = threadIdx.x;
  const int x = tid % T::threads_per_row, g = tid / T::threads_per_row;  // place in the row, row group
  const int64_t tile = blockIdx.x;
  const int64_t b = tile / row_tiles;
  const int64_t row0 = (tile % row_tiles) * T::rows;
  const float* Q = qkv + b * 3 * N * T::d;
  const float* K = Q + N * T::d;
  const float* V = K + N * T::d;

  float4 next[T::loads_per_thread];  // the K/V tile in flight
  float m[TM];              // running row max (base 2), the same in the row's C threads
  CompensatedSum l[TM];     // this thread's share of the row sums
  float o[TM][TD];          // O micro-tile: rows g + R i, columns 4 (x + C q) + e
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    m[i] = -INFINITY;
#pragma unroll
    for (int c = 0; c < TD; ++c) o[i][c] = 0.f;
  }

  constexpr bool kAsync = FA_SIMT_ASYNC;            // K/V by cp.async, else through registers
  constexpr bool kAsyncOneStage = kAsync && T::stages == 1;
  if (T::q_copied)  // Q and the first K/V tile in flight together
    simt_copy_async<T, T::rows>(smem.q, T::q_pitch, Q, row0, N, tid);
  else
    simt_load_q<T>(smem.q, Q, row0, N, tid);
  if (kAsync) {
    simt_copy_async<T, T::keys>(smem.k_stage(0), T::k_pitch, K, 0, N, tid);
    simt_copy_async<T, T::keys>(smem.v_stage(0), T::v_pitch, V, 0, N, tid);
    simt_wait_copies();
  } else {
    simt_fetch<T>(next, K, 0, N, tid);
    simt_stash<T>(next, smem.k_stage(0), T::k_pitch, tid);
    simt_fetch<T>(next, V, 0, N, tid);
    simt_stash<T>(next, smem.v_stage(0), T::v_pitch, tid);
  }
  __syncthreads();
  int buf = 0;
  for (int64_t key0 = 0; key0 < N; key0 += T::keys) {
    const bool more = key0 + T::keys < N;
    if (kAsync && T::stages == 2 && more) {  // the other stage was last read before the last barrier
      simt_copy_async<T, T::keys>(smem.k_stage(buf ^ 1), T::k_pitch, K, key0 + T::keys, N, tid);
      simt_copy_async<T, T::keys>(smem.v_stage(buf ^ 1), T::v_pitch, V, key0 + T::keys, N, tid);
    }
    if (!kAsync && more) simt_fetch<T>(next, K, key0 + T::keys, N, tid);
    const float* Qs = smem.q;
    const float* Kb = smem.k_stage(buf);
    const float* Vb = smem.v_stage(buf);

    // --- Scores S = Q K^T: rows g + R i, keys x + C j, k four at a time (float4 of Q and K from
    // shared memory: TM + TN loads per 4 TM TN FMA). This phase and P V stay in this function:
    // as functions of their own they compile to the same PTX but register names that ptxas
    // schedules differently.
    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = 0.f;
    FA_SIMT_UNROLL_K
    for (int k = 0; k < T::d; k += 4) {
      float4 kv[TN];
#pragma unroll
      for (int j = 0; j < TN; ++j) kv[j] = *reinterpret_cast<const float4*>(Kb + (x + C * j) * T::k_pitch + k);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float4 qv = *reinterpret_cast<const float4*>(Qs + (g + R * i) * T::q_pitch + k);
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          s[i][j] = fmaf(qv.x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv.y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv.z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv.w, kv[j].w, s[i][j]);
        }
      }
    }
    if (T::stages == 1) {  // every warp's S read this K stage; with cp.async, V of this tile landed
      simt_wait_copies();
      __syncthreads();
    }
    if (kAsyncOneStage && more) simt_copy_async<T, T::keys>(smem.k, T::k_pitch, K, key0 + T::keys, N, tid);
    if (!kAsync && more) {
      simt_stash<T>(next, smem.k_stage(buf ^ (T::stages - 1)), T::k_pitch, tid);
      simt_fetch<T>(next, V, key0 + T::keys, N, tid);
    }
    simt_mask_keys<T>(s, key0, N, x);
    float alpha[TM];  // rescaling of the rows' O by 2^(m_old - m_new)
    simt_online_softmax<T>(s, m, l, alpha, smem.p, x, g);

    // --- Fold P V into O: O = alpha O + P V, P as float4 along keys, V as float4 along d (TM + TD
    // loads per 4 TM TD FMA). The tile's P V is summed on its own first (in the registers S held),
    // then added: O's values are sums of N terms, and adding each one to O directly left errors
    // of 1.7e-5 at N = 16389 (sequential rounding); blocked by tile they stay under 1e-5 at 32768.
    float t[TM][TD];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int c = 0; c < TD; ++c) t[i][c] = 0.f;
    FA_SIMT_UNROLL_PV
    for (int j = 0; j < T::keys; j += 4) {
      float4 pv[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) pv[i] = *reinterpret_cast<const float4*>(smem.p + (g + R * i) * T::p_pitch + j);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        float4 vv[kQuads];
#pragma unroll
        for (int q = 0; q < kQuads; ++q)
          vv[q] = *reinterpret_cast<const float4*>(Vb + (j + jj) * T::v_pitch + 4 * (x + C * q));
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const float p = jj == 0 ? pv[i].x : jj == 1 ? pv[i].y : jj == 2 ? pv[i].z : pv[i].w;
#pragma unroll
          for (int q = 0; q < kQuads; ++q) {
            t[i][4 * q] = fmaf(p, vv[q].x, t[i][4 * q]);
            t[i][4 * q + 1] = fmaf(p, vv[q].y, t[i][4 * q + 1]);
            t[i][4 * q + 2] = fmaf(p, vv[q].z, t[i][4 * q + 2]);
            t[i][4 * q + 3] = fmaf(p, vv[q].w, t[i][4 * q + 3]);
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int c = 0; c < TD; ++c) o[i][c] = fmaf(o[i][c], alpha[i], t[i][c]);

    if (T::stages == 1) {  // every warp's P V read this V stage; with cp.async, the next K landed
      simt_wait_copies();
      __syncthreads();
    }
    if (kAsyncOneStage) {  // the next V, awaited at the next tile's first barrier
      if (more) simt_copy_async<T, T::keys>(smem.v, T::v_pitch, V, key0 + T::keys, N, tid);
    } else {
      if (!kAsync && more) simt_stash<T>(next, smem.v_stage(buf ^ (T::stages - 1)), T::v_pitch, tid);
      if (kAsync) simt_wait_copies();  // this thread's copies of the next tile have landed
      __syncthreads();
    }
    buf ^= T::stages - 1;  // the other stage, or the only one
  }

  simt_store_o<T>(out, o, l, b, row0, N, x, g);
}

template <int D, int TM, int TN, int C, int R, int MinBlocks, int Stages>
__global__ void FA_LAUNCH_BOUNDS(R* C, MinBlocks) attention_simt(const AttentionParams p) {
  simt_rows<SimtTile<D, TM, TN, C, R, MinBlocks, Stages> >(p.qkv, p.out, p.N, p.row_tiles);
}

}  // namespace fa

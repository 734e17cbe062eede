// attention_simt.h: FlashAttention forward on the CUDA cores (fp32), register-blocked like an
// SGEMM. One source for nvcc and hipcc, written against the same primitives as
// attention_tiled.h: FA_SHFL_XOR(v, mask, width), FA_SYNC_WAVE(), FA_WAVE, FA_LAUNCH_BOUNDS.
//
// Geometry (SimtTile: rows_per_thread TM, keys_per_thread TN, threads_per_row C, row_groups R):
// a block of R x C threads owns Br = R * TM query rows and streams K/V tiles of Bc = C * TN keys.
// Thread (g, x) = (tid / C, tid % C) owns
//   rows      g + R * i,          i < TM   (interleaved: the warp's row groups hit distinct banks)
//   keys      x + C * j,          j < TN   (its TM x TN micro-tile of scores S)
//   O columns 4 (x + C * q) .. +3, q < D / (4 C)   (its TM x D / C micro-tile of O)
// so the C threads that share a row are consecutive lanes of one warp (wavefront): the row max
// is a C-lane butterfly of shuffles, and each thread keeps its own share of the row sum until
// the end. Per tile:
//   S = Q K^T    Q and K from shared memory as float4 along d: TM + TN 16-byte loads per 4 TM TN FMA
//   online softmax: running max m (base 2: of s log2(e) / sqrt(d)), p = exp2(s log2(e) / sqrt(d) - m)
//                (the scale on Q as it is loaded, or in the FFMA that subtracts m: q_copied),
//                the tile's TN probabilities of a row summed, then added to a compensated l
//   P -> shared  (the warp's own rows: a wave barrier, no block barrier)
//   O = alpha O + P V   P as float4 along keys, V as float4 along d: TM + TD 16-byte loads per
//                4 TM TD FMA, summed per tile in registers before it is added to O (blocked sum)
// Shared memory (dynamic), pitches in floats:
//   Qs[Br][D + 4]        Q (scaled, or as it is: q_copied), loaded once; pitch/4 odd: the
//                        warp's rows in distinct banks
//   Ks[ST][Bc][D + 4]    K tiles, ST stages; a thread's keys x + C j: distinct banks for x < 8
//   Vs[ST][Bc][D]        V tiles, ST stages; read as consecutive float4 along d
//   Ps[Br][Bc + C]       probabilities; the stores of a warp (R_w row groups x C keys) fill 32 banks
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

// The AMD tiles where the code is AMD's (hipcc for CDNA, or nvcc through the MI210 emulation,
// which holds a block to the MI210's 64 KB of LDS).
#ifndef FA_SIMT_AMD
#define FA_SIMT_AMD FA_AMD_CODE
#endif

// K/V tiles of two-stage tiles copied from global to shared memory without registers (cp.async)
// where the GPU has it: issued at the start of a tile, awaited at its end, so the loads fly during all of S, the
// softmax and P V, and the 16 staging registers are free. Elsewhere (AMD, GPUs before sm_80,
// and the AMD tiles on NVIDIA) the tiles go through registers.
#if FA_ASYNC_COPY && !FA_SIMT_AMD
#define FA_SIMT_ASYNC 1
#else
#define FA_SIMT_ASYNC 0
#endif

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

// The tile's parameters, declared once, in the order of SimtTile's (and attention_simt's)
// template arguments after d: X(fa sweep's short name, the suffix of the macro that sets it at
// build time, -DFA_SIMT<d>_<SUFFIX>=, the member of SimtTile). The sweep's flags, --kernels'
// tiles and the kernel's name are made from this list (src_common/fp32_launches.h).
#define FA_SIMT_PARAMETERS(X)                     \
  X(TM, ROWS_PER_THREAD, rows_per_thread)         \
  X(TN, KEYS_PER_THREAD, keys_per_thread)         \
  X(C, THREADS_PER_ROW, threads_per_row)          \
  X(R, ROW_GROUPS, row_groups)                    \
  X(MB, MIN_BLOCKS, min_blocks)                   \
  X(ST, STAGES, stages)

// A tile: its parameters by name (fa sweep's short names after the colons) and what follows
// from them: block size, the shared-memory layout above, the loads of a K/V tile.
template <int D, int RowsPerThread, int KeysPerThread, int ThreadsPerRow, int RowGroups, int MinBlocks, int Stages>
struct SimtTile {
  static constexpr int d = D;
  static constexpr int rows_per_thread = RowsPerThread;  // TM: rows g + row_groups i of a thread
  static constexpr int keys_per_thread = KeysPerThread;  // TN: keys x + threads_per_row j of a tile
  static constexpr int threads_per_row = ThreadsPerRow;  // C: consecutive lanes that share a row
  static constexpr int row_groups = RowGroups;           // R: rows of threads in a block
  static constexpr int min_blocks = MinBlocks;           // MB: blocks per SM the registers are budgeted for
  static constexpr int stages = Stages;                  // ST: K/V tiles in shared memory (2: the next loads during this one)

  static constexpr int threads = row_groups * threads_per_row;
  static constexpr int rows = row_groups * rows_per_thread;        // Br: query rows of a block
  static constexpr int keys = threads_per_row * keys_per_thread;   // Bc: keys of a K/V tile
  static constexpr int cols_per_thread = d / threads_per_row;      // TD: O columns of a thread
  static constexpr int quads_per_thread = cols_per_thread / 4;     // ... as float4
  static constexpr int q_pitch = d + 4, k_pitch = d + 4, v_pitch = d, p_pitch = keys + threads_per_row;
  static constexpr int q_floats = rows * q_pitch, k_floats = keys * k_pitch, v_floats = keys * v_pitch;
  static constexpr int smem_floats = q_floats + stages * (k_floats + v_floats) + rows * p_pitch;
  static constexpr int smem_bytes = smem_floats * 4;
  static constexpr int tile_quads = keys * d / 4;  // float4 of K (and of V) per tile
  static constexpr int loads_per_thread = tile_quads / threads;
  // Q copied with the first K/V tile by cp.async (no registers to scale it in), the scale
  // log2(e) / sqrt(d) then applied in the softmax's FFMA: at d = 32, measured faster there (H100,
  // docs/kernels.md); at d = 64 it measured slower, and Q is loaded through registers, scaled.
  static constexpr bool q_copied = FA_SIMT_ASYNC && stages == 2 && d == 32;
  static constexpr float log2e = 1.4426950408889634f;
  static_assert(d % (4 * threads_per_row) == 0, "each thread owns whole float4 of O");
  static_assert(threads_per_row <= 32 && 32 % threads_per_row == 0 && threads_per_row <= FA_WAVE,
                "a row's threads stay inside one warp");
  static_assert(tile_quads % threads == 0, "every thread loads the same number of float4 per tile");
  static_assert(threads <= 1024, "at most 1024 threads per block");
  static_assert(stages == 1 || stages == 2, "one or two K/V stages");
};

// Tiles per d, chosen by measurement on an H100 (docs/kernels.md, "SIMT kernel"); the comments
// give registers, shared-memory loads per FMA and the blocks an SM holds. The big tile runs
// where a block may have its shared memory (sm_80, sm_90; at d = 64 not the 64 KB of sm_75 nor
// the 96 to 99 KB of sm_70, sm_86 and sm_89), else the small one.
#if FA_SIMT_AMD
// CDNA (gfx908/gfx90a), not measured (no AMD GPU here): a block is four wavefronts of 64 lanes
// (rows of 8 lanes stay inside a wavefront) in at most 32 KB of LDS, so that a CU's 64 KB hold
// two blocks: two wavefronts per SIMD, one to run while the other waits on LDS. The K/V tiles
// have one stage (two would not fit beside Q and P at this reuse):
//   d = 64: 2 x 2 scores and 2 x 8 O per thread, Br = 64, Bc = 16: 31.3 KB.
//   d = 32: 2 x 4 scores and 2 x 4 O per thread, Br = 64, Bc = 32: 27.5 KB.
template <int D> struct SimtBig;
template <> struct SimtBig<64> { typedef SimtTile<64, 2, 2, 8, 32, 1, 1> type; };
template <> struct SimtBig<32> { typedef SimtTile<32, 2, 4, 8, 32, 1, 1> type; };
template <int D> struct SimtSmall { typedef typename SimtBig<D>::type type; };
#else
// Measured on an H100 against 256-thread tiles of 4 x 4 / 4 x 8 scores (more warps, less reuse:
// 2 to 6% slower), against Bc = 16 (d = 64) and 8 lanes a row (d = 32) (3 to 24% slower), and
// against 12 warps per SM at 168 registers (one stage, 4 x 8 or 8 x 4 scores: 6 to 28% slower).
// fa sweep builds other big tiles with -DFA_SIMT<d>_<PARAMETER>=... (registry: Simt::sweep).
// d = 64: 128 threads (16 row groups x 8), 8 x 8 scores + 8 x 8 O per thread, Br = 128, Bc = 64,
// one K/V stage (cp.async, two barriers per tile): 16 float4 loads per 256 FMA in S and in P V,
// the softmax's per-row steps over 8 keys; 103 KB of shared memory: 2 blocks (8 warps) per SM,
// so up to 255 registers (255, no spills, on sm_90). Measured 8% faster than 8 x 4 scores with
// Bc = 32 in two stages (docs/kernels.md).
#ifndef FA_SIMT64_ROWS_PER_THREAD
#define FA_SIMT64_ROWS_PER_THREAD 8
#endif
#ifndef FA_SIMT64_KEYS_PER_THREAD
#define FA_SIMT64_KEYS_PER_THREAD 8
#endif
#ifndef FA_SIMT64_THREADS_PER_ROW
#define FA_SIMT64_THREADS_PER_ROW 8
#endif
#ifndef FA_SIMT64_ROW_GROUPS
#define FA_SIMT64_ROW_GROUPS 16
#endif
#ifndef FA_SIMT64_MIN_BLOCKS
#define FA_SIMT64_MIN_BLOCKS 2
#endif
#ifndef FA_SIMT64_STAGES
#define FA_SIMT64_STAGES 1
#endif
// d = 32: 64 threads (16 row groups x 4), 8 x 8 scores + 8 x 8 O per thread, Br = 128, Bc = 32:
// 16 float4 loads per 256 FMA in both products; 53 KB: 4 blocks (8 warps) per SM, 255 registers.
#ifndef FA_SIMT32_ROWS_PER_THREAD
#define FA_SIMT32_ROWS_PER_THREAD 8
#endif
#ifndef FA_SIMT32_KEYS_PER_THREAD
#define FA_SIMT32_KEYS_PER_THREAD 8
#endif
#ifndef FA_SIMT32_THREADS_PER_ROW
#define FA_SIMT32_THREADS_PER_ROW 4
#endif
#ifndef FA_SIMT32_ROW_GROUPS
#define FA_SIMT32_ROW_GROUPS 16
#endif
#ifndef FA_SIMT32_MIN_BLOCKS
#define FA_SIMT32_MIN_BLOCKS 4
#endif
#ifndef FA_SIMT32_STAGES
#define FA_SIMT32_STAGES 2
#endif
template <int D> struct SimtBig;
template <> struct SimtBig<64> {
  typedef SimtTile<64, FA_SIMT64_ROWS_PER_THREAD, FA_SIMT64_KEYS_PER_THREAD, FA_SIMT64_THREADS_PER_ROW,
                   FA_SIMT64_ROW_GROUPS, FA_SIMT64_MIN_BLOCKS, FA_SIMT64_STAGES> type;
};
template <> struct SimtBig<32> {
  typedef SimtTile<32, FA_SIMT32_ROWS_PER_THREAD, FA_SIMT32_KEYS_PER_THREAD, FA_SIMT32_THREADS_PER_ROW,
                   FA_SIMT32_ROW_GROUPS, FA_SIMT32_MIN_BLOCKS, FA_SIMT32_STAGES> type;
};
// GPUs that give a block too little for the big tile (at most 48 KB: sm_61, the course's GTX
// 1080): 64 query rows, 128 threads of 4 x 2 (d = 64, Bc = 16: 41 KB) or 4 x 8 scores (d = 32,
// Bc = 32: 37 KB).
template <int D> struct SimtSmall;
template <> struct SimtSmall<64> { typedef SimtTile<64, 4, 2, 8, 16, 1, 2> type; };
template <> struct SimtSmall<32> { typedef SimtTile<32, 4, 8, 4, 16, 1, 2> type; };
#endif

// The block's shared memory (dynamic), carved as laid out above.
template <class T>
struct SimtShared {
  float* q;  // [rows][q_pitch]
  float* k;  // [stages][keys][k_pitch]
  float* v;  // [stages][keys][v_pitch]
  float* p;  // [rows][p_pitch]
  __device__ __forceinline__ explicit SimtShared(float* smem)
      : q(smem), k(q + T::q_floats), v(k + T::stages * T::k_floats), p(v + T::stages * T::v_floats) {}
  __device__ __forceinline__ float* k_stage(int stage) const { return k + stage * T::k_floats; }
  __device__ __forceinline__ float* v_stage(int stage) const { return v + stage * T::v_floats; }
};

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

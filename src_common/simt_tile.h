// simt_tile.h: the register-blocked kernel's tiles (attention_simt.h): the parameters of a
// tile, what follows from them, its shared memory, and the tiles chosen per d and GPU.
//
// Geometry (SimtTile: rows_per_thread TM, keys_per_thread TN, threads_per_row C, row_groups R):
// a block of R x C threads owns Br = R * TM query rows and streams K/V tiles of Bc = C * TN keys.
// Thread (g, x) = (tid / C, tid % C) owns
//   rows      g + R * i,          i < TM   (interleaved: the warp's row groups hit distinct banks)
//   keys      x + C * j,          j < TN   (its TM x TN micro-tile of scores S)
//   O columns 4 (x + C * q) .. +3, q < D / (4 C)   (its TM x D / C micro-tile of O)
// Shared memory (dynamic), pitches in floats:
//   Qs[Br][D + 4]        Q (scaled, or as it is: q_copied), loaded once; pitch/4 odd: the
//                        warp's rows in distinct banks
//   Ks[ST][Bc][D + 4]    K tiles, ST stages; a thread's keys x + C j: distinct banks for x < 8
//   Vs[ST][Bc][D]        V tiles, ST stages; read as consecutive float4 along d
//   Ps[Br][Bc + C]       probabilities; the stores of a warp (R_w row groups x C keys) fill 32 banks
#pragma once

#include "gpu_primitives.h"

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
}  // namespace fa

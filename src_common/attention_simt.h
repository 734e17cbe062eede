// attention_simt.h: FlashAttention forward on the CUDA cores (fp32), register-blocked like an
// SGEMM. One source for nvcc and hipcc, written against the same primitives as
// attention_tiled.h: FA_SHFL_XOR(v, mask, width), FA_SYNC_WAVE(), FA_WAVE, FA_LAUNCH_BOUNDS.
//
// Geometry (SimtTile<D, TM, TN, C, R>): a block of R x C threads owns Br = R * TM query rows and
// streams K/V tiles of Bc = C * TN keys. Thread (g, x) = (tid / C, tid % C) owns
//   rows      g + R * i,          i < TM   (interleaved: the warp's row groups hit distinct banks)
//   keys      x + C * j,          j < TN   (its TM x TN micro-tile of scores S)
//   O columns 4 (x + C * q) .. +3, q < D / (4 C)   (its TM x D / C micro-tile of O)
// so the C threads that share a row are consecutive lanes of one warp (wavefront): the row max
// is a C-lane butterfly of shuffles, and each thread keeps its own share of the row sum until
// the end. Per tile:
//   S = Q K^T    Q and K from shared memory as float4 along d: TM + TN 16-byte loads per 4 TM TN FMA
//   online softmax: running max m (base 2: Q carries log2(e) / sqrt(d)), p = exp2(s - m),
//                the tile's TN probabilities of a row summed, then added to a compensated l
//   P -> shared  (the warp's own rows: a wave barrier, no block barrier)
//   O = alpha O + P V   P as float4 along keys, V as float4 along d: TM + TD 16-byte loads per
//                4 TM TD FMA, summed per tile in registers before it is added to O (blocked sum)
// Shared memory (dynamic), pitches in floats:
//   Qs[Br][D + 4]        Q, pre-scaled, loaded once; pitch/4 odd: the warp's rows in distinct banks
//   Ks[2][Bc][D + 4]     K tiles, two stages; a thread's keys x + C j: distinct banks for x < 8
//   Vs[2][Bc][D]         V tiles, two stages; read as consecutive float4 along d
//   Ps[Br][Bc + C]       probabilities; the stores of a warp (R_w row groups x C keys) fill 32 banks
// K/V double buffering: K of tile t + 1 is fetched from global memory into registers (float4)
// before S of tile t is computed and stored into the other stage after it, V of tile t + 1
// likewise around the softmax and P V; one block barrier per tile.
// Keys past N load as zeros and score -inf; rows past N are computed from zero Q and never
// stored. NaN and inf propagate as in the tiled kernel (same max/exp2/compensated-sum steps).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compensated_sum.h"
#include "host/settings.h"

#if !defined(FA_SHFL_XOR) || !defined(FA_SYNC_WAVE) || !defined(FA_WAVE) || !defined(FA_LAUNCH_BOUNDS)
#error "attention_simt.h needs FA_SHFL_XOR, FA_SYNC_WAVE, FA_WAVE and FA_LAUNCH_BOUNDS: include src_cuda/kernel_primitives.cuh (nvcc) or src_hip/hip_api.h (hipcc) first"
#endif

#if defined(__HIP_PLATFORM_AMD__) || (defined(__HIP__) && !defined(__NVCC__))
#define FA_SIMT_AMD 1
#else
#define FA_SIMT_AMD 0
#endif

// The k loop of S and the key loop of P V: unrolled on NVIDIA; on AMD fully unrolled loops let
// LLVM's scheduler hoist every shared-memory load of the tile and spill hundreds of registers.
#ifndef FA_SIMT_UNROLL_K
#if FA_SIMT_AMD
#define FA_SIMT_UNROLL_K _Pragma("unroll 1")
#define FA_SIMT_UNROLL_PV _Pragma("unroll 1")
#else
#define FA_SIMT_UNROLL_K _Pragma("unroll")
#define FA_SIMT_UNROLL_PV _Pragma("unroll 2")
#endif
#endif

namespace fa {

// 2^x for x <= 0 (or NaN): the hardware's approximation (2 ulp, as exp2f), without exp2f's
// rescaling of results below 2^-126: those become 0, an error under 1e-38 of the row sum's
// largest term (which is 1). exp2f spends four more instructions per probability on it.
__device__ __forceinline__ float simt_exp2(float x) {
#if FA_SIMT_AMD
  return exp2f(x);  // ROCm 5.2's clang has no __builtin_amdgcn_exp2f
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

template <int D_, int TM_, int TN_, int C_, int R_, int MinBlocks_>
struct SimtTile {
  static constexpr int D = D_, TM = TM_, TN = TN_, C = C_, R = R_, kMinBlocks = MinBlocks_;
  static constexpr int kThreads = R * C, kBr = R * TM, kBc = C * TN, TD = D / C, kQuads = TD / 4;
  static constexpr int kQPitch = D + 4, kKPitch = D + 4, kVPitch = D, kPPitch = kBc + C;
  static constexpr int kQFloats = kBr * kQPitch, kKFloats = kBc * kKPitch, kVFloats = kBc * kVPitch;
  static constexpr int kSmemFloats = kQFloats + 2 * kKFloats + 2 * kVFloats + kBr * kPPitch;
  static constexpr int kSmemBytes = kSmemFloats * 4;
  static constexpr int kTileVec = kBc * D / 4;  // float4 of K (and of V) per tile
  static constexpr int kLoads = kTileVec / kThreads;
  static_assert(D % (4 * C) == 0, "each thread owns whole float4 of O");
  static_assert(C <= 32 && 32 % C == 0 && C <= FA_WAVE, "a row's threads stay inside one warp");
  static_assert(kTileVec % kThreads == 0, "every thread loads the same number of float4 per tile");
  static_assert(kThreads <= 1024, "at most 1024 threads per block");
};

// Tiles per d, chosen by measurement on an H100 (docs/kernels.md, "SIMT kernel"); the comments
// give registers, shared-memory loads per FMA and the blocks an SM holds. The big tile runs
// where a block may have its shared memory (sm_80 and later; sm_75 allows 64 KB: the small tile
// at d = 64), else the small one.
#if FA_SIMT_AMD
// CDNA (gfx908/gfx90a), not measured (no AMD GPU here): the 64 KB of LDS of a CU hold one block,
// so a block is four wavefronts of 64 lanes, one per SIMD (rows of 8 or 4 lanes stay inside a
// wavefront), and the micro-tiles are smaller than NVIDIA's:
//   d = 64: 2 x 4 scores and 2 x 8 O per thread, Br = 64, Bc = 32: 62.5 KB.
//   d = 32: 2 x 8 scores and 2 x 8 O per thread, Br = 128, Bc = 32: 54 KB.
template <int D> struct SimtBig;
template <> struct SimtBig<64> { typedef SimtTile<64, 2, 4, 8, 32, 1> type; };
template <> struct SimtBig<32> { typedef SimtTile<32, 2, 8, 4, 64, 1> type; };
template <int D> struct SimtSmall { typedef typename SimtBig<D>::type type; };
#else
// Measured on an H100 against 256-thread tiles of 4 x 4 / 4 x 8 scores (more warps, less reuse:
// 2 to 6% slower) and against Bc = 16 (d = 64) and 8 lanes a row (d = 32) (3 to 24% slower).
#ifndef FA_SIMT64
// d = 64: 128 threads (16 row groups x 8), 8 x 4 scores + 8 x 8 O per thread, Br = 128, Bc = 32:
// 12 float4 loads per 128 FMA in S, 16 per 256 in P V; 87 KB of shared memory: 2 blocks
// (8 warps) per SM, so up to 255 registers (255, no spills, on sm_90).
#define FA_SIMT64 64, 8, 4, 8, 16, 2
#endif
#ifndef FA_SIMT32
// d = 32: 64 threads (16 row groups x 4), 8 x 8 scores + 8 x 8 O per thread, Br = 128, Bc = 32:
// 16 float4 loads per 256 FMA in both products; 53 KB: 4 blocks (8 warps) per SM, 255 registers.
#define FA_SIMT32 32, 8, 8, 4, 16, 4
#endif
template <int D> struct SimtBig;
template <> struct SimtBig<64> { typedef SimtTile<FA_SIMT64> type; };
template <> struct SimtBig<32> { typedef SimtTile<FA_SIMT32> type; };
// GPUs that give a block at most 48 KB (sm_61, the course's GTX 1080): 64 query rows, 128
// threads of 4 x 2 (d = 64, Bc = 16: 41 KB) or 4 x 8 scores (d = 32, Bc = 32: 37 KB).
template <int D> struct SimtSmall;
template <> struct SimtSmall<64> { typedef SimtTile<64, 4, 2, 8, 16, 1> type; };
template <> struct SimtSmall<32> { typedef SimtTile<32, 4, 8, 4, 16, 1> type; };
#endif

template <int D_, int TM_, int TN_, int C_, int R_, int MinBlocks_>
__global__ void FA_LAUNCH_BOUNDS(R_* C_, MinBlocks_)
    attention_simt(const float* __restrict__ qkv, float* __restrict__ out, int64_t N, int64_t row_tiles) {
  typedef SimtTile<D_, TM_, TN_, C_, R_, MinBlocks_> T;
  constexpr int D = T::D, TM = T::TM, TN = T::TN, C = T::C, R = T::R, TD = T::TD, kQuads = T::kQuads;
  constexpr int kBr = T::kBr, kBc = T::kBc, kThreads = T::kThreads, kLoads = T::kLoads;
  constexpr int QP = T::kQPitch, KP = T::kKPitch, VP = T::kVPitch, PP = T::kPPitch;
  extern __shared__ float4 simt_smem4[];
  float* smem = reinterpret_cast<float*>(simt_smem4);
  float* Qs = smem;
  float* Ks = Qs + T::kQFloats;        // [2][Bc][KP]
  float* Vs = Ks + 2 * T::kKFloats;    // [2][Bc][VP]
  float* Ps = Vs + 2 * T::kVFloats;    // [Br][PP]

  const int tid = threadIdx.x;
  const int x = tid % C, g = tid / C;
  const int64_t tile = blockIdx.x;
  const int64_t b = tile / row_tiles;
  const int64_t row0 = (tile % row_tiles) * kBr;
  const float* Q = qkv + b * 3 * N * D;
  const float* K = Q + N * D;
  const float* V = K + N * D;

  // --- Q tile, scaled by log2(e) / sqrt(d) so that exp2 gives e^x; rows past N are zeros.
  const float q_scale = 1.4426950408889634f / sqrtf((float)D);
  for (int i = tid; i < kBr * D / 4; i += kThreads) {
    const int r = i / (D / 4), c = (i % (D / 4)) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row0 + r < N) v = *reinterpret_cast<const float4*>(Q + (row0 + r) * D + c);
    v.x *= q_scale, v.y *= q_scale, v.z *= q_scale, v.w *= q_scale;
    *reinterpret_cast<float4*>(Qs + r * QP + c) = v;
  }

  // --- K/V tiles: load l of a thread is float4 number tid + l * kThreads of the tile.
  // K of the next tile is in flight (in registers) while S is computed, V while P V is: half
  // the staging registers of fetching both at once.
  float4 next[kLoads];
  auto fetch = [&](const float* src, int64_t key0) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int i = tid + l * kThreads;
      const int64_t key = key0 + i / (D / 4);
      next[l] = key < N ? *reinterpret_cast<const float4*>(src + key * D + (i % (D / 4)) * 4)
                        : make_float4(0.f, 0.f, 0.f, 0.f);  // keys past N: zeros, never garbage
    }
  };
  auto stash = [&](float* dst, int pitch) {
#pragma unroll
    for (int l = 0; l < kLoads; ++l) {
      const int i = tid + l * kThreads;
      *reinterpret_cast<float4*>(dst + (i / (D / 4)) * pitch + (i % (D / 4)) * 4) = next[l];
    }
  };

  float m[TM];              // running row max (base 2), the same in the row's C threads
  CompensatedSum l[TM];     // this thread's share of the row sums
  float o[TM][TD];          // O micro-tile: rows g + R i, columns 4 (x + C q) + e
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    m[i] = -INFINITY;
#pragma unroll
    for (int c = 0; c < TD; ++c) o[i][c] = 0.f;
  }

  fetch(K, 0);
  stash(Ks, KP);
  fetch(V, 0);
  stash(Vs, VP);
  __syncthreads();
  int buf = 0;
  for (int64_t key0 = 0; key0 < N; key0 += kBc) {
    const bool more = key0 + kBc < N;
    if (more) fetch(K, key0 + kBc);
    const float* Kb = Ks + buf * T::kKFloats;
    const float* Vb = Vs + buf * T::kVFloats;

    // --- S = Q K^T: TM x TN scores, k four at a time.
    float s[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) s[i][j] = 0.f;
    FA_SIMT_UNROLL_K
    for (int k = 0; k < D; k += 4) {
      float4 kv[TN];
#pragma unroll
      for (int j = 0; j < TN; ++j) kv[j] = *reinterpret_cast<const float4*>(Kb + (x + C * j) * KP + k);
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float4 qv = *reinterpret_cast<const float4*>(Qs + (g + R * i) * QP + k);
#pragma unroll
        for (int j = 0; j < TN; ++j) {
          s[i][j] = fmaf(qv.x, kv[j].x, s[i][j]);
          s[i][j] = fmaf(qv.y, kv[j].y, s[i][j]);
          s[i][j] = fmaf(qv.z, kv[j].z, s[i][j]);
          s[i][j] = fmaf(qv.w, kv[j].w, s[i][j]);
        }
      }
    }
    // The other stage was last read before the previous barrier: it takes the next tile.
    if (more) {
      stash(Ks + (buf ^ 1) * T::kKFloats, KP);
      fetch(V, key0 + kBc);
    }
    if (key0 + kBc > N) {  // the last, partial tile: keys past N score -inf
#pragma unroll
      for (int j = 0; j < TN; ++j)
        if (key0 + x + C * j >= N) {
#pragma unroll
          for (int i = 0; i < TM; ++i) s[i][j] = -INFINITY;
        }
    }

    // --- Online softmax per row; P into this warp's rows of Ps.
    float alpha[TM];  // rescaling of the rows' O by 2^(m_old - m_new)
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float mx = s[i][0];
#pragma unroll
      for (int j = 1; j < TN; ++j) mx = fmaxf(mx, s[i][j]);
#pragma unroll
      for (int off = C / 2; off > 0; off >>= 1) mx = fmaxf(mx, FA_SHFL_XOR(mx, off, C));
      const float m_new = fmaxf(m[i], mx);
      alpha[i] = simt_exp2(m[i] - m_new);
      m[i] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const float p = simt_exp2(s[i][j] - m_new);
        sum += p;
        Ps[(g + R * i) * PP + x + C * j] = p;
      }
      l[i].scale(alpha[i]);
      l[i].add(sum);
    }
    FA_SYNC_WAVE();  // Ps rows are written and read by the same warp

    // --- O = alpha O + P V. The tile's P V is summed on its own first (in the registers S held),
    // then added: O's values are sums of N terms, and adding each one to O directly left errors
    // of 1.7e-5 at N = 16389 (sequential rounding); blocked by tile they stay under 1e-5 at 32768.
    float t[TM][TD];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int c = 0; c < TD; ++c) t[i][c] = 0.f;
    FA_SIMT_UNROLL_PV
    for (int j = 0; j < kBc; j += 4) {
      float4 pv[TM];
#pragma unroll
      for (int i = 0; i < TM; ++i) pv[i] = *reinterpret_cast<const float4*>(Ps + (g + R * i) * PP + j);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        float4 vv[kQuads];
#pragma unroll
        for (int q = 0; q < kQuads; ++q)
          vv[q] = *reinterpret_cast<const float4*>(Vb + (j + jj) * VP + 4 * (x + C * q));
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

    // One barrier orders this tile's reads (K, V, and this warp's Ps) before the next tile's
    // writes, and the next tile's stores before its reads.
    if (more) stash(Vs + (buf ^ 1) * T::kVFloats, VP);
    __syncthreads();
    buf ^= 1;
  }

  // --- O written once: row sums combined across the row's C threads.
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    float sum = l[i].value();
#pragma unroll
    for (int off = C / 2; off > 0; off >>= 1) sum += FA_SHFL_XOR(sum, off, C);
    const float inv_l = 1.f / sum;
    const int64_t row = row0 + g + R * i;
    if (row < N) {
      float* dst = out + (b * N + row) * D;
#pragma unroll
      for (int q = 0; q < kQuads; ++q)
        *reinterpret_cast<float4*>(dst + 4 * (x + C * q)) =
            make_float4(o[i][4 * q] * inv_l, o[i][4 * q + 1] * inv_l, o[i][4 * q + 2] * inv_l,
                        o[i][4 * q + 3] * inv_l);
    }
  }
}

// The kernel of a tile, and its name as `fa resources` reads the compiler's reports.
template <class T>
struct SimtKernel {
  static decltype(&attention_simt<T::D, T::TM, T::TN, T::C, T::R, T::kMinBlocks>) get() {
    return &attention_simt<T::D, T::TM, T::TN, T::C, T::R, T::kMinBlocks>;
  }
  static std::string name() {
    const int p[] = {T::D, T::TM, T::TN, T::C, T::R, T::kMinBlocks};
    std::string n = "attention_simt<";
    for (int i = 0; i < 6; ++i) n += (i ? ", " : "") + std::to_string(p[i]);
    return n + ">";
  }
};

// What the programs' launches() report: kernel name, threads per block, dynamic shared bytes.
struct SimtLaunch {
  std::string kernel;
  int threads;
  int smem_bytes;
};
template <class T>
SimtLaunch simt_launch() {
  SimtLaunch l = {SimtKernel<T>::name(), T::kThreads, T::kSmemBytes};
  return l;
}
inline std::vector<SimtLaunch> simt_launches() {
  std::vector<SimtLaunch> all;
  all.push_back(simt_launch<SimtBig<32>::type>());
  all.push_back(simt_launch<SimtBig<64>::type>());
#if !FA_SIMT_AMD
  all.push_back(simt_launch<SimtSmall<32>::type>());
  all.push_back(simt_launch<SimtSmall<64>::type>());
#endif
  return all;
}

template <class T, class Stream>
void launch_simt_tile(const float* qkv, float* out, int64_t batches, int64_t N, Stream stream) {
  const int64_t row_tiles = (N + T::kBr - 1) / T::kBr;
  attention_simt<T::D, T::TM, T::TN, T::C, T::R, T::kMinBlocks>
      <<<(unsigned)(batches * row_tiles), T::kThreads, T::kSmemBytes, stream>>>(qkv, out, N, row_tiles);
}

#if FA_SIMT_AMD
template <int D>
bool simt_big() {
  return true;
}
#else
// Whether the big tile runs: the first call lets it use more than 48 KB of shared memory where
// the GPU allows it (sm_70 and later); a GPU that does not (sm_61) runs the small tile, as does
// any GPU with FA_SIMT_SMALL=1 (for the tests).
template <int D>
bool simt_big() {
  typedef typename SimtBig<D>::type Big;
  static const bool big = []() -> bool {
    if (settings().simt_small) return false;
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
      return false;
    if (optin < Big::kSmemBytes) return false;
    return cudaFuncSetAttribute(SimtKernel<Big>::get(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                Big::kSmemBytes) == cudaSuccess;
  }();
  return big;
}
#endif

// Chooses the tiles and loads the kernels' code: for the programs' init threads, so that the
// first chunk's kernel time does not include it.
inline void prepare_simt() {
#if FA_SIMT_AMD
  hipFuncAttributes attr;
  (void)hipFuncGetAttributes(&attr, reinterpret_cast<const void*>(SimtKernel<SimtBig<32>::type>::get()));
  (void)hipFuncGetAttributes(&attr, reinterpret_cast<const void*>(SimtKernel<SimtBig<64>::type>::get()));
#else
  cudaFuncAttributes attr;
  if (!simt_big<32>()) (void)cudaFuncGetAttributes(&attr, SimtKernel<SimtSmall<32>::type>::get());
  if (!simt_big<64>()) (void)cudaFuncGetAttributes(&attr, SimtKernel<SimtSmall<64>::type>::get());
#endif
}

// The SIMT kernel for one chunk of `batches` batches. A failed launch shows in the caller's
// launch check.
template <int D, class Stream>
void launch_simt(const float* qkv, float* out, int64_t batches, int64_t N, Stream stream) {
#if FA_SIMT_AMD
  launch_simt_tile<typename SimtBig<D>::type>(qkv, out, batches, N, stream);
#else
  if (simt_big<D>())
    launch_simt_tile<typename SimtBig<D>::type>(qkv, out, batches, N, stream);
  else
    launch_simt_tile<typename SimtSmall<D>::type>(qkv, out, batches, N, stream);
#endif
}

}  // namespace fa

// mfma_on_cuda.h: the AMD wavefront-64 primitives and the fp32 matrix-core (MFMA) builtin that
// src_hip/attention_mfma.h uses, in software on an NVIDIA GPU, so that the same kernel source
// runs on the H100 (make hip-cuda). Included by hip_on_cuda.h only; hipcc never sees it.
//
// A wavefront is 64 consecutive threads of the block (threads 64 w .. 64 w + 63): two CUDA
// warps. What one lane gives to another crosses between the warps through shared memory, each
// wavefront with a scratch of its own and a named barrier of its own (id 1 + w; __syncthreads
// keeps id 0), so the wavefronts of a block never wait for each other.
//
// v_mfma_f32_32x32x2f32 (D = C + A B, A 32 x 2, B 2 x 32, C and D 32 x 32): lanes and registers
// as AMD's matrix instruction calculator prints them for CDNA1 and CDNA2 (tests/data/mfma-*.txt,
// checked by tests/test_mfma_emulation.py):
//   A[i][k]  lane 32 k + i, its one register      B[k][j]  lane 32 k + j, its one register
//   C/D[i][j]  lane 32 (i / 4 % 2) + j, register 4 (i / 8) + i % 4
// Arithmetic: per element two fp32 FMAs, k = 0 then k = 1 (the hardware's order and rounding
// inside the instruction are not documented: bit-equality with it is not claimed).
#pragma once

// At most 8 wavefronts (512 threads) per block: ids 1..8 of the 16 named barriers.
#define FA_EMU_MAX_WAVES 8

// The accumulator's 16 floats per lane, as hipcc's ext_vector_type(16) is indexed.
struct fa_f32x16 {
  float v[16];
  __device__ __forceinline__ float& operator[](int i) { return v[i]; }
  __device__ __forceinline__ const float& operator[](int i) const { return v[i]; }
};

namespace fa_emu {

__device__ __forceinline__ int wave_id() { return threadIdx.x / 64; }
__device__ __forceinline__ int wave_lane() { return threadIdx.x % 64; }

// The 64 threads of this thread's wavefront meet here (bar.sync counts threads: 64 = two warps).
__device__ __forceinline__ void wave_barrier() {
  asm volatile("bar.sync %0, 64;" ::"r"(1 + wave_id()) : "memory");
}

// Each wavefront's exchange area: two values per lane (an MFMA's A and B operands).
__device__ __forceinline__ float* wave_scratch() {
  __shared__ __align__(16) float scratch[FA_EMU_MAX_WAVES][2][64];  // float4 reads of A
  return &scratch[wave_id()][0][0];
}

}  // namespace fa_emu

// __shfl_xor(v, mask, 64) of HIP on a 64-lane wavefront: lane l gets lane l ^ mask's v. Masks
// below 32 stay inside a warp (a shuffle); mask 32 (and above) swaps the two warps' values
// through the scratch. Every lane of the wavefront must call it.
__device__ __forceinline__ float fa_wave64_shfl_xor(float v, int mask) {
  if (mask < 32) return __shfl_xor_sync(0xffffffffu, v, mask, 32);
  float* s = fa_emu::wave_scratch();
  const int lane = fa_emu::wave_lane();
  s[lane] = v;
  fa_emu::wave_barrier();
  const float other = s[(lane ^ mask) & 63];
  fa_emu::wave_barrier();  // every lane has read before the scratch is written again
  return other;
}

// __builtin_amdgcn_mfma_f32_32x32x2f32(a, b, c, cbsz, abid, blgp) with the broadcast controls
// at 0 (the only form the kernel uses). Every lane of the wavefront must call it.
__device__ __forceinline__ fa_f32x16 __builtin_amdgcn_mfma_f32_32x32x2f32(float a, float b, fa_f32x16 c, int cbsz,
                                                                       int abid, int blgp) {
  (void)cbsz, (void)abid, (void)blgp;
  float* A = fa_emu::wave_scratch();  // A[k][i] at A[32 k + i]: as the lanes hold them
  float* B = A + 64;                  // B[k][j] at B[32 k + j]
  const int lane = fa_emu::wave_lane(), j = lane % 32, half = lane / 32;
  A[lane] = a;
  B[lane] = b;
  fa_emu::wave_barrier();
  const float b0 = B[j], b1 = B[32 + j];
  fa_f32x16 d;
#pragma unroll
  for (int g = 0; g < 4; ++g) {  // registers 4 g .. 4 g + 3: rows i = 8 g + 4 half + 0..3
    const int i = 8 * g + 4 * half;
    const float4 a0 = *reinterpret_cast<const float4*>(A + i);
    const float4 a1 = *reinterpret_cast<const float4*>(A + 32 + i);
    d[4 * g + 0] = fmaf(a1.x, b1, fmaf(a0.x, b0, c[4 * g + 0]));
    d[4 * g + 1] = fmaf(a1.y, b1, fmaf(a0.y, b0, c[4 * g + 1]));
    d[4 * g + 2] = fmaf(a1.z, b1, fmaf(a0.z, b0, c[4 * g + 2]));
    d[4 * g + 3] = fmaf(a1.w, b1, fmaf(a0.w, b0, c[4 * g + 3]));
  }
  fa_emu::wave_barrier();  // every lane has read before the next instruction's operands land
  return d;
}

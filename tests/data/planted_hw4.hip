// A student's hw4.hip ported the usual way from a hw4.cu (cuda* -> hip*, the rest kept), with one
// AMD-only mistake planted by PLANT; plainly built, a correct port. For fa's MI210 emulation
// tests (tests/test_wave64.py): each plant passes as hw4.cu (this file after planted_as_cuda.h,
// which gives it CUDA's names and 32-lane warps) and fails as hw4.hip, named.
//
//   fa run t01 --program hw4.hip            (hw4.hip: #define PLANT NAME, then #include this)
//
// The kernel: one 32-lane group per query row (a CUDA warp; half a wavefront on the MI210),
// ROWS rows per block, each lane one key of a 32-key chunk. PLANT=
//   LANE32        the P V loop broadcasts p from lane j with __shfl(p, j): right in a 32-lane
//                 warp, but at HIP's default width of 64 the upper half reads the lower half's row
//   BALLOT32      the keys' valid mask from __ballot kept in an unsigned (32 bits): the upper half
//                 of each wavefront sees no valid key
//   LDS_OVER_64K  K and V staged 256 keys at a time: 133 KB (d = 64) or 68 KB (d = 32) of LDS,
//                 which an NVIDIA GPU takes and the MI210 refuses
//   BLOCK32       one row per block, 32 threads: right, but half of every wavefront idle (a note)
//   CUDA_CALL     a cudaDeviceSynchronize() left in the port: hipcc does not know it
//   HALF_BRANCH   p broadcast at the default width inside `if (__lane_id() < G)`: every lane of a
//                 32-lane warp, but only the lower half of a 64-lane wavefront calls the shuffle
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define LANE32 1
#define BALLOT32 2
#define LDS_OVER_64K 3
#define BLOCK32 4
#define CUDA_CALL 5
#define HALF_BRANCH 6
#ifndef PLANT
#define PLANT 0
#endif

#ifndef FA_AS_CUDA  // as hw4.cu, planted_as_cuda.h gives CUDA's names first
#include <hip/hip_runtime.h>
#endif
#ifdef FA_AS_CUDA
typedef unsigned Mask;  // a warp's ballot
#else
typedef unsigned long long Mask;
#endif

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    hipError_t e_ = (call);                                                                              \
    if (e_ != hipSuccess) {                                                                              \
      fprintf(stderr, "hw4: line %d: %s\n", __LINE__, hipGetErrorString(e_));                            \
      exit(1);                                                                                           \
    }                                                                                                    \
  } while (0)

const int G = 32;                                 // lanes per row, keys per chunk
const int ROWS = PLANT == BLOCK32 ? 1 : 8;        // rows per block
const int STAGE = PLANT == LDS_OVER_64K ? 256 : 64;  // keys of K and V in LDS at a time

template <int D>
__global__ void attention(const float* qkv, float* out, int N) {
  extern __shared__ float lds[];
  float* Ks = lds;                      // STAGE x (D + 1): padded against bank conflicts
  float* Vs = lds + STAGE * (D + 1);    // STAGE x D
  const int b = blockIdx.y, lane = threadIdx.x % 32, r = threadIdx.x / G;
  const int row = blockIdx.x * ROWS + r;
  const float* Q = qkv + (size_t)b * 3 * N * D;
  const float* K = Q + (size_t)N * D;
  const float* V = K + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  float q[D], o[D / G], m = -INFINITY, l = 0.f;
  for (int x = 0; x < D; ++x) q[x] = row < N ? Q[(size_t)row * D + x] * scale : 0.f;
  for (int c = 0; c < D / G; ++c) o[c] = 0.f;

  for (int s0 = 0; s0 < N; s0 += STAGE) {
    __syncthreads();
    for (int i = threadIdx.x; i < STAGE * D; i += blockDim.x) {
      const int j = i / D, x = i % D;
      const bool in = s0 + j < N;
      Ks[j * (D + 1) + x] = in ? K[(size_t)(s0 + j) * D + x] : 0.f;
      Vs[j * D + x] = in ? V[(size_t)(s0 + j) * D + x] : 0.f;
    }
    __syncthreads();
    for (int k0 = 0; k0 < STAGE && s0 + k0 < N; k0 += G) {
      const int key = s0 + k0 + lane;
      float s = 0.f;
      for (int x = 0; x < D; ++x) s += q[x] * Ks[(k0 + lane) * (D + 1) + x];
#if PLANT == BALLOT32
      const unsigned valid = __ballot(key < N);
#else
      const Mask valid = __ballot(key < N);
#endif
      if (!(valid & 1ull << __lane_id())) s = -INFINITY;  // BALLOT32: bits 32..63 are gone
      float mx = s;
      for (int off = G / 2; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor(mx, off));
      const float m_new = fmaxf(m, mx), alpha = __expf(m - m_new), p = __expf(s - m_new);
      float sum = p;
      for (int off = G / 2; off > 0; off /= 2) sum += __shfl_xor(sum, off);
      l = l * alpha + sum;
      for (int c = 0; c < D / G; ++c) o[c] *= alpha;
      for (int j = 0; j < G; ++j) {
#if PLANT == HALF_BRANCH
        float pj = 0.f;
        if (__lane_id() < G) pj = __shfl(p, j);  // the lanes of one row, as the writer thought of them
#elif PLANT == LANE32 || defined(FA_AS_CUDA)
        const float pj = __shfl(p, j);  // lane j of the row: in a 32-lane warp, lane j is the row's
#else
        const float pj = __shfl(p, j, G);  // width 32: lane j of this half of the wavefront
#endif
        for (int c = 0; c < D / G; ++c) o[c] += pj * Vs[(k0 + j) * D + c * G + lane];
      }
      m = m_new;
    }
  }
  if (row < N)
    for (int c = 0; c < D / G; ++c) out[((size_t)b * N + row) * D + c * G + lane] = o[c] / l;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* in = fopen(argv[1], "rb");
  if (!in) return 2;
  int hdr[3];
  if (fread(hdr, 4, 3, in) != 3) return 2;
  const int B = hdr[0], N = hdr[1], d = hdr[2];
  const size_t values = (size_t)B * N * d;
  float* qkv = (float*)malloc(3 * values * sizeof(float));
  float* out = (float*)malloc(values * sizeof(float));
  if (fread(qkv, sizeof(float), 3 * values, in) != 3 * values) return 2;
  fclose(in);

  float *d_qkv, *d_out;
  CHECK(hipMalloc(&d_qkv, 3 * values * sizeof(float)));
  CHECK(hipMalloc(&d_out, values * sizeof(float)));
  CHECK(hipMemcpy(d_qkv, qkv, 3 * values * sizeof(float), hipMemcpyHostToDevice));
  dim3 grid((N + ROWS - 1) / ROWS, B);
  const size_t lds = (size_t)STAGE * (2 * d + 1) * sizeof(float);
  if (d == 32) {
    CHECK(hipFuncSetAttribute((const void*)attention<32>, hipFuncAttributeMaxDynamicSharedMemorySize, (int)lds));
    hipLaunchKernelGGL(attention<32>, grid, dim3(G * ROWS), lds, 0, d_qkv, d_out, N);
  } else {
    CHECK(hipFuncSetAttribute((const void*)attention<64>, hipFuncAttributeMaxDynamicSharedMemorySize, (int)lds));
    hipLaunchKernelGGL(attention<64>, grid, dim3(G * ROWS), lds, 0, d_qkv, d_out, N);
  }
  CHECK(hipGetLastError());
#if PLANT == CUDA_CALL
  cudaDeviceSynchronize();  // left from hw4.cu: hipify's usual miss
#endif
  CHECK(hipDeviceSynchronize());
  CHECK(hipMemcpy(out, d_out, values * sizeof(float), hipMemcpyDeviceToHost));
  FILE* f = fopen(argv[2], "wb");
  fwrite(out, sizeof(float), values, f);
  fclose(f);
  CHECK(hipFree(d_qkv));
  CHECK(hipFree(d_out));
  return 0;
}

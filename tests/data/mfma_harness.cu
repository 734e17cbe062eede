// mfma_harness.cu: runs src_hip/mfma_on_cuda.h's emulated wavefront primitives on an NVIDIA GPU
// for tests/test_mfma_emulation.py, which gives the inputs and judges the outputs against AMD's
// layout tables (tests/data/mfma-f32-32x32x2f32-cdna*.txt).
//
//   mfma_harness mfma IN OUT   IN: per case (one wavefront) 64 a, 64 b, then 64 x 16 c (lane-major)
//                              floats; OUT: 64 x 16 d, lane-major: d = mfma_f32_32x32x2f32(a, b, c)
//   mfma_harness shfl IN OUT   IN: per case 64 floats v; OUT: per case, for each mask of
//                              1 2 4 8 16 32, 64 floats: fa_wave64_shfl_xor(v, mask)
// The cases run four to a block (four wavefronts of 64 threads), each with its own inputs, so the
// wavefronts' exchanges must stay apart.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../src_hip/mfma_primitives.h"  // the emulated MFMA instruction and wave64 shuffle, as fa-hip-cuda has them

constexpr int kWaves = 4;

__global__ void mfma_cases(const float* in, float* out, int cases) {
  const int c = blockIdx.x * kWaves + threadIdx.x / 64, lane = threadIdx.x % 64;
  const bool real = c < cases;  // the last block's spare wavefronts run on zeros, store nothing
  const float* src = in + (size_t)(real ? c : 0) * 64 * 18;
  fa_f32x16 acc;
  for (int r = 0; r < 16; ++r) acc[r] = real ? src[128 + lane * 16 + r] : 0.f;
  const fa_f32x16 d =
      __builtin_amdgcn_mfma_f32_32x32x2f32(real ? src[lane] : 0.f, real ? src[64 + lane] : 0.f, acc, 0, 0, 0);
  if (real)
    for (int r = 0; r < 16; ++r) out[((size_t)c * 64 + lane) * 16 + r] = d[r];
}

__global__ void shfl_cases(const float* in, float* out, int cases) {
  const int c = blockIdx.x * kWaves + threadIdx.x / 64, lane = threadIdx.x % 64;
  const bool real = c < cases;
  const float v = real ? in[(size_t)c * 64 + lane] : 0.f;
  for (int m = 0; m < 6; ++m) {
    const float got = fa_wave64_shfl_xor(v, 1 << m);  // masks 1, 2, 4, 8, 16, 32
    if (real) out[((size_t)c * 6 + m) * 64 + lane] = got;
  }
}

static std::vector<float> read_all(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) std::perror(path), std::exit(1);
  std::vector<float> v;
  float x;
  while (std::fread(&x, sizeof x, 1, f) == 1) v.push_back(x);
  std::fclose(f);
  return v;
}

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e)), std::exit(1);
}

int main(int argc, char** argv) {
  if (argc != 4 || (std::strcmp(argv[1], "mfma") && std::strcmp(argv[1], "shfl")))
    return std::fprintf(stderr, "usage: %s mfma|shfl IN OUT\n", argv[0]), 2;
  const bool mfma = std::strcmp(argv[1], "mfma") == 0;
  const std::vector<float> in = read_all(argv[2]);
  const size_t per_in = mfma ? 64 * 18 : 64, per_out = mfma ? 64 * 16 : 64 * 6;
  const int cases = (int)(in.size() / per_in);
  std::vector<float> out(cases * per_out);
  float *d_in, *d_out;
  check(cudaMalloc(&d_in, in.size() * 4), "cudaMalloc");
  check(cudaMalloc(&d_out, out.size() * 4), "cudaMalloc");
  check(cudaMemcpy(d_in, in.data(), in.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  const int blocks = (cases + kWaves - 1) / kWaves;
  if (mfma)
    mfma_cases<<<blocks, 64 * kWaves>>>(d_in, d_out, cases);
  else
    shfl_cases<<<blocks, 64 * kWaves>>>(d_in, d_out, cases);
  check(cudaGetLastError(), "launch");
  check(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  FILE* f = std::fopen(argv[3], "wb");
  if (!f || std::fwrite(out.data(), 4, out.size(), f) != out.size()) return std::perror(argv[3]), 1;
  return std::fclose(f) == 0 ? 0 : 1;
}

// hw4.cu: FlashAttention forward, homework 4 -- warp-per-row version.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// 8 warps a block, one warp a query row; the block shares 32-key K (padded to d + 1) and V tiles in
// shared memory. Lane t scores key j0 + t, the tile max and sum come from xor butterflies, the weights
// are passed around with __shfl_sync for P V, and lane t owns output dims t and t + 32. To save the
// multiply in the kernel, Q is scaled by 1/sqrt(d) once on the host, right after reading the file.
//
// Builds with the course's example line: nvcc -std=c++11 -O3 -Xptxas="-v" -arch=sm_61 -o hw4 hw4.cu -lm
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

// ---------------------------------------------------------------- errors
// Every CUDA call goes through CHECK: a failure prints where it happened and what CUDA said.
#define CHECK(call)                                                                             \
  do {                                                                                          \
    cudaError_t err_ = (call);                                                                  \
    if (err_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "hw4: %s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

static void fail(const char* what, const char* path) {
  std::fprintf(stderr, "hw4: %s: %s\n", path, what);
  std::exit(2);
}

// ---------------------------------------------------------------- input and output
struct Input {
  int B, N, d;
  std::vector<float> qkv;  // per batch: Q (N x d), K (N x d), V (N x d)
};

static Input read_input(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) fail("cannot open the input", path);
  Input in;
  int header[3];
  if (std::fread(header, sizeof(int), 3, f) != 3) fail("no 12-byte header B, N, d", path);
  in.B = header[0], in.N = header[1], in.d = header[2];
  if (in.B <= 0 || in.N <= 0) fail("B and N must be positive", path);
  if (in.d != 32 && in.d != 64) fail("d must be 32 or 64", path);
  in.qkv.resize((size_t)in.B * 3 * in.N * in.d);
  if (std::fread(in.qkv.data(), sizeof(float), in.qkv.size(), f) != in.qkv.size()) fail("file too short", path);
  if (std::fgetc(f) != EOF) fail("file longer than 12 + 12*B*N*d bytes", path);
  std::fclose(f);
  return in;
}

static void write_output(const char* path, const std::vector<float>& out) {
  FILE* f = std::fopen(path, "wb");
  if (!f) fail("cannot write the output", path);
  if (std::fwrite(out.data(), sizeof(float), out.size(), f) != out.size() || std::fclose(f) != 0)
    fail("write failed", path);
}

// ---------------------------------------------------------------- timing (optional)
// With FA_TIMING=1 in the environment the program prints one line on stderr, the seconds of each
// stage, in the format of fa's own programs:
//   fa-timing: init=S read=S h2d=S kernel=S d2h=S write=S total=S impl=NAME arch=ARCH device=NAME
// fa sets FA_TIMING=1 when it runs a program, and `fa bench` and `fa compare --plot` show these
// stages; without the line they show the whole process only. Nothing else depends on it: keep the
// stage names and the format if you change it, or delete this section and the lines using it.
static double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double init, read, h2d, kernel, d2h, write, total;
  std::string impl, arch, device;
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_warp") {}
  void print_if_asked() const {
    const char* flag = std::getenv("FA_TIMING");
    if (!flag || !*flag || std::strcmp(flag, "0") == 0) return;
    std::string name = device;  // spaces written as '_', to keep the line key=value
    for (size_t i = 0; i < name.size(); ++i)
      if (name[i] == ' ') name[i] = '_';
    std::fprintf(stderr,
                 "fa-timing: init=%.6f read=%.6f h2d=%.6f kernel=%.6f d2h=%.6f write=%.6f total=%.6f impl=%s arch=%s "
                 "device=%s\n",
                 init, read, h2d, kernel, d2h, write, total, impl.c_str(), arch.c_str(), name.c_str());
  }
};


// ---------------------------------------------------------------- the kernel
#ifndef WARPS
#define WARPS 8  // query rows per block (one warp each)
#endif
#define BC 32     // keys per tile: one per lane
const int THREADS = WARPS * 32;
const unsigned FULL = 0xffffffffu;

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, off));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
  return v;
}

// Q arrives already scaled by 1/sqrt(d) (see main).
template <int D>
__global__ void __launch_bounds__(THREADS) attention_warp(const float* __restrict__ qkv, float* __restrict__ out, int N,
                                                         int tiles) {
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  __shared__ float Qs[WARPS][D];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int b = blockIdx.x / tiles, i = (blockIdx.x % tiles) * WARPS + w;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* k = base + (size_t)N * D;
  const float* v = base + (size_t)2 * N * D;
  const int ic = i < N ? i : N - 1;
  for (int x = lane; x < D; x += 32) Qs[w][x] = base[(size_t)ic * D + x];
  __syncwarp();
  const int NO = D / 32;
  float o[NO];
  for (int t = 0; t < NO; ++t) o[t] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    for (int e = threadIdx.x; e < BC * D; e += THREADS) {
      const int r = e / D, c = e % D;
      if (r < bc) Ks[r][c] = k[(size_t)(j0 + r) * D + c], Vs[r][c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    float s = -INFINITY;
    if (lane < bc) {
      s = 0.f;
      for (int x = 0; x < D; ++x) s += Qs[w][x] * Ks[lane][x];
    }
    const float mn = fmaxf(m, warp_max(s));
    const float p = lane < bc ? __expf(s - mn) : 0.f;
    const float a = __expf(m - mn);
    l = l * a + warp_sum(p);
    for (int t = 0; t < NO; ++t) o[t] *= a;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = __shfl_sync(FULL, p, jj);
      for (int t = 0; t < NO; ++t) o[t] += pj * Vs[jj][lane + 32 * t];
    }
    m = mn;
    __syncthreads();
  }
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int t = 0; t < NO; ++t) dst[lane + 32 * t] = o[t] / l;
  }
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  const double start = seconds_now();
  double t = start;
  Input in = read_input(argv[1]);
  {  // Q scaled once here, so the kernel never multiplies by the scale
    const float scale = 1.0f / std::sqrt((float)in.d);
    for (size_t e = 0; e < (size_t)in.B * in.N * in.d; ++e) in.qkv[e] *= scale;
  }
  timing.read = seconds_now() - t;
  const size_t out_values = (size_t)in.B * in.N * in.d;
  std::vector<float> out(out_values);

  t = seconds_now();
  CHECK(cudaFree(0));  // the GPU context is made here: its cost, not the first copy's
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  char arch[32];
  std::snprintf(arch, sizeof arch, "sm_%d%d", prop.major, prop.minor);
  timing.arch = arch, timing.device = prop.name;
  timing.init = seconds_now() - t;

  t = seconds_now();
  float *d_qkv = NULL, *d_out = NULL;
  CHECK(cudaMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_out, out_values * sizeof(float)));
  CHECK(cudaMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), cudaMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  const int tiles = (in.N + WARPS - 1) / WARPS;
  const unsigned blocks = (unsigned)((long long)in.B * tiles);
  if (in.d == 32)
    attention_warp<32><<<blocks, THREADS>>>(d_qkv, d_out, in.N, tiles);
  else
    attention_warp<64><<<blocks, THREADS>>>(d_qkv, d_out, in.N, tiles);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

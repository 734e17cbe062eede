// s02.cu: FlashAttention forward for the course's homework 4 (a student solution made from the
// course seed hw4.cu; its host code is kept: input checks, copies, output, errors, timing).
//
//   ./prog INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: batches in chunks (the chunk's output buffer holds 2^22 floats, reused by every chunk); per chunk a
// row-statistics kernel (a warp per row: max and sum of exp into global m, l) and a P V kernel whose grid also
// splits the keys (KS splits, thread per row, K/V tiles in shared memory) adding its parts with atomicAdd.
//
// Builds with: nvcc -std=c++11 -O3 -arch=sm_61 -o hw4 s02.cu -lm
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_rows") {}
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


// ---------------------------------------------------------------- kernel 1: row statistics
// A warp per query row (SW rows per block, flat rows b * N + i of the launch): lane t walks keys
// t, t + 32, ... with its own running max and sum, then the lanes' (max, sum) pairs are merged by xor
// shuffles. m_out / l_out: the row's max score and its sum of exp(score - max), in global memory.
#ifndef SW
#define SW 8
#endif
template <int D>
__global__ void __launch_bounds__(32 * SW) row_stats(const float* qkv, float* m_out, float* l_out, int N, int rows,
                                                     float scale) {
  __shared__ float qs[SW][D];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int row = blockIdx.x * SW + w;
  const bool live = row < rows;
  const int b = live ? row / N : 0, i = live ? row % N : 0;
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)i * D;
  const float* k = qkv + (size_t)b * 3 * N * D + (size_t)N * D;
  for (int x = lane; x < D; x += 32) qs[w][x] = live ? q[x] * scale : 0.f;
  __syncwarp();
  if (!live) return;  // the same for the whole warp
  float m = -INFINITY, l = 0.f;
  for (int j = lane; j < N; j += 32) {
    const float* kr = k + (size_t)j * D;
    float s = 0.f;
#pragma unroll 8
    for (int x = 0; x < D; ++x) s += qs[w][x] * kr[x];
    const float mn = fmaxf(m, s);
    l = l * __expf(m - mn) + __expf(s - mn);
    m = mn;
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float mo = __shfl_xor_sync(0xffffffffu, m, off), lo = __shfl_xor_sync(0xffffffffu, l, off);
    const float mn = fmaxf(m, mo);
    l = mn == -INFINITY ? 0.f : l * __expf(m - mn) + lo * __expf(mo - mn);
    m = mn;
  }
  if (lane == 0) {
    m_out[row] = m;
    l_out[row] = l;
  }
}

// ---------------------------------------------------------------- kernel 2: P V over a split of the keys
// Grid (query tiles, key splits, batches of the chunk); thread per query row. Each block walks its split's
// keys in tiles of BC (K and V staged in shared memory), weights p = exp(s - m) / l from the row statistics,
// and adds its part of the output row to o_acc with atomicAdd (the splits of a row add up to O).
#ifndef BR
#define BR 64
#endif
#ifndef BC
#define BC 32
#endif
#ifndef KS
#define KS 4
#endif
template <int D>
__global__ void __launch_bounds__(BR) pv_split(const float* qkv, const float* m_in, const float* l_in, float* o_acc,
                                               int N, int chunk, float scale) {
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  const int b = blockIdx.z, i = blockIdx.x * BR + threadIdx.x;
  const bool live = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* k = qb + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = live ? qb[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  const float m = live ? m_in[(size_t)b * N + i] : 0.f;
  const float inv_l = live ? 1.f / l_in[(size_t)b * N + i] : 0.f;
  const int jb = blockIdx.y * chunk, je = jb + chunk < N ? jb + chunk : N;
  for (int j0 = jb; j0 < je; j0 += BC) {
    const int bc = je - j0 < BC ? je - j0 : BC;
    for (int e = threadIdx.x; e < bc * D; e += BR) {
      const int r = e / D, c = e % D;
      Ks[r][c] = k[(size_t)(j0 + r) * D + c];
      Vs[r][c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
#pragma unroll 8
      for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj][x];
      const float p = __expf(s - m) * inv_l;
      for (int x = 0; x < D; ++x) o[x] += p * Vs[jj][x];
    }
    __syncthreads();
  }
  if (live)
    for (int x = 0; x < D; ++x) atomicAdd(&o_acc[((size_t)b * N + i) * D + x], o[x]);
}

template <int D>
static void attention_chunk(const float* qkv, float* d_m, float* d_l, float* d_o, int nb, int N) {
  const float scale = 1.0f / sqrtf((float)D);
  const int rows = nb * N;
  row_stats<D><<<(rows + SW - 1) / SW, 32 * SW>>>(qkv, d_m, d_l, N, rows, scale);
  const int chunk = ((N + KS - 1) / KS + BC - 1) / BC * BC;  // keys per split, whole tiles
  const int splits = (N + chunk - 1) / chunk;
  pv_split<D><<<dim3((N + BR - 1) / BR, splits, nb), BR>>>(qkv, d_m, d_l, d_o, N, chunk, scale);
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "stats_split_atomic";
  const double start = seconds_now();
  double t = start;
  Input in = read_input(argv[1]);
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
  const int N = in.N, d = in.d;
  const size_t nd = (size_t)N * d;
  int chb = (int)(((size_t)1 << 22) / nd);  // batches per chunk: the chunk's output buffer holds 2^22 floats
  if (chb < 1) chb = 1;
  if (chb > in.B) chb = in.B;
  float *d_qkv = NULL, *d_o = NULL, *d_m = NULL, *d_l = NULL;
  CHECK(cudaMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_o, (size_t)chb * nd * sizeof(float)));
  CHECK(cudaMalloc(&d_m, (size_t)chb * N * sizeof(float)));
  CHECK(cudaMalloc(&d_l, (size_t)chb * N * sizeof(float)));
  CHECK(cudaMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), cudaMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  // per chunk: zero the accumulators, statistics, P V, copy the chunk's output back
  t = seconds_now();
  for (int b0 = 0; b0 < in.B; b0 += chb) {
    const int nb = in.B - b0 < chb ? in.B - b0 : chb;
    const size_t vals = (size_t)nb * nd;
    const float* qkv = d_qkv + (size_t)b0 * 3 * nd;
    CHECK(cudaMemset(d_o, 0, vals));
    if (d == 32)
      attention_chunk<32>(qkv, d_m, d_l, d_o, nb, N);
    else
      attention_chunk<64>(qkv, d_m, d_l, d_o, nb, N);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(out.data() + (size_t)b0 * nd, d_o, vals * sizeof(float), cudaMemcpyDeviceToHost));
  }
  timing.kernel = seconds_now() - t;
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_o));
  CHECK(cudaFree(d_m));
  CHECK(cudaFree(d_l));

  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

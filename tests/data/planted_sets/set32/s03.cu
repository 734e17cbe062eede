// hw4.cu: FlashAttention forward for homework 4, from the course seed (`fa init`).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: a block per query row (128 threads). Each thread takes every 128th key with its own online
// softmax, then the block merges the 128 partial results with shared-memory reductions (row max,
// rescaled sums, output columns).
//
// With FA_TIMING=1 it also prints the time of each stage (see "timing" below).
//
// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o hw4 hw4.cu
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_row_block") {}
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
// A block per query row. Thread t walks the keys t, t + THREADS, ... with its own online softmax
// (m, l and an output row o in registers); the block then merges the THREADS partials: the row max
// by a shared-memory tree, each partial rescaled to it, the sums by a second tree and the output
// columns summed from shared memory (THREADS / D threads per column, then one).
#ifndef THREADS_PER_ROW
#define THREADS_PER_ROW 128
#endif

const int THREADS = THREADS_PER_ROW;
static_assert(THREADS % 64 == 0 && THREADS <= 512, "THREADS_PER_ROW: a multiple of 64, at most 512");

// grid (N, B): block (i, b) computes row i of batch b
template <int D>
__global__ void __launch_bounds__(THREADS) attention_row_block(const float* qkv, float* out, int N) {
  const int NPART = THREADS / D;
  __shared__ float qs[D];
  __shared__ float red[THREADS];
  __shared__ float so[THREADS * (D + 1)];
  __shared__ float part[NPART * D];
  const int t = threadIdx.x, i = blockIdx.x, b = blockIdx.y;
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)i * D;
  const float* k = qkv + (size_t)b * 3 * N * D + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  if (t < D) qs[t] = q[t] * scale;
  __syncthreads();

  float o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = t; j < N; j += THREADS) {
    const float4* kr = reinterpret_cast<const float4*>(k + (size_t)j * D);
    const float4* vr = reinterpret_cast<const float4*>(v + (size_t)j * D);
    float s = 0.f;
#pragma unroll
    for (int x4 = 0; x4 < D / 4; ++x4) {
      const float4 kv = kr[x4];
      s += qs[4 * x4] * kv.x + qs[4 * x4 + 1] * kv.y + qs[4 * x4 + 2] * kv.z + qs[4 * x4 + 3] * kv.w;
    }
    const float m_new = fmaxf(m, s);
    const float alpha = __expf(m - m_new), p = __expf(s - m_new);
    l = l * alpha + p;
#pragma unroll
    for (int x4 = 0; x4 < D / 4; ++x4) {
      const float4 vv = vr[x4];
      o[4 * x4] = o[4 * x4] * alpha + p * vv.x;
      o[4 * x4 + 1] = o[4 * x4 + 1] * alpha + p * vv.y;
      o[4 * x4 + 2] = o[4 * x4 + 2] * alpha + p * vv.z;
      o[4 * x4 + 3] = o[4 * x4 + 3] * alpha + p * vv.w;
    }
    m = m_new;
  }

  // the row max over the block
  red[t] = m;
  __syncthreads();
  for (int h = THREADS / 2; h > 0; h >>= 1) {
    if (t < h) red[t] = fmaxf(red[t], red[t + h]);
    __syncthreads();
  }
  const float f = (m == -INFINITY) ? 0.f : __expf(m - red[0]);
  const float ls = l * f;
  __syncthreads();

  // the partials rescaled to the row max: sums into red, output rows into so
  red[t] = ls;
#pragma unroll
  for (int x = 0; x < D; ++x) so[t * (D + 1) + x] = o[x] * f;
  __syncthreads();
  for (int h = THREADS / 2; h > 0; h >>= 1) {
    if (t < h) red[t] += red[t + h];
    __syncthreads();
  }
  {
    const int x = t % D, g = t / D;
    float acc = 0.f;
    for (int u = g * D; u < g * D + D; ++u) acc += so[u * (D + 1) + x];
    part[g * D + x] = acc;
  }
  __syncthreads();
  if (t < D) {
    float acc = 0.f;
    for (int g = 0; g < NPART; ++g) acc += part[g * D + t];
    out[((size_t)b * N + i) * D + t] = acc / ls;
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
  const dim3 grid(in.N, in.B);
  if (in.d == 32)
    attention_row_block<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_row_block<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

// hw4.cu: FlashAttention forward, homework 4 -- one cooperative kernel with a transposed K.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Phase 1: the whole grid transposes every K_b into a scratch K^T (d x N per batch), so that in phase
// 2 consecutive keys of one dimension are consecutive floats. A grid-wide barrier (cooperative groups,
// launched with cudaLaunchCooperativeKernel) separates the phases, so one launch does everything.
// Phase 2: one block per (batch, 64 query rows), one thread a row, K^T and V read through the
// read-only cache (__ldg, const __restrict__), 8 keys at a time.
//
// Builds with: nvcc -std=c++11 -O3 -Xptxas="-v" -arch=sm_61 -o hw4 hw4.cu -lm
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_coop") {}
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
#ifndef BR
#define BR 64  // query rows per block (one thread each)
#endif
#define KSTEP 8  // keys per step of the inner loop
const int THREADS = BR;

template <int D>
__global__ void __launch_bounds__(THREADS) attention_coop(const float* __restrict__ qkv, float* __restrict__ kt,
                                                         float* __restrict__ out, int B, int N, int tiles) {
  cg::grid_group grid = cg::this_grid();
  // phase 1: K_b (N x D) -> K_b^T (D x N), grid-stride over every element of every batch
  const size_t total = (size_t)B * N * D;
  const size_t nthreads = (size_t)gridDim.x * blockDim.x;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += nthreads) {
    const size_t b = e / ((size_t)N * D), rem = e % ((size_t)N * D);
    const int x = (int)(rem / N), j = (int)(rem % N);
    kt[e] = qkv[b * 3 * N * D + (size_t)N * D + (size_t)j * D + x];
  }
  grid.sync();

  // phase 2: attention
  const int b = blockIdx.x / tiles, i = (blockIdx.x % tiles) * BR + threadIdx.x;
  if (b >= B || i >= N) return;
  const float* __restrict__ q = qkv + (size_t)b * 3 * N * D + (size_t)i * D;
  const float* __restrict__ ktb = kt + (size_t)b * N * D;
  const float* __restrict__ v = qkv + (size_t)b * 3 * N * D + (size_t)2 * N * D;
  const float scale = 1.0f / sqrtf((float)D);
  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = __ldg(q + x) * scale, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += KSTEP) {
    const int n = min(KSTEP, N - j0);
    float s[KSTEP];
    float smax = -INFINITY;
    for (int u = 0; u < KSTEP; ++u) {
      s[u] = -INFINITY;
      if (u < n) {
        float acc = 0.f;
        for (int x = 0; x < D; ++x) acc += qi[x] * __ldg(ktb + (size_t)x * N + j0 + u);
        s[u] = acc;
      }
      smax = fmaxf(smax, s[u]);
    }
    const float mn = fmaxf(m, smax);
    const float a = __expf(m - mn);
    l *= a;
    for (int x = 0; x < D; ++x) o[x] *= a;
    for (int u = 0; u < n; ++u) {
      const float p = __expf(s[u] - mn);
      l += p;
      const float* vr = v + (size_t)(j0 + u) * D;
      for (int x = 0; x < D; ++x) o[x] += p * __ldg(vr + x);
    }
    m = mn;
  }
  float* dst = out + ((size_t)b * N + i) * D;
  for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
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
  float* d_kt = NULL;
  CHECK(cudaMalloc(&d_kt, out_values * sizeof(float)));  // K^T of every batch: B x d x N
  int B = in.B, N = in.N;
  int tiles = (in.N + BR - 1) / BR;
  const dim3 grid((unsigned)((long long)in.B * tiles)), block(THREADS);
  void* args[] = {&d_qkv, &d_kt, &d_out, &B, &N, &tiles};
  if (in.d == 32)
    CHECK(cudaLaunchCooperativeKernel((void*)attention_coop<32>, grid, block, args, 0, 0));
  else
    CHECK(cudaLaunchCooperativeKernel((void*)attention_coop<64>, grid, block, args, 0, 0));
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;
  CHECK(cudaFree(d_kt));

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

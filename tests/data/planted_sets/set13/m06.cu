// m06.cu: FlashAttention forward for the course's homework 4 (a starting point made by `fa init`).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// What is done: reading and checking the input (B, N, d, then Q_b K_b V_b per batch), the copies
// to and from the GPU, writing the output (B*N*d floats), and a kernel that is plain and correct:
// one thread per query row, walking every key once with an online softmax. What is yours: make
// the kernel fast. The place is marked TODO(tiles). Check your work with `fa run t01 --program ./hw4`.
//
// With FA_TIMING=1 it also prints the time of each stage (optional: see "timing" below).
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

// ---------------------------------------------------------------- the kernel
// Register blocking: each thread owns two query rows, i0 = q0 + t and i1 = q0 + BR + t, of a block's
// 2*BR rows; grid (ceil(N / (2*BR)), B). The K tile (row pitch D + 1) and the V tile of BC keys are
// loaded into shared memory once for the block, and every key read from shared memory serves both
// rows. Each row keeps its own running max, running sum and output row (the seed's per-key online
// softmax, twice).
#ifndef BR
#define BR 64  // threads per block; each thread has two query rows
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(BC >= 1, "BC: a tile holds one key at least");

template <int D>
__global__ void __launch_bounds__(THREADS) attention_two_rows(const float* qkv, float* out, int B, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y, q0 = blockIdx.x * 2 * BR;
  const int i0 = q0 + threadIdx.x, i1 = q0 + BR + threadIdx.x;
  const bool valid0 = i0 < N, valid1 = i1 < N;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* qa = base + (size_t)(valid0 ? i0 : 0) * D;
  const float* qb = base + (size_t)(valid1 ? i1 : 0) * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float q0r[D], q1r[D], o0[D], o1[D];
  for (int x = 0; x < D; ++x) {
    q0r[x] = qa[x] * scale, q1r[x] = qb[x] * scale;
    o0[x] = 0.f, o1[x] = 0.f;
  }
  float m0 = -INFINITY, l0 = 0.f, m1 = -INFINITY, l1 = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = N - j0 < BC ? N - j0 : BC;
    for (int e = threadIdx.x; e < bc * D; e += BR) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = k[(size_t)(j0 + r) * D + c];
      Vs[e] = v[(size_t)j0 * D + e];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s0 = 0.f, s1 = 0.f;
      for (int x = 0; x < D; ++x) {
        const float kx = Ks[jj * (D + 1) + x];
        s0 += q0r[x] * kx, s1 += q1r[x] * kx;
      }
      const float m0n = fmaxf(m0, s0), m1n = fmaxf(m1, s1);
      const float a0 = __expf(m0 - m0n), a1 = __expf(m0 - m1n);
      const float p0 = __expf(s0 - m0n), p1 = __expf(s1 - m1n);
      l0 = l0 * a0 + p0;
      l1 = l1 * a1 + p1;
      for (int x = 0; x < D; ++x) {
        const float vx = Vs[jj * D + x];
        o0[x] = o0[x] * a0 + p0 * vx;
        o1[x] = o1[x] * a1 + p1 * vx;
      }
      m0 = m0n, m1 = m1n;
    }
    __syncthreads();
  }
  float* ob = out + (size_t)b * N * D;
  if (valid0)
    for (int x = 0; x < D; ++x) ob[(size_t)i0 * D + x] = o0[x] / l0;
  if (valid1)
    for (int x = 0; x < D; ++x) ob[(size_t)i1 * D + x] = o1[x] / l1;
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
  const dim3 grid((in.N + 2 * BR - 1) / (2 * BR), in.B);
  if (in.d == 32)
    attention_two_rows<32><<<grid, THREADS>>>(d_qkv, d_out, in.B, in.N);
  else
    attention_two_rows<64><<<grid, THREADS>>>(d_qkv, d_out, in.B, in.N);
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

// s03.cu: FlashAttention forward, homework 4 (from the course seed hw4.cu).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design (packed half2 arithmetic): a thread per query row, 128 rows a block, grid (row tiles, batch).
// The scaled query row is kept in registers as d / 2 __half2 pairs and every 32-key K tile is stored
// in shared memory as __half2 pairs (half the space and half the shared-memory reads of floats); a
// score is then d / 2 packed __hfma2 operations, two dims at a time. The V tile stays in float, the
// online softmax (m, l, o) in float registers, one key at a time as in the seed.
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
#include <cuda_fp16.h>

#ifndef BR
#define BR 128  // query rows per block, one thread each
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
const int THREADS = BR;

template <int D>
__global__ void __launch_bounds__(THREADS) attention_h2(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  constexpr int D2 = D / 2;
  __shared__ __half2 Kh[BC * D2];  // Kh[j * D2 + x2]: dims 2 x2, 2 x2 + 1 of key j
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y, i = blockIdx.x * BR + threadIdx.x;
  const bool active = i < N;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  __half2 qh[D2];
  float o[D];
#pragma unroll
  for (int x2 = 0; x2 < D2; ++x2) {
    float2 a = make_float2(0.f, 0.f);
    if (active) a = reinterpret_cast<const float2*>(q + (size_t)i * D)[x2];
    qh[x2] = __floats2half2_rn(a.x * scale, a.y * scale);
    o[2 * x2] = o[2 * x2 + 1] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    for (int e = threadIdx.x; e < BC * D2; e += THREADS) {
      const int j = e / D2;
      float2 kv = make_float2(0.f, 0.f);
      if (j < bc) kv = reinterpret_cast<const float2*>(k + (size_t)j0 * D)[e];
      Kh[e] = __floats2half2_rn(kv.x, kv.y);
    }
    for (int e = threadIdx.x; e < BC * D; e += THREADS) Vs[e] = (e / D < bc) ? v[(size_t)j0 * D + e] : 0.f;
    __syncthreads();
    if (active) {
      for (int jj = 0; jj < bc; ++jj) {
        __half2 acc = __float2half2_rn(0.f);
#pragma unroll
        for (int x2 = 0; x2 < D2; ++x2) acc = __hfma2(qh[x2], Kh[jj * D2 + x2], acc);
        const float s = __low2float(acc) + __high2float(acc);
        const float m_new = fmaxf(m, s);
        const float alpha = __expf(m - m_new), p = __expf(s - m_new);
        l = l * alpha + p;
#pragma unroll
        for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
        m = m_new;
      }
    }
    __syncthreads();
  }
  if (active) {
    float* dst = out + ((size_t)b * N + i) * D;
    const float inv = 1.0f / l;
#pragma unroll
    for (int x = 0; x < D; ++x) dst[x] = o[x] * inv;
  }
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_h2";
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
  const dim3 grid((in.N + BR - 1) / BR, in.B);
  if (in.d == 32)
    attention_h2<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_h2<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

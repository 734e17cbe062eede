// hw4.cu: FlashAttention forward, prefetching kernel and two streams (homework 4).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Kernel: one thread per query row (64 per block), K/V tiles of 32 keys in shared memory (K padded
// to d + 1); the next tile is prefetched into registers (float4) while the current one is computed,
// then stored to shared memory after the barrier. Host: the batches are split in two halves, each
// on its own stream with its own page-locked staging and device buffers, so that the copies of one
// half overlap the kernel of the other.
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
#ifndef BR
#define BR 64  // query rows per block: one thread each
#endif
#define BC 32  // keys per tile
const int THREADS = BR;

template <int D>
__global__ void __launch_bounds__(THREADS) attention_prefetch(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  constexpr int C4 = D / 4;
  constexpr int PER = BC * C4 / THREADS;  // float4 of K (and of V) per thread and tile
  static_assert(BC * C4 % THREADS == 0, "whole float4 per thread");
  __shared__ float Ks[BC * (D + 1)];
  __shared__ __align__(16) float Vs[BC * D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  float q[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) q[x] = (i < N) ? qb[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  float4 pk[PER], pv[PER];  // the prefetched tile
  auto fetch = [&](int j0) {
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int e = threadIdx.x + u * THREADS, r = e / C4, c = (e % C4) * 4;
      pk[u] = pv[u] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j0 + r < N) {
        pk[u] = *reinterpret_cast<const float4*>(kb + (size_t)(j0 + r) * D + c);
        pv[u] = *reinterpret_cast<const float4*>(vb + (size_t)(j0 + r) * D + c);
      }
    }
  };
  fetch(0);
  for (int j0 = 0; j0 < N; j0 += BC) {
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int e = threadIdx.x + u * THREADS, r = e / C4, c = (e % C4) * 4;
      float* kr = &Ks[r * (D + 1) + c];
      kr[0] = pk[u].x, kr[1] = pk[u].y, kr[2] = pk[u].z, kr[3] = pk[u].w;
      *reinterpret_cast<float4*>(&Vs[r * D + c]) = pv[u];
    }
    __syncthreads();
    if (j0 + BC < N) fetch(j0 + BC);  // in flight during the computation below

    const int bc = min(BC, N - j0);
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += q[x] * Ks[jj * (D + 1) + x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
      m = m_new;
    }
    __syncthreads();
  }
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    const float inv = 1.f / l;
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
  timing.impl = "attention_prefetch";
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

  // Two halves of the batches: [0, half) on stream 0, [half, B) on stream 1.
  t = seconds_now();
  const size_t per_in = (size_t)3 * in.N * in.d, per_out = (size_t)in.N * in.d;
  const int half = in.B / 2;
  const int b0[2] = {0, half}, nb[2] = {half, in.B - half};
  cudaStream_t st[2];
  float *h_in[2], *h_out[2], *d_in[2], *d_out[2];
  for (int s = 0; s < 2; ++s) {
    CHECK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
    const size_t in_n = (size_t)nb[s] * per_in, out_n = (size_t)nb[s] * per_out;
    CHECK(cudaMallocHost(&h_in[s], in_n * sizeof(float)));
    CHECK(cudaMallocHost(&h_out[s], out_n * sizeof(float)));
    CHECK(cudaMalloc(&d_in[s], in_n * sizeof(float)));
    CHECK(cudaMalloc(&d_out[s], out_n * sizeof(float)));
    std::memcpy(h_in[s], in.qkv.data() + (size_t)b0[s] * per_in, in_n * sizeof(float));
  }
  timing.h2d = seconds_now() - t;  // staging; the copies themselves overlap the kernels

  t = seconds_now();
  for (int s = 0; s < 2; ++s) {
    const size_t in_n = (size_t)nb[s] * per_in, out_n = (size_t)nb[s] * per_out;
    CHECK(cudaMemcpyAsync(d_in[s], h_in[s], in_n * sizeof(float), cudaMemcpyHostToDevice, st[s]));
    const dim3 grid((in.N + BR - 1) / BR, nb[s]);
    if (in.d == 32)
      attention_prefetch<32><<<grid, THREADS, 0, st[s]>>>(d_in[s], d_out[s], in.N);
    else
      attention_prefetch<64><<<grid, THREADS, 0, st[s]>>>(d_in[s], d_out[s], in.N);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(h_out[s], d_out[s], out_n * sizeof(float), cudaMemcpyDeviceToHost, st[s]));
  }
  for (int s = 0; s < 2; ++s) CHECK(cudaStreamSynchronize(st[s]));
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  for (int s = 0; s < 2; ++s)
    std::memcpy(out.data() + (size_t)b0[s] * per_out, h_out[s], (size_t)nb[s] * per_out * sizeof(float));
  timing.d2h = seconds_now() - t;
  for (int s = 0; s < 2; ++s) {
    CHECK(cudaStreamDestroy(st[s]));
    CHECK(cudaFreeHost(h_in[s]));
    CHECK(cudaFreeHost(h_out[s]));
    CHECK(cudaFree(d_in[s]));
    CHECK(cudaFree(d_out[s]));
  }
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

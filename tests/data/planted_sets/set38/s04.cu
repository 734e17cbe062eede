// hw4.cu: FlashAttention forward, homework 4 (speed-contest entry, "producer warp").
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A software pipeline with a producer warp, after the warp-specialised kernels of FlashAttention-2/3:
// warp 0 of each block only copies K/V tiles (float4) into one of two shared-memory buffers, while
// warps 1..4 (128 consumer threads, a query row each) compute on the other buffer; one barrier per
// tile hands the buffers over. Every tile but the last is whole, so the main loop has no bounds
// checks at all; the last tile (the only one that can be short) is done after the loop.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_pipe") {}
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
#define BR 128  // query rows per block: one consumer thread each
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif

const int THREADS = BR + 32;  // the consumers and one producer warp
static_assert(BR % 32 == 0 && BR + 32 <= 1024, "BR: whole consumer warps");

// The producer warp copies tile t (bc keys) into a buffer; rows past bc are zeroed.
template <int D>
__device__ __forceinline__ void load_tile(const float* k, const float* v, int j0, int bc, float* Kb, float* Vb, int lane) {
  constexpr int D4 = D / 4;
  const float4* k4 = reinterpret_cast<const float4*>(k + (size_t)j0 * D);
  const float4* v4 = reinterpret_cast<const float4*>(v + (size_t)j0 * D);
  for (int e4 = lane; e4 < BC * D4; e4 += 32) {
    const bool ok = e4 / D4 < bc;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    reinterpret_cast<float4*>(Kb)[e4] = ok ? k4[e4] : zero;
    reinterpret_cast<float4*>(Vb)[e4] = ok ? v4[e4] : zero;
  }
}

// A whole tile for one consumer row: scores, the online softmax update, P V.
template <int D>
__device__ __forceinline__ void consume_tile(const float* Kb, const float* Vb, const float (&q)[D], float (&o)[D],
                                             float& m, float& l) {
  float s[BC], tmax = -INFINITY;
#pragma unroll
  for (int jj = 0; jj < BC; ++jj) {
    float acc = 0.f;
#pragma unroll 16
    for (int x = 0; x < D; ++x) acc += q[x] * Kb[jj * D + x];
    s[jj] = acc;
    tmax = fmaxf(tmax, acc);
  }
  const float m_new = fmaxf(m, tmax);
  const float alpha = __expf(m - m_new);
  float psum = 0.f;
  for (int x = 0; x < D; ++x) o[x] *= alpha;
#pragma unroll
  for (int jj = 0; jj < BC; ++jj) {
    const float p = __expf(s[jj] - m_new);
    psum += p;
#pragma unroll 16
    for (int x = 0; x < D; ++x) o[x] += p * Vb[jj * D + x];
  }
  l = l * alpha + psum;
  m = m_new;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_pipe(const float* qkv, float* out, int N) {
  __shared__ __align__(16) float Ks[2][BC * D];
  __shared__ __align__(16) float Vs[2][BC * D];
  const int b = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const float* qg = qkv + (size_t)b * 3 * N * D;
  const float* kg = qg + (size_t)N * D;
  const float* vg = kg + (size_t)N * D;
  const int nt = (N + BC - 1) / BC;
  const int i = blockIdx.x * BR + tid - 32;  // consumers' query row
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D], m = -INFINITY, l = 0.f;
  if (warp > 0)
    for (int x = 0; x < D; ++x) q[x] = i < N ? qg[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;

  if (warp == 0) load_tile<D>(kg, vg, 0, N < BC ? N : BC, Ks[0], Vs[0], lane);
  __syncthreads();
  for (int t = 0; t + 1 < nt; ++t) {
    if (warp == 0) {
      const int j1 = (t + 1) * BC;
      load_tile<D>(kg, vg, j1, N - j1 < BC ? N - j1 : BC, Ks[(t + 1) & 1], Vs[(t + 1) & 1], lane);
    } else {
      consume_tile<D>(Ks[t & 1], Vs[t & 1], q, o, m, l);
    }
    __syncthreads();
  }
  if (warp == 0) return;

  // the last tile: bc keys, masked
  const float* Kb = Ks[(nt - 1) & 1];
  const float* Vb = Vs[(nt - 1) & 1];
  const int bc = N - (nt - 1) * BC;
  float s[BC], tmax = -INFINITY;
#pragma unroll
  for (int jj = 0; jj < BC; ++jj) {
    float acc = 0.f;
#pragma unroll 16
    for (int x = 0; x < D; ++x) acc += q[x] * Kb[jj * D + x];
    s[jj] = jj < bc ? acc : -INFINITY;
    tmax = fmaxf(tmax, s[jj]);
  }
  const float m_new = fmaxf(m, tmax);
  const float alpha = __expf(m - m_new);
  for (int x = 0; x < D; ++x) o[x] *= alpha;
  for (int jj = 0; jj < bc; ++jj) {
    const float p = __expf(s[jj] - m_new);
    for (int x = 0; x < D; ++x) o[x] += p * Vb[jj * D + x];
  }
  m = m_new;

  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
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
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), (unsigned)in.B);
  if (in.d == 32)
    attention_pipe<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_pipe<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

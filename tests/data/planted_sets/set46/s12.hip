// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4 -- lanes own dims, one flat grid.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: 4 wavefronts a block, a wavefront a query row, and within it lane x owns dim x of q and of
// the output (lanes x >= d hold zeros). Tiles of 32 keys of K (rows padded to d + 1 floats) and V in
// LDS, loaded by the whole block between __syncthreads. For each key the lanes multiply their q and
// K elements and a 64-lane __shfl_xor butterfly adds the products, so every lane has the score and
// runs the same base-2 online softmax (log2(e) in the scale). The grid is one flattened dimension of
// B x ceil(N / 4) blocks (block = batch * row tiles + row tile), launched with hipLaunchKernelGGL.
//
// Builds with: hipcc -std=c++14 -O3 --offload-arch=gfx90a -o hw4-amd hw4.hip -lm (an MI210 is gfx90a)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <hip/hip_runtime.h>

// ---------------------------------------------------------------- errors
// Every HIP call goes through CHECK: a failure prints where it happened and what HIP said.
#define CHECK(call)                                                                             \
  do {                                                                                          \
    hipError_t err_ = (call);                                                                  \
    if (err_ != hipSuccess) {                                                                  \
      std::fprintf(stderr, "hw4-amd: %s:%d: %s\n", __FILE__, __LINE__, hipGetErrorString(err_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

static void fail(const char* what, const char* path) {
  std::fprintf(stderr, "hw4-amd: %s: %s\n", path, what);
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_dims") {}
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
#ifndef WAVE
#define WAVE 64  // lanes of a wavefront (the MI210's)
#endif
#ifndef ROWS
#define ROWS 4  // query rows per block: one wavefront each
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
const int THREADS = ROWS * WAVE;

#define LOG2E 1.4426950408889634f

// Butterflies over the whole wavefront (64 lanes on the MI210).
__device__ __forceinline__ float wave_max(float v) {
  for (int off = WAVE / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}
__device__ __forceinline__ float wave_sum(float v) {
  for (int off = WAVE / 2; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_dims(const float* __restrict__ qkv, float* __restrict__ out, int B, int N) {
  static_assert(D <= WAVE, "a lane per dim");
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int lane = threadIdx.x % WAVE, wave = threadIdx.x / WAVE;
  const int tiles = N / ROWS;
  const int b = blockIdx.x / tiles;
  if (b >= B) return;  // the whole block: no barrier is skipped by part of it
  const int i = (blockIdx.x - b * tiles) * ROWS + wave;
  const bool active = i < N;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = LOG2E / sqrtf((float)D);

  const float qx = (active && lane < D) ? q[(size_t)i * D + lane] * scale : 0.f;
  float o = 0.f, l = 0.f, m = -INFINITY;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int nk = min(BC, N - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < nk * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = k[(size_t)j0 * D + e];
      Vs[e] = v[(size_t)j0 * D + e];
    }
    __syncthreads();
    for (int jj = 0; jj < nk; ++jj) {
      const float s = wave_sum(lane < D ? qx * Ks[jj * (D + 1) + lane] : 0.f);
      const float m_new = fmaxf(m, s);
      const float alpha = exp2f(m - m_new);
      const float p = exp2f(s - m_new);
      l = l * alpha + p;
      if (lane < D) o = o * alpha + p * Vs[jj * D + lane];
      m = m_new;
    }
  }
  if (active && lane < D) out[((size_t)b * N + i) * D + lane] = o / l;
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
  CHECK(hipFree(0));  // the GPU context is made here: its cost, not the first copy's
  hipDeviceProp_t prop;
  CHECK(hipGetDeviceProperties(&prop, 0));
  const std::string gcn = prop.gcnArchName;
  timing.arch = gcn.substr(0, gcn.find(':')), timing.device = prop.name;  // gfx90a:sramecc+:xnack-: gfx90a
  timing.init = seconds_now() - t;

  t = seconds_now();
  float *d_qkv = NULL, *d_out = NULL;
  CHECK(hipMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(hipMalloc(&d_out, out_values * sizeof(float)));
  CHECK(hipMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), hipMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  const long long tiles = (in.N + ROWS - 1) / ROWS;
  const unsigned blocks = (unsigned)(tiles * in.B);
  if (in.d == 32)
    hipLaunchKernelGGL(attention_dims<32>, dim3(blocks), dim3(THREADS), 0, 0, d_qkv, d_out, in.B, in.N);
  else
    hipLaunchKernelGGL(attention_dims<64>, dim3(blocks), dim3(THREADS), 0, 0, d_qkv, d_out, in.B, in.N);
  CHECK(hipGetLastError());
  CHECK(hipDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(hipMemcpy(out.data(), d_out, out_values * sizeof(float), hipMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(hipFree(d_qkv));
  CHECK(hipFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

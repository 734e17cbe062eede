// s08.cu: FlashAttention forward, homework 4 (from the course seed hw4.cu).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design (shuffle reductions, a flattened grid): a warp per query row, 4 warps a block, a 1-D grid
// over the B * N rows (block x covers flat rows 4x .. 4x + 3, which may span two batches, so each warp
// finds its own batch). Every warp reads the K and V rows of its 32-key tile straight from global
// memory through the read-only cache (no shared memory, no block barriers); lane j scores key j. The
// tile max is an xor butterfly (every lane gets it); the tile's weight sum is a shfl_down tree into
// lane 0, which keeps the row's running sum l; lane x owns output dims x and x + 32.
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
#ifndef BC
#define BC 32  // keys per tile (one per lane)
#endif
#ifndef WARPS
#define WARPS 4  // warps (query rows) per block
#endif
const int THREADS = WARPS * 32;
const unsigned FULL = 0xffffffffu;

template <int D>
__global__ void __launch_bounds__(THREADS) attention_flat(const float* __restrict__ qkv, float* __restrict__ out, int N,
                                                         long long rows) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int b = (int)(row / N), i = (int)(row % N);
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = rsqrtf((float)D);
  constexpr int NC = D / 32;

  float qi[D], o[NC], m = -INFINITY, l = 0.f;
#pragma unroll
  for (int x = 0; x < D; ++x) qi[x] = __ldg(q + (size_t)i * D + x) * scale;
#pragma unroll
  for (int c = 0; c < NC; ++c) o[c] = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    float s = -INFINITY;
    if (lane < bc) {
      const float4* kr = reinterpret_cast<const float4*>(k + (size_t)(j0 + lane) * D);
      s = 0.f;
#pragma unroll
      for (int x4 = 0; x4 < D / 4; ++x4) {
        const float4 kk = __ldg(kr + x4);
        s += qi[4 * x4] * kk.x + qi[4 * x4 + 1] * kk.y + qi[4 * x4 + 2] * kk.z + qi[4 * x4 + 3] * kk.w;
      }
    }
    float tmax = s;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(FULL, tmax, off));
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    const float p = lane < bc ? __expf(s - m_new) : 0.f;
    float psum = p;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) psum += __shfl_down_sync(FULL, psum, off);
    if (lane == 0) l = l * alpha + psum;
#pragma unroll
    for (int c = 0; c < NC; ++c) o[c] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = __shfl_sync(FULL, p, jj);
      const float* vr = v + (size_t)(j0 + jj) * D;
#pragma unroll
      for (int c = 0; c < NC; ++c) o[c] += pj * __ldg(vr + lane + 32 * c);
    }
    m = m_new;
  }
  const float inv = 1.0f / l;
  float* dst = out + (size_t)row * D;
#pragma unroll
  for (int c = 0; c < NC; ++c) dst[lane + 32 * c] = o[c] * inv;
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_flat";
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
  const long long rows = (long long)in.B * in.N;
  const unsigned blocks = (unsigned)((rows + WARPS - 1) / WARPS);
  if (in.d == 32)
    attention_flat<32><<<blocks, THREADS>>>(d_qkv, d_out, in.N, rows);
  else
    attention_flat<64><<<blocks, THREADS>>>(d_qkv, d_out, in.N, rows);
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

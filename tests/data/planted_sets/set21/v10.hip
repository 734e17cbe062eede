// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4 (started from the course seed made by `fa init`).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// One block per query row, the keys of a tile spread over the block (ported from the CUDA version).
//
// Builds with the course's example line: hipcc -std=c++14 -O3 --offload-arch=gfx908 -o hw4-amd hw4.hip -lm
// (an MI210 is gfx90a).
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("flash_row") {}
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
// One block per query row: its KT threads score the KT keys of a tile at once (thread t: key j0 + t),
// the tile's max and sum are reduced over the block (a butterfly in each wavefront, then one slot per wavefront
// in shared memory), the weights go to shared memory, and thread t accumulates the output dimension
// t % D over the keys t / D, t / D + G, ... (G = KT / D); the G partial rows are added at the end.
#ifndef KT
#define KT 256  // keys per tile = threads per block
#endif
const int THREADS = KT;
static_assert(KT % 64 == 0 && KT <= 1024, "KT: whole warps and wavefronts, at most 1024");

// butterflies over the whole warp / wavefront, whatever its width (32 on NVIDIA, 64 on the MI210)
__device__ __forceinline__ float wave_max(float x) {
  for (int off = warpSize / 2; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor(x, off));
  return x;
}

__device__ __forceinline__ float wave_sum(float x) {
  for (int off = warpSize / 2; off > 0; off >>= 1) x += __shfl_xor(x, off);
  return x;
}
const int NSLOT = THREADS / 32;  // slots for the per-warp results

template <int D>
__global__ void __launch_bounds__(THREADS) flash_row(const float* qkv, float* out, int N) {
  constexpr int G = KT / D;  // key groups of the P V product
  __shared__ float qs[D];
  __shared__ float Ps[KT];
  __shared__ float red_max[32], red_sum[32];
  __shared__ float Op[KT];
  const int t = threadIdx.x;  // key of the tile
  const long long row = blockIdx.x;  // flat query row: batch row / N, row row % N
  const int b = (int)(row / N), i = (int)(row % N);
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)i * D;
  const float* k = qkv + (size_t)b * 3 * N * D + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  if (t < D) qs[t] = q[t] / sqrtf((float)D);
  __syncthreads();

  const int x = t % D, g = t / D;
  float acc = 0.f, m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += KT) {
    const int bc = min(KT, N - j0);
    float s = -INFINITY;  // threads past the last key weigh nothing
    if (t < bc) {
      const float* kr = k + (size_t)(j0 + t) * D;
      s = 0.f;
#pragma unroll 8
      for (int y = 0; y < D; ++y) s += qs[y] * kr[y];
    }
    const float wm = wave_max(s);
    if ((t & 31) == 0) red_max[t >> 5] = wm;
    __syncthreads();
    float tmax = red_max[0];
    for (int w = 1; w < NSLOT; ++w) tmax = fmaxf(tmax, red_max[w]);
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    const float p = __expf(s - m_new);
    Ps[t] = p;
    const float ws = wave_sum(p);
    if ((t & 31) == 0) red_sum[t >> 5] = ws;
    __syncthreads();  // the slots and Ps are written
    float psum = red_sum[0];
    for (int w = 1; w < NSLOT; ++w) psum += red_sum[w];
    l = l * alpha + psum;
    acc *= alpha;
    for (int jj = g; jj < bc; jj += G) acc += Ps[jj] * v[(size_t)(j0 + jj) * D + x];
    m = m_new;
    __syncthreads();  // Ps and the slots are read before the next tile writes them
  }
  Op[t] = acc;
  __syncthreads();
  if (t < D) {
    float o = 0.f;
    for (int h = 0; h < G; ++h) o += Op[h * D + t];
    out[(size_t)row * D + t] = o / l;
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
  const long long rows = (long long)in.B * in.N;  // one block per query row
  if (in.d == 32)
    hipLaunchKernelGGL(flash_row<32>, dim3((unsigned)rows), dim3(THREADS), 0, 0, d_qkv, d_out, in.N);
  else
    hipLaunchKernelGGL(flash_row<64>, dim3((unsigned)rows), dim3(THREADS), 0, 0, d_qkv, d_out, in.N);
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

// hw4.hip: homework 4, FlashAttention forward for the AMD partition (HIP, from the course seed).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// One block of 256 threads per query row. Keys in tiles of 256: thread t scores key j0 + t; the tile's
// max and sum by block reductions (a shared-memory tree with barriers, then one wavefront finishes with
// shuffles); the weights go to LDS, and for P V the block splits into 256 / d groups of d threads
// (thread = output dim), each group taking every (256 / d)-th key; the groups' parts are added at the end.
//
// Build: hipcc -std=c++14 -O3 --offload-arch=gfx90a -o hw4-amd hw4.hip -lm
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_blockrow") {}
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
#define BR 1  // query rows per block
#endif
#ifndef BC
#define BC 256  // keys per tile: one per thread
#endif

const int THREADS = BC;
static_assert(BR == 1, "BR: one row per block in this design");
static_assert(BC == 256, "BC: the reductions are written for 256 threads");

// Block-wide max (MAX) or sum of v over the 256 threads; every thread gets the result.
template <bool MAX>
__device__ float block_reduce(float v, float* red) {
  const int t = threadIdx.x;
  red[t] = v;
  __syncthreads();
  for (int s = THREADS / 2; s > 32; s >>= 1) {  // down to 64 values: the last warp takes them
    if (t < s) red[t] = MAX ? fmaxf(red[t], red[t + s]) : red[t] + red[t + s];
    __syncthreads();
  }
  if (t < warpSize) {
    float x = MAX ? fmaxf(red[t], red[t + warpSize]) : red[t] + red[t + warpSize];
    for (int off = warpSize / 2; off > 0; off >>= 1) {
      const float y = __shfl_down(x, off);
      x = MAX ? fmaxf(x, y) : x + y;
    }
    if (t == 0) red[THREADS] = x;
  }
  __syncthreads();
  const float total = red[THREADS];
  __syncthreads();
  return total;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_blockrow(const float* qkv, float* out, int N) {
  __shared__ float qs[D];
  __shared__ float red[THREADS + 1];
  __shared__ float Ps[BC];
  __shared__ float part[THREADS];
  constexpr int G = THREADS / D;  // groups of D threads in the P V product
  const int t = threadIdx.x, g = t / D, x = t % D;
  const long long row = blockIdx.x;
  const int b = (int)(row / N), i = (int)(row % N);
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  if (t < D) qs[t] = base[(size_t)i * D + t] * scale;
  __syncthreads();

  float m = -INFINITY, l = 0.f, o = 0.f;  // o: this thread's part of output dim x
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = N - j0 < BC ? N - j0 : BC;
    float s = -INFINITY;
    if (t < bc) {
      const float* kr = k + (size_t)(j0 + t) * D;
      float acc = 0.f;
      for (int c = 0; c < D; ++c) acc += qs[c] * kr[c];
      s = acc;
    }
    const float m_new = fmaxf(m, block_reduce<true>(s, red));
    const float alpha = __expf(m - m_new);
    const float p = t < bc ? __expf(s - m_new) : 0.f;
    l = l * alpha + block_reduce<false>(p, red);
    Ps[t] = p;
    __syncthreads();
    float acc = 0.f;
    for (int jj = g; jj < bc; jj += G) acc += Ps[jj] * v[(size_t)(j0 + jj) * D + x];
    o = o * alpha + acc;
    m = m_new;
    __syncthreads();  // Ps is rewritten by the next tile
  }
  part[t] = o;
  __syncthreads();
  if (t < D) {
    float sum = 0.f;
    for (int gg = 0; gg < G; ++gg) sum += part[gg * D + t];
    out[((size_t)b * N + i) * D + t] = sum / l;
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
  const unsigned blocks = (unsigned)((long long)in.B * in.N);  // one block per query row
  if (in.d == 32)
    attention_blockrow<32><<<blocks, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_blockrow<64><<<blocks, THREADS>>>(d_qkv, d_out, in.N);
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

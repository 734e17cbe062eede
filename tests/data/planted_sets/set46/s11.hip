// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4 -- a thread per row, two kernels.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: a thread per query row, 128 rows a block, grid (row tiles, batch); 64-key tiles of K
// (rows padded to d + 1 floats) and V in LDS, loaded cooperatively; base-2 online softmax per key
// (log2(e) folded into the scale). The first kernel writes the un-normalised output rows and each
// row's sum l; a second, element-wise kernel divides every output value by its row's l (one thread
// per value, fully coalesced). Copies and both kernels are queued on one stream
// (hipMemcpyAsync, hipLaunchKernelGGL on the stream) and the host waits once per stage.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_acc") {}
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
#define BR 128  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 64  // keys per tile
#endif
#define LOG2E 1.4426950408889634f
const int THREADS = BR;
const int NORM_THREADS = 256;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");

template <int D>
__global__ void __launch_bounds__(THREADS) attention_acc(const float* __restrict__ qkv, float* __restrict__ out,
                                                         float* __restrict__ lsum, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const bool active = i < N;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = LOG2E / sqrtf((float)D);

  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = active ? q[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
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
      const float* kr = &Ks[jj * (D + 1)];
      float s = 0.f;
      for (int x = 0; x < D; ++x) s += qi[x] * kr[x];
      const float m_new = fmaxf(m, s);
      const float alpha = exp2f(m - m_new);
      const float p = exp2f(s - m_new);
      l = l * alpha + p;
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
      m = m_new;
    }
  }
  if (active) {
    const size_t row = (size_t)b * N + i;
    for (int x = 0; x < D; ++x) out[row * D + x] = o[x];
    lsum[row] = l;
  }
}

// Divides output value e (row e / d) by its row's sum.
__global__ void __launch_bounds__(NORM_THREADS) normalise(float* __restrict__ out, const float* __restrict__ lsum,
                                                          long long total, int d) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < total) out[e] /= lsum[e / d];
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
  hipStream_t stream;
  CHECK(hipStreamCreate(&stream));
  CHECK(hipMemcpyAsync(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), hipMemcpyHostToDevice, stream));
  CHECK(hipStreamSynchronize(stream));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  const long long rows = (long long)in.B * in.N;
  float* d_l = NULL;
  CHECK(hipMalloc(&d_l, (size_t)rows * sizeof(float)));
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), (unsigned)in.B);
  if (in.d == 32)
    hipLaunchKernelGGL(attention_acc<32>, grid, dim3(THREADS), 0, stream, d_qkv, d_out, d_l, in.N);
  else
    hipLaunchKernelGGL(attention_acc<64>, grid, dim3(THREADS), 0, stream, d_qkv, d_out, d_l, in.N);
  CHECK(hipGetLastError());
  const unsigned norm_blocks = (unsigned)(((long long)out_values + NORM_THREADS - 1) / NORM_THREADS);
  hipLaunchKernelGGL(normalise, dim3(norm_blocks), dim3(NORM_THREADS), 0, stream, d_out, d_l, rows, in.d);
  CHECK(hipGetLastError());
  CHECK(hipStreamSynchronize(stream));
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(hipMemcpyAsync(out.data(), d_out, out_values * sizeof(float), hipMemcpyDeviceToHost, stream));
  CHECK(hipStreamSynchronize(stream));
  timing.d2h = seconds_now() - t;
  CHECK(hipStreamDestroy(stream));
  CHECK(hipFree(d_qkv));
  CHECK(hipFree(d_out));
  CHECK(hipFree(d_l));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

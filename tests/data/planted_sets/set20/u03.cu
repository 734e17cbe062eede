// hw4.cu: attention for homework 4, done in two kernels.
//
//   ./hw4 INPUT OUTPUT
//
// Kernel 1 writes the scaled scores S = Q K^T / sqrt(d) of a group of batches to a buffer in
// global memory (16 x 16 threads per block, one score each). Kernel 2 takes one thread per
// query row and makes three passes over the row of S: its max, the sum of the weights, and the
// output row. Batches go in groups so that S stays under 256 MB.
//
// Build: nvcc -std=c++11 -O3 -Xptxas="-v" -arch=sm_61 -o hw4 hw4.cu -lm
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
#ifndef TS
#define TS 16  // score tile: TS x TS threads
#endif
#ifndef ROWS
#define ROWS 128  // threads per block of the row kernel
#endif
const int THREADS = ROWS;

template <int D>
__global__ void scores_kernel(const float* qkv, float* S, int N, int b0) {
  const int j = blockIdx.x * TS + threadIdx.x;
  const int i = blockIdx.y * TS + threadIdx.y;
  const int bl = blockIdx.z;
  if (i >= N || j >= N) return;
  const float* base = qkv + (size_t)(b0 + bl) * 3 * N * D;
  const float* q = base + (size_t)i * D;
  const float* k = base + (size_t)N * D + (size_t)j * D;
  float s = 0.f;
#pragma unroll
  for (int x = 0; x < D; ++x) s += q[x] * k[x];
  S[((size_t)bl * N + i) * N + j] = s / sqrtf((float)D);
}

template <int D>
__global__ void __launch_bounds__(THREADS) softmax_pv(const float* qkv, float* S, float* out, int N, int b0, int nb) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= (long long)nb * N) return;
  const int bl = (int)(r / N), i = (int)(r % N);
  float* srow = S + ((size_t)bl * N + i) * N;
  const float* v = qkv + (size_t)(b0 + bl) * 3 * N * D + (size_t)2 * N * D;

  // pass 1: the row max
  float m = -INFINITY;
  for (int j = 0; j < N; ++j) m = fmaxf(m, srow[j]);
  // pass 2: the weights and their sum
  float l = 0.f;
  for (int j = 0; j < N; ++j) {
    const float p = __expf(srow[j] - m);
    srow[j] = p;
    l += p;
  }
  // pass 3: the output row
  float o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) o[x] = 0.f;
  for (int j = 0; j < N; ++j) {
    const float p = __expf(srow[j] - m);
#pragma unroll
    for (int x = 0; x < D; ++x) o[x] += p * v[(size_t)j * D + x];
  }
  float* dst = out + ((size_t)(b0 + bl) * N + i) * D;
#pragma unroll
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
  // batches per group: S holds group * N * N floats, at most 64M (256 MB)
  long long group = (64LL << 20) / ((long long)in.N * in.N);
  if (group < 1) group = 1;
  if (group > in.B) group = in.B;
  float* d_s = NULL;
  CHECK(cudaMalloc(&d_s, (size_t)group * in.N * in.N * sizeof(float)));
  for (int b0 = 0; b0 < in.B; b0 += (int)group) {
    const int nb = (int)(in.B - b0 < group ? in.B - b0 : group);
    const dim3 sblock(TS, TS), sgrid((in.N + TS - 1) / TS, (in.N + TS - 1) / TS, nb);
    const long long rows = (long long)nb * in.N;
    const unsigned blocks = (unsigned)((rows + THREADS - 1) / THREADS);
    if (in.d == 32) {
      scores_kernel<32><<<sgrid, sblock>>>(d_qkv, d_s, in.N, b0);
      softmax_pv<32><<<blocks, THREADS>>>(d_qkv, d_s, d_out, in.N, b0, nb);
    } else {
      scores_kernel<64><<<sgrid, sblock>>>(d_qkv, d_s, in.N, b0);
      softmax_pv<64><<<blocks, THREADS>>>(d_qkv, d_s, d_out, in.N, b0, nb);
    }
    CHECK(cudaGetLastError());
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_s));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

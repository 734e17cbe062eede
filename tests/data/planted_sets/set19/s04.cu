// s04.cu: FlashAttention forward for the course's homework 4 (a starting point made by `fa init`).
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
// The seed's kernel (one thread per query row, online softmax), with 16-byte loads: Q, K and V rows
// are read as float4 (a row of d floats is d / 4 float4, 16-byte aligned since d is 32 or 64), and
// the output row is written as float4 too.
#ifndef BR
#define BR 128  // query rows per block: one thread each, so also the threads per block
#endif

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");

template <int D>
__global__ void __launch_bounds__(THREADS) attention_rows4(const float* qkv, float* out, int B, int N) {
  const int D4 = D / 4;
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= (long long)B * N) return;
  const int b = (int)(row / N), i = (int)(row % N);
  const float4* base = reinterpret_cast<const float4*>(qkv + (size_t)b * 3 * N * D);  // Q_b
  const float4* q4 = base + (size_t)i * D4;
  const float4* k4 = base + (size_t)N * D4;
  const float4* v4 = k4 + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float4 qi[D4], o[D4];
  for (int t = 0; t < D4; ++t) {
    const float4 a = q4[t];
    qi[t] = make_float4(a.x * scale, a.y * scale, a.z * scale, a.w * scale);
    o[t] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < N; ++j) {
    float s = 0.f;
    for (int t = 0; t < D4; ++t) {
      const float4 kk = k4[(size_t)j * D4 + t];
      s += qi[t].x * kk.x + qi[t].y * kk.y + qi[t].z * kk.z + qi[t].w * kk.w;
    }
    const float m_new = fmaxf(m, s);
    const float alpha = __expf(m - m_new), p = __expf(s - m_new);
    l = l * alpha + p;
    for (int t = 0; t < D4; ++t) {
      const float4 vv = v4[(size_t)j * D4 + t];
      o[t].x = o[t].x * alpha + p * vv.x;
      o[t].y = o[t].y * alpha + p * vv.y;
      o[t].z = o[t].z * alpha + p * vv.z;
      o[t].w = o[t].w * alpha + p * vv.w;
    }
    m = m_new;
  }
  float4* dst = reinterpret_cast<float4*>(out + (size_t)row * D);
  const float inv = 1.0f / l;
  for (int t = 0; t < D4; ++t) dst[t] = make_float4(o[t].x * inv, o[t].y * inv, o[t].z * inv, o[t].w * inv);
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
  const long long rows = (long long)in.B * in.N;
  const unsigned blocks = (unsigned)((rows + THREADS - 1) / THREADS);
  if (in.d == 32)
    attention_rows4<32><<<blocks, THREADS>>>(d_qkv, d_out, in.B, in.N);
  else
    attention_rows4<64><<<blocks, THREADS>>>(d_qkv, d_out, in.B, in.N);
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

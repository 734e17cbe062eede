// hw4.cu: FlashAttention forward, tiled, with the K/V tiles double-buffered in shared memory.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// One thread per query row (q and o in registers), a block of BR rows of one batch (grid y = batch).
// Two shared-memory buffers for each of K and V: while the block computes on the current tile the
// next one is already being loaded into the other buffer, so one barrier per tile is enough.
//
// Builds with: nvcc -std=c++11 -O3 -arch=sm_90 -o hw4 hw4.cu
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
#ifndef BC
#define BC 32  // keys per tile
#endif
static_assert(BR >= 32 && BR <= 1024, "BR: 32 to 1024 threads");

template <int D>
__global__ void __launch_bounds__(BR) attention_db(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  __shared__ float Kbuf[2][BC * (D + 1)];  // K rows padded to D + 1
  __shared__ float Vbuf[2][BC * D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = rsqrtf((float)D);
  const bool valid = i < N;

  float qi[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) {
    qi[x] = valid ? q[(size_t)i * D + x] * scale : 0.f;
    o[x] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  float* kc = Kbuf[0];  // the tile computed on
  float* vc = Vbuf[0];
  float* kn = Kbuf[1];  // the tile loaded meanwhile
  float* vn = Vbuf[1];

  {  // prologue: tile 0 into the current buffers
    const int bc = min(BC, N);
    for (int e = threadIdx.x; e < bc * D; e += BR) {
      const int r = e / D, c = e - r * D;
      kc[r * (D + 1) + c] = k[e];
      vc[e] = v[e];
    }
  }
  __syncthreads();

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    const int jn = j0 + BC;
    if (jn < N) {  // prefetch the next tile into the other buffers
      const int bn = min(BC, N - jn);
      const float* kt = k + (size_t)jn * D;
      const float* vt = v + (size_t)jn * D;
      for (int e = threadIdx.x; e < bn * D; e += BR) {
        const int r = e / D, c = e - r * D;
        kn[r * (D + 1) + c] = kt[e];
        vn[e] = vt[e];
      }
    }
    for (int jj = 0; jj < bc; ++jj) {
      const float* kr = kc + jj * (D + 1);
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += qi[x] * kr[x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
      const float* vr = vc + jj * D;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * vr[x];
      m = m_new;
    }
    __syncthreads();  // everyone is done with the current buffers, the next tile is in
    float* tk = kc;   // swap current and next
    kc = kn;
    kn = tk;
  }

  if (valid) {
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
  timing.impl = "attention_db";
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
    attention_db<32><<<grid, BR>>>(d_qkv, d_out, in.N);
  else
    attention_db<64><<<grid, BR>>>(d_qkv, d_out, in.N);
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

// hw4.cu: FlashAttention forward for the course's homework 4 (made from the course seed).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design (week 2): a thread per query row, 128 rows per block, 32-key tiles with K stored transposed
// in shared memory (Kt[x][j], a row pitch of BC + 4 floats, which keeps float4 alignment), so that
// a thread reads four consecutive keys of one dim with one float4 load and scores its row against
// four keys at a time into a register tile of 32 scores. V tile row-major. Base-2 weights
// (log2(e) folded into the query scale), one rescale per tile.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_kt") {}
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
#define BR 128  // query rows per block: one thread each, so also the threads per block
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif

const int THREADS = BR;
const int KTP = BC + 4;  // row pitch of the transposed K tile
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(BC % 4 == 0 && BC <= 64, "BC: a multiple of 4, at most 64 (a register tile)");

template <int D>
__global__ void __launch_bounds__(THREADS) attention_kt(const float* qkv, float* out, int N) {
  __shared__ __align__(16) float Kt[D * KTP];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float qscale = 1.4426950408889634f / sqrtf((float)D);  // log2(e) / sqrt(d)

  float qi[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) qi[x] = i < N ? q[(size_t)i * D + x] * qscale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    const int nk = (bc + 3) & ~3;
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Kt[c * KTP + r] = k[(size_t)(j0 + r) * D + c];
      Vs[e] = v[(size_t)j0 * D + e];
    }
    __syncthreads();

    float sc[BC];
    float tmax = -INFINITY;
#pragma unroll
    for (int g4 = 0; g4 < BC / 4; ++g4) {
      float4 acc = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      if (4 * g4 < nk) {
        acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int x = 0; x < D; ++x) {
          const float4 kk = reinterpret_cast<const float4*>(Kt + x * KTP)[g4];
          acc.x += qi[x] * kk.x, acc.y += qi[x] * kk.y, acc.z += qi[x] * kk.z, acc.w += qi[x] * kk.w;
        }
      }
      sc[4 * g4] = acc.x, sc[4 * g4 + 1] = acc.y, sc[4 * g4 + 2] = acc.z, sc[4 * g4 + 3] = acc.w;
      tmax = fmaxf(tmax, fmaxf(fmaxf(acc.x, acc.y), fmaxf(acc.z, acc.w)));
    }
    const float m_new = fmaxf(m, tmax);
    const float alpha = exp2f(m - m_new);
    float psum = 0.f;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      sc[jj] = exp2f(sc[jj] - m_new);
      psum += sc[jj];
    }
    l = l * alpha + psum;
#pragma unroll
    for (int x = 0; x < D; ++x) o[x] *= alpha;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      if (jj < nk) {
#pragma unroll
        for (int x = 0; x < D; ++x) o[x] += sc[jj] * Vs[jj * D + x];
      }
    }
    m = m_new;
  }
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
    attention_kt<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_kt<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

// hw4.cu: FlashAttention forward, homework 4.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Block of 64 x 8 threads: 8 query rows per block, tiles of BC = 64 keys. Thread (tx, ty) scores key
// j0 + tx for row ty; the row's tile max and tile sum are tree reductions over the row's 64 slots in
// shared memory (the last 32 slots inside one warp, unrolled); the weights go to a shared P tile and
// thread (tx, ty) accumulates output dim tx of row ty. Q (scaled), K (rows padded to d + 1) and V tiles
// in shared memory.
//
// Build: nvcc -std=c++11 -O3 -arch=sm_90 -o hw4 hw4.cu -lm
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
#define BR 8  // query rows per block
#endif
#ifndef BC
#define BC 64  // keys per tile: one per thread of a row
#endif
static_assert(BC == 64, "BC: the reductions are written for 64 slots");
const int THREADS = BC * BR;
static_assert(THREADS <= 1024, "BR: at most 1024 threads");

// Reduce the 64 slots r[0..63] of one row into r[0]; called by all 64 threads of the row after a
// barrier. Slots 32..63 are folded in by the first warp, then the warp finishes on its own.
template <bool MAX>
__device__ __forceinline__ float op(float a, float b) {
  return MAX ? fmaxf(a, b) : a + b;
}
template <bool MAX>
__device__ __forceinline__ void row_reduce(float* r, int tx) {
  if (tx < 32) {
    r[tx] = op<MAX>(r[tx], r[tx + 32]);
    r[tx] = op<MAX>(r[tx], r[tx + 16]);
    r[tx] = op<MAX>(r[tx], r[tx + 8]);
    r[tx] = op<MAX>(r[tx], r[tx + 4]);
    r[tx] = op<MAX>(r[tx], r[tx + 2]);
    r[tx] = op<MAX>(r[tx], r[tx + 1]);
  }
}

template <int D>
__global__ void __launch_bounds__(THREADS) flash_block_rows(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  __shared__ float Qs[BR * D];
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  __shared__ float Ps[BR * BC];
  __shared__ float red[BR * BC];

  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * BC + tx;
  const int b = blockIdx.y;
  const int q0 = blockIdx.x * BR;
  const float* Q = qkv + (size_t)b * 3 * N * D;
  const float* K = Q + (size_t)N * D;
  const float* V = K + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  for (int e = tid; e < BR * D; e += THREADS) {
    const int r = e / D;
    Qs[e] = (q0 + r < N) ? Q[(size_t)q0 * D + e] * scale : 0.f;
  }
  float* rr = red + ty * BC;
  float* pr = Ps + ty * BC;
  const float* qr = Qs + ty * D;

  float m = -INFINITY, l = 0.f, o = 0.f;  // o: output dim tx of row ty (tx < D)
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    for (int e = tid; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = K[(size_t)j0 * D + e];
      Vs[e] = V[(size_t)j0 * D + e];
    }
    __syncthreads();

    float s = -INFINITY;
    if (tx < bc) {
      const float* kr = Ks + tx * (D + 1);
      float acc = 0.f;
#pragma unroll 16
      for (int x = 0; x < D; ++x) acc += qr[x] * kr[x];
      s = acc;
    }
    rr[tx] = s;
    __syncthreads();
    row_reduce<true>(rr, tx);
    __syncthreads();
    const float m_new = fmaxf(m, rr[0]);
    const float p = (tx < bc) ? __expf(s - m_new) : 0.f;
    __syncthreads();
    rr[tx] = p;
    pr[tx] = p;
    __syncthreads();
    row_reduce<false>(rr, tx);
    __syncthreads();
    const float alpha = __expf(m - m_new);
    l = l * alpha + rr[0];
    if (tx < D) {
      float acc = 0.f;
      for (int jj = 0; jj < bc; ++jj) acc += pr[jj] * Vs[jj * D + tx];
      o = o * alpha + acc;
    }
    m = m_new;
  }

  const int i = q0 + ty;
  if (i < N && tx < D) out[((size_t)b * N + i) * D + tx] = o / l;
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
  timing.impl = "flash_block_rows";
  const dim3 block(BC, BR);
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), (unsigned)in.B);
  if (in.d == 32)
    flash_block_rows<32><<<grid, block>>>(d_qkv, d_out, in.N);
  else
    flash_block_rows<64><<<grid, block>>>(d_qkv, d_out, in.N);
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

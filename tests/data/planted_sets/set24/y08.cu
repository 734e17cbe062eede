// hw4.cu: FlashAttention forward with register micro-tiles (a 2-D thread block).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Block dim3(16, 16) = 256 threads for a BR = 64-row query tile of one batch, key tiles of BC = 32.
// Thread (ty, tx) computes a 4 x 2 micro-tile of scores: rows ty + 16a (a < 4), two keys; the Q
// and K tiles are in shared memory (pitch D + 1). A row's max and sum are reduced over the 16
// threads tx of its half-warp with xor shuffles (offsets 8..1). The weights go to a shared P tile;
// then thread (ty, tx) updates rows ty + 16a, dims tx + 16c of the output.
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
#define TX 16
#define TY 16
#ifndef BR
#define BR 64  // query rows per block
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
#define RA (BR / TY)  // rows per thread
#define KB (BC / TX)  // keys per thread
#define FULL 0xffffffffu
static_assert(BR % TY == 0 && BC % TX == 0, "tiles must split over the 16 x 16 threads");

__device__ __forceinline__ float row_max16(float x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(FULL, x, off));
  return x;
}
__device__ __forceinline__ float row_sum16(float x) {
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
  return x;
}

template <int D>
__global__ void __launch_bounds__(TX * TY) attention_micro(const float* __restrict__ qkv, float* __restrict__ out,
                                                           int N) {
  constexpr int DC = D / TX;  // output dims per thread
  __shared__ float Qs[BR * (D + 1)];
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  __shared__ float Ps[BR * (BC + 1)];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx;
  const int b = blockIdx.y, q0 = blockIdx.x * BR;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  for (int e = tid; e < BR * D; e += TX * TY) {
    const int r = e / D, c = e - r * D;
    Qs[r * (D + 1) + c] = (q0 + r < N) ? qb[(size_t)q0 * D + e] * scale : 0.f;
  }
  float m[RA], l[RA], o[RA][DC];
#pragma unroll
  for (int a = 0; a < RA; ++a) {
    m[a] = -INFINITY, l[a] = 0.f;
#pragma unroll
    for (int c = 0; c < DC; ++c) o[a][c] = 0.f;
  }

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();  // previous tile's Ks, Vs, Ps are finished with
    for (int e = tid; e < BC * D; e += TX * TY) {
      const int r = e / D, c = e - r * D;
      const bool ok = r < bc;
      Ks[r * (D + 1) + c] = ok ? kb[(size_t)j0 * D + e] : 0.f;
      Vs[e] = ok ? vb[(size_t)j0 * D + e] : 0.f;
    }
    __syncthreads();

    // scores of the micro-tile: rows ty + 16a, keys kc + kk
    const int kc = tx * KB;
    float s[RA][KB];
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) s[a][kk] = 0.f;
#pragma unroll 4
    for (int x = 0; x < D; ++x) {
      float kv[KB];
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) kv[kk] = Ks[(kc + kk) * (D + 1) + x];
#pragma unroll
      for (int a = 0; a < RA; ++a) {
        const float qv = Qs[(ty + TY * a) * (D + 1) + x];
#pragma unroll
        for (int kk = 0; kk < KB; ++kk) s[a][kk] += qv * kv[kk];
      }
    }

    // online softmax per row; the weights go to Ps
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      float tmax = -INFINITY;
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) {
        if (kc + kk >= bc) s[a][kk] = -INFINITY;
        tmax = fmaxf(tmax, s[a][kk]);
      }
      const float m_new = fmaxf(m[a], row_max16(tmax));
      const float alpha = __expf(m[a] - m_new);
      float psum = 0.f;
#pragma unroll
      for (int kk = 0; kk < KB; ++kk) {
        const float p = __expf(s[a][kk] - m_new);
        psum += p;
        Ps[(ty + TY * a) * (BC + 1) + tx + TX * kk] = p;
      }
      l[a] = l[a] * alpha + row_sum16(psum);
      m[a] = m_new;
#pragma unroll
      for (int c = 0; c < DC; ++c) o[a][c] *= alpha;
    }
    __syncthreads();  // Ps complete

#pragma unroll
    for (int a = 0; a < RA; ++a) {
      const float* pr = Ps + (ty + TY * a) * (BC + 1);
      for (int jj = 0; jj < bc; ++jj) {
        const float p = pr[jj];
#pragma unroll
        for (int c = 0; c < DC; ++c) o[a][c] += p * Vs[jj * D + tx + TX * c];
      }
    }
  }

#pragma unroll
  for (int a = 0; a < RA; ++a) {
    const int i = q0 + ty + TY * a;
    if (i < N) {
      float* dst = out + ((size_t)b * N + i) * D;
      const float inv = 1.f / l[a];
#pragma unroll
      for (int c = 0; c < DC; ++c) dst[tx + TX * c] = o[a][c] * inv;
    }
  }
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_micro";
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
  const dim3 grid((in.N + BR - 1) / BR, in.B), block(TX, TY);
  if (in.d == 32)
    attention_micro<32><<<grid, block>>>(d_qkv, d_out, in.N);
  else
    attention_micro<64><<<grid, block>>>(d_qkv, d_out, in.N);
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

// s08.cu: FlashAttention forward for the course's homework 4 (a student solution made from the
// course seed hw4.cu; its host code is kept: input checks, copies, output, errors, timing).
//
//   ./prog INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: three kernels launched once for all batches (grid z / y = batch): tiled scores into a global
// B x N x N scratch S, a row softmax with one block per row, tiled P V.
//
// Builds with: nvcc -std=c++11 -O3 -arch=sm_61 -o hw4 s08.cu -lm
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


// ---------------------------------------------------------------- kernel 1: scores S = Q K^T * scale
// A TS x TS block computes a TS x TS tile of S: the TS query rows and TS keys of the tile are staged in
// shared memory (rows padded to D + 1 floats), thread (tx, ty) computes S[i0 + ty][j0 + tx].
#ifndef TS
#define TS 16
#endif
template <int D>
__global__ void __launch_bounds__(TS * TS) scores_kernel(const float* q, const float* k, float* S, int N, int ldS,
                                                         size_t q_batch, size_t s_batch, float scale) {
  __shared__ float Qs[TS][D + 1];
  __shared__ float Ks[TS][D + 1];
  q += blockIdx.z * q_batch, k += blockIdx.z * q_batch, S += blockIdx.z * s_batch;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * TS + tx;
  const int i0 = blockIdx.y * TS, j0 = blockIdx.x * TS;
  for (int e = tid; e < TS * D; e += TS * TS) {
    const int r = e / D, c = e % D;
    Qs[r][c] = i0 + r < N ? q[(size_t)(i0 + r) * D + c] : 0.f;
    Ks[r][c] = j0 + r < N ? k[(size_t)(j0 + r) * D + c] : 0.f;
  }
  __syncthreads();
  float acc = 0.f;
#pragma unroll 8
  for (int x = 0; x < D; ++x) acc += Qs[ty][x] * Ks[tx][x];
  const int i = i0 + ty, j = j0 + tx;
  if (i < N && j < N) S[(size_t)i * ldS + j] = acc * scale;
}

// ---------------------------------------------------------------- warp and block reductions
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Block-wide max and sum: each warp reduces by shuffles and puts its value in red[warp]; the first warp
// folds the slots and leaves the result in red[0] for everybody. The block is a multiple of 32 threads.
__device__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_max(lane < nw ? red[lane] : -INFINITY);
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  v = red[0];
  __syncthreads();  // red is used again by the next reduction
  return v;
}
__device__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_sum(lane < nw ? red[lane] : 0.f);
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  v = red[0];
  __syncthreads();
  return v;
}

// ---------------------------------------------------------------- kernel 2: row softmax, in place
// One block per row of S (blockIdx.x = row, blockIdx.y = batch of the launch): row max, then
// p = exp(s - max) and the row sum, then p / sum written back over the scores.
#ifndef SM_THREADS
#define SM_THREADS 256
#endif
__global__ void __launch_bounds__(SM_THREADS) softmax_rows(float* S, int N, int ldS, size_t s_batch) {
  __shared__ float red[32];
  float* row = S + blockIdx.y * s_batch + (size_t)blockIdx.x * ldS;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < N; j += blockDim.x) m = fmaxf(m, row[j]);
  m = block_max(m, red);
  float l = 0.f;
  for (int j = threadIdx.x; j < N; j += blockDim.x) {
    const float p = __expf(row[j] - m);
    row[j] = p;
    l += p;
  }
  l = block_sum(l, red);
  const float inv = 1.f / l;
  for (int j = threadIdx.x; j < N; j += blockDim.x) row[j] *= inv;
}

// ---------------------------------------------------------------- kernel 3: O = P V
// A block of 32 x PR threads computes PR rows of O: per tile of PK keys, the PR x PK weights and the PK x D
// values are staged in shared memory; thread (tx, ty) owns O[i0 + ty][tx + 32 c].
#ifndef PR
#define PR 16
#endif
#ifndef PK
#define PK 32
#endif
template <int D>
__global__ void __launch_bounds__(32 * PR) pv_kernel(const float* P, const float* v, float* o, int N, int ldP,
                                                     size_t p_batch, size_t v_batch, size_t o_batch) {
  __shared__ float Ps[PR][PK + 1];
  __shared__ float Vs[PK][D];
  P += blockIdx.y * p_batch, v += blockIdx.y * v_batch, o += blockIdx.y * o_batch;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
  const int i0 = blockIdx.x * PR, i = i0 + ty;
  float acc[D / 32];
  for (int c = 0; c < D / 32; ++c) acc[c] = 0.f;
  for (int j0 = 0; j0 < N; j0 += PK) {
    for (int e = tid; e < PR * PK; e += 32 * PR) {
      const int r = e / PK, c = e % PK;
      Ps[r][c] = (i0 + r < N && j0 + c < N) ? P[(size_t)(i0 + r) * ldP + j0 + c] : 0.f;
    }
    for (int e = tid; e < PK * D; e += 32 * PR) {
      const int r = e / D, c = e % D;
      Vs[r][c] = j0 + r < N ? v[(size_t)(j0 + r) * D + c] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int jj = 0; jj < PK; ++jj) {
      const float p = Ps[ty][jj];
      for (int c = 0; c < D / 32; ++c) acc[c] += p * Vs[jj][tx + 32 * c];
    }
    __syncthreads();
  }
  if (i < N)
    for (int c = 0; c < D / 32; ++c) o[(size_t)i * D + tx + 32 * c] = acc[c];
}

// ---------------------------------------------------------------- all batches at once: three launches
// S holds every batch's N x N scores (B x N x N floats); the batch is blockIdx.z (scores) or blockIdx.y.
template <int D>
static void attention_all(const float* qkv, float* S, float* o, int B, int N) {
  const float scale = 1.0f / sqrtf((float)D);
  const size_t nd = (size_t)N * D, nn = (size_t)N * N;
  const dim3 sgrid((N + TS - 1) / TS, (N + TS - 1) / TS, B);
  scores_kernel<D><<<sgrid, dim3(TS, TS)>>>(qkv, qkv + nd, S, N, N, 3 * nd, nn, scale);
  softmax_rows<<<dim3(N, B), SM_THREADS>>>(S, N, N, nn);
  pv_kernel<D><<<dim3((N + PR - 1) / PR, B), dim3(32, PR)>>>(S, qkv + 2 * nd, o, N, N, nn, 3 * nd, nd);
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "three_kernels_all_batches";
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
  const size_t s_elems = in.B * in.N * in.N;  // the scores of every batch
  float *d_qkv = NULL, *d_out = NULL, *d_S = NULL;
  CHECK(cudaMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_out, out_values * sizeof(float)));
  CHECK(cudaMalloc(&d_S, s_elems * sizeof(float)));
  CHECK(cudaMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), cudaMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  if (in.d == 32)
    attention_all<32>(d_qkv, d_S, d_out, in.B, in.N);
  else
    attention_all<64>(d_qkv, d_S, d_out, in.B, in.N);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_S));

  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

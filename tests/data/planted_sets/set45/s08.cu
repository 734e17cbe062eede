// hw4.cu: FlashAttention forward for the course's homework 4, launched in chunks of batches.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: a warp per query row, 8 rows a block (block dim3(32, 8)), one key per lane on tiles of
// 32 keys (K with a row pitch of d + 1, V plain) in shared memory, row max and sum by xor
// butterflies, weights by __shfl_sync, lane dims lane + 32 t. The host launches the kernel on
// chunks of at most 64 batches at a time, grid (row tiles, batches of the chunk), through a small
// launch helper templated on d, so that no single launch runs for long on the course's GTX 1080
// (it also drives a display and has a watchdog).
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("chunked_rows") {}
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
#ifndef ROWS
#define ROWS 8  // query rows (warps) per block
#endif
#ifndef CHUNK_B
#define CHUNK_B 64  // batches per launch
#endif
#define BC 32
const int THREADS = 32 * ROWS;
const unsigned FULL = 0xffffffffu;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, off));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
  return v;
}

// qkv, out: the chunk's first batch. grid = (ceil(N / ROWS), batches in the chunk).
template <int D>
__global__ void __launch_bounds__(THREADS) chunked_rows(const float* qkv, float* out, int N) {
  constexpr int DPL = D / 32;
  __shared__ float Qs[ROWS][D];
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane;
  const int b = blockIdx.y;
  const int i = blockIdx.x * ROWS + w;
  const bool valid = i < N;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const float* q = base + (size_t)(valid ? i : N - 1) * D;
  for (int x = lane; x < D; x += 32) Qs[w][x] = q[x] * scale;

  float m = -INFINITY, l = 0.f, o[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) o[t] = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    for (int e = tid; e < bc * D; e += THREADS) {
      const int r = e / D, c = e - r * D;
      Ks[r][c] = k[(size_t)j0 * D + e];
      Vs[r][c] = v[(size_t)j0 * D + e];
    }
    __syncthreads();
    float s = -INFINITY;
    if (lane < bc) {
      float acc = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) acc += Qs[w][x] * Ks[lane][x];
      s = acc;
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float alpha = __expf(m - m_new);
    const float p = __expf(s - m_new);
    l = l * alpha + warp_sum(p);
#pragma unroll
    for (int t = 0; t < DPL; ++t) o[t] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = __shfl_sync(FULL, p, jj);
#pragma unroll
      for (int t = 0; t < DPL; ++t) o[t] += pj * Vs[jj][lane + 32 * t];
    }
    m = m_new;
  }
  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
#pragma unroll
    for (int t = 0; t < DPL; ++t) dst[lane + 32 * t] = o[t] / l;
  }
}

// Launches the batches [b0, b0 + nb) of the problem.
template <int D>
static void launch_chunk(const float* d_qkv, float* d_out, int N, int b0, int nb) {
  if (nb <= 0) return;
  const size_t in_batch = (size_t)3 * N * D, out_batch = (size_t)N * D;
  const dim3 grid((unsigned)((N + ROWS - 1) / ROWS), (unsigned)nb), block(32, ROWS);
  chunked_rows<D><<<grid, block>>>(d_qkv + (size_t)b0 * in_batch, d_out + (size_t)b0 * out_batch, N);
  CHECK(cudaGetLastError());
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
  const int chunks = (in.B + CHUNK_B - 1) / CHUNK_B;
  for (int c = 0; c < chunks; ++c) {
    const int b0 = c * CHUNK_B;
    const int nb = c == chunks - 1 ? in.B % CHUNK_B : CHUNK_B;
    if (in.d == 32)
      launch_chunk<32>(d_qkv, d_out, in.N, b0, nb);
    else
      launch_chunk<64>(d_qkv, d_out, in.N, b0, nb);
  }
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

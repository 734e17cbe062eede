// hw4.cu: FlashAttention forward for the course's homework 4, with the score tile in shared memory.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: 256 threads a block for BR = 32 query rows and tiles of BC = 32 keys, grid (row tiles,
// batch). The scaled Q tile, the K tile (both with a row pitch of d + 1) and the V tile sit in
// shared memory, and so does the whole 32 x 32 score tile S (pitch 33). Three phases per tile:
// (1) scores: thread t takes key t / 8 and scores it against 4 rows (t % 8 + 8 u), so each K row
// is read by one group only; (2) softmax: 8 lanes per row (4 rows a warp) take the row max and
// the row sum with width-8 shuffles and write the weights back into S; (3) P V: the same 8 lanes
// own the row's output dims g + 8 t. The per-row state (m, l, o) stays in registers.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("score_tile") {}
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
constexpr int BR = 32;   // query rows per block
constexpr int BC = 32;   // keys per tile
constexpr int LPR = 8;   // lanes per row in the softmax and P V phases
constexpr int THREADS = BR * LPR;
const unsigned FULL = 0xffffffffu;

__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int off = LPR / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, off, LPR));
  return v;
}
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int off = LPR / 2; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off, LPR);
  return v;
}

template <int D>
__global__ void __launch_bounds__(THREADS) score_tile(const float* qkv, float* out, int N) {
  constexpr int DPL = D / LPR;      // output dims per lane
  constexpr int KPL = BC / LPR;     // keys per lane in the softmax phase
  constexpr int RPT = BR / LPR;     // rows per thread in the score phase
  __shared__ float Qs[BR][D + 1];
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  __shared__ float S[BR][BC + 1];
  const int tid = threadIdx.x;
  const int b = blockIdx.y, q0 = blockIdx.x * BR;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = tid; e < BR * D; e += THREADS) {
    const int r = e / D, c = e - r * D;
    const int row = min(q0 + r, N - 1);
    Qs[r][c] = base[(size_t)row * D + c] * scale;
  }

  // softmax / P V mapping: row r, lane g of the row's group
  const int r = tid / LPR, g = tid % LPR;
  // score mapping: key kc, rows kr + LPR u
  const int kc = tid / LPR, kr = tid % LPR;

  float m = -INFINITY, l = 0.f, o[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) o[t] = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();  // the previous tile's K, V and S are no longer read
    for (int e = tid; e < bc * D; e += THREADS) {
      const int rr = e / D, c = e - rr * D;
      Ks[rr][c] = k[(size_t)j0 * D + e];
      Vs[rr][c] = v[(size_t)j0 * D + e];
    }
    __syncthreads();

    // (1) scores
#pragma unroll
    for (int u = 0; u < RPT; ++u) {
      const int row = kr + LPR * u;
      float acc = -INFINITY;
      if (kc < bc) {
        acc = 0.f;
#pragma unroll
        for (int x = 0; x < D; ++x) acc += Qs[row][x] * Ks[kc][x];
      }
      S[row][kc] = acc;
    }

    // (2) softmax update of row r
    float s[KPL];
    float tmax = -INFINITY;
#pragma unroll
    for (int u = 0; u < KPL; ++u) {
      s[u] = S[r][g + LPR * u];
      tmax = fmaxf(tmax, s[u]);
    }
    tmax = group_max(tmax);
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    float psum = 0.f;
#pragma unroll
    for (int u = 0; u < KPL; ++u) {
      const float p = __expf(s[u] - m_new);
      S[r][g + LPR * u] = p;
      psum += p;
    }
    psum = group_sum(psum);
    l = l * alpha + psum;
    m = m_new;
    __syncwarp();

    // (3) P V for row r, dims g + LPR t
#pragma unroll
    for (int t = 0; t < DPL; ++t) o[t] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float p = S[r][jj];
#pragma unroll
      for (int t = 0; t < DPL; ++t) o[t] += p * Vs[jj][g + LPR * t];
    }
  }
  const int i = q0 + r;
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    const float inv = 1.0f / l;
#pragma unroll
    for (int t = 0; t < DPL; ++t) dst[g + LPR * t] = o[t] * inv;
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
    score_tile<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    score_tile<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

// s07.cu: FlashAttention forward, homework 4 (from the course seed hw4.cu).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design (split-K with a merge, for long sequences with few batches): the keys of every row are cut
// into S ranges (S = 1, 2, 4 or 8, more for longer rows); kernel 1, grid (row tiles, batch, S), walks
// one range with a warp per row (32-key K tiles with pitch d + 1 and V tiles in shared memory, lane j
// scores key j, butterflies) and writes the range's partial state (max m, sum l, un-normalised o) to
// scratch laid out [split][flat row]; kernel 2, a warp per row, merges the S partials with the common
// max. The merge is a template on S so that its loop over the splits unrolls.
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
#ifndef BC
#define BC 32  // keys per tile (one per lane)
#endif
#ifndef WARPS
#define WARPS 8  // warps (query rows) per block
#endif
const int THREADS = WARPS * 32;
const unsigned FULL = 0xffffffffu;

template <int D>
__global__ void __launch_bounds__(THREADS) split_part(const float* __restrict__ qkv, float* __restrict__ po,
                                                      float* __restrict__ pm, float* __restrict__ pl, int B, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.y, s_id = blockIdx.z, S = gridDim.z;
  const int i = blockIdx.x * WARPS + warp;
  const bool active = i < N;
  const int chunk = (N + S - 1) / S;
  const int kbeg = s_id * chunk, kend = min(N, kbeg + chunk);
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = rsqrtf((float)D);
  constexpr int NC = D / 32;

  float qi[D], o[NC], m = -INFINITY, l = 0.f;
#pragma unroll
  for (int c = 0; c < NC; ++c) o[c] = 0.f;
  if (active) {
#pragma unroll
    for (int x = 0; x < D; ++x) qi[x] = q[(size_t)i * D + x] * scale;
  }
  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    for (int e = threadIdx.x; e < BC * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = r < bc ? k[(size_t)(j0 + r) * D + c] : 0.f;
      Vs[e] = r < bc ? v[(size_t)(j0 + r) * D + c] : 0.f;
    }
    __syncthreads();
    if (active) {
      float s = -INFINITY;
      if (lane < bc) {
        s = 0.f;
#pragma unroll
        for (int x = 0; x < D; ++x) s += qi[x] * Ks[lane * (D + 1) + x];
      }
      float tmax = s;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(FULL, tmax, off));
      const float m_new = fmaxf(m, tmax);
      const float alpha = __expf(m - m_new);
      const float p = lane < bc ? __expf(s - m_new) : 0.f;
      float psum = p;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) psum += __shfl_xor_sync(FULL, psum, off);
      l = l * alpha + psum;
#pragma unroll
      for (int c = 0; c < NC; ++c) o[c] *= alpha;
      for (int jj = 0; jj < bc; ++jj) {
        const float pj = __shfl_sync(FULL, p, jj);
#pragma unroll
        for (int c = 0; c < NC; ++c) o[c] += pj * Vs[jj * D + lane + 32 * c];
      }
      m = m_new;
    }
    __syncthreads();
  }
  if (active) {
    const size_t slot = (size_t)s_id * B * N + (size_t)b * N + i;
#pragma unroll
    for (int c = 0; c < NC; ++c) po[slot * D + lane + 32 * c] = o[c];
    if (lane == 0) pm[slot] = m, pl[slot] = l;
  }
}

template <int D, int S>
__global__ void __launch_bounds__(THREADS) split_merge(const float* __restrict__ po, const float* __restrict__ pm,
                                                       const float* __restrict__ pl, float* __restrict__ out, long long rows) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (row >= rows) return;
  constexpr int NC = D / 32;
  float M = -INFINITY;
#pragma unroll
  for (int s = 0; s < S; ++s) M = fmaxf(M, pm[s * rows + row]);
  float L = 0.f, acc[NC];
#pragma unroll
  for (int c = 0; c < NC; ++c) acc[c] = 0.f;
#pragma unroll
  for (int s = 0; s < S; ++s) {
    const size_t slot = (size_t)(s * rows + row);
    const float w = __expf(pm[slot] - M);
    L += w * pl[slot];
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[c] += w * po[slot * D + lane + 32 * c];
  }
#pragma unroll
  for (int c = 0; c < NC; ++c) out[row * D + lane + 32 * c] = acc[c] / L;
}

// Splits per row: one per 2048 keys, a power of two, at most 8.
static int splits_for(int N) {
  int S = 1;
  while (S < 8 && 2048LL * (2 * S) <= N) S *= 2;
  return S;
}

template <int D>
static void launch_attention(const float* d_qkv, float* d_out, float* po, float* pm, float* pl, int B, int N, int S) {
  const dim3 grid((N + WARPS - 1) / WARPS, B, S);
  split_part<D><<<grid, THREADS>>>(d_qkv, po, pm, pl, B, N);
  CHECK(cudaGetLastError());
  const long long rows = (long long)B * N;
  const unsigned mblocks = (unsigned)((rows + WARPS - 1) / WARPS);
  switch (S) {
    case 8:
      split_merge<D, 8><<<mblocks, THREADS>>>(po, pm, pl, d_out, rows);
      break;
    case 4:
      split_merge<D, 4><<<mblocks, THREADS>>>(po, pm, pl, d_out, rows);
    case 2:
      split_merge<D, 2><<<mblocks, THREADS>>>(po, pm, pl, d_out, rows);
      break;
    default:
      split_merge<D, 1><<<mblocks, THREADS>>>(po, pm, pl, d_out, rows);
      break;
  }
  CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "split_part+split_merge";
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
  const int S = splits_for(in.N);
  const size_t prow = (size_t)S * in.B * in.N;  // partial rows: S per query row
  float *d_po = NULL, *d_pm = NULL, *d_pl = NULL;
  CHECK(cudaMalloc(&d_po, prow * in.d * sizeof(float)));
  CHECK(cudaMalloc(&d_pm, prow * sizeof(float)));
  CHECK(cudaMalloc(&d_pl, prow * sizeof(float)));
  if (in.d == 32)
    launch_attention<32>(d_qkv, d_out, d_po, d_pm, d_pl, in.B, in.N, S);
  else
    launch_attention<64>(d_qkv, d_out, d_po, d_pm, d_pl, in.B, in.N, S);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(d_po));
  CHECK(cudaFree(d_pm));
  CHECK(cudaFree(d_pl));
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

// hw4.cu: FlashAttention forward with several query rows per warp.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A block of WARPS = 4 warps covers ROWS = 32 query rows of one batch, RPW = 8 rows per warp. Lane
// t of a warp is key j0 + t of the current 32-key tile: it loads its K column once from the
// transposed tile Kt (pitch BC + 1) and uses it for all 8 rows of its warp. Per row: max and sum by
// xor butterflies, the weights broadcast by __shfl_sync for the P V product, lane t owning output
// dims t and t + 32. The block's query rows are staged (scaled) in shared memory.
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
#ifndef BC
#define BC 32  // keys per tile: one per lane
#endif
#ifndef RPW
#define RPW 8  // query rows per warp
#endif
#define WARPS 4
#define ROWS (RPW * WARPS)
#define FULL 0xffffffffu
static_assert(BC == 32, "BC: one key per lane of a warp");

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(FULL, x, off));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
  return x;
}

template <int D>
__global__ void __launch_bounds__(WARPS * 32) attention_warp_rows(const float* __restrict__ qkv,
                                                                   float* __restrict__ out, int N) {
  constexpr int DPL = D / 32;  // output dims per lane
  __shared__ float Qs[ROWS * D];
  __shared__ float Kt[D * (BC + 1)];  // transposed: Kt[x][key]
  __shared__ float Vs[BC * D];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = blockIdx.y, q0 = blockIdx.x * ROWS;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  for (int e = tid; e < ROWS * D; e += WARPS * 32) {
    const int r = e / D;
    Qs[e] = (q0 + r < N) ? qb[(size_t)q0 * D + e] * scale : 0.f;
  }

  float m[RPW], l[RPW], o[RPW][DPL];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    m[r] = -INFINITY, l[r] = 0.f;
#pragma unroll
    for (int t = 0; t < DPL; ++t) o[r][t] = 0.f;
  }
  const float* qw = Qs + warp * RPW * D;  // this warp's rows

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();  // the previous tile is finished with (and Qs is staged, the first time)
    for (int e = tid; e < bc * D; e += WARPS * 32) {
      const int r = e / D, c = e - r * D;
      Kt[c * (BC + 1) + r] = kb[(size_t)j0 * D + e];
      Vs[e] = vb[(size_t)j0 * D + e];
    }
    __syncthreads();

    const bool key_ok = lane < bc;
    float s[RPW];
#pragma unroll
    for (int r = 0; r < RPW; ++r) s[r] = 0.f;
#pragma unroll 8
    for (int x = 0; x < D; ++x) {
      const float kx = Kt[x * (BC + 1) + lane];
#pragma unroll
      for (int r = 0; r < RPW; ++r) s[r] += qw[r * D + x] * kx;
    }

#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const float sr = key_ok ? s[r] : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(sr));
      const float alpha = __expf(m[r] - m_new);
      const float p = key_ok ? __expf(sr - m_new) : 0.f;
      l[r] = l[r] * alpha + warp_sum(p);
      m[r] = m_new;
      float acc[DPL];
#pragma unroll
      for (int t = 0; t < DPL; ++t) acc[t] = 0.f;
      for (int jj = 0; jj < bc; ++jj) {
        const float pj = __shfl_sync(FULL, p, jj);
#pragma unroll
        for (int t = 0; t < DPL; ++t) acc[t] += pj * Vs[jj * D + lane + 32 * t];
      }
#pragma unroll
      for (int t = 0; t < DPL; ++t) o[r][t] = o[r][t] * alpha + acc[t];
    }
  }

#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int i = q0 + r * WARPS + warp;  // the warp's row r
    if (i < N) {
      float* dst = out + ((size_t)b * N + i) * D;
      const float inv = 1.f / l[r];
#pragma unroll
      for (int t = 0; t < DPL; ++t) dst[lane + 32 * t] = o[r][t] * inv;
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
  timing.impl = "attention_warp_rows";
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
  const dim3 grid((in.N + ROWS - 1) / ROWS, in.B);
  if (in.d == 32)
    attention_warp_rows<32><<<grid, WARPS * 32>>>(d_qkv, d_out, in.N);
  else
    attention_warp_rows<64><<<grid, WARPS * 32>>>(d_qkv, d_out, in.N);
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

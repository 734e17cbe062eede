// hw4.hip: FlashAttention forward for AMD GPUs (HIP), weights staged in LDS.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: a 64-lane wavefront per query row, 4 rows a block, grid (row tiles, batch), triple-chevron
// launch. Tiles of 64 keys (one per lane) are loaded with float4 reads into LDS: K with a row pitch of d + 1, V
// plain. Row max and sum are __shfl_xor butterflies over the wavefront; each lane writes its weight
// into the row's slice of an LDS weight buffer, and the P V loop reads the weights back from LDS
// (no shuffles in the inner loop). Lane x owns output dim x (lanes x >= d idle).
//
// Builds with the course's example line: hipcc -std=c++14 -O3 --offload-arch=gfx908 -o hw4-amd hw4.hip -lm
// (an MI210 is gfx90a).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <hip/hip_runtime.h>

// ---------------------------------------------------------------- errors
// Every HIP call goes through CHECK: a failure prints where it happened and what HIP said.
#define CHECK(call)                                                                             \
  do {                                                                                          \
    hipError_t err_ = (call);                                                                  \
    if (err_ != hipSuccess) {                                                                  \
      std::fprintf(stderr, "hw4-amd: %s:%d: %s\n", __FILE__, __LINE__, hipGetErrorString(err_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

static void fail(const char* what, const char* path) {
  std::fprintf(stderr, "hw4-amd: %s: %s\n", path, what);
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("lds_weights") {}
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
#define ROWS 4  // wavefronts (query rows) per block
#endif
constexpr int WAVE = 64;
constexpr int BC = WAVE;  // keys per tile
const int THREADS = WAVE * ROWS;

template <typename T>
__device__ __forceinline__ T wave_reduce_max(T v) {
#pragma unroll
  for (int off = WAVE / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}
template <typename T>
__device__ __forceinline__ T wave_reduce_sum(T v) {
#pragma unroll
  for (int off = WAVE / 2; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

template <int D>
__global__ void __launch_bounds__(THREADS) lds_weights(const float* __restrict__ qkv, float* __restrict__ out, int N,
                                                       int scale) {
  constexpr int D4 = D / 4;
  __shared__ float Ks[BC][D + 1];
  __shared__ __align__(16) float Vs[BC][D];
  __shared__ float Ps[ROWS][BC];
  __shared__ float Qs[ROWS][D];
  const int tid = threadIdx.x, lane = tid % WAVE, w = tid / WAVE;
  const int b = blockIdx.y;
  const int i = blockIdx.x * ROWS + w;
  const bool valid = i < N;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float4* k4 = reinterpret_cast<const float4*>(base + (size_t)N * D);
  const float4* v4 = reinterpret_cast<const float4*>(base + (size_t)2 * N * D);
  const float* q = base + (size_t)(valid ? i : N - 1) * D;
  if (lane < D) Qs[w][lane] = q[lane] * scale;

  float m = -INFINITY, l = 0.f, o = 0.f;
  const int x = lane < D ? lane : 0;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    for (int e4 = tid; e4 < bc * D4; e4 += THREADS) {
      const int r = e4 / D4, c = (e4 - r * D4) * 4;
      const float4 kk = k4[(size_t)j0 * D4 + e4];
      Ks[r][c] = kk.x, Ks[r][c + 1] = kk.y, Ks[r][c + 2] = kk.z, Ks[r][c + 3] = kk.w;
      *reinterpret_cast<float4*>(&Vs[r][c]) = v4[(size_t)j0 * D4 + e4];
    }
    __syncthreads();
    float s = -INFINITY;
    if (lane < bc) {
      float acc = 0.f;
#pragma unroll
      for (int c = 0; c < D; ++c) acc += Qs[w][c] * Ks[lane][c];
      s = acc;
    }
    const float m_new = fmaxf(m, wave_reduce_max(s));
    const float alpha = __expf(m - m_new);
    const float p = __expf(s - m_new);
    Ps[w][lane] = p;
    __syncthreads();
    l = l * alpha + wave_reduce_sum(p);
    o *= alpha;
    for (int jj = 0; jj < bc; ++jj) o += Ps[w][jj] * Vs[jj][x];
    m = m_new;
  }
  if (valid && lane < D) out[((size_t)b * N + i) * D + lane] = o / l;
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
  CHECK(hipFree(0));  // the GPU context is made here: its cost, not the first copy's
  hipDeviceProp_t prop;
  CHECK(hipGetDeviceProperties(&prop, 0));
  const std::string gcn = prop.gcnArchName;
  timing.arch = gcn.substr(0, gcn.find(':')), timing.device = prop.name;  // gfx90a:sramecc+:xnack-: gfx90a
  timing.init = seconds_now() - t;

  t = seconds_now();
  float *d_qkv = NULL, *d_out = NULL;
  CHECK(hipMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(hipMalloc(&d_out, out_values * sizeof(float)));
  CHECK(hipMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), hipMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  const float scale = (float)(1.0 / std::sqrt((double)in.d));
  const dim3 grid((unsigned)((in.N + ROWS - 1) / ROWS), (unsigned)in.B);
  if (in.d == 32)
    lds_weights<32><<<grid, THREADS>>>(d_qkv, d_out, in.N, scale);
  else
    lds_weights<64><<<grid, THREADS>>>(d_qkv, d_out, in.N, scale);
  CHECK(hipGetLastError());
  CHECK(hipDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(hipMemcpy(out.data(), d_out, out_values * sizeof(float), hipMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(hipFree(d_qkv));
  CHECK(hipFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

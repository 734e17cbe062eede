// hw4.cu: homework 4, FlashAttention forward (started from the course seed).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Two kernels, so that the keys of a row can be split across blocks without a merge step:
//  1. row_stats: a warp per row; each lane runs an online max / sum over keys lane, lane + 32, ...; the
//     lanes are merged by xor shuffles; the row's max m and sum l go to global memory.
//  2. attention_pv: grid (64-row tiles, KSPLIT key ranges, batches), thread per row, 32-key tiles of K
//     and V in shared memory; each weight is final (exp(s - m) / l), so every block adds its part of the
//     output with atomicAdd into the zeroed output.
// The kernel stage is run twice (a warm-up run, then the timed run).
//
// Build: nvcc -std=c++11 -O3 -Xptxas="-v" -arch=sm_61 -o hw4 hw4.cu -lm
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_pv") {}
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
#define BR 64  // query rows per block of attention_pv
#endif
#ifndef BC
#define BC 32  // keys per shared-memory tile
#endif
#ifndef KSPLIT
#define KSPLIT 4  // key ranges per row (blocks along grid y)
#endif
#ifndef REPS
#define REPS 2  // runs of the kernel stage: warm-up, then the timed one
#endif

const int THREADS = BR;
const int STATS_THREADS = 256;  // 8 rows (warps) per block of row_stats
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(BC >= 1, "BC: a tile holds one key at least");
#define FULL 0xffffffffu

template <int D>
__global__ void __launch_bounds__(STATS_THREADS) row_stats(const float* qkv, float* m_out, float* l_out, int B, int N) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * (STATS_THREADS / 32) + (threadIdx.x >> 5);
  if (row >= (long long)B * N) return;  // a whole warp leaves together
  const int b = (int)(row / N), i = (int)(row % N);
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)i * D;
  const float* k = qkv + (size_t)b * 3 * N * D + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  float qi[D];
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale;
  float m = -INFINITY, l = 0.f;
  for (int j = lane; j < N; j += 32) {
    float s = 0.f;
    for (int x = 0; x < D; ++x) s += qi[x] * k[(size_t)j * D + x];
    const float m_new = fmaxf(m, s);
    l = l * __expf(m - m_new) + __expf(s - m_new);
    m = m_new;
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float mo = __shfl_xor_sync(FULL, m, off), lo = __shfl_xor_sync(FULL, l, off);
    const float mm = fmaxf(m, mo);
    const float f = m == -INFINITY ? 0.f : __expf(m - mm), fo = mo == -INFINITY ? 0.f : __expf(mo - mm);
    l = l * f + lo * fo;
    m = mm;
  }
  if (lane == 0) m_out[row] = m, l_out[row] = l;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_pv(const float* qkv, const float* m_in, const float* l_in,
                                                        float* out, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.z, split = blockIdx.y, i = blockIdx.x * BR + threadIdx.x;
  const bool valid = i < N;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* q = base + (size_t)(valid ? i : 0) * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int len = (N + KSPLIT - 1) / KSPLIT;
  const int jb = split * len, je = jb + len < N ? jb + len : N;
  const float m = valid ? m_in[(size_t)b * N + i] : 0.f;
  const float inv_l = valid ? 1.f / l_in[(size_t)b * N + i] : 0.f;

  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale, o[x] = 0.f;
  for (int j0 = jb; j0 < je; j0 += BC) {
    const int bc = je - j0 < BC ? je - j0 : BC;
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = k[(size_t)(j0 + r) * D + c];
      Vs[r * D + c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
      for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj * (D + 1) + x];
      const float p = __expf(s - m) * inv_l;
      for (int x = 0; x < D; ++x) o[x] += p * Vs[jj * D + x];
    }
  }
  if (valid && jb < je) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int x = 0; x < D; ++x) atomicAdd(dst + x, o[x]);
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
  float *d_m = NULL, *d_l = NULL;  // row statistics
  CHECK(cudaMalloc(&d_m, (size_t)in.B * in.N * sizeof(float)));
  CHECK(cudaMalloc(&d_l, (size_t)in.B * in.N * sizeof(float)));
  CHECK(cudaMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), cudaMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  const long long rows = (long long)in.B * in.N;
  const unsigned stat_blocks = (unsigned)((rows + STATS_THREADS / 32 - 1) / (STATS_THREADS / 32));
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), KSPLIT, (unsigned)in.B);
  CHECK(cudaMemset(d_out, 0, out_values * sizeof(float)));  // attention_pv adds into it
  for (int rep = 0; rep < REPS; ++rep) {
    t = seconds_now();  // the last run is the one timed
    if (in.d == 32) {
      row_stats<32><<<stat_blocks, STATS_THREADS>>>(d_qkv, d_m, d_l, in.B, in.N);
      attention_pv<32><<<grid, THREADS>>>(d_qkv, d_m, d_l, d_out, in.N);
    } else {
      row_stats<64><<<stat_blocks, STATS_THREADS>>>(d_qkv, d_m, d_l, in.B, in.N);
      attention_pv<64><<<grid, THREADS>>>(d_qkv, d_m, d_l, d_out, in.N);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    timing.kernel = seconds_now() - t;
  }

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_m));
  CHECK(cudaFree(d_l));
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

// hw4.cu: FlashAttention forward, homework 4 (final version).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Split-K in one kernel: the keys of every 64-row tile are cut into KSPLIT ranges, one block per
// range. Blocks of ranges 1..KSPLIT-1 leave their unnormalised (m, l, o) in a scratch buffer and
// raise a counter; the block of range 0 computes its own range, waits for the counter, then
// merges the parts and writes O (no second kernel, no second pass over the output).
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
#define BR 64  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 32  // keys per shared-memory tile
#endif
#ifndef KSPLIT
#define KSPLIT 4  // key ranges per row tile
#endif

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(KSPLIT >= 2, "KSPLIT: two ranges at least");

// grid (tiles * B, KSPLIT): x = (batch, row tile), y = key range. Scratch: for ranges 1..KSPLIT-1,
// part_o [x][range-1][BR][D], part_ml [x][range-1][BR][2]; done[x] counts the finished ranges.
template <int D>
__global__ void __launch_bounds__(THREADS) attention_splitk(const float* qkv, float* out, float* part_o,
                                                             float* part_ml, int* done, int N, int tiles,
                                                             int chunk) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int item = blockIdx.x, range = blockIdx.y;
  const int b = item / tiles, tile = item % tiles;
  const int i = tile * BR + threadIdx.x;
  const bool row_ok = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const int kbeg = range * chunk, kend = min(N, kbeg + chunk);
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D];
  for (int x = 0; x < D; ++x) q[x] = row_ok ? qb[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = kb[(size_t)j0 * D + e];
      Vs[e] = vb[(size_t)j0 * D + e];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      const float* kr = Ks + jj * (D + 1);
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += q[x] * kr[x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
      const float* vr = Vs + jj * D;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * vr[x];
      m = m_new;
    }
  }

  const size_t slot0 = (size_t)item * (KSPLIT - 1) * BR;  // this item's first scratch row
  if (range > 0) {
    const size_t slot = slot0 + (size_t)(range - 1) * BR + threadIdx.x;
    for (int x = 0; x < D; ++x) part_o[slot * D + x] = o[x];
    part_ml[2 * slot] = m;
    part_ml[2 * slot + 1] = l;
    __threadfence();  // the part is visible before the counter moves
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(&done[item], 1);
    return;
  }

  // range 0: wait for the other ranges of this item, then merge
  if (threadIdx.x == 0) {
    while (atomicAdd(&done[item], 0) < KSPLIT - 1) {
    }
  }
  __syncthreads();
  __threadfence();
  if (!row_ok) return;
  float mx = m;
  for (int r = 1; r < KSPLIT; ++r) mx = fmaxf(mx, __ldcg(&part_ml[2 * (slot0 + (size_t)(r - 1) * BR + threadIdx.x)]));
  const float w0 = __expf(m - mx);
  float lsum = l * w0;
  for (int x = 0; x < D; ++x) o[x] *= w0;
  for (int r = 1; r < KSPLIT; ++r) {
    const size_t slot = slot0 + (size_t)(r - 1) * BR + threadIdx.x;
    const float w = __expf(__ldcg(&part_ml[2 * slot]) - mx);  // 0 for an empty range (m = -inf)
    lsum += w * __ldcg(&part_ml[2 * slot + 1]);
    for (int x = 0; x < D; ++x) o[x] += w * __ldcg(&part_o[slot * D + x]);
  }
  float* dst = out + ((size_t)b * N + i) * D;
  for (int x = 0; x < D; ++x) dst[x] = o[x] / lsum;
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_splitk";
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
  const int tiles = (in.N + BR - 1) / BR;
  const size_t items = (size_t)tiles * in.B;
  const size_t part_rows = items * (KSPLIT - 1) * BR;
  float *d_qkv = NULL, *d_out = NULL, *d_po = NULL, *d_ml = NULL;
  int* d_done = NULL;
  CHECK(cudaMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_out, out_values * sizeof(float)));
  CHECK(cudaMalloc(&d_po, part_rows * in.d * sizeof(float)));
  CHECK(cudaMalloc(&d_ml, part_rows * 2 * sizeof(float)));
  CHECK(cudaMalloc(&d_done, items * sizeof(int)));
  CHECK(cudaMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), cudaMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemset(d_done, 0, items * sizeof(int)));
  // keys per range: an equal share rounded up to whole tiles
  const int chunk = ((in.N + KSPLIT - 1) / KSPLIT + BC - 1) / BC * BC;
  const dim3 grid((unsigned)items, KSPLIT);
  if (in.d == 32)
    attention_splitk<32><<<grid, THREADS>>>(d_qkv, d_out, d_po, d_ml, d_done, in.N, tiles, chunk);
  else
    attention_splitk<64><<<grid, THREADS>>>(d_qkv, d_out, d_po, d_ml, d_done, in.N, tiles, chunk);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_po));
  CHECK(cudaFree(d_ml));
  CHECK(cudaFree(d_done));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

// hw4.cu: FlashAttention forward, homework 4 (final version).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Split-KV ("flash-decoding") version: the keys of a batch are cut into SPLITS ranges and every
// (row tile, range, batch) is its own block, so even small B x N inputs fill the GPU. A block
// writes its rows' partial result normalised, plus the log-sum-exp of its range; a second kernel
// merges the SPLITS partials of every row with the weights exp(lse_s - max lse).
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

// ---------------------------------------------------------------- the kernels
#ifndef BR
#define BR 64  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 64  // keys per shared-memory tile
#endif
#ifndef SPLITS
#define SPLITS 8  // key ranges per row
#endif

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(BC % 4 == 0, "BC: float4 tile loads");

// grid (ceil(N / BR), SPLITS, B). Keys [kbeg, kend) of this split, in tiles of BC keys loaded as
// float4 (K rows padded to D + 4 floats so that every row stays 16-byte aligned).
template <int D>
__global__ void __launch_bounds__(THREADS)
    attention_part(const float* qkv, float* part_o, float* part_lse, int N, int chunk) {
  constexpr int D4 = D / 4, KP = D + 4;
  __shared__ __align__(16) float Ks[BC * KP];
  __shared__ __align__(16) float Vs[BC * D];
  const int b = blockIdx.z, split = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const bool row_ok = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const int kbeg = split * chunk;
  const int kend = min(N, kbeg + chunk);
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D];
  for (int x = 0; x < D; ++x) q[x] = row_ok ? qb[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    __syncthreads();
    const float4* k4 = reinterpret_cast<const float4*>(kb + (size_t)j0 * D);
    const float4* v4 = reinterpret_cast<const float4*>(vb + (size_t)j0 * D);
    for (int e = threadIdx.x; e < bc * D4; e += THREADS) {
      const int r = e / D4, c = e % D4;
      *reinterpret_cast<float4*>(&Ks[r * KP + 4 * c]) = k4[e];
      *reinterpret_cast<float4*>(&Vs[r * D + 4 * c]) = v4[e];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      const float4* kr = reinterpret_cast<const float4*>(&Ks[jj * KP]);
      float s = 0.f;
#pragma unroll
      for (int x4 = 0; x4 < D4; ++x4) {
        const float4 kk = kr[x4];
        s += q[4 * x4] * kk.x + q[4 * x4 + 1] * kk.y + q[4 * x4 + 2] * kk.z + q[4 * x4 + 3] * kk.w;
      }
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
      const float* vr = &Vs[jj * D];
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * vr[x];
      m = m_new;
    }
  }

  if (row_ok) {
    const size_t prow = ((size_t)b * SPLITS + split) * N + i;
    float* dst = part_o + prow * D;
    for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
    part_lse[prow] = m + logf(l);
  }
}

// One thread per output value: O = sum_s w_s o_s / sum_s w_s with w_s = exp(lse_s - max lse).
template <int D>
__global__ void merge_splits(const float* part_o, const float* part_lse, float* out, int B, int N) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (size_t)B * N * D) return;
  const size_t row = idx / D;
  const int x = (int)(idx % D);
  const size_t b = row / N, i = row % N;
  float mx = -INFINITY;
  for (int s = 0; s < SPLITS; ++s) mx = fmaxf(mx, part_lse[(b * SPLITS + s) * N + i]);
  float acc = 0.f, wsum = 0.f;
  for (int s = 0; s < SPLITS; ++s) {
    const size_t prow = (b * SPLITS + s) * N + i;
    const float w = __expf(part_lse[prow] - mx);
    acc += w * part_o[prow * D + x];
    wsum += w;
  }
  out[idx] = acc / wsum;
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_part+merge_splits";
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
  float *d_qkv = NULL, *d_out = NULL, *d_po = NULL, *d_lse = NULL;
  CHECK(cudaMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_out, out_values * sizeof(float)));
  CHECK(cudaMalloc(&d_po, SPLITS * out_values * sizeof(float)));
  CHECK(cudaMalloc(&d_lse, (size_t)SPLITS * in.B * in.N * sizeof(float)));
  CHECK(cudaMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), cudaMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  // keys per split: an equal share, rounded up to whole tiles
  const int chunk = ((in.N + SPLITS - 1) / SPLITS + BC - 1) / BC * BC;
  const dim3 grid((in.N + BR - 1) / BR, SPLITS, in.B);
  const unsigned merge_blocks = (unsigned)((out_values + 255) / 256);
  if (in.d == 32) {
    attention_part<32><<<grid, THREADS>>>(d_qkv, d_po, d_lse, in.N, chunk);
    CHECK(cudaGetLastError());
    merge_splits<32><<<merge_blocks, 256>>>(d_po, d_lse, d_out, in.B, in.N);
  } else {
    attention_part<64><<<grid, THREADS>>>(d_qkv, d_po, d_lse, in.N, chunk);
    CHECK(cudaGetLastError());
    merge_splits<64><<<merge_blocks, 256>>>(d_po, d_lse, d_out, in.B, in.N);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_po));
  CHECK(cudaFree(d_lse));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

// hw4.cu: FlashAttention forward, homework 4 (final version).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// The course card's kernel (16 query rows per block, 32 x 16 threads: a row per warp, a key per
// lane, Q tile and padded K tile in shared memory, xor-shuffle max and sum), with the keys of
// every row tile split in two halves that run as two blocks side by side (blockIdx.x = half), so
// the GPU gets twice the blocks. Each half leaves its unnormalised (m, l, o); a small second
// kernel merges the two halves.
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
#define BR 16  // query rows per block: one warp each
#endif
#ifndef BC
#define BC 32  // keys per tile: one per lane
#endif

static_assert(BC == 32, "BC: one key per lane");
static_assert(BR >= 1 && BR <= 32, "BR: 1 to 32 warps per block");

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, off));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
  return v;
}

// grid (2, B * tiles), block (32, BR). Half h takes keys [h * half_keys, min(N, (h + 1) * half_keys)).
// Parts: po [2][B * N][D] (unnormalised o), pml [2][B * N][2] (m, l).
template <int D>
__global__ void __launch_bounds__(32 * BR)
    attention_half(const float* qkv, float* po, float* pml, int B, int N, int tiles, int half_keys) {
  __shared__ float Qs[BR * D];
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  __shared__ float Ps[BR * BC];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + tx;
  const int h = blockIdx.x;
  const int b = blockIdx.y / tiles, tile = blockIdx.y % tiles;
  const int q0 = tile * BR;
  const int i = q0 + ty;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const int kbeg = h * half_keys, kend = min(N, kbeg + half_keys);
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = tid; e < BR * D; e += 32 * BR) {
    const int r = e / D;
    Qs[e] = (q0 + r < N) ? qb[(size_t)q0 * D + e] * scale : 0.f;
  }

  float m = -INFINITY, l = 0.f, o0 = 0.f, o1 = 0.f;
  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    __syncthreads();  // Q tile stored / previous K, V tile no longer read
    for (int e = tid; e < bc * D; e += 32 * BR) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = kb[(size_t)j0 * D + e];
      Vs[e] = vb[(size_t)j0 * D + e];
    }
    __syncthreads();

    float s = -INFINITY;
    if (tx < bc) {
      const float* qr = Qs + ty * D;
      const float* kr = Ks + tx * (D + 1);
      float acc = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) acc += qr[x] * kr[x];
      s = acc;
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float alpha = __expf(m - m_new);
    const float p = __expf(s - m_new);
    l = l * alpha + warp_sum(p);
    Ps[ty * BC + tx] = p;
    __syncwarp();
    float a0 = 0.f, a1 = 0.f;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = Ps[ty * BC + jj];
      a0 += pj * Vs[jj * D + tx];
      if (D > 32) a1 += pj * Vs[jj * D + tx + 32];
    }
    o0 = o0 * alpha + a0;
    o1 = o1 * alpha + a1;
    m = m_new;
    __syncwarp();
  }

  if (i < N) {
    const size_t row = (size_t)h * B * N + (size_t)b * N + i;
    po[row * D + tx] = o0;
    if (D > 32) po[row * D + tx + 32] = o1;
    if (tx == 0) {
      pml[2 * row] = m;
      pml[2 * row + 1] = l;
    }
  }
}

// One thread per output value: merge the two halves of its row.
template <int D>
__global__ void merge_halves(const float* po, const float* pml, float* out, int B, int N) {
  const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t rows = (size_t)B * N;
  if (idx >= rows * D) return;
  const size_t row = idx / D;
  const float m0 = pml[2 * row], l0 = pml[2 * row + 1];
  const float m1 = pml[2 * (rows + row)], l1 = pml[2 * (rows + row) + 1];
  const float mx = fmaxf(m0, m1);
  const float w0 = __expf(m0 - mx), w1 = __expf(m1 - mx);  // an empty half has m = -inf: weight 0
  out[idx] = (w0 * po[idx] + w1 * po[rows * D + idx]) / (w0 * l0 + w1 * l1);
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_half+merge_halves";
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
  float *d_qkv = NULL, *d_out = NULL, *d_po = NULL, *d_pml = NULL;
  CHECK(cudaMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_out, out_values * sizeof(float)));
  CHECK(cudaMalloc(&d_po, 2 * out_values * sizeof(float)));
  CHECK(cudaMalloc(&d_pml, 2 * (size_t)in.B * in.N * 2 * sizeof(float)));
  CHECK(cudaMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), cudaMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  const int tiles = (in.N + BR - 1) / BR;
  const int half_keys = ((in.N + 1) / 2 + BC - 1) / BC * BC;  // whole tiles in the first half
  const dim3 grid(2, in.B * tiles), block(32, BR);
  const unsigned merge_blocks = (unsigned)((out_values + 255) / 256);
  if (in.d == 32) {
    attention_half<32><<<grid, block>>>(d_qkv, d_po, d_pml, in.B, in.N, tiles, half_keys);
    CHECK(cudaGetLastError());
    merge_halves<32><<<merge_blocks, 256>>>(d_po, d_pml, d_out, in.B, in.N);
  } else {
    attention_half<64><<<grid, block>>>(d_qkv, d_po, d_pml, in.B, in.N, tiles, half_keys);
    CHECK(cudaGetLastError());
    merge_halves<64><<<merge_blocks, 256>>>(d_po, d_pml, d_out, in.B, in.N);
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
  CHECK(cudaFree(d_pml));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

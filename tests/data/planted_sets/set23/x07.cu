// hw4.cu: FlashAttention forward, homework 4 (started from the course seed made by `fa init`).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Blocks of 8 warps (8 query rows, q rows in shared memory); lane = key of a 32-key tile. To save
// shared memory one tile buffer T holds the K tile while the scores are made and is then refilled
// with the V tile for the P V product; the weights go through a small per-warp buffer.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("flash_onebuf") {}
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
#define BR 8  // query rows (warps) per block
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
static_assert(BC == 32, "BC: one key per lane");
#define NT (32 * BR)

__inline__ __device__ float reduce_max(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, off));
  return v;
}
__inline__ __device__ float reduce_sum(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) v += __shfl_xor_sync(0xffffffff, v, off);
  return v;
}

template <int D>
__global__ void __launch_bounds__(NT) flash_onebuf(const float* qkv, float* out, int N) {
  __shared__ float Qs[BR][D];
  __shared__ float T[BC][D + 1];  // K tile, then V tile
  __shared__ float P[BR][BC];
  const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane;
  const int b = blockIdx.y, q0 = blockIdx.x * BR;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = tid; e < BR * D; e += NT) {
    const int r = e / D, c = e % D;
    Qs[r][c] = (q0 + r < N) ? qb[(size_t)(q0 + r) * D + c] * scale : 0.f;
  }
  float m = -INFINITY, l = 0.f, o[D / 32];
  for (int h = 0; h < D / 32; ++h) o[h] = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();  // T: the previous V tile is no longer read
    for (int e = tid; e < bc * D; e += NT) T[e / D][e % D] = kb[(size_t)j0 * D + e];
    __syncthreads();

    float s = -INFINITY;
    if (lane < bc) {
      s = 0.f;
      for (int x = 0; x < D; ++x) s += Qs[w][x] * T[lane][x];
    }
    const float m_new = fmaxf(m, reduce_max(s));
    const float p = lane < bc ? __expf(s - m_new) : 0.f;
    const float alpha = __expf(m - m_new);
    l = l * alpha + reduce_sum(p);
    P[w][lane] = p;

    for (int e = tid; e < bc * D; e += NT) T[e / D][e % D] = vb[(size_t)j0 * D + e];
    __syncthreads();

    for (int h = 0; h < D / 32; ++h) {
      float acc = o[h] * alpha;
      for (int jj = 0; jj < bc; ++jj) acc += P[w][jj] * T[jj][lane + 32 * h];
      o[h] = acc;
    }
    m = m_new;
  }
  const int i = q0 + w;
  if (i < N)
    for (int h = 0; h < D / 32; ++h) out[((size_t)b * N + i) * D + lane + 32 * h] = o[h] / l;
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
  const dim3 block(32, BR);
  const dim3 grid((in.N + BR - 1) / BR, in.B);
  if (in.d == 32)
    flash_onebuf<32><<<grid, block>>>(d_qkv, d_out, in.N);
  else
    flash_onebuf<64><<<grid, block>>>(d_qkv, d_out, in.N);
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

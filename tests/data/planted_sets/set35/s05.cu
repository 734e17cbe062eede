// hw4.cu: homework 4, FlashAttention forward (started from the course seed).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Register-blocked version (like a hand-written GEMM, no tensor cores): one block per (64 query rows,
// batch), 16 x 16 threads, 32-key tiles. Scores: thread (tx, ty) computes a 4 x 2 micro-tile (rows
// 4ty..4ty+3, keys 2tx, 2tx+1) from Q^T and K^T tiles in shared memory read as float4 / float2. Softmax:
// four threads per row on the score tile in shared memory, row statistics in shared memory. P V: thread
// (tx, ty) keeps a 4 x (d / 16) block of the output (rows 4ty.., dims tx + 16c) in registers.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_micro") {}
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
#define BR 64  // query rows per block
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif

const int THREADS = 256;  // 16 x 16
static_assert(BR == 64 && BC == 32, "the micro-tiles are written for 64 x 32 tiles");
#define FULL 0xffffffffu
#define QP (BR + 4)  // pitch of the Q^T tile (float4 reads stay aligned)
#define KP (BC + 4)  // pitch of the K^T tile
#define SP (BC + 1)  // pitch of the score tile

// 1 / sqrt(x) by the bit trick and one Newton step: no division, no sqrt.
__host__ __device__ inline float fast_rsqrt(float x) {
  union { float f; unsigned u; } c;
  c.f = x;
  c.u = 0x5f3759dfu - (c.u >> 1);
  float y = c.f;
  y = y * (1.5f - 0.5f * x * y * y);
  return y;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_micro(const float* qkv, float* out, int N) {
  __shared__ __align__(16) float Qt[D * QP];
  __shared__ __align__(16) float Kt[D * KP];
  __shared__ __align__(16) float Vs[BC * D];
  __shared__ float Ss[BR * SP];
  __shared__ float m_s[BR], l_s[BR], a_s[BR];
  const int tid = threadIdx.y * 16 + threadIdx.x, tx = threadIdx.x, ty = threadIdx.y;
  const int b = blockIdx.y, q0 = blockIdx.x * BR;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = fast_rsqrt((float)D);
  constexpr int DPT = D / 16;  // output dims per thread

  for (int e = tid; e < BR * D; e += THREADS) {
    const int r = e / D, c = e % D;
    Qt[c * QP + r] = q0 + r < N ? q[(size_t)(q0 + r) * D + c] * scale : 0.f;
  }
  if (tid < BR) m_s[tid] = -INFINITY, l_s[tid] = 0.f;
  float o[4][DPT];
  for (int a = 0; a < 4; ++a)
    for (int c = 0; c < DPT; ++c) o[a][c] = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = N - j0 < BC ? N - j0 : BC;
    __syncthreads();
    for (int e = tid; e < BC * D; e += THREADS) {
      const int r = e / D, c = e % D;
      const bool ok = r < bc;
      Kt[c * KP + r] = ok ? k[(size_t)(j0 + r) * D + c] : 0.f;
      Vs[r * D + c] = ok ? v[(size_t)(j0 + r) * D + c] : 0.f;
    }
    __syncthreads();

    // scores: rows 4ty..4ty+3, keys 2tx, 2tx+1
    float acc[4][2] = {{0.f, 0.f}, {0.f, 0.f}, {0.f, 0.f}, {0.f, 0.f}};
    for (int x = 0; x < D; ++x) {
      const float4 qa = *reinterpret_cast<const float4*>(&Qt[x * QP + 4 * ty]);
      const float2 kb = *reinterpret_cast<const float2*>(&Kt[x * KP + 2 * tx]);
      acc[0][0] += qa.x * kb.x, acc[0][1] += qa.x * kb.y;
      acc[1][0] += qa.y * kb.x, acc[1][1] += qa.y * kb.y;
      acc[2][0] += qa.z * kb.x, acc[2][1] += qa.z * kb.y;
      acc[3][0] += qa.w * kb.x, acc[3][1] += qa.w * kb.y;
    }
    for (int a = 0; a < 4; ++a)
      for (int c = 0; c < 2; ++c) Ss[(4 * ty + a) * SP + 2 * tx + c] = 2 * tx + c < bc ? acc[a][c] : -INFINITY;
    __syncthreads();

    // softmax: four threads per row, 8 keys each
    {
      const int r = tid >> 2, u = tid & 3;
      float* srow = Ss + r * SP + 8 * u;
      float tmax = -INFINITY;
      for (int c = 0; c < 8; ++c) tmax = fmaxf(tmax, srow[c]);
      tmax = fmaxf(tmax, __shfl_xor_sync(FULL, tmax, 1));
      tmax = fmaxf(tmax, __shfl_xor_sync(FULL, tmax, 2));
      const float m_old = m_s[r], m_new = fmaxf(m_old, tmax);
      float psum = 0.f;
      for (int c = 0; c < 8; ++c) {
        const float p = __expf(srow[c] - m_new);
        srow[c] = p;
        psum += p;
      }
      psum += __shfl_xor_sync(FULL, psum, 1);
      psum += __shfl_xor_sync(FULL, psum, 2);
      if (u == 0) {
        const float alpha = __expf(m_old - m_new);
        m_s[r] = m_new;
        l_s[r] = l_s[r] * alpha + psum;
        a_s[r] = alpha;
      }
    }
    __syncthreads();

    // P V: rows 4ty..4ty+3, dims tx + 16c
    for (int a = 0; a < 4; ++a) {
      const float alpha = a_s[4 * ty + a];
      for (int c = 0; c < DPT; ++c) o[a][c] *= alpha;
    }
    for (int jj = 0; jj < bc; ++jj) {
      float vv[DPT];
      for (int c = 0; c < DPT; ++c) vv[c] = Vs[jj * D + tx + 16 * c];
      for (int a = 0; a < 4; ++a) {
        const float p = Ss[(4 * ty + a) * SP + jj];
        for (int c = 0; c < DPT; ++c) o[a][c] += p * vv[c];
      }
    }
  }
  __syncthreads();
  for (int a = 0; a < 4; ++a) {
    const int i = q0 + 4 * ty + a;
    if (i >= N) continue;
    const float inv = 1.f / l_s[4 * ty + a];
    float* dst = out + ((size_t)b * N + i) * D;
    for (int c = 0; c < DPT; ++c) dst[tx + 16 * c] = o[a][c] * inv;
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
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), (unsigned)in.B), block(16, 16);
  if (in.d == 32)
    attention_micro<32><<<grid, block>>>(d_qkv, d_out, in.N);
  else
    attention_micro<64><<<grid, block>>>(d_qkv, d_out, in.N);
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

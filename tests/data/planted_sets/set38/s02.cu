// hw4.cu: FlashAttention forward, homework 4 (speed-contest entry, "a warp per 16 x 16 tile").
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// As in the FlashAttention-2 paper a warp owns its query rows and never talks to the other warps:
// here a warp owns 16 rows and computes a 16 x 16 score tile at a time, two lanes per row (lane
// 2r + h takes row r and keys 8h .. 8h + 7 of the tile, one xor shuffle merges the pair). For P V
// the pair splits the head dims (lane h keeps dims h d/2 .. h d/2 + d/2 - 1) and swaps weights
// with the same shuffle. A block is 4 warps = 64 rows; K and V tiles of 16 keys in shared memory.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_warp16") {}
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
#ifndef WARPS
#define WARPS 4  // warps per block, 16 query rows each
#endif
#define KT 16    // keys per tile (the tile is 16 x 16)

const int THREADS = WARPS * 32;
const int BR = WARPS * 16;  // query rows per block
static_assert(WARPS >= 1 && WARPS <= 32, "WARPS: 1 to 32 warps per block");
const unsigned FULL = 0xffffffffu;

template <int D>
__global__ void __launch_bounds__(THREADS) attention_warp16(const float* qkv, float* out, int N) {
  constexpr int HD = D / 2;  // head dims per lane in P V
  __shared__ float sm[KT * D + KT * (D + 1)];
  float* Vs = sm;           // KT rows of D
  float* Ks = sm + KT * D;  // KT rows of D + 1
  const int b = blockIdx.y, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int r = lane >> 1, h = lane & 1;
  const int i = blockIdx.x * BR + warp * 16 + r;  // this lane's query row
  const float* qg = qkv + (size_t)b * 3 * N * D;
  const float* kg = qg + (size_t)N * D;
  const float* vg = kg + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[HD];
  for (int x = 0; x < D; ++x) q[x] = i < N ? qg[(size_t)i * D + x] * scale : 0.f;
  for (int x = 0; x < HD; ++x) o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += KT) {
    const int bc = N - j0 < KT ? N - j0 : KT;
    __syncthreads();
    for (int e = tid; e < KT * D; e += THREADS) {
      const int rr = e / D, c = e % D;
      const bool ok = rr < bc;
      Ks[rr * (D + 1) + c] = ok ? kg[(size_t)(j0 + rr) * D + c] : 0.f;
      Vs[e] = ok ? vg[(size_t)j0 * D + e] : 0.f;
    }
    __syncthreads();

    float s[8], tmax = -INFINITY;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int j = h * 8 + k;
      const float* kr = Ks + j * (D + 1);
      float acc = 0.f;
      for (int x = 0; x < D; ++x) acc += q[x] * kr[x];
      s[k] = j < bc ? acc : -INFINITY;
      tmax = fmaxf(tmax, s[k]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(FULL, tmax, 1));
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    float p[8], psum = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      p[k] = __expf(s[k] - m_new);
      psum += p[k];
    }
    psum += __shfl_xor_sync(FULL, psum, 1);
    l = l * alpha + psum;

    for (int x = 0; x < HD; ++x) o[x] *= alpha;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float mine = p[k];
      const float theirs = __shfl_xor_sync(FULL, p[k], 1);  // the partner's weight of its key k
      const float* va = Vs + (h * 8 + k) * D + h * HD;
      const float* vb = Vs + ((h + 1) * 8 + k) * D + h * HD;
      for (int x = 0; x < HD; ++x) o[x] += mine * va[x] + theirs * vb[x];
    }
    m = m_new;
  }
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D + h * HD;
    for (int x = 0; x < HD; ++x) dst[x] = o[x] / l;
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
    attention_warp16<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_warp16<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

// s04.cu: FlashAttention forward, batches over several streams (homework 4).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: the course card kernel (block 32 x 8, a warp per row, a key per lane, K (pitch d + 1) and V
// tiles of 32 keys in shared memory); the batches split over up to 4 streams, each with its async
// H2D copy, kernel and async D2H copy through page-locked host buffers (cudaMallocHost), one device
// synchronise at the end.
//
// Builds with: nvcc -O3 -arch=sm_80 -o hw4 hw4.cu (the host code, checks and timing are the course seed's).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <algorithm>
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_card_streams") {}
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
#define ROWS 8  // query rows per block: one warp each
#endif
#ifndef BC
#define BC 32  // keys per tile: one per lane
#endif
const int THREADS = 32 * ROWS;
static_assert(ROWS >= 1 && ROWS <= 32, "ROWS: 1 to 32 warps a block");
static_assert(BC == 32, "BC: one key per lane of a warp");
#define FULL 0xffffffffu

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL, v, off));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
  return v;
}

// A warp per query row, a key per lane (the course card). Each stream runs this kernel on its own
// share of the batches; the kernel sees only its share (blockIdx.y counts from the share's start).

template <int D>
__global__ void __launch_bounds__(THREADS) attention_card(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  __shared__ __align__(16) float Qs[ROWS][D];  // the block's query rows, scaled
  __shared__ float Ks[BC][D + 1];  // padded pitch: lane j reads row j, 32 banks
  __shared__ float Vs[BC][D];
  const int lane = threadIdx.x, ty = threadIdx.y, tid = ty * 32 + lane;
  const int b = blockIdx.y, q0 = blockIdx.x * ROWS, i = q0 + ty;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  for (int e = tid; e < ROWS * D; e += THREADS) {
    const int r = e / D, c = e % D;
    Qs[r][c] = q0 + r < N ? q[(size_t)(q0 + r) * D + c] * scale : 0.f;
  }
  constexpr int DPL = D / 32;  // output dims of a lane: lane, lane + 32
  float o[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) o[t] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();  // the previous tile is no longer read
    for (int e = tid; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r][c] = k[(size_t)(j0 + r) * D + c];
      Vs[r][c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();

    float s = -INFINITY;  // the score of key j0 + lane
    if (lane < bc) {
      float acc = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) acc += Qs[ty][x] * Ks[lane][x];
      s = acc;
    }
    const float m_new = fmaxf(m, warp_max(s));
    const float alpha = __expf(m - m_new);
    const float p = lane < bc ? __expf(s - m_new) : 0.f;
    l = l * alpha + warp_sum(p);

#pragma unroll
    for (int t = 0; t < DPL; ++t) o[t] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = __shfl_sync(FULL, p, jj);
#pragma unroll
      for (int t = 0; t < DPL; ++t) o[t] += pj * Vs[jj][lane + 32 * t];
    }
    m = m_new;
  }

  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
#pragma unroll
    for (int t = 0; t < DPL; ++t) dst[lane + 32 * t] = o[t] / l;
  }
}

#ifndef NSTREAMS
#define NSTREAMS 4  // batches spread over this many streams: copies of one overlap kernels of another
#endif

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
  // Page-locked staging buffers, so that the copies are truly asynchronous.
  const size_t in_batch = (size_t)3 * in.N * in.d, out_batch = (size_t)in.N * in.d;
  float *h_in = NULL, *h_out = NULL, *d_qkv = NULL, *d_out = NULL;
  CHECK(cudaMallocHost(&h_in, in.qkv.size() * sizeof(float)));
  CHECK(cudaMallocHost(&h_out, out_values * sizeof(float)));
  std::memcpy(h_in, in.qkv.data(), in.qkv.size() * sizeof(float));
  CHECK(cudaMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(cudaMalloc(&d_out, out_values * sizeof(float)));
  const int S = in.B < NSTREAMS ? in.B : NSTREAMS;
  const int per = (in.B + S - 1) / S;  // batches per stream, the last stream takes what is left
  cudaStream_t st[NSTREAMS];
  for (int s = 0; s < S; ++s) CHECK(cudaStreamCreate(&st[s]));
  timing.h2d = seconds_now() - t;  // the copies themselves overlap the kernels: counted there

  t = seconds_now();
  for (int s = 0; s < S; ++s) {
    const int nb = std::min(per, in.B - s * per);  // this stream's batches
    if (nb <= 0) break;
    const size_t b0 = (size_t)s * nb;  // its first batch
    CHECK(cudaMemcpyAsync(d_qkv + b0 * in_batch, h_in + b0 * in_batch, nb * in_batch * sizeof(float),
                          cudaMemcpyHostToDevice, st[s]));
    const dim3 block(32, ROWS), grid((in.N + ROWS - 1) / ROWS, nb);
    if (in.d == 32)
      attention_card<32><<<grid, block, 0, st[s]>>>(d_qkv + b0 * in_batch, d_out + b0 * out_batch, in.N);
    else
      attention_card<64><<<grid, block, 0, st[s]>>>(d_qkv + b0 * in_batch, d_out + b0 * out_batch, in.N);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(h_out + b0 * out_batch, d_out + b0 * out_batch, nb * out_batch * sizeof(float),
                          cudaMemcpyDeviceToHost, st[s]));
  }
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  std::memcpy(out.data(), h_out, out_values * sizeof(float));
  timing.d2h = seconds_now() - t;
  for (int s = 0; s < S; ++s) CHECK(cudaStreamDestroy(st[s]));
  CHECK(cudaFreeHost(h_in));
  CHECK(cudaFreeHost(h_out));
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

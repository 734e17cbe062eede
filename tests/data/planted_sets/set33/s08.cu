// hw4.cu: FlashAttention forward with Q, K and V planes on the device (homework 4).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Host side: one device allocation carved into four planes Q, K, V, O (B x N x d each); the input
// is staged in page-locked memory and de-interleaved by three 2-D asynchronous copies (one per
// plane, each on its own stream, rows of N*d floats taken every 3*N*d floats of the file); the
// kernel's stream waits for the other two copies through events; the output comes back into
// page-locked memory. Kernel: one thread per query row (128 per block), K/V tiles of 32 keys in
// shared memory (K padded to d + 1), q and o in registers, one rescale per tile.
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
#define BR 128  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
const int THREADS = BR;

// q, k, v, o: planes of B batches of N x D floats each.
template <int D>
__global__ void __launch_bounds__(THREADS) attention_planes(const float* __restrict__ q, const float* __restrict__ k,
                                                            const float* __restrict__ v, float* __restrict__ o, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const size_t base = (size_t)b * N * D;
  const float* kb = k + base;
  const float* vb = v + base;
  const float scale = rsqrtf((float)D);

  float qi[D], acc[D];
#pragma unroll
  for (int x = 0; x < D; ++x) qi[x] = (i < N) ? q[base + (size_t)i * D + x] * scale : 0.f, acc[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    for (int e = threadIdx.x; e < BC * D; e += THREADS) {
      const int r = e / D, c = e % D;
      const bool ok = r < bc;
      Ks[r * (D + 1) + c] = ok ? kb[(size_t)(j0 + r) * D + c] : 0.f;
      Vs[e] = ok ? vb[(size_t)j0 * D + e] : 0.f;
    }
    __syncthreads();
    float s[BC];
    float tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      float dot = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) dot += qi[x] * Ks[jj * (D + 1) + x];
      s[jj] = jj < bc ? dot : -INFINITY;
      tmax = fmaxf(tmax, s[jj]);
    }
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    l *= alpha;
#pragma unroll
    for (int x = 0; x < D; ++x) acc[x] *= alpha;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      const float p = __expf(s[jj] - m_new);
      l += p;
#pragma unroll
      for (int x = 0; x < D; ++x) acc[x] += p * Vs[jj * D + x];
    }
    m = m_new;
    __syncthreads();
  }
  if (i < N) {
    float* dst = o + base + (size_t)i * D;
    const float inv = 1.f / l;
#pragma unroll
    for (int x = 0; x < D; ++x) dst[x] = acc[x] * inv;
  }
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_planes";
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
  const size_t nd = (size_t)in.N * in.d;  // floats of one matrix
  const size_t plane = (size_t)in.B * nd;  // floats of one plane (all batches)
  float *h_in = NULL, *h_out = NULL, *d_base = NULL;
  CHECK(cudaMallocHost(&h_in, in.qkv.size() * sizeof(float)));
  CHECK(cudaMallocHost(&h_out, out_values * sizeof(float)));
  std::memcpy(h_in, in.qkv.data(), in.qkv.size() * sizeof(float));
  CHECK(cudaMalloc(&d_base, 4 * plane * sizeof(float)));
  float* d_plane[4] = {d_base, d_base + plane, d_base + 2 * plane, d_base + 3 * plane};  // Q K V O

  cudaStream_t st[3];
  cudaEvent_t copied[3];
  for (int s = 0; s < 3; ++s) {
    CHECK(cudaStreamCreateWithFlags(&st[s], cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&copied[s], cudaEventDisableTiming));
  }
  const size_t row_bytes = nd * sizeof(float);  // one matrix of one batch
  for (int s = 0; s < 3; ++s) {                 // s = 0, 1, 2: Q, K, V
    CHECK(cudaMemcpy2DAsync(d_plane[s], row_bytes, h_in + s * nd, row_bytes, row_bytes, in.B,
                            cudaMemcpyHostToDevice, st[s]));
    CHECK(cudaEventRecord(copied[s], st[s]));
  }
  CHECK(cudaStreamWaitEvent(st[0], copied[1], 0));
  CHECK(cudaStreamWaitEvent(st[0], copied[2], 0));
  timing.h2d = seconds_now() - t;  // issue time only: the copies overlap the launch below

  t = seconds_now();
  const dim3 grid((in.N + BR - 1) / BR, in.B);
  if (in.d == 32)
    attention_planes<32><<<grid, THREADS, 0, st[0]>>>(d_plane[0], d_plane[1], d_plane[2], d_plane[3], in.N);
  else
    attention_planes<64><<<grid, THREADS, 0, st[0]>>>(d_plane[0], d_plane[1], d_plane[2], d_plane[3], in.N);
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(st[0]));
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpyAsync(h_out, d_plane[3], out_values * sizeof(float), cudaMemcpyDeviceToHost, st[0]));
  CHECK(cudaStreamSynchronize(st[0]));
  std::memcpy(out.data(), h_out, out_values * sizeof(float));
  timing.d2h = seconds_now() - t;
  for (int s = 0; s < 3; ++s) {
    CHECK(cudaEventDestroy(copied[s]));
    CHECK(cudaStreamDestroy(st[s]));
  }
  CHECK(cudaFree(d_base));
  CHECK(cudaFreeHost(h_in));
  CHECK(cudaFreeHost(h_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

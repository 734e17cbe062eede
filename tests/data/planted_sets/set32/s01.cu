// hw4.cu: FlashAttention forward for homework 4, from the course seed (`fa init`).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: a block of BR = 64 threads holds 64 query rows (a thread per row, q and o in registers)
// and walks the keys in tiles of BC = 32 rows of K and V staged in shared memory, with the online
// softmax per key. Host: batches in chunks through page-locked memory and two CUDA streams.
//
// With FA_TIMING=1 it also prints the time of each stage (see "timing" below).
//
// Build: nvcc -std=c++17 -O3 -arch=sm_90 -o hw4 hw4.cu
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_tiles") {}
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
// A block holds BR query rows, one thread each, and walks the keys in tiles of BC rows of K and V
// staged in shared memory (K rows padded to D + 1 floats). The kernel sees one chunk of batches.
#ifndef BR
#define BR 64  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 32  // keys per shared-memory tile
#endif

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(BC >= 1, "BC: a tile holds one key at least");

// grid (query tiles, batches of the chunk); qkv and out point at the chunk's first batch
template <int D>
__global__ void __launch_bounds__(THREADS) attention_tiles(const float* qkv, float* out, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y, i = blockIdx.x * BR + threadIdx.x;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const bool valid = i < N;

  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = valid ? q[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = k[(size_t)(j0 + r) * D + c];
      Vs[r * D + c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
      for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj * (D + 1) + x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
      m = m_new;
    }
    __syncthreads();
  }
  if (!valid) return;
  float* dst = out + ((size_t)b * N + i) * D;
  for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
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

  // Batches go in chunks of about 2^24 output values. Each of the two streams has its own
  // page-locked staging buffer and device buffers; chunk c goes to stream c % 2 (copy in, kernel,
  // copy out into the page-locked output), so copies and kernels of neighbouring chunks overlap.
  t = seconds_now();
  const size_t per_in = (size_t)3 * in.N * in.d, per_out = (size_t)in.N * in.d;
  int chunk = (int)(((size_t)1 << 24) / per_out);
  if (chunk < 1) chunk = 1;
  if (chunk > in.B) chunk = in.B;
  const int nchunks = (in.B + chunk - 1) / chunk;
  float *h_out = NULL, *h_stage[2], *d_in[2], *d_out[2];
  cudaStream_t streams[2];
  CHECK(cudaMallocHost(&h_out, out_values * sizeof(float)));
  for (int s = 0; s < 2; ++s) {
    CHECK(cudaStreamCreate(&streams[s]));
    CHECK(cudaMallocHost(&h_stage[s], chunk * per_in * sizeof(float)));
    CHECK(cudaMalloc(&d_in[s], chunk * per_in * sizeof(float)));
    CHECK(cudaMalloc(&d_out[s], chunk * per_out * sizeof(float)));
  }
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  const unsigned tiles = (unsigned)((in.N + BR - 1) / BR);
  for (int c = 0; c < nchunks; ++c) {
    const int b0 = c * chunk, s = c & 1;
    const size_t in_n = (size_t)chunk * per_in, out_n = (size_t)chunk * per_out;
    CHECK(cudaStreamSynchronize(streams[s]));  // the staging buffer of this stream is free again
    std::memcpy(h_stage[s], in.qkv.data() + (size_t)b0 * per_in, in_n * sizeof(float));
    CHECK(cudaMemcpyAsync(d_in[s], h_stage[s], in_n * sizeof(float), cudaMemcpyHostToDevice, streams[s]));
    const dim3 grid(tiles, chunk);
    if (in.d == 32)
      attention_tiles<32><<<grid, THREADS, 0, streams[s]>>>(d_in[s], d_out[s], in.N);
    else
      attention_tiles<64><<<grid, THREADS, 0, streams[s]>>>(d_in[s], d_out[s], in.N);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(h_out + (size_t)b0 * per_out, d_out[s], out_n * sizeof(float), cudaMemcpyDeviceToHost,
                          streams[s]));
  }
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  std::memcpy(out.data(), h_out, out_values * sizeof(float));
  timing.d2h = seconds_now() - t;
  for (int s = 0; s < 2; ++s) {
    CHECK(cudaStreamDestroy(streams[s]));
    CHECK(cudaFreeHost(h_stage[s]));
    CHECK(cudaFree(d_in[s]));
    CHECK(cudaFree(d_out[s]));
  }
  CHECK(cudaFreeHost(h_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

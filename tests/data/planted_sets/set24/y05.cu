// hw4.cu: FlashAttention forward, with the copies overlapped with the kernels (streams, pinned memory).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Host: the input and output vectors are page-locked (cudaHostRegister) so that cudaMemcpyAsync is
// truly asynchronous; the batches are cut into chunks of about 64 MB of input, and the chunks go
// round-robin over several streams: copy in, kernel, copy out, so that one chunk's copies overlap
// another chunk's kernel. Two device input buffers are used in turn (ping-pong), the device output is
// full size. Kernel: one thread per query row, K/V tiles of BC keys in shared memory.
//
// Builds with: nvcc -std=c++11 -O3 -arch=sm_90 -o hw4 hw4.cu
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
#define BC 32  // keys per tile
#endif

// qkv: nb batches (grid y), laid out Q_b K_b V_b; out: their nb outputs.
template <int D>
__global__ void __launch_bounds__(BR) attention_tiles(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  __shared__ float Ks[BC * D];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y, i = blockIdx.x * BR + threadIdx.x;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);
  const bool valid = i < N;

  float qi[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) {
    qi[x] = valid ? qb[(size_t)i * D + x] * scale : 0.f;
    o[x] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D; e += BR) {
      Ks[e] = kb[(size_t)j0 * D + e];
      Vs[e] = vb[(size_t)j0 * D + e];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj * D + x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
      m = m_new;
    }
  }
  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
    const float inv = 1.f / l;
#pragma unroll
    for (int x = 0; x < D; ++x) dst[x] = o[x] * inv;
  }
}

// ---------------------------------------------------------------- main
static const int NSTREAMS = 3;              // chunks in flight
static const size_t CHUNK_FLOATS = 1 << 24;  // input floats per chunk, about 64 MB

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_tiles";
  const double start = seconds_now();
  double t = start;
  Input in = read_input(argv[1]);
  timing.read = seconds_now() - t;
  const int B = in.B, N = in.N, d = in.d;
  const size_t out_values = (size_t)B * N * d;
  std::vector<float> out(out_values);

  t = seconds_now();
  CHECK(cudaFree(0));  // the GPU context is made here: its cost, not the first copy's
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  char arch[32];
  std::snprintf(arch, sizeof arch, "sm_%d%d", prop.major, prop.minor);
  timing.arch = arch, timing.device = prop.name;
  cudaStream_t streams[NSTREAMS];
  for (int s = 0; s < NSTREAMS; ++s) CHECK(cudaStreamCreate(&streams[s]));
  timing.init = seconds_now() - t;

  // pinned host memory, device buffers
  t = seconds_now();
  CHECK(cudaHostRegister(in.qkv.data(), in.qkv.size() * sizeof(float), cudaHostRegisterDefault));
  CHECK(cudaHostRegister(out.data(), out_values * sizeof(float), cudaHostRegisterDefault));
  const size_t in_batch = (size_t)3 * N * d, out_batch = (size_t)N * d;
  int chunk = (int)(CHUNK_FLOATS / in_batch);
  if (chunk < 1) chunk = 1;
  if (chunk > B) chunk = B;
  float* d_in[2] = {NULL, NULL};
  float* d_out = NULL;
  CHECK(cudaMalloc(&d_in[0], (size_t)chunk * in_batch * sizeof(float)));
  CHECK(cudaMalloc(&d_in[1], (size_t)chunk * in_batch * sizeof(float)));
  CHECK(cudaMalloc(&d_out, out_values * sizeof(float)));
  timing.h2d = seconds_now() - t;

  // copy in, compute, copy out, one chunk per stream in turn
  t = seconds_now();
  for (int c = 0, b0 = 0; b0 < B; ++c, b0 += chunk) {
    const int nb = (B - b0 < chunk) ? B - b0 : chunk;
    cudaStream_t st = streams[c % NSTREAMS];
    float* buf = d_in[c & 1];
    CHECK(cudaMemcpyAsync(buf, in.qkv.data() + (size_t)b0 * in_batch, (size_t)nb * in_batch * sizeof(float),
                          cudaMemcpyHostToDevice, st));
    const dim3 grid((N + BR - 1) / BR, nb);
    if (d == 32)
      attention_tiles<32><<<grid, BR, 0, st>>>(buf, d_out + (size_t)b0 * out_batch, N);
    else
      attention_tiles<64><<<grid, BR, 0, st>>>(buf, d_out + (size_t)b0 * out_batch, N);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(out.data() + (size_t)b0 * out_batch, d_out + (size_t)b0 * out_batch,
                          (size_t)nb * out_batch * sizeof(float), cudaMemcpyDeviceToHost, st));
  }
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;  // copies included: they overlap the kernels

  t = seconds_now();
  for (int s = 0; s < NSTREAMS; ++s) CHECK(cudaStreamDestroy(streams[s]));
  CHECK(cudaFree(d_in[0]));
  CHECK(cudaFree(d_in[1]));
  CHECK(cudaFree(d_out));
  CHECK(cudaHostUnregister(in.qkv.data()));
  CHECK(cudaHostUnregister(out.data()));
  timing.d2h = seconds_now() - t;
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

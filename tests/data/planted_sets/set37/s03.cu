// hw4.cu: FlashAttention forward, homework 4.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Kernel: one thread per query row, 64 rows per block, K and V tiles of 32 keys in shared memory (K
// rows padded to d + 1 floats), the online softmax key by key.
// Host: the batches go to the GPU in chunks of at most CHUNK_BYTES of input, on two streams, through
// page-locked staging buffers, so that the copies of one chunk overlap the kernel of the other.
// (Office hours: v1 pinned the whole 654 MB input with cudaHostRegister, which alone took longer than
// the kernel; the staging buffers are small and allocated once.)
//
// Builds with: nvcc -std=c++11 -O3 -arch=sm_61 -o hw4 hw4.cu -lm
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
#ifndef BR
#define BR 64  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
const int THREADS = BR;
const size_t CHUNK_BYTES = (size_t)16 << 20;  // input bytes per chunk (per stream buffer)

// blockIdx.x: a tile of BR query rows; blockIdx.y: the batch within the chunk
template <int D>
__global__ void __launch_bounds__(THREADS) attention_tiles(const float* qkv, float* out, int N) {
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D];
  for (int x = 0; x < D; ++x) {
    q[x] = i < N ? qb[(size_t)i * D + x] * scale : 0.f;
    o[x] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r][c] = kb[(size_t)(j0 + r) * D + c];
      Vs[r][c] = vb[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += q[x] * Ks[jj][x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj][x];
      m = m_new;
    }
  }
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
  }
}

static void launch(int d, int N, int nb, const float* qkv, float* o, cudaStream_t st) {
  const dim3 grid((N + BR - 1) / BR, nb);
  if (d == 32)
    attention_tiles<32><<<grid, THREADS, 0, st>>>(qkv, o, N);
  else
    attention_tiles<64><<<grid, THREADS, 0, st>>>(qkv, o, N);
  CHECK(cudaGetLastError());
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

  // chunks of whole batches, as many as fit in CHUNK_BYTES of input
  const size_t in_per_batch = (size_t)3 * in.N * in.d;  // floats
  const size_t out_per_batch = (size_t)in.N * in.d;
  int per_chunk = (int)(CHUNK_BYTES / (in_per_batch * sizeof(float)));
  if (per_chunk > in.B) per_chunk = in.B;

  t = seconds_now();
  cudaStream_t st[2];
  float *h_in[2], *h_out[2], *d_in[2], *d_o[2];
  for (int k = 0; k < 2; ++k) {
    CHECK(cudaStreamCreate(&st[k]));
    CHECK(cudaMallocHost(&h_in[k], per_chunk * in_per_batch * sizeof(float)));
    CHECK(cudaMallocHost(&h_out[k], per_chunk * out_per_batch * sizeof(float)));
    CHECK(cudaMalloc(&d_in[k], per_chunk * in_per_batch * sizeof(float)));
    CHECK(cudaMalloc(&d_o[k], per_chunk * out_per_batch * sizeof(float)));
  }
  int pend_b0[2] = {-1, -1}, pend_nb[2] = {0, 0};  // the chunk whose output each stream still holds
  for (int b0 = 0, c = 0; b0 < in.B; b0 += per_chunk, ++c) {
    const int k = c & 1;
    const int nb = in.B - b0 < per_chunk ? in.B - b0 : per_chunk;
    if (pend_b0[k] >= 0) {  // collect this stream's previous chunk before its buffers are reused
      CHECK(cudaStreamSynchronize(st[k]));
      std::memcpy(out.data() + pend_b0[k] * out_per_batch, h_out[k], pend_nb[k] * out_per_batch * sizeof(float));
    }
    std::memcpy(h_in[k], in.qkv.data() + b0 * in_per_batch, nb * in_per_batch * sizeof(float));
    CHECK(cudaMemcpyAsync(d_in[k], h_in[k], nb * in_per_batch * sizeof(float), cudaMemcpyHostToDevice, st[k]));
    launch(in.d, in.N, nb, d_in[k], d_o[k], st[k]);
    CHECK(cudaMemcpyAsync(h_out[k], d_o[k], nb * out_per_batch * sizeof(float), cudaMemcpyDeviceToHost, st[k]));
    pend_b0[k] = b0, pend_nb[k] = nb;
  }
  for (int k = 0; k < 2; ++k) {
    if (pend_b0[k] < 0) continue;
    CHECK(cudaStreamSynchronize(st[k]));
    std::memcpy(out.data() + pend_b0[k] * out_per_batch, h_out[k], pend_nb[k] * out_per_batch * sizeof(float));
  }
  timing.kernel = seconds_now() - t;  // copies and kernels overlap: all of it counted as "kernel"

  for (int k = 0; k < 2; ++k) {
    CHECK(cudaStreamDestroy(st[k]));
    CHECK(cudaFreeHost(h_in[k]));
    CHECK(cudaFreeHost(h_out[k]));
    CHECK(cudaFree(d_in[k]));
    CHECK(cudaFree(d_o[k]));
  }
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

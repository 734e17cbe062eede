// hw4.cu: FlashAttention forward, homework 4 (tiles in dynamic shared memory, tile size per d).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// One kernel template, attention_tiled<D, TBC>: thread per query row, K/V tiles of TBC keys in
// dynamic shared memory (K padded to d + 1), online softmax per tile. d = 32 rows are half as long,
// so d = 32 takes tiles of twice as many keys in about the same space. The host sizes the shared
// memory at launch and falls back to the seed's kernel if a device cannot give that much.
// Built from the course seed (fa init).
#include <algorithm>
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
#define BC 32  // keys per K/V tile for d = 64 (d = 32: 2 * BC)
#endif

// grid (ceil(N / BR), B); dynamic shared memory: K tile TBC x (D + 1), then V tile TBC x D
template <int D, int TBC>
__global__ void __launch_bounds__(BR) attention_tiled(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  extern __shared__ float smem[];
  float* Ks = smem;
  float* Vs = smem + TBC * (D + 1);
  const int tid = threadIdx.x, b = blockIdx.y;
  const int i = blockIdx.x * BR + tid;
  const bool valid = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) q[x] = valid ? qb[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += TBC) {
    const int bc = min(TBC, N - j0);
    for (int e = tid; e < bc * D; e += BR) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = kb[(size_t)(j0 + r) * D + c];
      Vs[r * D + c] = vb[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    float s[TBC];
    float tmax = m;
#pragma unroll
    for (int jj = 0; jj < TBC; ++jj) {
      float acc = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) acc += q[x] * Ks[jj * (D + 1) + x];
      s[jj] = jj < bc ? acc : -INFINITY;
      tmax = fmaxf(tmax, s[jj]);
    }
    const float alpha = __expf(m - tmax);
#pragma unroll
    for (int x = 0; x < D; ++x) o[x] *= alpha;
    float psum = 0.f;
#pragma unroll
    for (int jj = 0; jj < TBC; ++jj) {
      if (jj < bc) {
        const float p = __expf(s[jj] - tmax);
        psum += p;
#pragma unroll
        for (int x = 0; x < D; ++x) o[x] += p * Vs[jj * D + x];
      }
    }
    l = l * alpha + psum;
    m = tmax;
    __syncthreads();
  }
  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
#pragma unroll
    for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
  }
}

// The seed's kernel (one thread per row, K and V read from global memory): the fallback.
template <int D>
__global__ void __launch_bounds__(128) attention_rows(const float* qkv, float* out, int B, int N) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= (long long)B * N) return;
  const int b = (int)(row / N), i = (int)(row % N);
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)i * D;
  const float* k = qkv + (size_t)b * 3 * N * D + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < N; ++j) {
    float s = 0.f;
    for (int x = 0; x < D; ++x) s += qi[x] * k[(size_t)j * D + x];
    const float m_new = fmaxf(m, s);
    const float alpha = __expf(m - m_new), p = __expf(s - m_new);
    l = l * alpha + p;
    for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * v[(size_t)j * D + x];
    m = m_new;
  }
  float* dst = out + (size_t)b * N * D + (size_t)i * D;
  for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
}

template <int D, int TBC>
static const char* launch_attention(const float* d_qkv, float* d_out, int B, int N, const cudaDeviceProp& prop) {
  const size_t smem = (size_t)BC * (2 * D + 1) * sizeof(float);  // K tile (pitch D + 1) and V tile
  if (smem > prop.sharedMemPerBlock) {  // not on this device: the plain kernel
    const long long rows = (long long)B * N;
    attention_rows<D><<<(unsigned)((rows + 127) / 128), 128>>>(d_qkv, d_out, B, N);
    return "attention_rows";
  }
  const dim3 grid((N + BR - 1) / BR, B);
  attention_tiled<D, TBC><<<grid, BR, smem>>>(d_qkv, d_out, N);
  return "attention_tiled";
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
  if (in.d == 32)
    timing.impl = launch_attention<32, 2 * BC>(d_qkv, d_out, in.B, in.N, prop);
  else
    timing.impl = launch_attention<64, BC>(d_qkv, d_out, in.B, in.N, prop);
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

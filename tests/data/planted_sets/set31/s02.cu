// hw4.cu: FlashAttention forward, homework 4 (split keys merged under a lock).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// The keys of a query tile are split into S ranges, one block each (S > 1 only for long
// sequences). A block runs the online softmax over its range and then merges its (m, l, o) into
// running accumulators of the tile's rows in global memory, holding a spin lock of the tile while
// it does; a last small kernel divides o by l. Built from the course seed (fa init).
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
#define BC 32  // keys per K/V tile in shared memory
#endif
#ifndef MAXS
#define MAXS 8  // at most this many key splits
#endif

// grid (query tiles, S, B). acc_m, acc_l: per row; acc_o: per row, D values; locks: per (b, tile).
template <int D>
__global__ void __launch_bounds__(BR) attention_split_lock(const float* __restrict__ qkv, float* acc_o, float* acc_m,
                                                           float* acc_l, int* locks, int N, int klen) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int tid = threadIdx.x, tile = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int i = tile * BR + tid;
  const bool valid = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) q[x] = valid ? qb[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  const int kbeg = split * klen, kend = min(N, kbeg + klen);
  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    for (int e = tid; e < bc * D; e += BR) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = kb[(size_t)(j0 + r) * D + c];
      Vs[r * D + c] = vb[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    float s[BC];
    float tmax = m;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
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
    for (int jj = 0; jj < BC; ++jj) {
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

  // merge into the tile's accumulators, one block at a time
  int* lock = &locks[(size_t)b * gridDim.x + tile];
  if (tid == 0)
    while (atomicCAS(lock, 0, 1) != 0) {
    }
  __threadfence();
  if (valid) {
    const size_t row = (size_t)b * N + i;
    const float m0 = __ldcg(&acc_m[row]), l0 = __ldcg(&acc_l[row]);
    const float mn = fmaxf(m0, m);
    const float a0 = __expf(m0 - mn), a1 = __expf(m - mn);
    float* go = acc_o + row * D;
#pragma unroll
    for (int x = 0; x < D; ++x) go[x] = __ldcg(&go[x]) * a0 + o[x] * a1;
    acc_l[row] = l0 * a0 + l * a1;
    acc_m[row] = mn;
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) atomicExch(lock, 0);
}

__global__ void init_rows(float* acc_m, long long rows) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) acc_m[r] = -INFINITY;
}

// O = o / l, one thread per output value
__global__ void finalize(const float* __restrict__ acc_o, const float* __restrict__ acc_l, float* __restrict__ out,
                         long long values, int D) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < values) out[e] = acc_o[e] / acc_l[e / D];
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
  timing.impl = "attention_split_lock";
  const int S = in.N >= 1024 ? std::min(MAXS, in.N / 512) : 1;  // key splits
  const int klen = (in.N + S - 1) / S;                            // keys per split
  const int tiles = (in.N + BR - 1) / BR;
  const long long rows = (long long)in.B * in.N;
  float *d_acc_o = NULL, *d_acc_m = NULL, *d_acc_l = NULL;
  int* d_locks = NULL;
  CHECK(cudaMalloc(&d_acc_o, out_values * sizeof(float)));
  CHECK(cudaMalloc(&d_acc_m, rows * sizeof(float)));
  CHECK(cudaMalloc(&d_acc_l, rows * sizeof(float)));
  CHECK(cudaMalloc(&d_locks, (size_t)in.B * tiles * sizeof(int)));
  CHECK(cudaMemset(d_acc_o, 0, out_values * sizeof(float)));
  CHECK(cudaMemset(d_acc_l, 0, rows * sizeof(float)));
  CHECK(cudaMemset(d_locks, 0, (size_t)in.B * tiles * sizeof(int)));
  init_rows<<<(unsigned)((rows + 255) / 256), 256>>>(d_acc_m, rows);
  const dim3 grid(tiles, S, in.B);
  if (in.d == 32)
    attention_split_lock<32><<<grid, BR>>>(d_qkv, d_acc_o, d_acc_m, d_acc_l, d_locks, in.N, klen);
  else
    attention_split_lock<64><<<grid, BR>>>(d_qkv, d_acc_o, d_acc_m, d_acc_l, d_locks, in.N, klen);
  CHECK(cudaGetLastError());
  finalize<<<(unsigned)((out_values + 255) / 256), 256>>>(d_acc_o, d_acc_l, d_out, (long long)out_values, in.d);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_acc_o));
  CHECK(cudaFree(d_acc_m));
  CHECK(cudaFree(d_acc_l));
  CHECK(cudaFree(d_locks));
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

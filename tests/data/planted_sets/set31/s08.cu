// hw4.cu: FlashAttention forward, homework 4 (grid-stride loop over work items, float4 loads).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A fixed grid (a few blocks per SM) walks the work items (batch, query tile of BR rows) with a
// grid-stride loop. Inside an item: thread per row, K/V tiles loaded with float4 into shared
// memory (K padded to d + 1 against bank conflicts), online softmax per tile, float4 stores of the
// output row. Built from the course seed (fa init).
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
#define BR 64  // query rows per work item: one thread each
#endif
#ifndef BC
#define BC 32  // keys per K/V tile in shared memory
#endif
#ifndef BLOCKS_PER_SM
#define BLOCKS_PER_SM 4  // the grid: this many blocks per SM
#endif

template <int D>
__global__ void __launch_bounds__(BR) attention_gridstride(const float* __restrict__ qkv, float* __restrict__ out,
                                                           int N, int tiles, int total) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ __align__(16) float Vs[BC * D];  // float4 stores
  const int tid = threadIdx.x;
  const float scale = 1.0f / sqrtf((float)D);
  constexpr int D4 = D / 4;

  // the row's scaled query, loaded with float4 and kept in registers
  int item = blockIdx.x;
  float q[D];
  {
    const int b = item / tiles, i = (item % tiles) * BR + tid;
    const float4* q4 = reinterpret_cast<const float4*>(qkv + (size_t)b * 3 * N * D + (size_t)i * D);
#pragma unroll
    for (int x4 = 0; x4 < D4; ++x4) {
      const float4 v = i < N ? q4[x4] : make_float4(0.f, 0.f, 0.f, 0.f);
      q[4 * x4 + 0] = v.x * scale, q[4 * x4 + 1] = v.y * scale;
      q[4 * x4 + 2] = v.z * scale, q[4 * x4 + 3] = v.w * scale;
    }
  }

  for (; item < total; item += gridDim.x) {
    const int b = item / tiles, i = (item % tiles) * BR + tid;
    const bool valid = i < N;
    const float* kb = qkv + (size_t)b * 3 * N * D + (size_t)N * D;
    const float* vb = kb + (size_t)N * D;
    float o[D];
#pragma unroll
    for (int x = 0; x < D; ++x) o[x] = 0.f;
    float m = -INFINITY, l = 0.f;

    for (int j0 = 0; j0 < N; j0 += BC) {
      const int bc = min(BC, N - j0);
      const float4* k4 = reinterpret_cast<const float4*>(kb + (size_t)j0 * D);
      const float4* v4 = reinterpret_cast<const float4*>(vb + (size_t)j0 * D);
      for (int e = tid; e < bc * D4; e += BR) {
        const int r = e / D4, c = (e % D4) * 4;
        const float4 kv = k4[e], vv = v4[e];
        float* kd = &Ks[r * (D + 1) + c];  // padded row: not 16-byte aligned, stored one by one
        kd[0] = kv.x, kd[1] = kv.y, kd[2] = kv.z, kd[3] = kv.w;
        reinterpret_cast<float4*>(Vs)[e] = vv;
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
    if (valid) {
      float4* dst = reinterpret_cast<float4*>(out + ((size_t)b * N + i) * D);
      const float inv = 1.0f / l;
#pragma unroll
      for (int x4 = 0; x4 < D4; ++x4)
        dst[x4] = make_float4(o[4 * x4] * inv, o[4 * x4 + 1] * inv, o[4 * x4 + 2] * inv, o[4 * x4 + 3] * inv);
    }
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
  timing.impl = "attention_gridstride";
  const int tiles = (in.N + BR - 1) / BR;
  const int total = in.B * tiles;  // work items
  const int grid = std::min(total, BLOCKS_PER_SM * prop.multiProcessorCount);
  if (in.d == 32)
    attention_gridstride<32><<<grid, BR>>>(d_qkv, d_out, in.N, tiles, total);
  else
    attention_gridstride<64><<<grid, BR>>>(d_qkv, d_out, in.N, tiles, total);
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

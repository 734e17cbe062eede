// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4: LDS tiles sized at launch.
//
//   ./hw4-amd INPUT OUTPUT   O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// attention_tiled<D, TBC>: a wavefront of BR = 64 query rows per block (thread per row), the Q tile
// loaded into LDS with float4 (coalesced) and copied to registers, K/V tiles of TBC keys in LDS
// (K padded to d + 1), online softmax per tile. All LDS is dynamic, sized at launch. The MI210
// has 64 KB of LDS per block: where the device has room, d = 64 takes tiles of 2 * BC keys (over
// 48 KB); elsewhere BC. Built from the course seed (fa init).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <hip/hip_runtime.h>

// ---------------------------------------------------------------- errors
// Every HIP call goes through CHECK: a failure prints where it happened and what HIP said.
#define CHECK(call)                                                                             \
  do {                                                                                          \
    hipError_t err_ = (call);                                                                  \
    if (err_ != hipSuccess) {                                                                  \
      std::fprintf(stderr, "hw4-amd: %s:%d: %s\n", __FILE__, __LINE__, hipGetErrorString(err_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

static void fail(const char* what, const char* path) {
  std::fprintf(stderr, "hw4-amd: %s: %s\n", path, what);
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
#define BR 64  // query rows per block: one thread each (one wavefront)
#endif
#ifndef BC
#define BC 32  // keys per K/V tile (d = 64 with 64 KB of LDS: 2 * BC)
#endif

// grid (ceil(N / BR), B); dynamic LDS: Q tile BR x D, K tile TBC x (D + 1), V tile TBC x D
template <int D, int TBC>
__global__ void __launch_bounds__(BR) attention_tiled(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  extern __shared__ float lds[];
  float* Qs = lds;
  float* Ks = Qs + BR * D;
  float* Vs = Ks + TBC * (D + 1);
  const int tid = threadIdx.x, b = blockIdx.y;
  const int q0 = blockIdx.x * BR, i = q0 + tid;
  const bool valid = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  // Q tile: float4, consecutive threads on consecutive addresses
  const int qrows = min(BR, N - q0);
  const float4* q4 = reinterpret_cast<const float4*>(qb + (size_t)q0 * D);
  for (int e = tid; e < qrows * (D / 4); e += BR) reinterpret_cast<float4*>(Qs)[e] = q4[e];
  __syncthreads();
  float q[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) q[x] = valid ? Qs[tid * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += TBC) {
    const int bc = min(BC, N - j0);
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

template <int D, int TBC>
static size_t lds_bytes() {
  return (size_t)(BR * D + TBC * (D + 1) + TBC * D) * sizeof(float);
}

template <int D, int TBC>
static void launch_tiled(const float* d_qkv, float* d_out, int B, int N) {
  const dim3 grid((N + BR - 1) / BR, B);
  attention_tiled<D, TBC><<<grid, BR, lds_bytes<D, TBC>()>>>(d_qkv, d_out, N);
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
  CHECK(hipFree(0));  // the GPU context is made here: its cost, not the first copy's
  hipDeviceProp_t prop;
  CHECK(hipGetDeviceProperties(&prop, 0));
  const std::string gcn = prop.gcnArchName;
  timing.arch = gcn.substr(0, gcn.find(':')), timing.device = prop.name;  // gfx90a:sramecc+:xnack-: gfx90a
  timing.init = seconds_now() - t;

  t = seconds_now();
  float *d_qkv = NULL, *d_out = NULL;
  CHECK(hipMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(hipMalloc(&d_out, out_values * sizeof(float)));
  CHECK(hipMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), hipMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  if (in.d == 32) {
    timing.impl = "attention_tiled<32,32>";
    launch_tiled<32, BC>(d_qkv, d_out, in.B, in.N);
  } else if (lds_bytes<64, 2 * BC>() <= prop.sharedMemPerBlock) {  // MI210: 64 KB
    timing.impl = "attention_tiled<64,64>";
    launch_tiled<64, 2 * BC>(d_qkv, d_out, in.B, in.N);
  } else {
    timing.impl = "attention_tiled<64,32>";
    launch_tiled<64, BC>(d_qkv, d_out, in.B, in.N);
  }
  CHECK(hipGetLastError());
  CHECK(hipDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(hipMemcpy(out.data(), d_out, out_values * sizeof(float), hipMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(hipFree(d_qkv));
  CHECK(hipFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

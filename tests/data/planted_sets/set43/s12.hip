// hw4.hip (s12): FlashAttention forward for the MI210 (HIP), 16 lanes per query row.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Ported from a CUDA half-warp version, written so that it does not care about the wavefront's
// width: a row is a group of 16 lanes (4 rows a wavefront on the MI210, 2 a warp on NVIDIA), every
// reduction is a __shfl_xor with a width argument that keeps it inside the group. A block of 256
// threads (16 rows) shares 64-key K (pitch d + 1) and V tiles in LDS; each group takes a tile in 4
// steps of 16 keys, a key per lane, base-2 weights; lane g owns output dims g + 16 t.
//
// Builds with: hipcc -std=c++14 -O3 --offload-arch=gfx90a -o hw4-amd hw4.hip -lm
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
#ifndef TILE
#define TILE 64  // keys per LDS tile
#endif
const int GROUP = 16;                 // lanes per row
const int THREADS = 256;
const int ROWS = THREADS / GROUP;     // rows per block

__device__ __forceinline__ float group_max(float v) {
  for (int off = GROUP / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off, GROUP));
  return v;
}
__device__ __forceinline__ float group_sum(float v) {
  for (int off = GROUP / 2; off > 0; off >>= 1) v += __shfl_xor(v, off, 8);
  return v;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_groups(const float* __restrict__ qkv, float* __restrict__ out,
                                                            int N) {
  constexpr int DPL = D / GROUP;  // output dims per lane: 2 or 4
  __shared__ float Qs[ROWS][D];
  __shared__ float Ks[TILE][D + 1];
  __shared__ float Vs[TILE][D];
  const int r = threadIdx.x / GROUP, g = threadIdx.x % GROUP;
  const int b = blockIdx.y, i = blockIdx.x * ROWS + r;
  const bool valid = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float qscale = 1.4426950408889634f / sqrtf((float)D);

  for (int x = g; x < D; x += GROUP) Qs[r][x] = valid ? qb[(size_t)i * D + x] * qscale : 0.f;
  float o[DPL];
  for (int t = 0; t < DPL; ++t) o[t] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += TILE) {
    const int bc = min(TILE, N - j0);
    __syncthreads();  // the previous tile is no longer read (and, the first time, Qs is written)
    for (int e = threadIdx.x; e < bc * D; e += blockDim.x) {
      Ks[e / D][e % D] = kb[(size_t)j0 * D + e];
      Vs[e / D][e % D] = vb[(size_t)j0 * D + e];
    }
    __syncthreads();
    for (int k0 = 0; k0 < bc; k0 += GROUP) {  // 16 keys a step, one per lane
      const int jj = k0 + g, kn = min(GROUP, bc - k0);
      float s = -INFINITY;
      if (jj < bc) {
        s = 0.f;
        for (int x = 0; x < D; ++x) s += Qs[r][x] * Ks[jj][x];
      }
      const float m_new = fmaxf(m, group_max(s));
      const float p = jj < bc ? exp2f(s - m_new) : 0.f;
      const float alpha = exp2f(m - m_new);
      l = l * alpha + group_sum(p);
      for (int t = 0; t < DPL; ++t) o[t] *= alpha;
      for (int k = 0; k < kn; ++k) {
        const float pk = __shfl(p, k, GROUP);
        for (int t = 0; t < DPL; ++t) o[t] += pk * Vs[k0 + k][g + GROUP * t];
      }
      m = m_new;
    }
  }
  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int t = 0; t < DPL; ++t) dst[g + GROUP * t] = o[t] / l;
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
  const dim3 grid((in.N + ROWS - 1) / ROWS, in.B);
  if (in.d == 32)
    attention_groups<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_groups<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

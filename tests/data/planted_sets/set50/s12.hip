// hw4.hip: FlashAttention forward for AMD GPUs (HIP) -- a wavefront per row, a key per lane.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// 4 wavefronts a block (sized from prop.warpSize), one wavefront a query row. Tiles of W = warpSize
// keys in LDS (sized for 64); lane t scores key j0 + t, the tile max is a __shfl_xor butterfly, the
// weights reach the P V loop through __shfl. To save a butterfly per tile, each lane keeps its own
// share of the row sum l (the weights of its own keys, rescaled like o); the shares are added once at
// the end with a __shfl_down tree. Lane t owns output dims t, t + W.
//
// Builds with the course's example line: hipcc -std=c++14 -O3 --offload-arch=gfx908 -o hw4-amd hw4.hip -lm
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_keylane") {}
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
#ifndef WAVES
#define WAVES 4  // query rows per block (one wavefront each)
#endif
#define TMAX 64  // LDS rows per tile: the largest warpSize

__device__ __forceinline__ float wave_max(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}

template <int D>
__global__ void __launch_bounds__(256) attention_keylane(const float* __restrict__ qkv, float* __restrict__ out, int N,
                                                        int tiles) {
  __shared__ float Ks[TMAX][D + 1];
  __shared__ float Vs[TMAX][D];
  __shared__ float Qs[WAVES][D];
  const int W = warpSize;
  const int lane = threadIdx.x % W, w = threadIdx.x / W;
  const int b = blockIdx.x / tiles, i = (blockIdx.x % tiles) * WAVES + w;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* k = base + (size_t)N * D;
  const float* v = base + (size_t)2 * N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int ic = i < N ? i : N - 1;
  for (int x = lane; x < D; x += W) Qs[w][x] = base[(size_t)ic * D + x] * scale;
  float o[2] = {0.f, 0.f};
  float m = -INFINITY, lpart = 0.f;
  for (int j0 = 0; j0 < N; j0 += W) {
    const int bc = min(W, N - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < W * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      if (r < bc) Ks[r][c] = k[(size_t)(j0 + r) * D + c], Vs[r][c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    float s = -INFINITY;
    if (lane < bc) {
      s = 0.f;
      for (int x = 0; x < D; ++x) s += Qs[w][x] * Ks[lane][x];
    }
    const float mn = fmaxf(m, wave_max(s));
    const float a = __expf(m - mn);
    float p = 0.f;
    if (lane < bc) {
      p = __expf(s - mn);
      lpart = lpart * a + p;
    }
    for (int u = 0; u < 2; ++u) o[u] *= a;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = __shfl(p, jj);
      for (int u = 0; u < 2; ++u) {
        const int x = lane + u * W;
        if (x < D) o[u] += pj * Vs[jj][x];
      }
    }
    m = mn;
  }
  float l = lpart;
  for (int off = W / 2; off > 0; off >>= 1) l += __shfl_down(l, off);
  l = __shfl(l, 0);
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int u = 0; u < 2; ++u) {
      const int x = lane + u * W;
      if (x < D) dst[x] = o[u] / l;
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
  const int tiles = (in.N + WAVES - 1) / WAVES;
  const unsigned blocks = (unsigned)((long long)in.B * tiles);
  const unsigned threads = (unsigned)(WAVES * prop.warpSize);
  if (in.d == 32)
    hipLaunchKernelGGL(attention_keylane<32>, dim3(blocks), dim3(threads), 0, 0, d_qkv, d_out, in.N, tiles);
  else
    hipLaunchKernelGGL(attention_keylane<64>, dim3(blocks), dim3(threads), 0, 0, d_qkv, d_out, in.N, tiles);
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

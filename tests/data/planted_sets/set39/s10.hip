// s10.hip: hw4 for AMD GPUs (HIP): a wavefront per query row, one key per lane.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// My design (port of my CUDA warp-per-row kernel onto the course's hw4.hip seed; host code as in the seed):
// a block holds BR = 4 rows, one wavefront each, so the host sizes the block as 4 x prop.warpSize threads.
// A tile is one key per lane (warpSize keys: 64 on the MI210, 32 on NVIDIA); the block's scaled Q rows,
// the K tile (rows padded to d + 1 floats) and the V tile sit in LDS, sized for 64 lanes. Lane t scores
// key j0 + t; tile max and sum by xor butterflies from warpSize / 2; the weights go to every lane by
// __shfl for P V, lane t owning dims t, t + warpSize, ... of its row. Grid: (ceil(N / 4), B).
// Builds with the course's example line: hipcc -std=c++14 -O3 --offload-arch=gfx908 -o hw4-amd hw4.hip -lm
// (an MI210 is gfx90a).
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_wave") {}
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
#define BR 4  // query rows per block: one wavefront each
#endif
#ifndef BC
#define BC 32  // keys per tile of the CUDA version (one per lane of a warp)
#endif

const int THREADS = BR * 64;  // the largest block: 64-lane wavefronts
static_assert(THREADS <= 1024, "BR: at most 16 wavefronts of 64");
static_assert(BC >= 1, "BC: a tile holds one key at least");

__device__ __forceinline__ float wave_max(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}
__device__ __forceinline__ float wave_sum(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_wave(const float* qkv, float* out, int N) {
  __shared__ float Qs[BR][D];
  __shared__ float Ks[64][D + 1];  // one key per lane: room for 64 lanes
  __shared__ float Vs[64][D];
  const int W = warpSize;  // keys per tile
  const int tid = threadIdx.x, lane = tid % W, w = tid / W, nthreads = blockDim.x;
  const int b = blockIdx.y, q0 = blockIdx.x * BR, i = q0 + w;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  constexpr int DPL = (D + 31) / 32;  // output dims per lane (at most; fewer on 64 lanes)

  for (int e = tid; e < BR * D; e += nthreads) {
    const int r = e / D, c = e % D;
    Qs[r][c] = (q0 + r < N) ? q[(size_t)(q0 + r) * D + c] * scale : 0.f;
  }
  float o[DPL];
  for (int t = 0; t < DPL; ++t) o[t] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int tail = N % BC;  // keys in a short last tile

  for (int j0 = 0; j0 < N; j0 += W) {
    const int bc = (j0 + W <= N) ? W : tail;
    __syncthreads();  // nobody reads the previous tile any more (and Qs is complete)
    for (int e = tid; e < bc * D; e += nthreads) {
      const int r = e / D, c = e % D;
      Ks[r][c] = k[(size_t)(j0 + r) * D + c];
      Vs[r][c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();

    float s = -INFINITY;  // lanes past the tile's keys: weight 0
    if (lane < bc) {
      float acc = 0.f;
      for (int x = 0; x < D; ++x) acc += Qs[w][x] * Ks[lane][x];
      s = acc;
    }
    const float m_new = fmaxf(m, wave_max(s));
    const float alpha = __expf(m - m_new), p = __expf(s - m_new);
    l = l * alpha + wave_sum(p);
    for (int t = 0; t < DPL; ++t) o[t] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float wgt = __shfl(p, jj);
      for (int t = 0; t < DPL; ++t) {
        const int x = lane + W * t;
        if (x < D) o[t] += wgt * Vs[jj][x];
      }
    }
    m = m_new;
  }
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int t = 0; t < DPL; ++t) {
      const int x = lane + W * t;
      if (x < D) dst[x] = o[t] / l;
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
  const int threads = BR * prop.warpSize;  // BR wavefronts
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), (unsigned)in.B);
  if (in.d == 32)
    attention_wave<32><<<grid, threads>>>(d_qkv, d_out, in.N);
  else
    attention_wave<64><<<grid, threads>>>(d_qkv, d_out, in.N);
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

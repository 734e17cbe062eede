// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4.
//
//   ./hw4-amd INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Port of my CUDA version: a wavefront per query row, 4 wavefronts a block (the block size is taken
// from prop.warpSize at run time, so the same code runs with 32- or 64-lane warps). Lanes split the
// head dimension: a lane holds q and o for its dims; each key's score is the butterfly sum of the
// lanes' partial products over the whole wavefront. K/V tiles of warpSize keys in LDS, sized for 64.
// Launched with hipLaunchKernelGGL on a grid (row tiles, batches).
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
#ifndef WAVES
#define WAVES 4  // query rows per block: one wavefront each
#endif
#define MAXW 64  // the widest wavefront: LDS tiles are sized for it

template <int D>
__global__ void __launch_bounds__(WAVES * MAXW) attention_wave(const float* qkv, float* out, int N) {
  constexpr int DPL = D / 32;  // output dims a lane can own
  __shared__ float Ks[MAXW][D];
  __shared__ float Vs[MAXW][D];
  const int W = warpSize;
  const int wave = threadIdx.x / W, lane = threadIdx.x % W;
  const int b = blockIdx.y;
  const int i = blockIdx.x * WAVES + wave;
  const bool valid = i < N;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* q = base + (size_t)(valid ? i : 0) * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float qr[DPL], o[DPL];
  for (int t = 0; t < DPL; ++t) {
    const int x = lane + 32 * t;
    qr[t] = x < D ? q[x] * scale : 0.f;
    o[t] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += W) {
    const int bc = min(W, N - j0);
    for (int e = threadIdx.x; e < bc * D; e += blockDim.x) {
      Ks[e / D][e % D] = k[(size_t)j0 * D + e];
      Vs[e / D][e % D] = v[(size_t)j0 * D + e];
    }
    __syncthreads();
    if (valid) {
      for (int jj = 0; jj < bc; ++jj) {
        float part = 0.f;
        for (int t = 0; t < DPL; ++t) {
          const int x = lane + 32 * t;
          if (x < D) part += qr[t] * Ks[jj][x];
        }
        for (int off = W / 2; off > 0; off >>= 1) part += __shfl_xor(part, off);
        const float m_new = fmaxf(m, part);
        const float alpha = __expf(m - m_new), p = __expf(part - m_new);
        l = l * alpha + p;
        for (int t = 0; t < DPL; ++t) {
          const int x = lane + 32 * t;
          if (x < D) o[t] = o[t] * alpha + p * Vs[jj][x];
        }
        m = m_new;
      }
    }
    __syncthreads();
  }
  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int t = 0; t < DPL; ++t) {
      const int x = lane + 32 * t;
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
  const dim3 block((unsigned)(WAVES * prop.warpSize));
  const dim3 grid((unsigned)((in.N + WAVES - 1) / WAVES), (unsigned)in.B);
  if (in.d == 32)
    hipLaunchKernelGGL(attention_wave<32>, grid, block, 0, 0, d_qkv, d_out, in.N);
  else
    hipLaunchKernelGGL(attention_wave<64>, grid, block, 0, 0, d_qkv, d_out, in.N);
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

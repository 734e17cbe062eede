// hw4.hip: FlashAttention forward for AMD GPUs (HIP), a wavefront per query row (homework 4).
//
//   ./hw4-amd INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Written for any warp width (warpSize: 64 on the MI210, 32 on NVIDIA): a block of 4 wavefronts
// owns 4 query rows and shares K/V tiles of 64 keys in LDS (K padded to d + 1). Register blocking
// over the keys: each lane scores KPL = 64 / warpSize consecutive keys of the tile (lane * KPL + u),
// so the row max and the weight sum need one butterfly per tile over the whole wavefront; the
// weights are then broadcast with __shfl for the P V product, where lane x owns output dims x and
// x + warpSize. Base-2 softmax (log2(e) folded into the query scale, exp2f).
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
#define WAVES 4  // wavefronts (query rows) per block
#define TILE 64  // keys per LDS tile
#define MAXKPL (TILE / 32)  // keys per lane on the narrowest warp

__device__ __forceinline__ float wave_max(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}
__device__ __forceinline__ float wave_sum(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

template <int D>
__global__ void __launch_bounds__(256) attention_wave(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  __shared__ float Ks[TILE * (D + 1)];
  __shared__ float Vs[TILE * D];
  __shared__ float Qs[WAVES][D];
  const int W = warpSize, KPL = TILE / W;
  const int wave = threadIdx.x / W, lane = threadIdx.x % W;
  const int b = blockIdx.y;
  const int i = blockIdx.x * WAVES + wave;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float qscale = 1.4426950408889634f / sqrtf((float)D);

  for (int x = lane; x < D; x += W) Qs[wave][x] = (i < N) ? qb[(size_t)i * D + x] * qscale : 0.f;

  float m = -INFINITY, l = 0.f, o[2] = {0.f, 0.f};
  for (int j0 = 0; j0 < N; j0 += TILE) {
    const int bc = min(TILE, N - j0);
    for (int e = threadIdx.x; e < TILE * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      const bool ok = r < bc;
      Ks[r * (D + 1) + c] = ok ? kb[(size_t)(j0 + r) * D + c] : 0.f;
      Vs[e] = ok ? vb[(size_t)j0 * D + e] : 0.f;
    }
    __syncthreads();  // also orders the Qs stores before the first reads

    float s[MAXKPL] = {0.f, 0.f};
    float tmax = -INFINITY;
    for (int u = 0; u < KPL; ++u) {
      const int r = lane * KPL + u;
      float acc = -INFINITY;
      if (r < bc) {
        acc = 0.f;
        for (int x = 0; x < D; ++x) acc += Qs[wave][x] * Ks[r * (D + 1) + x];
      }
      s[u] = acc;
      tmax = fmaxf(tmax, acc);
    }
    const float m_new = fmaxf(m, wave_max(tmax));
    float psum = 0.f;
    for (int u = 0; u < KPL; ++u) {
      s[u] = exp2f(s[u] - m_new);  // now the weight (0 past N)
      psum += s[u];
    }
    const float alpha = exp2f(m - m_new);
    l = l * alpha + wave_sum(psum);
    o[0] *= alpha, o[1] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float p = __shfl(s[jj & 1], jj >> 1);  // key jj sits in lane jj / KPL, slot jj % KPL
      for (int k = 0; k < 2; ++k) {
        const int x = lane + k * W;
        if (x < D) o[k] += p * Vs[jj * D + x];
      }
    }
    m = m_new;
    __syncthreads();
  }

  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    const float inv = 1.f / l;
    for (int k = 0; k < 2; ++k) {
      const int x = lane + k * W;
      if (x < D) dst[x] = o[k] * inv;
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
  timing.impl = "attention_wave";
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
  const int threads = WAVES * prop.warpSize;  // one wavefront per row
  const dim3 grid((in.N + WAVES - 1) / WAVES, in.B);
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

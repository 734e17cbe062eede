// hw4.hip: homework 4, FlashAttention forward for the AMD partition (HIP, from the course seed).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A wavefront per query row, ROWS = 4 rows per block (the block is sized from the device's warpSize).
// Short rows take an exact path: the row's scores are kept in shared memory (S, NMAX keys a row), then
// max, exponentials and sum, then P V. Rows longer than what the shared memory holds take the online
// softmax path: tiles of warpSize keys, a key per lane, wavefront butterflies, weights by shuffles.
// The host decides which path from the device's shared memory per block.
//
// Build: hipcc -std=c++14 -O3 --offload-arch=gfx90a -o hw4-amd hw4.hip -lm
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_rowlds") {}
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
#ifndef NMAX
#define NMAX 2048  // keys a row keeps in shared memory (48 KB / (4 rows x 4 bytes) = 3072, a power of two below)
#endif

const int ROWS = BR;
static_assert(BR >= 1 && BR <= 16, "BR: 1 to 16 wavefronts");
static_assert((NMAX & (NMAX - 1)) == 0, "NMAX: a power of two");

__device__ __forceinline__ float wave_max(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}
__device__ __forceinline__ float wave_sum(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

// fast_max: the longest row that takes the exact path (decided by the host).
template <int D>
__global__ void __launch_bounds__(1024) attention_rowlds(const float* qkv, float* out, int B, int N, int fast_max) {
  __shared__ float S[ROWS * NMAX];
  const int W = warpSize;
  const int lane = threadIdx.x % W, wave = threadIdx.x / W;
  const long long row = (long long)blockIdx.x * ROWS + wave;
  if (row >= (long long)B * N) return;  // a whole wavefront leaves together
  const int b = (int)(row / N), i = (int)(row % N);
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)i * D;
  const float* k = qkv + (size_t)b * 3 * N * D + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  float qi[D];
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale;
  float o[2] = {0.f, 0.f};  // dims lane and lane + W (those below D)
  float l;

  if (N <= fast_max) {  // exact path: the whole row of scores in shared memory
    float* srow = S + wave * NMAX;
    float lm = -INFINITY;
    for (int j = lane; j < N; j += W) {
      float s = 0.f;
      for (int x = 0; x < D; ++x) s += qi[x] * k[(size_t)j * D + x];
      srow[j] = s;
      lm = fmaxf(lm, s);
    }
    const float m = wave_max(lm);
    float ls = 0.f;
    for (int j = lane; j < N; j += W) {
      const float p = __expf(srow[j] - m);
      srow[j] = p;
      ls += p;
    }
    l = wave_sum(ls);
    __syncthreads();  // every lane's weights are in S
    for (int j = 0; j < N; ++j) {
      const float p = srow[j];
      for (int t = 0; t < 2; ++t)
        if (lane + t * W < D) o[t] += p * v[(size_t)j * D + lane + t * W];
    }
  } else {  // online path: tiles of W keys, a key per lane
    float m = -INFINITY;
    l = 0.f;
    for (int j0 = 0; j0 < N; j0 += W) {
      const int bc = N - j0 < W ? N - j0 : W;
      float s = -INFINITY;
      if (lane < bc) {
        s = 0.f;
        for (int x = 0; x < D; ++x) s += qi[x] * k[(size_t)(j0 + lane) * D + x];
      }
      const float m_new = fmaxf(m, wave_max(s));
      const float alpha = __expf(m - m_new);
      const float p = lane < bc ? __expf(s - m_new) : 0.f;
      l = l * alpha + wave_sum(p);
      o[0] *= alpha, o[1] *= alpha;
      for (int jj = 0; jj < bc; ++jj) {
        const float pj = __shfl(p, jj);
        for (int t = 0; t < 2; ++t)
          if (lane + t * W < D) o[t] += pj * v[(size_t)(j0 + jj) * D + lane + t * W];
      }
      m = m_new;
    }
  }
  float* dst = out + ((size_t)b * N + i) * D;
  for (int t = 0; t < 2; ++t)
    if (lane + t * W < D) dst[lane + t * W] = o[t] / l;
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
  const int W = prop.warpSize;
  int fast_max = 1;  // the longest row the exact path takes: the keys that fit, a power of two
  while (2 * fast_max <= (int)(prop.sharedMemPerBlock / (ROWS * sizeof(float)))) fast_max *= 2;
  const long long rows = (long long)in.B * in.N;
  const unsigned blocks = (unsigned)((rows + ROWS - 1) / ROWS);
  if (in.d == 32)
    attention_rowlds<32><<<blocks, ROWS * W>>>(d_qkv, d_out, in.B, in.N, fast_max);
  else
    attention_rowlds<64><<<blocks, ROWS * W>>>(d_qkv, d_out, in.B, in.N, fast_max);
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

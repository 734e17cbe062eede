// s11.hip: hw4 for AMD GPUs (HIP): K and V repacked into one [k | v] row per key, then LDS tiles.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// My design (from the course's hw4.hip seed; reading, checks, copies, writing and timing are the seed's):
// two kernels. pack_kv rewrites K and V of every batch into one buffer of B * N rows of 2 d floats,
// row b N + j = [K_b row j | V_b row j], so that a tile of keys is one contiguous block of memory and a
// single loop loads both halves. attention_kv: a thread per query row, 256 rows (four wavefronts) per
// block, tiles of 64 keys: the K half goes to LDS with rows padded to d + 1 floats, the V half plain;
// the seed's online softmax key by key. Grid: (ceil(N / 256), B).
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("pack_kv+attention_kv") {}
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
#define BR 256  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 64  // keys per tile
#endif

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(BC >= 1, "BC: a tile holds one key at least");
#define PACK_T 256  // threads per block of pack_kv

// kv[(b N + j) 2D + c] = K_b[j][c] for c < D, V_b[j][c - D] for c >= D
template <int D>
__global__ void __launch_bounds__(PACK_T) pack_kv(const float* qkv, float* kv, int B, int N) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (long long)B * N * 2 * D) return;
  const long long row = e / (2 * D);  // b N + j
  const int c = (int)(e % (2 * D));
  const int b = (int)(row / N), j = (int)(row % N);
  const float* src = qkv + (size_t)b * 3 * N * D + (size_t)(c < D ? 1 : 2) * N * D + (size_t)j * D + (c % D);
  kv[e] = *src;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_kv(const float* qkv, const float* kv, float* out, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y, i = blockIdx.x * BR + threadIdx.x;
  const bool valid = i < N;
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)(valid ? i : 0) * D;
  const float* kvb = kv + (size_t)b * N * D;  // batch b's rows [k | v]
  const float scale = 1.0f / sqrtf((float)D);

  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    const float* tile = kvb + (size_t)j0 * 2 * D;
    for (int e = threadIdx.x; e < bc * 2 * D; e += THREADS) {
      const int r = e / (2 * D), c = e % (2 * D);
      const float val = tile[e];
      if (c < D)
        Ks[r * (D + 1) + c] = val;
      else
        Vs[r * D + (c - D)] = val;
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
      for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj * (D + 1) + x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
      m = m_new;
    }
    __syncthreads();
  }
  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
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
  float* d_kv = NULL;  // B * N rows of [k | v]
  const long long kv_values = (long long)in.B * in.N * 2 * in.d;
  CHECK(hipMalloc(&d_kv, (size_t)kv_values * sizeof(float)));
  const unsigned pblocks = (unsigned)((kv_values + PACK_T - 1) / PACK_T);
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), (unsigned)in.B);
  if (in.d == 32) {
    pack_kv<32><<<pblocks, PACK_T>>>(d_qkv, d_kv, in.B, in.N);
    attention_kv<32><<<grid, THREADS>>>(d_qkv, d_kv, d_out, in.N);
  } else {
    pack_kv<64><<<pblocks, PACK_T>>>(d_qkv, d_kv, in.B, in.N);
    attention_kv<64><<<grid, THREADS>>>(d_qkv, d_kv, d_out, in.N);
  }
  CHECK(hipGetLastError());
  CHECK(hipDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(hipMemcpy(out.data(), d_out, out_values * sizeof(float), hipMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(hipFree(d_kv));
  CHECK(hipFree(d_qkv));
  CHECK(hipFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

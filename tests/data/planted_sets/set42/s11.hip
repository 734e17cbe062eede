// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4 (final submission).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: split keys, as many ranges as the sequence is long: one per 1024 keys, at most 8, at
// least one. split_rows (grid x = batch * row tiles flattened, y = range) gives a wavefront of 64
// threads 64 query rows and one key range, walked in 64-key K (LDS pitch d + 1) and V tiles with the
// seed's online softmax; partial o, m and l go to scratch. merge_rows (a thread per row of the B*N
// rows) rescales the ranges to the common max, adds them and divides.
//
// With FA_TIMING=1 it also prints the time of each stage.
//
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("split_rows") {}
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
#define BR 64    // query rows per block (a thread each)
#define BC 64    // keys per LDS tile
#define MAXS 8   // key ranges at most
#define KEYS_PER_SPLIT 1024

template <int D>
__global__ void __launch_bounds__(BR) split_rows(const float* __restrict__ qkv, float* __restrict__ po,
                                                 float* __restrict__ pm, float* __restrict__ pl, int N, int tiles,
                                                 int S, int per_split) {
  __shared__ float Ks[BC * (D + 1)], Vs[BC * D];
  const int b = blockIdx.x / tiles, s = blockIdx.y;
  const int i = (blockIdx.x % tiles) * BR + threadIdx.x;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int kbeg = s * per_split, kend = min(N, kbeg + per_split);

  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = i < N ? q[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D; e += BR) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = k[(size_t)(j0 + r) * D + c];
      Vs[r * D + c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float sc = 0.f;
      for (int x = 0; x < D; ++x) sc += qi[x] * Ks[jj * (D + 1) + x];
      const float m_new = fmaxf(m, sc);
      const float alpha = __expf(m - m_new), p = __expf(sc - m_new);
      l = l * alpha + p;
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
      m = m_new;
    }
  }
  if (i < N) {
    const size_t slot = ((size_t)b * S + s) * N + i;
    pm[slot] = m, pl[slot] = l;
    for (int x = 0; x < D; ++x) po[slot * D + x] = o[x];
  }
}

template <int D>
__global__ void __launch_bounds__(256) merge_rows(const float* __restrict__ po, const float* __restrict__ pm,
                                                  const float* __restrict__ pl, float* __restrict__ out,
                                                  long long rows, int N, int S) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const long long b = row / N;
  const int i = (int)(row - b * N);
  float M = -INFINITY;
  for (int s = 0; s < S; ++s) M = fmaxf(M, pm[((size_t)b * S + s) * N + i]);
  float L = 0.f, acc[D];
  for (int x = 0; x < D; ++x) acc[x] = 0.f;
  for (int s = 0; s < S; ++s) {
    const size_t slot = ((size_t)b * S + s) * N + i;
    if (pm[slot] == -INFINITY) continue;  // an empty range
    const float w = __expf(pm[slot] - M);
    L += w * pl[slot];
    for (int x = 0; x < D; ++x) acc[x] += w * po[slot * D + x];
  }
  for (int x = 0; x < D; ++x) out[(size_t)row * D + x] = acc[x] / L;
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
  const long long rows = (long long)in.B * in.N;
  const int splits = std::min(MAXS, in.N / KEYS_PER_SPLIT);
  const size_t slots = (size_t)rows * splits;
  float *d_po = NULL, *d_pm = NULL, *d_pl = NULL;
  CHECK(hipMalloc(&d_po, slots * in.d * sizeof(float)));
  CHECK(hipMalloc(&d_pm, slots * sizeof(float)));
  CHECK(hipMalloc(&d_pl, slots * sizeof(float)));
  const int S = std::max(splits, 1);
  const int tiles = (in.N + BR - 1) / BR;
  const int ktiles = (in.N + BC - 1) / BC;
  const int per_split = (ktiles + S - 1) / S * BC;  // whole tiles per range
  const dim3 pgrid((unsigned)in.B * tiles, S);
  const unsigned mgrid = (unsigned)((rows + 255) / 256);
  if (in.d == 32) {
    split_rows<32><<<pgrid, BR>>>(d_qkv, d_po, d_pm, d_pl, in.N, tiles, S, per_split);
    merge_rows<32><<<mgrid, 256>>>(d_po, d_pm, d_pl, d_out, rows, in.N, S);
  } else {
    split_rows<64><<<pgrid, BR>>>(d_qkv, d_po, d_pm, d_pl, in.N, tiles, S, per_split);
    merge_rows<64><<<mgrid, 256>>>(d_po, d_pm, d_pl, d_out, rows, in.N, S);
  }
  CHECK(hipGetLastError());
  CHECK(hipDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(hipMemcpy(out.data(), d_out, out_values * sizeof(float), hipMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(hipFree(d_qkv));
  CHECK(hipFree(d_out));
  CHECK(hipFree(d_po));
  CHECK(hipFree(d_pm));
  CHECK(hipFree(d_pl));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

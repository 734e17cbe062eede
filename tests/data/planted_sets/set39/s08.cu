// s08.cu: hw4, FlashAttention forward: keys split four ways, partial results merged by a second kernel,
// two streams.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// My design (from the course's hw4.cu seed; reading, checks, copies, writing and timing are the seed's):
// the few-batch, long-N cases (t25-t30) give too few row blocks to fill the GPU, so the keys of every
// batch are split into SPLITS = 4 ranges. attention_part: grid (ceil(N / 64), SPLITS, batches), a thread
// per row, tiles of 32 keys (K padded to d + 1) over its range only, writing its unnormalised row o and its
// (m, l) to scratch buffers. merge_splits: a thread per row rescales the four partials to their common max
// and divides. The batches go in two halves; the partial kernels run on one stream and the merges on
// another, so that the merge of the first half overlaps the partials of the second half.
// Builds with the course's example line: nvcc -std=c++11 -O3 -Xptxas="-v" -arch=sm_61 -o hw4 hw4.cu -lm
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_part+merge_splits") {}
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
#define BR 64  // query rows per block of attention_part: one thread each
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
#define SPLITS 4     // key ranges per row
#define MERGE_T 256  // threads per block of merge_splits

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(BC >= 1, "BC: a tile holds one key at least");

// partial (b, s, i) lives at slot (b * SPLITS + s) * N + i: pm, pl one float, po D floats
template <int D>
__global__ void __launch_bounds__(THREADS) attention_part(const float* qkv, float* po, float* pm, float* pl, int N,
                                                          int b0) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int s = blockIdx.y, b = b0 + blockIdx.z, i = blockIdx.x * BR + threadIdx.x;
  const bool valid = i < N;
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)(valid ? i : 0) * D;
  const float* k = qkv + (size_t)b * 3 * N * D + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int chunk = ((N + SPLITS - 1) / SPLITS + BC - 1) / BC * BC;  // keys per range, whole tiles
  const int kbeg = s * chunk, kend = min(N, kbeg + chunk);           // may be empty for small N

  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = k[(size_t)j0 * D + e];
      Vs[e] = v[(size_t)j0 * D + e];
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
    __syncthreads();
  }
  if (valid) {
    const size_t slot = ((size_t)b * SPLITS + s) * N + i;
    pm[slot] = m, pl[slot] = l;
    for (int x = 0; x < D; ++x) po[slot * D + x] = o[x];
  }
}

// one thread per row of batches b0 .. b0 + nb - 1
template <int D>
__global__ void __launch_bounds__(MERGE_T) merge_splits(const float* po, const float* pm, const float* pl, float* out,
                                                        int N, int b0, int nb) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= (long long)nb * N) return;
  const int b = b0 + (int)(r / N), i = (int)(r % N);
  float M = -INFINITY;
  for (int s = 0; s < SPLITS; ++s) M = fmaxf(M, pm[((size_t)b * SPLITS + s) * N + i]);
  float L = 0.f, acc[D];
  for (int x = 0; x < D; ++x) acc[x] = 0.f;
  for (int s = 0; s < SPLITS; ++s) {
    const size_t slot = ((size_t)b * SPLITS + s) * N + i;
    if (pl[slot] > 0.f) {  // an empty range has l = 0 and m = -inf
      const float w = __expf(pm[slot] - M);
      L += pl[slot] * w;
      for (int x = 0; x < D; ++x) acc[x] += po[slot * D + x] * w;
    }
  }
  float* dst = out + ((size_t)b * N + i) * D;
  for (int x = 0; x < D; ++x) dst[x] = acc[x] / L;
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
  float *d_po = NULL, *d_pm = NULL, *d_pl = NULL;
  const size_t slots = (size_t)in.B * SPLITS * in.N;
  CHECK(cudaMalloc(&d_po, slots * in.d * sizeof(float)));
  CHECK(cudaMalloc(&d_pm, slots * sizeof(float)));
  CHECK(cudaMalloc(&d_pl, slots * sizeof(float)));
  cudaStream_t s_part, s_merge;  // partials on one stream, merges on the other
  CHECK(cudaStreamCreate(&s_part));
  CHECK(cudaStreamCreate(&s_merge));
  const int half = in.B / 2;
  const int first[2] = {0, half}, count[2] = {half, in.B - half};
  for (int h = 0; h < 2; ++h) {
    const int b0 = first[h], nb = count[h];
    if (nb == 0) continue;  // B = 1: the first half is empty
    const dim3 pgrid((unsigned)((in.N + BR - 1) / BR), SPLITS, (unsigned)nb);
    const unsigned mblocks = (unsigned)(((long long)nb * in.N + MERGE_T - 1) / MERGE_T);
    if (in.d == 32) {
      attention_part<32><<<pgrid, THREADS, 0, s_part>>>(d_qkv, d_po, d_pm, d_pl, in.N, b0);
      merge_splits<32><<<mblocks, MERGE_T, 0, s_merge>>>(d_po, d_pm, d_pl, d_out, in.N, b0, nb);
    } else {
      attention_part<64><<<pgrid, THREADS, 0, s_part>>>(d_qkv, d_po, d_pm, d_pl, in.N, b0);
      merge_splits<64><<<mblocks, MERGE_T, 0, s_merge>>>(d_po, d_pm, d_pl, d_out, in.N, b0, nb);
    }
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaStreamDestroy(s_part));
  CHECK(cudaStreamDestroy(s_merge));
  CHECK(cudaFree(d_po));
  CHECK(cudaFree(d_pm));
  CHECK(cudaFree(d_pl));
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

// s01.cu: hw4, FlashAttention forward: two query rows per warp, a half-warp each.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// My design (built from the course's hw4.cu seed; reading, checks, copies, output and timing are the
// seed's): a block of 128 threads holds 8 query rows, two per warp, one per half-warp of 16 lanes. The
// block's scaled Q rows, and tiles of 16 keys of K (rows padded to d + 1 floats) and V, go through shared
// memory. Lane g of a half-warp scores key j0 + g of the tile; the tile max and the tile sum are xor
// butterflies inside the half (offsets 8, 4, 2, 1); then lane g owns the output dims g, g + 16, ... of its
// row and pulls the tile's 16 weights from its own half with __shfl_sync. Online softmax tile by tile.
// Grid: (ceil(N / 8), B).
//
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_halfwarp") {}
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
#define BR 8  // query rows per block: two per warp, one per half-warp
#endif
#ifndef BC
#define BC 16  // keys per tile: one per lane of a half-warp
#endif

const int THREADS = BR * 16;
static_assert(BR % 2 == 0 && THREADS <= 1024, "BR: an even number of rows, two per warp");
static_assert(BC == 16, "BC: one key per lane of a half-warp");
#define FULL 0xffffffffu

template <int D>
__global__ void __launch_bounds__(THREADS) attention_halfwarp(const float* qkv, float* out, int N) {
  __shared__ float Qs[BR][D];
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  const int tid = threadIdx.x, lane = tid & 31;
  const int r = tid >> 4;   // this half-warp's row in the block
  const int g = lane & 15;  // lane within the half: key g of a tile, output dims g + 16 t
  const int b = blockIdx.y, q0 = blockIdx.x * BR, i = q0 + r;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = tid; e < BR * D; e += THREADS) {
    const int rr = e / D, c = e % D;
    Qs[rr][c] = (q0 + rr < N) ? q[(size_t)(q0 + rr) * D + c] * scale : 0.f;
  }
  float o[D / 16];
  for (int t = 0; t < D / 16; ++t) o[t] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();  // nobody reads the previous tile any more (and Qs is complete)
    for (int e = tid; e < BC * D; e += THREADS) {
      const int jj = e / D, c = e % D;
      const bool ok = jj < bc;
      Ks[jj][c] = ok ? k[(size_t)(j0 + jj) * D + c] : 0.f;
      Vs[jj][c] = ok ? v[(size_t)(j0 + jj) * D + c] : 0.f;
    }
    __syncthreads();

    float s = -INFINITY;  // keys past N keep -inf: weight 0
    if (g < bc) {
      float acc = 0.f;
      for (int x = 0; x < D; ++x) acc += Qs[r][x] * Ks[g][x];
      s = acc;
    }
    float tmax = s;
    for (int off = 8; off > 0; off >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(FULL, tmax, off, 16));
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    const float p = __expf(s - m_new);
    float psum = p;
    for (int off = 8; off > 0; off >>= 1) psum += __shfl_xor_sync(FULL, psum, off, 16);
    l = l * alpha + psum;

    const int base = lane >> 4;  // first lane of this row's half-warp
    for (int t = 0; t < D / 16; ++t) o[t] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float w = __shfl_sync(FULL, p, base + jj);  // weight of key j0 + jj of this row
      for (int t = 0; t < D / 16; ++t) o[t] += w * Vs[jj][g + 16 * t];
    }
    m = m_new;
  }
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int t = 0; t < D / 16; ++t) dst[g + 16 * t] = o[t] / l;
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
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), (unsigned)in.B);
  if (in.d == 32)
    attention_halfwarp<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_halfwarp<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

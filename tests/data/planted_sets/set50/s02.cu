// hw4.cu: FlashAttention forward, homework 4 -- split-K (flash-decoding style) version.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// The keys of every row are cut into NSPLIT = 4 equal ranges, one per blockIdx.y, so that four times
// as many blocks run at once. attention_part: 64 query rows a block, one thread a row, 32-key K/V
// tiles in shared memory, the seed's online softmax over the block's key range; it stores the
// unnormalised o and the pair (m, l) as one float2 per (split, row). merge_splits: one thread a flat
// row combines the NSPLIT partials with the usual max / rescale and divides once.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_split4") {}
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
#define BR 64  // query rows per block (one thread each)
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
#ifndef NSPLIT
#define NSPLIT 4  // key ranges per row
#endif
const int THREADS = BR;

template <int D>
__global__ void __launch_bounds__(THREADS) attention_part(const float* __restrict__ qkv, float* __restrict__ po,
                                                          float2* __restrict__ pml, int N, int tiles, int rows) {
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  const int b = blockIdx.x / tiles, i = (blockIdx.x % tiles) * BR + threadIdx.x, split = blockIdx.y;
  const int chunk = (N + NSPLIT - 1) / NSPLIT;
  const int kbeg = split * chunk, kend = min(N, kbeg + chunk);
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* k = base + (size_t)N * D;
  const float* v = base + (size_t)2 * N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int ic = i < N ? i : N - 1;

  float qi[D], o[D];
  for (int x = 0; x < D; ++x) qi[x] = base[(size_t)ic * D + x] * scale, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    for (int e = threadIdx.x; e < BC * D; e += THREADS) {
      const int r = e / D, c = e % D;
      if (r < bc) Ks[r][c] = k[(size_t)(j0 + r) * D + c], Vs[r][c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
      for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj][x];
      const float mn = fmaxf(m, s);
      const float a = __expf(m - mn), p = __expf(s - mn);
      l = l * a + p;
      for (int x = 0; x < D; ++x) o[x] = o[x] * a + p * Vs[jj][x];
      m = mn;
    }
    __syncthreads();
  }
  if (i >= N) return;
  const size_t row = (size_t)b * N + i;
  float* dst = po + ((size_t)split * rows + row) * D;
  for (int x = 0; x < D; ++x) dst[x] = o[x];
  pml[(size_t)split * rows + row] = make_float2(m, l);  // (m, l) of this key range
}

template <int D>
__global__ void merge_splits(const float* __restrict__ po, const float2* __restrict__ pml, float* __restrict__ out,
                             int rows) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  float ms[NSPLIT], ls[NSPLIT];
  float M = -INFINITY;
  for (int s = 0; s < NSPLIT; ++s) {
    const float2 st = pml[(size_t)s * rows + row];
    ls[s] = st.x;
    ms[s] = st.y;
    M = fmaxf(M, ms[s]);
  }
  float w[NSPLIT], L = 0.f;
  for (int s = 0; s < NSPLIT; ++s) w[s] = __expf(ms[s] - M), L += w[s] * ls[s];
  const float inv = 1.0f / L;
  for (int x = 0; x < D; ++x) {
    float acc = 0.f;
    for (int s = 0; s < NSPLIT; ++s) acc += w[s] * po[((size_t)s * rows + row) * D + x];
    out[(size_t)row * D + x] = acc * inv;
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
  const int rows = in.B * in.N;
  const int tiles = (in.N + BR - 1) / BR;
  float* d_po = NULL;
  float2* d_pml = NULL;
  CHECK(cudaMalloc(&d_po, (size_t)NSPLIT * rows * in.d * sizeof(float)));
  CHECK(cudaMalloc(&d_pml, (size_t)NSPLIT * rows * sizeof(float2)));
  const dim3 grid((unsigned)((long long)in.B * tiles), NSPLIT);
  const unsigned mblocks = (unsigned)((rows + 127) / 128);
  if (in.d == 32) {
    attention_part<32><<<grid, THREADS>>>(d_qkv, d_po, d_pml, in.N, tiles, rows);
    merge_splits<32><<<mblocks, 128>>>(d_po, d_pml, d_out, rows);
  } else {
    attention_part<64><<<grid, THREADS>>>(d_qkv, d_po, d_pml, in.N, tiles, rows);
    merge_splits<64><<<mblocks, 128>>>(d_po, d_pml, d_out, rows);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;
  CHECK(cudaFree(d_po));
  CHECK(cudaFree(d_pml));

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

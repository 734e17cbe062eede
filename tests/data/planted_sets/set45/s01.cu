// hw4.cu: FlashAttention forward for the course's homework 4, after the mid-term refactor.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: one thread per query row, BR = 64 rows a block on a grid of (row tiles, batch). Each
// tile of BC = 32 keys is copied once into shared memory (K with a row pitch of d + 1 floats, V
// plain) and every thread first scores the whole tile into a register array, then folds it into
// its softmax state in one step: tile max, one rescale of (l, o) by exp(m_old - m_new), then the
// weights. The state (m, l and the output row o) is a small struct with helpers, so that the
// kernel body reads like the algorithm in the paper.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("tile_struct") {}
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
#define BR 64  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 32  // keys per shared-memory tile
#endif

const int THREADS = BR;
static_assert(BR >= 32 && BR <= 1024, "BR: 32 to 1024 threads a block");
static_assert(BC >= 1, "BC: a tile holds one key at least");

// The running softmax state of one query row.
template <int D>
struct RowState {
  float m;     // running max of the scores seen so far
  float l;     // running sum of exp(s - m)
  float o[D];  // running sum of exp(s - m) * v
};

template <int D>
__device__ void state_init(RowState<D>& st) {
  st.m = -INFINITY;
  st.l = 0.f;
#pragma unroll
  for (int x = 0; x < D; ++x) st.o[x] = 0.f;
}

// Brings (l, o) from the old reference max to the new one.
template <int D>
__device__ void state_rescale(RowState<D> st, float alpha) {
  st.l *= alpha;
#pragma unroll
  for (int x = 0; x < D; ++x) st.o[x] *= alpha;
}

// Folds one tile of bc scores (s[0 .. bc-1]) and its V rows (Vs, bc x D) into the state.
template <int D>
__device__ void state_fold_tile(RowState<D>& st, const float (&s)[BC], int bc, const float* Vs) {
  float tmax = -INFINITY;
  for (int jj = 0; jj < bc; ++jj) tmax = fmaxf(tmax, s[jj]);
  const float m_new = fmaxf(st.m, tmax);
  state_rescale(st, __expf(st.m - m_new));
  for (int jj = 0; jj < bc; ++jj) {
    const float p = __expf(s[jj] - m_new);
    st.l += p;
#pragma unroll
    for (int x = 0; x < D; ++x) st.o[x] += p * Vs[jj * D + x];
  }
  st.m = m_new;
}

template <int D>
__device__ float dot_row(const float (&q)[D], const float* krow) {
  float acc = 0.f;
#pragma unroll
  for (int x = 0; x < D; ++x) acc += q[x] * krow[x];
  return acc;
}

// grid = (ceil(N / BR), B), block = BR threads.
template <int D>
__global__ void __launch_bounds__(THREADS) tile_struct(const float* qkv, float* out, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const bool valid = i < N;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* q = base + (size_t)(valid ? i : N - 1) * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float qi[D];
#pragma unroll
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale;
  RowState<D> st;
  state_init(st);

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();  // every thread is done with the previous tile
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int r = e / D, c = e - r * D;
      Ks[r * (D + 1) + c] = k[(size_t)j0 * D + e];
      Vs[e] = v[(size_t)j0 * D + e];
    }
    __syncthreads();
    float s[BC];
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) s[jj] = jj < bc ? dot_row<D>(qi, &Ks[jj * (D + 1)]) : -INFINITY;
    state_fold_tile(st, s, bc, Vs);
  }
  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
    const float inv = 1.0f / st.l;
#pragma unroll
    for (int x = 0; x < D; ++x) dst[x] = st.o[x] * inv;
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
    tile_struct<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    tile_struct<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

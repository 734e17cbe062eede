// hw4.cu: FlashAttention forward for the course's homework 4 (from `fa init`'s seed; a block per query row).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// What is done: reading and checking the input (B, N, d, then Q_b K_b V_b per batch), the copies
// to and from the GPU, writing the output (B*N*d floats), and a kernel that is plain and correct:
// one thread per query row, walking every key once with an online softmax. What is yours: make
// the kernel fast. The place is marked TODO(tiles). Check your work with `fa run t01 --program ./hw4`.
//
// With FA_TIMING=1 it also prints the time of each stage (optional: see "timing" below).
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
// My version: one block of THREADS threads per query row (grid = B * N blocks). The row's N scores
// are kept in dynamic shared memory: thread tid scores keys tid, tid + THREADS, ...; block_reduce
// gives the row max and then the row sum of the weights (which overwrite the scores); the P V product
// is split over the block: thread tid takes dim tid % D and the keys j with j % G == tid / D
// (G = THREADS / D groups), and the groups' partial sums are added through shared memory.
#ifndef THREADS_PER_ROW
#define THREADS_PER_ROW 128
#endif
#define FULL 0xffffffffu

const int THREADS = THREADS_PER_ROW;
static_assert(THREADS == 128, "block_reduce is written for 128 threads (a tree step, then one warp)");

enum { OP_MAX = 0, OP_SUM = 1 };

__device__ __forceinline__ float combine(float a, float b, int op) { return op == OP_MAX ? fmaxf(a, b) : a + b; }

__device__ __forceinline__ float warp_reduce(float v, int op) {
  for (int off = 16; off > 0; off >>= 1) v = combine(v, __shfl_xor_sync(FULL, v, off), op);
  return v;
}

// Reduces one value per thread over the block (red: THREADS floats of shared memory); every thread
// gets the result. Tree steps in shared memory down to 64 values, then the first warp finishes with
// shuffles.
__device__ float block_reduce(float v, float* red, int op) {
  const int tid = threadIdx.x;
  red[tid] = v;
  __syncthreads();
  for (int s = THREADS / 2; s > 32; s >>= 1) {
    if (tid < s) red[tid] = combine(red[tid], red[tid + s], op);
    __syncthreads();
  }
  if (tid < 32) {
    float w = red[tid];
    w = warp_reduce(w, op);
    if (tid == 0) red[0] = w;
  }
  __syncthreads();
  const float r = red[0];
  __syncthreads();  // red is reused by the next call
  return r;
}

// Dynamic shared memory: N scores, THREADS floats for the reductions, D floats for the q row.
static size_t smem_bytes(int N, int d) { return ((size_t)N + THREADS + d) * sizeof(float); }

template <int D>
__global__ void __launch_bounds__(THREADS) attention_block_row(const float* qkv, float* out, int N) {
  extern __shared__ float smem[];
  float* S = smem;          // N scores, then N weights
  float* red = S + N;       // THREADS floats
  float* qs = red + THREADS;  // the scaled q row
  const int tid = threadIdx.x;
  const long long row = blockIdx.x;
  const int b = (int)(row / N), i = (int)(row % N);
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  if (tid < D) qs[tid] = base[(size_t)i * D + tid] * scale;
  __syncthreads();

  float tmax = -INFINITY;
  for (int j = tid; j < N; j += THREADS) {
    const float* kr = k + (size_t)j * D;
    float s = 0.f;
    for (int x = 0; x < D; ++x) s += qs[x] * kr[x];
    S[j] = s;
    tmax = fmaxf(tmax, s);
  }
  const float m = block_reduce(tmax, red, OP_MAX);

  float tsum = 0.f;
  for (int j = tid; j < N; j += THREADS) {
    const float p = __expf(S[j] - m);
    S[j] = p;
    tsum += p;
  }
  const float l = block_reduce(tsum, red, OP_SUM);  // its barriers also publish every S[j]

  const int G = THREADS / D;
  const int x = tid % D, g = tid / D;
  float acc = 0.f;
  for (int j = g; j < N; j += G) acc += S[j] * v[(size_t)j * D + x];
  red[tid] = acc;
  __syncthreads();
  if (tid < D) {
    float o = 0.f;
    for (int h = 0; h < G; ++h) o += red[h * D + tid];
    out[(size_t)row * D + tid] = o / l;
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
  const long long rows = (long long)in.B * in.N;
  const unsigned blocks = (unsigned)rows;  // one block per query row
  const size_t smem = smem_bytes(in.N, in.d);
  timing.impl = "attention_block_row";
  if (in.d == 32) {
    CHECK(cudaFuncSetAttribute(attention_block_row<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_block_row<32><<<blocks, THREADS, smem>>>(d_qkv, d_out, in.N);
  } else {
    CHECK(cudaFuncSetAttribute(attention_block_row<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    attention_block_row<64><<<blocks, THREADS, smem>>>(d_qkv, d_out, in.N);
  }
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

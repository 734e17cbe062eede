// hw4.cu: FlashAttention forward, homework 4.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Split keys: the keys of a batch are cut into SPLITS ranges and each (row tile, range) pair is its own
// block (grid: row tiles x SPLITS x B), so short batches still fill the GPU. A block runs one thread per
// query row over its range (32-key tiles in shared memory, K padded to d + 1) and writes the row's
// partial state (m, l, unnormalised o) to a scratch buffer; a second kernel merges the SPLITS partial
// states of each row.
// Office hours: a range now starts its running state from its own first key, so m is never -inf and
// the first update has no -inf - -inf in it.
//
// Builds with: nvcc -std=c++11 -O3 -arch=sm_61 -o hw4 hw4.cu -lm
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_part") {}
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
#define BC 32  // keys per tile
#endif
#ifndef SPLITS
#define SPLITS 4  // key ranges per row
#endif
const int THREADS = BR;

// partial state of (batch b, split s, row i) at index (b * SPLITS + s) * N + i
template <int D>
__global__ void __launch_bounds__(THREADS) attention_part(const float* qkv, float* part_o, float* part_m,
                                                          float* part_l, int N) {
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  const int s_idx = blockIdx.y, b = blockIdx.z;
  const int i = blockIdx.x * BR + threadIdx.x;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int chunk = (N + SPLITS - 1) / SPLITS;
  const int kbeg = s_idx * chunk;
  const int kend = min(N, kbeg + chunk);
  const size_t slot = ((size_t)b * SPLITS + s_idx) * N + i;

  if (kbeg >= kend) {  // an empty range (small N): nothing to add
    if (i < N) {
      part_m[slot] = -INFINITY;
      part_l[slot] = 0.f;
      for (int x = 0; x < D; ++x) part_o[slot * D + x] = 0.f;
    }
    return;  // the whole block takes this branch
  }

  float q[D], o[D];
  for (int x = 0; x < D; ++x) q[x] = i < N ? qb[(size_t)i * D + x] * scale : 0.f;

  // running state started from the range's first key
  float m = 0.f;
  for (int x = 0; x < D; ++x) m += q[x] * kb[(size_t)kbeg * D + x];
  float l = 1.f;
  for (int x = 0; x < D; ++x) o[x] = vb[(size_t)kbeg * D + x];

  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int bc = min(BC, kend - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r][c] = kb[(size_t)(j0 + r) * D + c];
      Vs[r][c] = vb[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += q[x] * Ks[jj][x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj][x];
      m = m_new;
    }
  }

  if (i < N) {
    part_m[slot] = m;
    part_l[slot] = l;
    for (int x = 0; x < D; ++x) part_o[slot * D + x] = o[x];
  }
}

// one thread per output row: O = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s
template <int D>
__global__ void merge_parts(const float* part_o, const float* part_m, const float* part_l, float* out, int B,
                            int N) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= (long long)B * N) return;
  const int b = (int)(row / N), i = (int)(row % N);
  float M = -INFINITY;
  for (int s = 0; s < SPLITS; ++s) M = fmaxf(M, part_m[((size_t)b * SPLITS + s) * N + i]);
  float L = 0.f, acc[D];
  for (int x = 0; x < D; ++x) acc[x] = 0.f;
  for (int s = 0; s < SPLITS; ++s) {
    const size_t slot = ((size_t)b * SPLITS + s) * N + i;
    const float w = __expf(part_m[slot] - M);
    L += part_l[slot] * w;
    for (int x = 0; x < D; ++x) acc[x] += part_o[slot * D + x] * w;
  }
  float* dst = out + (size_t)row * D;
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
  const size_t part_rows = (size_t)in.B * SPLITS * in.N;
  float *d_po = NULL, *d_pm = NULL, *d_pl = NULL;
  CHECK(cudaMalloc(&d_po, part_rows * in.d * sizeof(float)));
  CHECK(cudaMalloc(&d_pm, part_rows * sizeof(float)));
  CHECK(cudaMalloc(&d_pl, part_rows * sizeof(float)));
  const dim3 grid((in.N + BR - 1) / BR, SPLITS, in.B);
  const long long rows = (long long)in.B * in.N;
  const unsigned mblocks = (unsigned)((rows + 127) / 128);
  if (in.d == 32) {
    attention_part<32><<<grid, THREADS>>>(d_qkv, d_po, d_pm, d_pl, in.N);
    merge_parts<32><<<mblocks, 128>>>(d_po, d_pm, d_pl, d_out, in.B, in.N);
  } else {
    attention_part<64><<<grid, THREADS>>>(d_qkv, d_po, d_pm, d_pl, in.N);
    merge_parts<64><<<mblocks, 128>>>(d_po, d_pm, d_pl, d_out, in.B, in.N);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(d_po));
  CHECK(cudaFree(d_pm));
  CHECK(cudaFree(d_pl));
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

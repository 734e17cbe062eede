// hw4.cu: FlashAttention forward, homework 4.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// FlashAttention-1 as in the paper's Algorithm 1: the outer loop is over K/V tiles (here on the host,
// one launch per tile of 64 keys), the inner over query rows (one thread per row, 128 rows a block).
// The running statistics m, l and the output O live in global memory between launches; O is kept
// normalised, and each launch reads (m, l, O) of its row, folds in the tile (its max, its sum and its
// P V part, computed relative to the tile's own max) and writes them back. Grid (row tiles, batches).
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_fa1") {}
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
#define BR 128  // query rows per block: one thread each
#endif
#ifndef TK
#define TK 64  // keys per launch (one K/V tile)
#endif

const int THREADS = BR;

template <int D>
__global__ void __launch_bounds__(THREADS) attention_fa1(const float* qkv, float* out, float* M, float* L, int N,
                                                         int j0) {
  __shared__ float Ks[TK][D];
  __shared__ float Vs[TK][D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const bool valid = i < N;
  const float* base = qkv + (size_t)b * 3 * N * D;
  const float* q = base + (size_t)(valid ? i : 0) * D;
  const float* k = base + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int tk = min(TK, N - j0);

  for (int e = threadIdx.x; e < tk * D; e += blockDim.x) {
    Ks[e / D][e % D] = k[(size_t)j0 * D + e];
    Vs[e / D][e % D] = v[(size_t)j0 * D + e];
  }
  __syncthreads();
  if (!valid) return;

  float qi[D], pv[D], sc[TK];
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale, pv[x] = 0.f;
  float mt = -INFINITY;
  for (int jj = 0; jj < tk; ++jj) {
    float s = 0.f;
    for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj][x];
    sc[jj] = s;
    mt = fmaxf(mt, s);
  }
  float lt = 0.f;
  for (int jj = 0; jj < tk; ++jj) {
    const float p = __expf(sc[jj] - mt);
    lt += p;
    for (int x = 0; x < D; ++x) pv[x] += p * Vs[jj][x];
  }

  const size_t row = (size_t)b * N + i;
  float* o = out + row * D;
  const float m_old = j0 == 0 ? -INFINITY : M[row];
  const float l_old = j0 == 0 ? 0.f : L[row];
  const float m_new = fmaxf(m_old, mt);
  const float a = __expf(m_old - m_new), c = __expf(mt - m_new);
  const float l_new = a * l_old + c * lt;
  for (int x = 0; x < D; ++x) {
    const float o_old = j0 == 0 ? 0.f : o[x];
    o[x] = (a * o_old + c * pv[x]) / l_new;
  }
  M[row] = m_new;
  L[row] = l_new;
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
  float *d_m = NULL, *d_l = NULL;
  CHECK(cudaMalloc(&d_m, (size_t)in.B * in.N * sizeof(float)));
  CHECK(cudaMalloc(&d_l, (size_t)in.B * in.N * sizeof(float)));
  const dim3 grid((unsigned)((in.N + BR - 1) / BR), (unsigned)in.B);
  for (int j0 = 0; j0 < in.N; j0 += TK) {
    if (in.d == 32)
      attention_fa1<32><<<grid, THREADS>>>(d_qkv, d_out, d_m, d_l, in.N, j0);
    else
      attention_fa1<64><<<grid, THREADS>>>(d_qkv, d_out, d_m, d_l, in.N, j0);
  }
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(cudaMemcpy(out.data(), d_out, out_values * sizeof(float), cudaMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(cudaFree(d_qkv));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_m));
  CHECK(cudaFree(d_l));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

// s07.cu: hw4, FlashAttention forward: two query rows per thread, the output in passes of 32 dims.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// My design (from the course's hw4.cu seed; host code as in the seed): each thread owns two query rows,
// i and i + 64 of a 128-row block (64 threads), so that every K and V value read from shared memory
// serves two rows. Tiles of 32 keys of K (rows padded to d + 1 floats) and V in shared memory. To keep
// the registers down (two q rows are already 2 d floats), the output is built in passes of DP = 32 dims:
// pass p sweeps all the keys with a fresh online softmax for both rows (the scores use the whole q) and
// accumulates dims 32 p .. 32 p + 31; d = 32 is one pass, d = 64 two. Grid: (ceil(N / 128), B).
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_two") {}
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
#define BR 128  // query rows per block: two per thread
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
#define DP 32  // output dims per pass

const int THREADS = BR / 2;
static_assert(BR % 2 == 0 && THREADS <= 1024, "BR: two rows per thread");
static_assert(BC >= 1, "BC: a tile holds one key at least");

template <int D>
__global__ void __launch_bounds__(THREADS) attention_two(const float* qkv, float* out, int N) {
  __shared__ float Ks[BC * (D + 1)];
  __shared__ float Vs[BC * D];
  const int t = threadIdx.x, b = blockIdx.y;
  const int ia = blockIdx.x * BR + t, ib = ia + THREADS;  // this thread's two rows
  const bool va = ia < N, vb = ib < N;
  const float* qbase = qkv + (size_t)b * 3 * N * D;
  const float* k = qbase + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float qa[D], qb[D];
  for (int x = 0; x < D; ++x) {
    qa[x] = va ? qbase[(size_t)ia * D + x] * scale : 0.f;
    qb[x] = vb ? qbase[(size_t)ib * D + x] * scale : 0.f;
  }
  for (int part = 0; part < D / DP; ++part) {  // output dims DP * part .. DP * part + DP - 1
    float oa[DP], ob[DP];
    for (int x = 0; x < DP; ++x) oa[x] = 0.f, ob[x] = 0.f;
    float ma = -INFINITY, la = 0.f, mb = -INFINITY, lb = 0.f;
    for (int j0 = 0; j0 < N; j0 += BC) {
      const int bc = min(BC, N - j0);
      for (int e = t; e < bc * D; e += THREADS) {
        const int r = e / D, c = e % D;
        Ks[r * (D + 1) + c] = k[(size_t)j0 * D + e];
        Vs[e] = v[(size_t)j0 * D + e];
      }
      __syncthreads();
      for (int jj = 0; jj < bc; ++jj) {
        const float* kr = Ks + jj * (D + 1);
        float sa = 0.f, sb = 0.f;
        for (int x = 0; x < D; ++x) sa += qa[x] * kr[x], sb += qb[x] * kr[x];
        const float mna = fmaxf(ma, sa), aa = __expf(ma - mna), pa = __expf(sa - mna);
        const float mnb = fmaxf(mb, sb), ab = __expf(mb - mnb), pb = __expf(sb - mnb);
        la = la * aa + pa;
        lb = lb * ab + pb;
        const float* vr = Vs + jj * D;  // V row j0 + jj
        for (int x = 0; x < DP; ++x) {
          oa[x] = oa[x] * aa + pa * vr[x];
          ob[x] = ob[x] * ab + pb * vr[x];
        }
        ma = mna, mb = mnb;
      }
      __syncthreads();
    }
    if (va)
      for (int x = 0; x < DP; ++x) out[((size_t)b * N + ia) * D + DP * part + x] = oa[x] / la;
    if (vb)
      for (int x = 0; x < DP; ++x) out[((size_t)b * N + ib) * D + DP * part + x] = ob[x] / lb;
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
    attention_two<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_two<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

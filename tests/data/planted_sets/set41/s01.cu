// s01.cu: FlashAttention forward, register-blocked (homework 4).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: 64 threads a block, each owning two query rows (i0 and i0 + 64: 128 rows a block), the K
// (pitch d + 1) and V tiles of 32 keys in shared memory, keys taken two at a time so that every
// shared-memory value feeds four products; q, o of both rows in registers, D a template parameter
// with unrolled loops; online softmax per key pair, one division at the end.
//
// Builds with: nvcc -O3 -arch=sm_80 -o hw4 hw4.cu (the host code, checks and timing are the course seed's).
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_reg2") {}
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
// Register blocking: a thread owns TWO query rows (i0 and i0 + THREADS) and takes the keys of a
// shared-memory tile two at a time, so each K and V value read from shared memory serves four
// products. D is a template parameter and every loop over it is unrolled.
#ifndef BR
#define BR 128  // query rows per block (two per thread)
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
const int THREADS = BR / 2;
static_assert(BR % 2 == 0 && BR / 2 <= 1024, "BR: an even row count, two rows a thread");
static_assert(BC % 2 == 0, "BC: keys are taken in pairs");

template <int D>
__global__ void __launch_bounds__(THREADS) attention_reg2(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  __shared__ float Ks[BC][D + 1];  // padded: the threads read the same key, no conflict either way
  __shared__ float Vs[BC][D];
  const int tid = threadIdx.x, b = blockIdx.y;
  const int i0 = blockIdx.x * BR + tid, i1 = i0 + THREADS;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float qa[D], qb[D], oa[D], ob[D];
#pragma unroll
  for (int x = 0; x < D; ++x) {
    qa[x] = i0 < N ? q[(size_t)i0 * D + x] * scale : 0.f;
    qb[x] = i1 < N ? q[(size_t)i1 * D + x] * scale : 0.f;
    oa[x] = 0.f, ob[x] = 0.f;
  }
  float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();  // the previous tile is no longer read
    for (int e = tid; e < bc * D; e += THREADS) {
      const int r = e / D, c = e % D;
      Ks[r][c] = k[(size_t)(j0 + r) * D + c];
      Vs[r][c] = v[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();

    for (int jj = 0; jj < bc; jj += 2) {
      const bool two = jj + 1 < bc;
      float sa0 = 0.f, sa1 = 0.f, sb0 = 0.f, sb1 = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) {
        const float k0 = Ks[jj][x], k1 = Ks[jj + 1][x];
        sa0 += qa[x] * k0, sa1 += qa[x] * k1;
        sb0 += qb[x] * k0, sb1 += qb[x] * k1;
      }
      if (!two) sa1 = -INFINITY, sb1 = -INFINITY;

      const float mna = fmaxf(ma, fmaxf(sa0, sa1)), mnb = fmaxf(mb, fmaxf(sb0, sb1));
      const float aa = __expf(ma - mna), ab = __expf(mb - mnb);
      const float pa0 = __expf(sa0 - mna), pa1 = __expf(sa1 - mna);
      const float pb0 = __expf(sb0 - mnb), pb1 = __expf(sb1 - mnb);
      la = la * aa + pa0 + pa1;
      lb = lb * ab + pb0 + pb1;
#pragma unroll
      for (int x = 0; x < 32; ++x) oa[x] *= aa, ob[x] *= ab;
#pragma unroll
      for (int x = 0; x < D; ++x) {
        const float v0 = Vs[jj][x], v1 = two ? Vs[jj + 1][x] : 0.f;
        oa[x] += pa0 * v0 + pa1 * v1;
        ob[x] += pb0 * v0 + pb1 * v1;
      }
      ma = mna, mb = mnb;
    }
  }
  if (i0 < N) {
    float* dst = out + ((size_t)b * N + i0) * D;
#pragma unroll
    for (int x = 0; x < D; ++x) dst[x] = oa[x] / la;
  }
  if (i1 < N) {
    float* dst = out + ((size_t)b * N + i1) * D;
#pragma unroll
    for (int x = 0; x < D; ++x) dst[x] = ob[x] / lb;
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
  const dim3 grid((in.N + BR - 1) / BR, in.B);
  if (in.d == 32)
    attention_reg2<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_reg2<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

// hw4.cu: FlashAttention forward, homework 4 (speed-contest entry, "float4 everywhere").
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Thread per query row, 128 rows per block, 32-key tiles. All global traffic is float4 (16-byte
// loads of Q, K and V, 16-byte stores of O). K is kept TRANSPOSED in shared memory, Kt[x][j] with a
// row pitch of 36 floats, so that a thread reads four keys' values of one head dim with a single
// float4 and the score loop does four keys at a time; V stays row-major and is read as float4.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_t4k") {}
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
#ifndef BC
#define BC 32  // keys per tile
#endif
#define KP (BC + 4)  // pitch of a Kt row: a multiple of 4 (float4 reads), not of 32 (transposed stores)

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");
static_assert(BC % 4 == 0, "BC: whole float4 groups of keys");

template <int D>
__global__ void __launch_bounds__(THREADS) attention_t4k(const float* qkv, float* out, int N) {
  constexpr int D4 = D / 4;
  __shared__ __align__(16) float Kt[D * KP];
  __shared__ __align__(16) float Vs[BC * D];
  const int b = blockIdx.y, tid = threadIdx.x, i = blockIdx.x * BR + tid;
  const float4* q4 = reinterpret_cast<const float4*>(qkv + (size_t)b * 3 * N * D);
  const float4* k4 = q4 + (size_t)N * D4;
  const float4* v4 = k4 + (size_t)N * D4;
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D];
#pragma unroll
  for (int x4 = 0; x4 < D4; ++x4) {
    const float4 t = i < N ? q4[(size_t)i * D4 + x4] : make_float4(0.f, 0.f, 0.f, 0.f);
    q[4 * x4] = t.x * scale, q[4 * x4 + 1] = t.y * scale, q[4 * x4 + 2] = t.z * scale, q[4 * x4 + 3] = t.w * scale;
  }
  for (int x = 0; x < D; ++x) o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = N - j0 < BC ? N - j0 : BC;
    __syncthreads();
    // K: read in file order (coalesced), stored transposed; a warp walks down a Kt column
    for (int e4 = tid; e4 < BC * D4; e4 += THREADS) {
      const int r = e4 % BC, c4 = e4 / BC;
      const float4 t = r < bc ? k4[(size_t)j0 * D4 + e4] : make_float4(0.f, 0.f, 0.f, 0.f);
      Kt[(4 * c4) * KP + r] = t.x;
      Kt[(4 * c4 + 1) * KP + r] = t.y;
      Kt[(4 * c4 + 2) * KP + r] = t.z;
      Kt[(4 * c4 + 3) * KP + r] = t.w;
    }
    for (int e4 = tid; e4 < BC * D4; e4 += THREADS) {
      const int r = e4 / D4;
      reinterpret_cast<float4*>(Vs)[e4] = r < bc ? v4[(size_t)j0 * D4 + e4] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    __syncthreads();

    float s[BC];
#pragma unroll
    for (int j4 = 0; j4 < BC / 4; ++j4) {
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
      for (int x = 0; x < D; ++x) {
        const float4 kk = *reinterpret_cast<const float4*>(&Kt[x * KP + 4 * j4]);
        acc.x += q[x] * kk.x, acc.y += q[x] * kk.y, acc.z += q[x] * kk.z, acc.w += q[x] * kk.w;
      }
      s[4 * j4] = acc.x, s[4 * j4 + 1] = acc.y, s[4 * j4 + 2] = acc.z, s[4 * j4 + 3] = acc.w;
    }
    float tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      if (jj >= bc) s[jj] = -INFINITY;
      tmax = fmaxf(tmax, s[jj]);
    }
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    for (int x = 0; x < D; ++x) o[x] *= alpha;
    float psum = 0.f;
    for (int jj = 0; jj < bc; ++jj) {
      const float p = __expf(s[jj] - m_new);
      psum += p;
      const float4* vr = reinterpret_cast<const float4*>(Vs + jj * D);
#pragma unroll
      for (int x4 = 0; x4 < D4; ++x4) {
        const float4 vv = vr[x4];
        o[4 * x4] += p * vv.x, o[4 * x4 + 1] += p * vv.y, o[4 * x4 + 2] += p * vv.z, o[4 * x4 + 3] += p * vv.w;
      }
    }
    l = l * alpha + psum;
    m = m_new;
  }
  if (i < N) {
    float4* dst = reinterpret_cast<float4*>(out + ((size_t)b * N + i) * D);
    const float inv = 1.0f / l;
#pragma unroll
    for (int x4 = 0; x4 < D4; ++x4)
      dst[x4] = make_float4(o[4 * x4] * inv, o[4 * x4 + 1] * inv, o[4 * x4 + 2] * inv, o[4 * x4 + 3] * inv);
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
    attention_t4k<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_t4k<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

// hw4.cu: FlashAttention forward, homework 4 (final version).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Four threads per query row (a quad), 32 rows per block of 128 threads. Each thread owns d / 4
// of the row's dims as float4 chunks (chunk c4 = sub + 4 u), so q and o stay small in registers;
// a score is the sum of the quad's partial dot products (two xor shuffles). K/V tiles of 64 keys
// go to shared memory as float4 (K padded to d + 4). The blocks of a batch start at different
// key tiles (staggered), so they do not all read the same K/V tile from memory at the same time.
//
// Build: nvcc -std=c++11 -O3 -Xptxas="-v" -arch=sm_61 -o hw4 hw4.cu -lm
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
#ifndef BR
#define BR 32  // query rows per block: four threads each
#endif
#ifndef BC
#define BC 64  // keys per tile
#endif

const int THREADS = 4 * BR;
static_assert(THREADS <= 1024, "BR: at most 256 rows per block");

#define FULL_MASK 0xffffffffu

// grid (ceil(N / BR), B), block 4 * BR threads: row r = threadIdx.x / 4, sub = threadIdx.x % 4.
template <int D>
__global__ void __launch_bounds__(THREADS) attention_quad(const float* qkv, float* out, int N) {
  constexpr int D4 = D / 4, KP = D + 4, C = D / 16;  // C: float4 chunks per thread
  __shared__ __align__(16) float Ks[BC * KP];
  __shared__ __align__(16) float Vs[BC * D];
  const int b = blockIdx.y;
  const int r = threadIdx.x >> 2, sub = threadIdx.x & 3;
  const int i = blockIdx.x * BR + r;
  const bool row_ok = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float4 q[C], o[C];
  const float4* q4 = reinterpret_cast<const float4*>(qb + (size_t)(row_ok ? i : 0) * D);
#pragma unroll
  for (int u = 0; u < C; ++u) {
    float4 v = q4[sub + 4 * u];
    q[u] = make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
    o[u] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY, l = 0.f;

  const int ntiles = (N + BC - 1) / BC;
  for (int it = 0; it < ntiles; ++it) {
    int t = blockIdx.x + it;  // staggered start, wrapped around
    if (t >= ntiles) t -= ntiles;
    const int j0 = t * BC, bc = min(BC, N - j0);
    __syncthreads();
    const float4* k4 = reinterpret_cast<const float4*>(kb + (size_t)j0 * D);
    const float4* v4 = reinterpret_cast<const float4*>(vb + (size_t)j0 * D);
    for (int e = threadIdx.x; e < bc * D4; e += THREADS) {
      const int rr = e / D4, c = e % D4;
      *reinterpret_cast<float4*>(&Ks[rr * KP + 4 * c]) = k4[e];
      *reinterpret_cast<float4*>(&Vs[rr * D + 4 * c]) = v4[e];
    }
    __syncthreads();

    for (int jj = 0; jj < bc; ++jj) {
      const float4* kr = reinterpret_cast<const float4*>(&Ks[jj * KP]);
      float s = 0.f;
#pragma unroll
      for (int u = 0; u < C; ++u) {
        const float4 kk = kr[sub + 4 * u];
        s += q[u].x * kk.x + q[u].y * kk.y + q[u].z * kk.z + q[u].w * kk.w;
      }
      s += __shfl_xor_sync(FULL_MASK, s, 1);
      s += __shfl_xor_sync(FULL_MASK, s, 2);
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
      const float4* vr = reinterpret_cast<const float4*>(&Vs[jj * D]);
#pragma unroll
      for (int u = 0; u < C; ++u) {
        const float4 vv = vr[sub + 4 * u];
        o[u].x = o[u].x * alpha + p * vv.x;
        o[u].y = o[u].y * alpha + p * vv.y;
        o[u].z = o[u].z * alpha + p * vv.z;
        o[u].w = o[u].w * alpha + p * vv.w;
      }
      m = m_new;
    }
  }

  if (row_ok) {
    float4* dst = reinterpret_cast<float4*>(out + ((size_t)b * N + i) * D);
    const float inv = 1.f / l;
#pragma unroll
    for (int u = 0; u < C; ++u)
      dst[sub + 4 * u] = make_float4(o[u].x * inv, o[u].y * inv, o[u].z * inv, o[u].w * inv);
  }
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_quad";
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
    attention_quad<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_quad<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

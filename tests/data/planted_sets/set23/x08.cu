// hw4.cu: FlashAttention forward, homework 4 (started from the course seed made by `fa init`).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A thread per query row (64 per block), q and o in registers as float4; K/V tiles of 32 keys
// staged in shared memory with float4 loads and stores; the tile's scores in registers, one
// online-softmax step per tile.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("flash_vec4") {}
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
#define BR 64  // query rows per block (threads)
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
const int THREADS = BR;

template <int D>
__global__ void __launch_bounds__(THREADS) flash_vec4(const float* qkv, float* out, int N) {
  const int D4 = D / 4;
  __shared__ float4 Ks4[BC * D4];
  __shared__ float4 Vs4[BC * D4];
  const int t = threadIdx.x, b = blockIdx.y;
  const int i = blockIdx.x * BR + t;
  const float4* q4 = reinterpret_cast<const float4*>(qkv + (size_t)b * 3 * N * D);
  const float4* k4 = q4 + (size_t)N * D4;
  const float4* v4 = k4 + (size_t)N * D4;
  const float scale = powf(D, -1 / 2);

  float4 qi[D4], o[D4];
  for (int x = 0; x < D4; ++x) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < N) v = q4[(size_t)i * D4 + x];
    qi[x] = make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
    o[x] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    for (int e = t; e < bc * D4; e += THREADS) {
      Ks4[e] = k4[(size_t)j0 * D4 + e];
      Vs4[e] = v4[(size_t)j0 * D4 + e];
    }
    __syncthreads();
    float s[BC];
    float tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      float acc = -INFINITY;
      if (jj < bc) {
        acc = 0.f;
        for (int x = 0; x < D4; ++x) {
          const float4 kk = Ks4[jj * D4 + x];
          acc += qi[x].x * kk.x + qi[x].y * kk.y + qi[x].z * kk.z + qi[x].w * kk.w;
        }
      }
      s[jj] = acc;
      tmax = fmaxf(tmax, acc);
    }
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    l *= alpha;
    for (int x = 0; x < D4; ++x) o[x].x *= alpha, o[x].y *= alpha, o[x].z *= alpha, o[x].w *= alpha;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      if (jj < bc) {
        const float p = __expf(s[jj] - m_new);
        l += p;
        for (int x = 0; x < D4; ++x) {
          const float4 vv = Vs4[jj * D4 + x];
          o[x].x += p * vv.x, o[x].y += p * vv.y, o[x].z += p * vv.z, o[x].w += p * vv.w;
        }
      }
    }
    m = m_new;
  }
  if (i < N) {
    float4* dst = reinterpret_cast<float4*>(out + ((size_t)b * N + i) * D);
    const float inv = 1.f / l;
    for (int x = 0; x < D4; ++x) dst[x] = make_float4(o[x].x * inv, o[x].y * inv, o[x].z * inv, o[x].w * inv);
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
    flash_vec4<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    flash_vec4<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

// hw4.cu: FlashAttention forward for the course's homework 4, on Q, K and V planes.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: the host first splits the file's interleaved Q_b K_b V_b blocks into three planes (all
// Q, then all K, then all V, each B x N x d) with a small helper, so that the kernel gets three
// plain pointers. One thread per query row, 128 rows a block, a flattened grid of B * ceil(N / 128)
// blocks. Tiles of 32 keys are copied with float4 loads into shared memory: K with a row pitch of
// d + 4 floats (rows stay 16-byte aligned so the dot product can read float4), V plain; q lives in
// registers as float4, and each key is folded with the seed's online softmax.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("planes_rows") {}
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

const int THREADS = BR;
static_assert(BR >= 1 && BR <= 1024, "BR: a block holds 1 to 1024 threads");

__device__ __forceinline__ float dot4(const float4 a, const float4 b) {
  return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// Qp, Kp, Vp: B x N x D planes. Block x: batch x / tiles, row tile x % tiles.
template <int D>
__global__ void __launch_bounds__(THREADS) planes_rows(const float* Qp, const float* Kp, const float* Vp, float* out,
                                                       int N, int tiles) {
  constexpr int D4 = D / 4;
  constexpr int KP4 = D4 + 1;  // K row pitch in float4 (d + 4 floats)
  __shared__ float4 Ks[BC * KP4];
  __shared__ float4 Vs[BC * D4];
  const int b = blockIdx.x / tiles, t = blockIdx.x % tiles;
  const int i = t * BR + threadIdx.x;
  const bool valid = i < N;
  const size_t batch = (size_t)b * N * D;
  const float4* q4 = reinterpret_cast<const float4*>(Qp + batch + (size_t)(valid ? i : N - 1) * D);
  const float4* k4 = reinterpret_cast<const float4*>(Kp + batch);
  const float4* v4 = reinterpret_cast<const float4*>(Vp + batch);
  const float scale = 1.0f / sqrtf((float)D);

  float4 qi[D4], o[D4];
#pragma unroll
  for (int c = 0; c < D4; ++c) {
    const float4 a = q4[c];
    qi[c] = make_float4(a.x * scale, a.y * scale, a.z * scale, a.w * scale);
    o[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D4; e += THREADS) {
      const int r = e / D4, c = e - r * D4;
      Ks[r * KP4 + c] = k4[(size_t)j0 * D4 + e];
      Vs[e] = v4[(size_t)j0 * D4 + e];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
#pragma unroll
      for (int c = 0; c < D4; ++c) s += dot4(qi[c], Ks[jj * KP4 + c]);
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int c = 0; c < D4; ++c) {
        const float4 vv = Vs[jj * D4 + c];
        o[c].x = o[c].x * alpha + p * vv.x;
        o[c].y = o[c].y * alpha + p * vv.y;
        o[c].z = o[c].z * alpha + p * vv.z;
        o[c].w = o[c].w * alpha + p * vv.w;
      }
      m = m_new;
    }
  }
  if (valid) {
    float4* dst = reinterpret_cast<float4*>(out + batch + (size_t)i * D);
    const float inv = 1.0f / l;
#pragma unroll
    for (int c = 0; c < D4; ++c) dst[c] = make_float4(o[c].x * inv, o[c].y * inv, o[c].z * inv, o[c].w * inv);
  }
}

// ---------------------------------------------------------------- planes (host)
// The file holds Q_0 K_0 V_0 Q_1 K_1 V_1 ...; the kernel wants Q_0 Q_1 ... | K_0 K_1 ... | V_0 V_1 ...
static std::vector<float> split_planes(const Input& in) {
  const size_t nd = (size_t)in.N * in.d, plane = (size_t)in.B * nd;
  std::vector<float> planes(3 * plane);
  float* q_plane = planes.data();
  float* k_plane = q_plane + plane;
  float* v_plane = k_plane + plane;
  for (int b = 0; b < in.B; ++b) {
    const float* src = in.qkv.data() + (size_t)b * 3 * nd;
    const float* kb = src + nd;
    const float* qb = src;
    const float* vb = src + 2 * nd;
    std::memcpy(q_plane + (size_t)b * nd, kb, nd * sizeof(float));
    std::memcpy(k_plane + (size_t)b * nd, qb, nd * sizeof(float));
    std::memcpy(v_plane + (size_t)b * nd, vb, nd * sizeof(float));
  }
  return planes;
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
  {
    const std::vector<float> planes = split_planes(in);
    CHECK(cudaMemcpy(d_qkv, planes.data(), planes.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  const int tiles = (in.N + BR - 1) / BR;
  const unsigned blocks = (unsigned)((long long)in.B * tiles);
  const size_t plane = (size_t)in.B * in.N * in.d;
  const float* d_q = d_qkv;
  const float* d_k = d_qkv + plane;
  const float* d_v = d_qkv + 2 * plane;
  if (in.d == 32)
    planes_rows<32><<<blocks, THREADS>>>(d_q, d_k, d_v, d_out, in.N, tiles);
  else
    planes_rows<64><<<blocks, THREADS>>>(d_q, d_k, d_v, d_out, in.N, tiles);
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

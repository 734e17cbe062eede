// hw4.cu: FlashAttention forward, homework 4 (warps split the keys, merge in shared memory).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A block of NW warps owns 32 query rows (lane = row). Warp w walks the key tiles w, w + NW,
// w + 2 NW, ... with its own K/V tile in shared memory (no block barrier in the loop), keeping its
// own online softmax (m, l, o) per row. At the end the NW partial results are merged through
// shared memory: each warp then writes a quarter of the dimensions of the 32 rows.
// Built from the course seed (fa init).
#include <algorithm>
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
#ifndef NW
#define NW 4  // warps per block, each with its own share of the keys
#endif
#ifndef KT
#define KT 16  // keys per warp tile
#endif

// grid (ceil(N / 32), B), block NW * 32
template <int D>
__global__ void __launch_bounds__(NW * 32) attention_warpsplit(const float* __restrict__ qkv, float* __restrict__ out,
                                                                 int N) {
  __shared__ __align__(16) float smem[NW * 2 * KT * D];  // per warp a K and a V tile; later the partial o's
  __shared__ float sm[NW][32], sl[NW][32];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, b = blockIdx.y;
  const int i = blockIdx.x * 32 + lane;
  const bool valid = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) q[x] = valid ? qb[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  float* Ks = smem + w * 2 * KT * D;
  float* Vs = Ks + KT * D;
  const int ntiles = (N + KT - 1) / KT;
  for (int t = w; t < ntiles; t += NW) {
    const int j0 = t * KT, bc = min(KT, N - j0);
    const float4* k4 = reinterpret_cast<const float4*>(kb + (size_t)j0 * D);
    const float4* v4 = reinterpret_cast<const float4*>(vb + (size_t)j0 * D);
    for (int e = lane; e < bc * (D / 4); e += 32)
      reinterpret_cast<float4*>(Ks)[e] = k4[e], reinterpret_cast<float4*>(Vs)[e] = v4[e];
    __syncwarp();
    for (int jj = 0; jj < bc; ++jj) {
      float sc = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) sc += q[x] * Ks[jj * D + x];
      if (sc > m) {  // the max grew: rescale what was summed so far
        const float a = __expf(m - sc);
        l *= a;
#pragma unroll
        for (int x = 0; x < D; ++x) o[x] *= a;
        m = sc;
      }
      const float p = __expf(sc - m);
      l += p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] += p * Vs[jj * D + x];
    }
    __syncwarp();
  }

  // merge the NW partials: so[(w * D + x) * 32 + lane] (over the tiles: all warps are done with them)
  __syncthreads();
  float* so = smem;
#pragma unroll
  for (int x = 0; x < D; ++x) so[(w * D + x) * 32 + lane] = o[x];
  sm[w][lane] = m, sl[w][lane] = l;
  __syncthreads();

  float M = sm[0][lane];
  for (int u = 1; u < NW; ++u) M = fmaxf(M, sm[u][lane]);
  float L = 0.f;
  for (int u = 0; u < NW; ++u) L += sl[u][lane] * __expf(sm[u][lane] - M);
  const float inv = 1.0f / L;
  const int x0 = w * (D / NW);  // this warp writes dims x0 .. x0 + D / NW - 1 of the 32 rows
  for (int x = x0; x < x0 + D / NW; ++x) {
    float acc = so[x * 32 + lane];
    for (int u = 1; u < NW; ++u) acc += so[(u * D + x) * 32 + lane] * __expf(sm[u][lane] - M);
    if (valid) out[((size_t)b * N + i) * D + x] = acc * inv;
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
  timing.impl = "attention_warpsplit";
  const dim3 grid((in.N + 31) / 32, in.B);
  if (in.d == 32)
    attention_warpsplit<32><<<grid, NW * 32>>>(d_qkv, d_out, in.N);
  else
    attention_warpsplit<64><<<grid, NW * 32>>>(d_qkv, d_out, in.N);
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

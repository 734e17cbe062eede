// hw4.cu (s04): FlashAttention forward, homework 4, warps of a block split the keys.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Ported from a split-K attention kernel: a block owns a tile of 32 query rows (lane = row) and its
// 4 warps take turns over the 16-key tiles (warp w takes tiles w, w + 4, ...), each with its own K
// (pitch d + 1) and V tiles in shared memory and its own online softmax (base 2). At the end each
// warp leaves (m, l) as a float2 and its o in shared memory (reusing the tile space) and the block
// merges the four partial states per row: M = max m, L = sum l 2^(m - M), O = sum o 2^(m - M) / L.
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
#define NW 4  // warps per block, each a share of the keys
#endif
#ifndef KT
#define KT 16  // keys per warp tile
#endif
const int ROWS = 32;  // query rows per block: lane = row
const int THREADS = NW * 32;

template <int D>
struct Smem {  // the warps' tiles while they run, their partial outputs after
  static const int tiles = NW * KT * (2 * D + 1);
  static const int parts = NW * ROWS * (D + 1);
  static const int floats = tiles > parts ? tiles : parts;
};

template <int D>
__global__ void __launch_bounds__(THREADS) attention_split(const float* __restrict__ qkv, float* __restrict__ out,
                                                           int N) {
  __shared__ float smem[Smem<D>::floats];
  __shared__ float2 ml[NW][ROWS];
  const int b = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int i = blockIdx.x * ROWS + lane;
  const bool valid = i < N;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float qscale = 1.4426950408889634f / sqrtf((float)D);
  float* Kw = smem + warp * KT * (2 * D + 1);  // this warp's K tile, pitch D + 1
  float* Vw = Kw + KT * (D + 1);               // and its V tile, pitch D

  float q[D], o[D];
  for (int x = 0; x < D; ++x) q[x] = valid ? qb[(size_t)i * D + x] * qscale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int ntiles = (N + KT - 1) / KT;
  for (int t = warp; t < ntiles; t += NW) {
    const int j0 = t * KT, bc = min(KT, N - j0);
    for (int e = lane; e < bc * D; e += 32) {
      const int r = e / D, c = e % D;
      Kw[r * (D + 1) + c] = kb[(size_t)j0 * D + e];
      Vw[r * D + c] = vb[(size_t)j0 * D + e];
    }
    __syncwarp();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
      for (int x = 0; x < D; ++x) s += q[x] * Kw[jj * (D + 1) + x];
      const float m_new = fmaxf(m, s);
      const float alpha = exp2f(m - m_new), p = exp2f(s - m_new);
      l = l * alpha + p;
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vw[jj * D + x];
      m = m_new;
    }
    __syncwarp();
  }
  __syncthreads();  // every warp is done with its tiles: the space now takes the partial outputs
  float* Os = smem + (warp * ROWS + lane) * (D + 1);
  for (int x = 0; x < D; ++x) Os[x] = o[x];
  ml[warp][lane] = make_float2(m, l);
  __syncthreads();

  // Merge: thread (warp, lane) finishes dims warp * D / NW .. (warp + 1) * D / NW - 1 of row lane.
  float M = -INFINITY;
  for (int u = 0; u < NW; ++u) M = fmaxf(M, ml[u][lane].x);
  float L = 0.f, f[NW];
  for (int u = 0; u < NW; ++u) {
    const float lu = ml[u][lane].x, mu = ml[u][lane].y;
    f[u] = exp2f(mu - M);
    L += lu * f[u];
  }
  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int x = warp * (D / NW); x < (warp + 1) * (D / NW); ++x) {
      float acc = 0.f;
      for (int u = 0; u < NW; ++u) acc += smem[(u * ROWS + lane) * (D + 1) + x] * f[u];
      dst[x] = acc / L;
    }
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
  const dim3 grid((in.N + ROWS - 1) / ROWS, in.B);
  if (in.d == 32)
    attention_split<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_split<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

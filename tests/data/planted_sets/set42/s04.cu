// hw4.cu: FlashAttention forward, homework 4 (final submission).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: cooperative groups. The block (256 threads) is cut with cg::tiled_partition<16> into 16
// tiles of 16 lanes, one query row each (16 rows per block). Q rows (pre-scaled), and K (pitch
// d + 1) and V tiles of 16 keys live in shared memory; lane g of a tile scores key j0 + g, the
// tile's max and sum come from cg::reduce (cg::greater, cg::plus), the weights travel by
// tile.shfl, and lane g owns the output dims g, g + 16, ... Grid: batches x row tiles flattened.
//
// With FA_TIMING=1 it also prints the time of each stage.
//
// Builds with the course's example line: nvcc -std=c++11 -O3 -Xptxas="-v" -arch=sm_61 -o hw4 hw4.cu -lm
// (cg::reduce needs CUDA 11 or later.)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_cg16") {}
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
namespace cg = cooperative_groups;

#define ROWS 16  // query rows per block: one 16-lane tile each
#define TK 16    // keys per shared-memory tile: one per lane of a tile

template <int D>
__global__ void __launch_bounds__(256) attention_cg16(const float* __restrict__ qkv, float* __restrict__ out, int N,
                                                      int tiles) {
  __shared__ float Qs[ROWS][D], Ks[TK][D + 1], Vs[TK][D];
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
  const int b = blockIdx.x / tiles, q0 = (blockIdx.x % tiles) * ROWS;
  const int g = tile.thread_rank();
  const int r = threadIdx.x / 32;  // this tile's row in the block
  const int i = q0 + r;
  const float* q = qkv + (size_t)b * 3 * N * D;
  const float* k = q + (size_t)N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = threadIdx.x; e < ROWS * D; e += 256) {
    const int rr = e / D, c = e % D;
    Qs[rr][c] = q0 + rr < N ? __ldg(q + (size_t)(q0 + rr) * D + c) * scale : 0.f;
  }
  constexpr int NPL = D / 16;  // output dims per lane
  float o[NPL];
  for (int t = 0; t < NPL; ++t) o[t] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += TK) {
    const int bc = min(TK, N - j0);
    block.sync();
    for (int e = threadIdx.x; e < TK * D; e += 256) {
      const int rr = e / D, c = e % D;
      Ks[rr][c] = rr < bc ? __ldg(k + (size_t)(j0 + rr) * D + c) : 0.f;
      Vs[rr][c] = rr < bc ? __ldg(v + (size_t)(j0 + rr) * D + c) : 0.f;
    }
    block.sync();
    float s = -INFINITY;
    if (g < bc) {
      s = 0.f;
      for (int x = 0; x < D; ++x) s += Qs[r][x] * Ks[g][x];
    }
    const float tmax = cg::reduce(tile, s, cg::greater<float>());
    const float m_new = fmaxf(m, tmax), alpha = __expf(m - m_new);
    const float p = g < bc ? __expf(s - m_new) : 0.f;
    l = l * alpha + cg::reduce(tile, p, cg::plus<float>());
    for (int t = 0; t < NPL; ++t) o[t] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = tile.shfl(p, jj);
      for (int t = 0; t < NPL; ++t) o[t] += pj * Vs[jj][g + 16 * t];
    }
    m = m_new;
  }
  if (i < N)
    for (int t = 0; t < NPL; ++t) out[((size_t)b * N + i) * D + g + 16 * t] = o[t] / l;
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
  const int tiles = (in.N + ROWS - 1) / ROWS;
  const unsigned blocks = (unsigned)in.B * tiles;
  if (in.d == 32)
    attention_cg16<32><<<blocks, 256>>>(d_qkv, d_out, in.N, tiles);
  else
    attention_cg16<64><<<blocks, 256>>>(d_qkv, d_out, in.N, tiles);
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

// hw4.cu: FlashAttention forward, the keys of a tile split over the warps (homework 4).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A block of 4 warps owns 32 query rows (lane = row); every warp holds the same 32 rows. K/V tiles of
// 64 keys in shared memory (K padded to d + 1); warp w walks keys 16w .. 16w + 15 of every tile with
// its own online softmax (m, l, o), so each row's keys are split four ways and the work per thread
// is a quarter. At the end the four partial results of each row are merged through shared memory
// (the tile buffers are reused for the partial outputs) and warp 0 writes the rows.
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
#define NW 4     // warps per block, each a quarter of every tile's keys
#define ROWS 32  // query rows per block: one per lane
#ifndef BC
#define BC 64  // keys per tile
#endif
#define KPW (BC / NW)  // keys of a tile per warp
const int THREADS = 32 * NW;

template <int D>
struct Smem {
  static const int TILE = BC * (D + 1) + BC * D;  // K (padded) then V
  static const int PART = NW * D * ROWS;          // partial outputs, [w][x][row]
  static const int FLOATS = TILE > PART ? TILE : PART;
};

template <int D>
__global__ void __launch_bounds__(THREADS) attention_split(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  __shared__ float smem[Smem<D>::FLOATS];
  __shared__ float Ms[NW], Ls[NW];
  float* Ks = smem;
  float* Vs = smem + BC * (D + 1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.y;
  const int i = blockIdx.x * ROWS + lane;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  float q[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) q[x] = (i < N) ? qb[(size_t)i * D + x] * scale : 0.f, o[x] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    for (int e = threadIdx.x; e < BC * D; e += THREADS) {
      const int r = e / D, c = e % D;
      const bool ok = r < bc;
      Ks[r * (D + 1) + c] = ok ? kb[(size_t)(j0 + r) * D + c] : 0.f;
      Vs[e] = ok ? vb[(size_t)j0 * D + e] : 0.f;
    }
    __syncthreads();

    const int kbeg = warp * KPW, kend = min(kbeg + KPW, bc);
    for (int jj = kbeg; jj < kend; ++jj) {
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += q[x] * Ks[jj * (D + 1) + x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
      m = m_new;
    }
    __syncthreads();  // the tiles are reloaded (or reused for the partials)
  }

  // Merge the four partials of each row (a warp with no key at all has m = -inf, l = 0).
  float* part = smem;
#pragma unroll
  for (int x = 0; x < D; ++x) part[(warp * D + x) * ROWS + lane] = o[x];
  if (lane == 0) Ms[warp] = m, Ls[warp] = l;
  __syncthreads();
  if (warp == 0 && i < N) {
    float M = -INFINITY;
    for (int w = 0; w < NW; ++w) M = fmaxf(M, Ms[w]);
    float f[NW], L = 0.f;
    for (int w = 0; w < NW; ++w) {
      f[w] = (Ls[w] > 0.f) ? __expf(Ms[w] - M) : 0.f;
      L += Ls[w] * f[w];
    }
    float* dst = out + ((size_t)b * N + i) * D;
    for (int x = 0; x < D; ++x) {
      float acc = 0.f;
      for (int w = 0; w < NW; ++w) acc += f[w] * part[(w * D + x) * ROWS + lane];
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
  timing.impl = "attention_split";
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

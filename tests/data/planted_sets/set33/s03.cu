// hw4.cu: FlashAttention forward, asynchronous copies (homework 4).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// One thread per query row, 128 rows per block, q and o in registers. K/V tiles of 32 keys are
// brought into shared memory with cp.async (16-byte copies, zero-fill past N) into two buffers:
// the copy of tile t + 1 runs while tile t is computed. The K tile rows are padded to d + 4 floats
// (16-byte aligned rows for cp.async, and a bank shift between rows). Scores of a whole tile in
// registers, one rescale per tile. Templated over d.
//
// cp.async needs sm_80 or newer: nvcc -std=c++11 -O3 -arch=sm_80 -o hw4 hw4.cu -lm
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
#define BR 128  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 32  // keys per tile
#endif
const int THREADS = BR;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int n>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(n)); }

template <int D>
struct TileBuf {
  static const int KP = D + 4;  // padded K row (floats), 16-byte aligned
  float k[BC * KP];
  float v[BC * D];
};

// Issue the copies of the tile of keys j0 .. j0 + BC - 1 (zeros past N).
template <int D>
__device__ __forceinline__ void load_tile(TileBuf<D>& buf, const float* kb, const float* vb, int j0, int N) {
  constexpr int C4 = D / 4;
  constexpr int CHUNKS = BC * 32 / 4;  // 16-byte chunks of one tile
  for (int e = threadIdx.x; e < CHUNKS; e += THREADS) {
    const int r = e / C4, c = (e % C4) * 4;
    const bool ok = j0 + r < N;
    const size_t g = (size_t)(ok ? j0 + r : 0) * D + c;
    cp_async16(&buf.k[r * TileBuf<D>::KP + c], kb + g, ok ? 16 : 0);
    cp_async16(&buf.v[r * D + c], vb + g, ok ? 16 : 0);
  }
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_async(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  __shared__ __align__(16) TileBuf<D> tiles[2];
  constexpr int KP = TileBuf<D>::KP;
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  float q[D], o[D];
  const bool valid = i < N;
#pragma unroll
  for (int x = 0; x < D; x += 4) {
    float4 t = make_float4(0.f, 0.f, 0.f, 0.f);
    if (valid) t = *reinterpret_cast<const float4*>(qb + (size_t)i * D + x);
    q[x] = t.x * scale, q[x + 1] = t.y * scale, q[x + 2] = t.z * scale, q[x + 3] = t.w * scale;
    o[x] = o[x + 1] = o[x + 2] = o[x + 3] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  const int nt = (N + BC - 1) / BC;
  load_tile<D>(tiles[0], kb, vb, 0, N);
  cp_async_commit();
  for (int t = 0; t < nt; ++t) {
    if (t + 1 < nt) load_tile<D>(tiles[(t + 1) & 1], kb, vb, (t + 1) * BC, N);
    cp_async_commit();   // an empty group at the last tile keeps the count below right
    cp_async_wait<1>();  // everything but the newest group: tile t has landed
    __syncthreads();

    const TileBuf<D>& tb = tiles[t & 1];
    const int bc = min(BC, N - t * BC);
    float s[BC];
    float tmax = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      float acc = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) acc += q[x] * tb.k[jj * KP + x];
      s[jj] = jj < bc ? acc : -INFINITY;
      tmax = fmaxf(tmax, s[jj]);
    }
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    l *= alpha;
#pragma unroll
    for (int x = 0; x < D; ++x) o[x] *= alpha;
#pragma unroll
    for (int jj = 0; jj < BC; ++jj) {
      const float p = __expf(s[jj] - m_new);
      l += p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] += p * tb.v[jj * D + x];
    }
    m = m_new;
    __syncthreads();  // the buffer of tile t is the target of the copy issued next iteration
  }

  if (valid) {
    float* dst = out + ((size_t)b * N + i) * D;
    const float inv = 1.f / l;
#pragma unroll
    for (int x = 0; x < D; x += 4)
      *reinterpret_cast<float4*>(dst + x) = make_float4(o[x] * inv, o[x + 1] * inv, o[x + 2] * inv, o[x + 3] * inv);
  }
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_async";
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
    attention_async<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_async<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

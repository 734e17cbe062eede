// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4.
//
//   ./hw4-amd INPUT OUTPUT   O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A query row per 32 lanes: on a 32-lane GPU a row is a warp, on a 64-lane wavefront two rows share
// it (lanes 0-31 and 32-63), so the tiles, the butterflies and the LDS layout are the same on both.
// Block = 128 threads = 4 rows, sharing LDS tiles of 32 keys (K rows padded to d + 1); slot t of a row
// scores key t of the tile, the row max and sum are xor butterflies over 16, 8, 4, 2, 1 (they never
// leave the 32 lanes of the row), and for P V slot t keeps dims t and t + 32, taking the weights of
// the row's other slots with __shfl.
//
// Builds with: hipcc -std=c++14 -O3 --offload-arch=gfx90a -o hw4-amd hw4.hip -lm
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <hip/hip_runtime.h>

// ---------------------------------------------------------------- errors
// Every HIP call goes through CHECK: a failure prints where it happened and what HIP said.
#define CHECK(call)                                                                             \
  do {                                                                                          \
    hipError_t err_ = (call);                                                                  \
    if (err_ != hipSuccess) {                                                                  \
      std::fprintf(stderr, "hw4-amd: %s:%d: %s\n", __FILE__, __LINE__, hipGetErrorString(err_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

static void fail(const char* what, const char* path) {
  std::fprintf(stderr, "hw4-amd: %s: %s\n", path, what);
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_rows32") {}
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
#ifndef BC
#define BC 32  // keys per tile, lanes per row
#endif
const int THREADS = 128;
const int ROWS = THREADS / BC;  // query rows per block

__device__ __forceinline__ float row_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}

__device__ __forceinline__ float row_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_rows32(const float* qkv, float* out, int N) {
  __shared__ float Qs[ROWS][D];
  __shared__ float Ks[BC][D + 1];
  __shared__ float Vs[BC][D];
  const int r = threadIdx.x / BC;   // row of the block
  const int t = threadIdx.x % BC;   // slot within the row
  const int b = blockIdx.y;
  const int i = blockIdx.x * ROWS + r;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = threadIdx.x; e < ROWS * D; e += THREADS) {
    const int rr = e / D, c = e % D, ii = blockIdx.x * ROWS + rr;
    Qs[rr][c] = ii < N ? qb[(size_t)ii * D + c] * scale : 0.f;
  }

  float m = -INFINITY, l = 0.f, o0 = 0.f, o1 = 0.f;
  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    for (int e = threadIdx.x; e < bc * D; e += THREADS) {
      const int rr = e / D, c = e % D;
      Ks[rr][c] = kb[(size_t)(j0 + rr) * D + c];
      Vs[rr][c] = vb[(size_t)(j0 + rr) * D + c];
    }
    __syncthreads();

    float s = -INFINITY;
    if (t < bc) {
      float acc = 0.f;
      for (int x = 0; x < D; ++x) acc += Qs[r][x] * Ks[t][x];
      s = acc;
    }
    const float m_new = fmaxf(m, row_max(s));
    const float p = t < bc ? __expf(s - m_new) : 0.f;
    const float alpha = __expf(m - m_new);
    l = l * alpha + row_sum(p);
    o0 *= alpha;
    o1 *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = __shfl(p, jj);
      o0 += pj * Vs[jj][t];
      if (D == 64) o1 += pj * Vs[jj][t + 32];
    }
    m = m_new;
  }

  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    dst[t] = o0 / l;
    if (D == 64) dst[t + 32] = o1 / l;
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
  CHECK(hipFree(0));  // the GPU context is made here: its cost, not the first copy's
  hipDeviceProp_t prop;
  CHECK(hipGetDeviceProperties(&prop, 0));
  const std::string gcn = prop.gcnArchName;
  timing.arch = gcn.substr(0, gcn.find(':')), timing.device = prop.name;  // gfx90a:sramecc+:xnack-: gfx90a
  timing.init = seconds_now() - t;

  t = seconds_now();
  float *d_qkv = NULL, *d_out = NULL;
  CHECK(hipMalloc(&d_qkv, in.qkv.size() * sizeof(float)));
  CHECK(hipMalloc(&d_out, out_values * sizeof(float)));
  CHECK(hipMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * sizeof(float), hipMemcpyHostToDevice));
  timing.h2d = seconds_now() - t;

  t = seconds_now();
  const dim3 grid((in.N + ROWS - 1) / ROWS, in.B);
  if (in.d == 32)
    attention_rows32<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_rows32<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  CHECK(hipGetLastError());
  CHECK(hipDeviceSynchronize());
  timing.kernel = seconds_now() - t;

  t = seconds_now();
  CHECK(hipMemcpy(out.data(), d_out, out_values * sizeof(float), hipMemcpyDeviceToHost));
  timing.d2h = seconds_now() - t;
  CHECK(hipFree(d_qkv));
  CHECK(hipFree(d_out));
  t = seconds_now();
  write_output(argv[2], out);
  timing.write = seconds_now() - t;
  timing.total = seconds_now() - start;
  timing.print_if_asked();
  return 0;
}

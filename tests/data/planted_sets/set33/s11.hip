// hw4.hip: FlashAttention forward for AMD GPUs (HIP), key tiles as large as the LDS allows
// (homework 4).
//
//   ./hw4-amd INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A wavefront per query row, 4 rows per block. The key tile is sized from the device at run time:
// as many keys as fit in the block's LDS (sharedMemPerBlock: 64 KB on the MI210) next to the 4
// query rows, at most 512, in whole warps of keys; the K (padded to d + 1) and V tiles live in
// dynamic LDS. Inside a tile the wavefront takes warpSize keys at a time, a key per lane: butterfly
// max and sum with __shfl_xor, then the weights broadcast with __shfl for the P V product (lane x
// owns output dims x and x + warpSize).
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
#define WAVES 4      // wavefronts (query rows) per block
#define MAX_TK 512   // keys per tile at most

__device__ __forceinline__ float wave_max(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}
__device__ __forceinline__ float wave_sum(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

// Dynamic LDS: Qs [WAVES][D], Ks [TK][D + 1], Vs [TK][D].
template <int D>
__global__ void __launch_bounds__(256) attention_bigtile(const float* __restrict__ qkv, float* __restrict__ out, int N, int TK) {
  extern __shared__ float lds[];
  float* Qs = lds;
  float* Ks = Qs + WAVES * D;
  float* Vs = Ks + TK * (D + 1);
  const int W = warpSize;
  const int wave = threadIdx.x / W, lane = threadIdx.x % W;
  const int b = blockIdx.y;
  const int i = blockIdx.x * WAVES + wave;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  for (int x = lane; x < D; x += W) Qs[wave * D + x] = (i < N) ? qb[(size_t)i * D + x] * scale : 0.f;
  const float* qrow = Qs + wave * D;

  float m = -INFINITY, l = 0.f, o[2] = {0.f, 0.f};
  for (int j0 = 0; j0 < N; j0 += TK) {
    const int bc = min(TK, N - j0);
    for (int e = threadIdx.x; e < bc * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      Ks[r * (D + 1) + c] = kb[(size_t)(j0 + r) * D + c];
      Vs[e] = vb[(size_t)j0 * D + e];
    }
    __syncthreads();

    for (int g = 0; g < bc; g += W) {  // warpSize keys at a time, one per lane
      const int r = g + lane;
      const bool live = j0 + r < N;
      float s = -INFINITY;
      if (live) {
        s = 0.f;
        for (int x = 0; x < D; ++x) s += qrow[x] * Ks[r * (D + 1) + x];
      }
      const float m_new = fmaxf(m, wave_max(s));
      const float p = live ? __expf(s - m_new) : 0.f;
      const float alpha = __expf(m - m_new);
      l = l * alpha + wave_sum(p);
      o[0] *= alpha, o[1] *= alpha;
      const int nk = min(W, N - j0 - g);
      for (int u = 0; u < nk; ++u) {
        const float pu = __shfl(p, u);
        for (int k = 0; k < 2; ++k) {
          const int x = lane + k * W;
          if (x < D) o[k] += pu * Vs[(g + u) * D + x];
        }
      }
      m = m_new;
    }
    __syncthreads();
  }

  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    const float inv = 1.f / l;
    for (int k = 0; k < 2; ++k) {
      const int x = lane + k * W;
      if (x < D) dst[x] = o[k] * inv;
    }
  }
}

// Keys per tile for this device: what fits in the block's LDS beside the query rows.
template <int D>
static int tile_keys(const hipDeviceProp_t& prop) {
  const size_t avail = prop.sharedMemPerBlock - (size_t)WAVES * D * sizeof(float);
  int tk = (int)(avail / ((2 * D + 1) * sizeof(float)));
  if (tk > MAX_TK) tk = MAX_TK;
  tk -= tk % 32;  // whole warps of keys
  return tk;
}

template <int D>
static void launch_bigtile(const hipDeviceProp_t& prop, const float* d_qkv, float* d_out, int B, int N) {
  const int tk = tile_keys<D>(prop);
  const size_t bytes = ((size_t)WAVES * D + (size_t)tk * (2 * D + 1)) * sizeof(float);
  const dim3 grid((N + WAVES - 1) / WAVES, B);
  attention_bigtile<D><<<grid, WAVES * prop.warpSize, bytes>>>(d_qkv, d_out, N, tk);
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_bigtile";
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
  if (in.d == 32)
    launch_bigtile<32>(prop, d_qkv, d_out, in.B, in.N);
  else
    launch_bigtile<64>(prop, d_qkv, d_out, in.B, in.N);
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

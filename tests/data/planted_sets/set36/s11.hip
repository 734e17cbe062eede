// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4 (final version).
//
//   ./hw4-amd INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A wavefront per query row, 8 rows of one batch per block, a key per lane. The block's query
// rows sit in LDS (every lane reads q[x] as a broadcast). K (transposed, so lane j reads column j
// without bank conflicts) and V go to dynamic LDS: the whole K_b and V_b at once when they fit
// in the device's LDS (short sequences: one load per block and no tile loop), otherwise tiles of
// 64 keys. Row max and sum by wavefront butterflies, weights broadcast with __shfl for P V.
//
// Build: hipcc -std=c++14 -O3 --offload-arch=gfx90a -o hw4-amd hw4.hip -lm
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
#ifndef ROWS
#define ROWS 8  // query rows per block: one wavefront each
#endif
#ifndef TK
#define TK 64  // keys per LDS tile when the whole sequence does not fit
#endif

__device__ __forceinline__ float wave_max(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}
__device__ __forceinline__ float wave_sum(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

// grid (ceil(N / ROWS), B), block ROWS * warpSize. Dynamic LDS: Kt (D x tk) then V (tk x D).
// Lane owns output dims lane and lane + warpSize (when D > warpSize).
template <int D>
__global__ void __launch_bounds__(ROWS * 64) attention_lds(const float* qkv, float* out, int N, int tk) {
  extern __shared__ float lds[];
  __shared__ float Qs[ROWS * D];
  float* Kt = lds;
  float* Vs = lds + (size_t)tk * D;
  const int W = warpSize;
  const int lane = threadIdx.x % W, wave = threadIdx.x / W;
  const int b = blockIdx.y;
  const int q0 = blockIdx.x * ROWS, i = q0 + wave;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = threadIdx.x; e < ROWS * D; e += blockDim.x)
    Qs[e] = (q0 + e / D < N) ? qb[(size_t)q0 * D + e] * scale : 0.f;

  float m = -INFINITY, l = 0.f, o[2] = {0.f, 0.f};
  const float* qr = Qs + wave * D;
  for (int j0 = 0; j0 < N; j0 += tk) {
    const int bc = min(tk, N - j0);
    __syncthreads();  // Q rows stored / previous tile no longer read
    for (int e = threadIdx.x; e < bc * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      Kt[c * tk + r] = kb[(size_t)j0 * D + e];
      Vs[e] = vb[(size_t)j0 * D + e];
    }
    __syncthreads();

    for (int g = 0; g < bc; g += W) {  // a group of warpSize keys: one per lane
      const int jj = g + lane;
      const bool live = jj < bc;
      float s = -INFINITY;
      if (live) {
        float acc = 0.f;
#pragma unroll
        for (int x = 0; x < D; ++x) acc += qr[x] * Kt[x * tk + jj];
        s = acc;
      }
      const float m_new = fmaxf(m, wave_max(s));
      const float alpha = __expf(m - m_new);
      const float p = live ? __expf(s - m_new) : 0.f;
      l = l * alpha + wave_sum(p);
      o[0] *= alpha;
      o[1] *= alpha;
      const int nk = min(W, bc - g);
      for (int k = 0; k < nk; ++k) {
        const float pk = __shfl(p, k);
        const float* vr = Vs + (size_t)(g + k) * D;
        for (int u = 0; u < 2; ++u) {
          const int x = lane + u * W;
          if (x < D) o[u] += pk * vr[x];
        }
      }
      m = m_new;
    }
  }

  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int u = 0; u < 2; ++u) {
      const int x = lane + u * W;
      if (x < D) dst[x] = o[u] / l;
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
  timing.impl = "attention_lds";
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
  // the whole K_b and V_b in LDS when they fit (N in whole groups of 128 keys: no partial
  // wavefront group on either vendor), else tiles of TK keys
  const size_t whole_bytes = (size_t)in.N * 2 * in.d * sizeof(float);
  const bool whole = in.N % 128 == 0 && whole_bytes <= prop.sharedMemPerBlock;
  const int tk = whole ? in.N : TK;
  const size_t lds_bytes = (size_t)tk * 2 * in.d * sizeof(float);
  const dim3 grid((in.N + ROWS - 1) / ROWS, in.B), block(ROWS * prop.warpSize);
  if (in.d == 32)
    attention_lds<32><<<grid, block, lds_bytes>>>(d_qkv, d_out, in.N, tk);
  else
    attention_lds<64><<<grid, block, lds_bytes>>>(d_qkv, d_out, in.N, tk);
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

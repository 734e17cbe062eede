// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4, ported from my hw4.cu.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Design: a block per (batch, tile of 16 query rows), 4 wavefronts a block (4 x warpSize threads),
// each wavefront owning 4 rows, launched with hipLaunchKernelGGL. The block's Q rows (pre-scaled)
// and tiles of warpSize keys of K (rows padded to d + 1) and V sit in LDS; lane j scores key j0 + j
// for each of its wavefront's 4 rows, 64-lane __shfl_xor butterflies give each row's tile max and
// sum, and lane x owns the output dim x (and x + warpSize) of the 4 rows.
//
// Builds with the course's example line: hipcc -std=c++14 -O3 --offload-arch=gfx908 -o hw4-amd hw4.hip -lm
// (an MI210 is gfx90a).
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
#define WAVES 4               // wavefronts per block
#define RPW 4                 // rows per wavefront
#define ROWS (WAVES * RPW)    // rows per block: 16
#define MAX_W 64              // the widest wavefront: the LDS tiles are sized for it

__device__ __forceinline__ float wave_max(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor(v, off));
  return v;
}

__device__ __forceinline__ float wave_sum(float v) {
  for (int off = warpSize / 2; off > 0; off >>= 1) v += __shfl_xor(v, off);
  return v;
}

template <int D>
__global__ void __launch_bounds__(WAVES * MAX_W) attention_rowtile(const float* qkv, float* out, int N) {
  __shared__ float Qs[ROWS][D];
  __shared__ float Ks[MAX_W][D + 1];
  __shared__ float Vs[MAX_W][D];

  const int W = warpSize;
  const int lane = threadIdx.x & 31;
  const int wave = threadIdx.x / W;
  const int b = blockIdx.y;
  const int i0 = blockIdx.x * ROWS;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = threadIdx.x; e < ROWS * D; e += blockDim.x) {
    const int r = e / D, c = e % D;
    Qs[r][c] = i0 + r < N ? qb[(size_t)(i0 + r) * D + c] * scale : 0.f;
  }

  float o[RPW][2], m[RPW], l[RPW];
  for (int k = 0; k < RPW; ++k) {
    o[k][0] = o[k][1] = 0.f;
    m[k] = -INFINITY;
    l[k] = 0.f;
  }

  for (int j0 = 0; j0 < N; j0 += W) {
    const int bc = min(W, N - j0);
    __syncthreads();  // Q is in place; the previous tile is no longer read
    for (int e = threadIdx.x; e < bc * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      Ks[r][c] = kb[(size_t)(j0 + r) * D + c];
      Vs[r][c] = vb[(size_t)(j0 + r) * D + c];
    }
    __syncthreads();

    for (int k = 0; k < RPW; ++k) {
      const int r = wave * RPW + k;
      float s = -INFINITY;
      if (lane < bc) {
        s = 0.f;
        for (int x = 0; x < D; ++x) s += Qs[r][x] * Ks[lane][x];
      }
      const float m_new = fmaxf(m[k], wave_max(s));
      const float alpha = __expf(m[k] - m_new);
      const float p = lane < bc ? __expf(s - m_new) : 0.f;
      l[k] = l[k] * alpha + wave_sum(p);
      o[k][0] *= alpha;
      o[k][1] *= alpha;
      for (int jj = 0; jj < bc; ++jj) {
        const float pj = __shfl(p, jj);
        for (int t = 0; t < 2; ++t) {
          const int x = lane + t * W;
          if (x < D) o[k][t] += pj * Vs[jj][x];
        }
      }
      m[k] = m_new;
    }
  }

  for (int k = 0; k < RPW; ++k) {
    const int i = i0 + wave * RPW + k;
    if (i >= N) continue;
    float* dst = out + ((size_t)b * N + i) * D;
    for (int t = 0; t < 2; ++t) {
      const int x = lane + t * W;
      if (x < D) dst[x] = o[k][t] / l[k];
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
  timing.impl = "attention_rowtile";
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
  const dim3 block(WAVES * prop.warpSize);
  const dim3 grid((in.N + ROWS - 1) / ROWS, in.B);
  if (in.d == 32)
    hipLaunchKernelGGL(attention_rowtile<32>, grid, block, 0, 0, d_qkv, d_out, in.N);
  else
    hipLaunchKernelGGL(attention_rowtile<64>, grid, block, 0, 0, d_qkv, d_out, in.N);
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

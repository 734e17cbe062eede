// hw4.hip: FlashAttention forward for the AMD MI210 (HIP): a wavefront per query row, two keys per lane.
//
//   ./hw4-amd INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A block of 4 wavefronts = 4 query rows of one batch. Key tiles of TK = 128 keys: lane t scores
// keys j0 + t and j0 + 64 + t from the K tile in LDS (pitch D + 1; a 128-row K tile of d = 64 with
// a V tile would not fit the 64 KB of LDS, so V is read from global memory, coalesced over the
// lanes). Tile max and sum by 64-lane butterflies; the P V product in two unrolled halves, the
// weights broadcast with __shfl, lane x < D owning output dim x.
//
// Builds with: hipcc -std=c++14 -O3 --offload-arch=gfx90a -o hw4-amd hw4.hip
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
#define WAVE 64      // lanes of a wavefront (MI210)
#define WAVES 4      // query rows per block: one wavefront each
#define TK (2 * WAVE)  // keys per tile: two per lane

__device__ __forceinline__ float wave_max(float x) {
#pragma unroll
  for (int off = WAVE / 2; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor(x, off, WAVE));
  return x;
}
__device__ __forceinline__ float wave_sum(float x) {
#pragma unroll
  for (int off = WAVE / 2; off > 0; off >>= 1) x += __shfl_xor(x, off, WAVE);
  return x;
}

template <int D>
__global__ void __launch_bounds__(WAVES * WAVE) attention_wave_keys2(const float* __restrict__ qkv,
                                                                     float* __restrict__ out, int N) {
  __shared__ float Qs[WAVES * D];
  __shared__ float Ks[TK * (D + 1)];
  const int tid = threadIdx.x, lane = tid % WAVE, wave = tid / WAVE;
  const int b = blockIdx.y, q0 = blockIdx.x * WAVES, i = q0 + wave;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);

  for (int e = tid; e < WAVES * D; e += WAVES * WAVE) {
    const int r = e / D;
    Qs[e] = (q0 + r < N) ? qb[(size_t)q0 * D + e] * scale : 0.f;
  }
  const float* qr = Qs + wave * D;
  const int x = lane < D ? lane : 0;  // this lane's output dim (lanes >= D idle in the P V product)
  float o = 0.f, m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += TK) {
    const int bc = min(TK, N - j0);
    const int n0 = min(WAVE, bc);      // keys in the first half
    const int n1 = max(0, bc - WAVE);  // keys in the second half
    __syncthreads();
    for (int e = tid; e < bc * D; e += WAVES * WAVE) {
      const int r = e / D, c = e - r * D;
      Ks[r * (D + 1) + c] = kb[(size_t)j0 * D + e];
    }
    __syncthreads();

    float s0 = -INFINITY, s1 = -INFINITY;
    if (lane < n0) {
      const float* kr = Ks + lane * (D + 1);
      float acc = 0.f;
#pragma unroll 16
      for (int t = 0; t < D; ++t) acc += qr[t] * kr[t];
      s0 = acc;
    }
    if (lane < n1) {
      const float* kr = Ks + (WAVE + lane) * (D + 1);
      float acc = 0.f;
#pragma unroll 16
      for (int t = 0; t < D; ++t) acc += qr[t] * kr[t];
      s1 = acc;
    }
    const float m_new = fmaxf(m, wave_max(fmaxf(s0, s1)));
    const float alpha = __expf(m - m_new);
    const float p0 = (lane < n0) ? __expf(s0 - m_new) : 0.f;
    const float p1 = (lane < n1) ? __expf(s1 - m_new) : 0.f;
    l = l * alpha + wave_sum(p0 + p1);

    float acc = 0.f;
    for (int jj = 0; jj < n0; ++jj) {
      const float pj = __shfl(p0, jj, WAVE);
      acc += pj * vb[(size_t)(j0 + jj) * D + x];
    }
    for (int jj = 0; jj < n1; ++jj) {
      const float pj = __shfl(p1, jj, WAVE);
      acc += pj * vb[(size_t)(j0 + jj) * D + x];
    }
    o = o * alpha + acc;
    m = m_new;
  }

  if (i < N && lane < D) out[((size_t)b * N + i) * D + lane] = o / l;
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_wave_keys2";
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
  const dim3 grid((in.N + WAVES - 1) / WAVES, in.B);
  if (in.d == 32)
    attention_wave_keys2<32><<<grid, WAVES * WAVE>>>(d_qkv, d_out, in.N);
  else
    attention_wave_keys2<64><<<grid, WAVES * WAVE>>>(d_qkv, d_out, in.N);
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

// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4.
//
//   ./hw4-amd INPUT OUTPUT   O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Two kernels. split_planes re-lays the input (Q_b K_b V_b interleaved per batch) as three planes, all
// Q rows, then all K rows, then all V rows, in one device buffer; the K plane's rows are stored with a
// pitch of d + 4 floats, the pitch of the K tile in LDS, so a K tile is copied to LDS row for row with
// float4 as it is. attention_planes: one thread per query row, 256 rows (4 wavefronts) per block,
// 64-key K/V tiles in LDS loaded with float4.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_planes") {}
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
#define BR 256  // query rows per block: one thread each
#endif
#ifndef BC
#define BC 64  // keys per tile
#endif
const int THREADS = BR;

// one thread per input element of the Q, K and V planes (grid-stride)
template <int D>
__global__ void split_planes(const float* qkv, float* Qp, float* Kp, float* Vp, int B, int N) {
  const int KP = D + 4;
  const size_t total = (size_t)B * N * D;
  for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
    const size_t row = e / D;  // b * N + i
    const int x = (int)(e % D);
    const size_t b = row / N, i = row % N;
    const float* src = qkv + b * 3 * N * D + i * D + x;
    Qp[e] = src[0];
    Kp[row * KP + x] = src[(size_t)N * D];
    Vp[e] = src[(size_t)2 * N * D];
  }
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_planes(const float* Qp, const float* Kp, const float* Vp,
                                                            float* out, int N) {
  const int KP = D + 4;
  __shared__ __align__(16) float Ks[BC * (D + 4)];
  __shared__ __align__(16) float Vs[BC * D];
  const int b = blockIdx.y;
  const int i = blockIdx.x * BR + threadIdx.x;
  const float* qb = Qp + (size_t)b * N * D;
  const float* kb = Kp + (size_t)b * N * KP;
  const float* vb = Vp + (size_t)b * N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float q[D], o[D];
  for (int x = 0; x < D; ++x) {
    q[x] = i < N ? qb[(size_t)i * D + x] * scale : 0.f;
    o[x] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    const int bc = min(BC, N - j0);
    __syncthreads();
    {
      const float4* ksrc = reinterpret_cast<const float4*>(kb + (size_t)j0 * KP);
      float4* kdst = reinterpret_cast<float4*>(Ks);
      for (int e = threadIdx.x; e < bc * KP / 4; e += THREADS) kdst[e] = ksrc[e];
      const float4* vsrc = reinterpret_cast<const float4*>(vb + (size_t)j0 * D);
      float4* vdst = reinterpret_cast<float4*>(Vs);
      for (int e = threadIdx.x; e < bc * D / 4; e += THREADS) vdst[e] = vsrc[e];
    }
    __syncthreads();
    for (int jj = 0; jj < bc; ++jj) {
      const float* kr = Ks + jj * KP;
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += q[x] * kr[x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
      const float* vr = Vs + jj * D;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * vr[x];
      m = m_new;
    }
  }

  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int x = 0; x < D; ++x) dst[x] = o[x] / l;
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
  const size_t plane = (size_t)in.B * in.N * in.d;  // floats in one plane
  float* d_planes = NULL;
  CHECK(hipMalloc(&d_planes, 3 * plane * sizeof(float)));
  float* d_Q = d_planes;
  float* d_K = d_Q + plane;
  float* d_V = d_K + plane;
  const unsigned split_blocks = (unsigned)std::min<size_t>((plane + 255) / 256, 65536);
  const dim3 grid((in.N + BR - 1) / BR, in.B);
  if (in.d == 32) {
    split_planes<32><<<split_blocks, 256>>>(d_qkv, d_Q, d_K, d_V, in.B, in.N);
    attention_planes<32><<<grid, THREADS>>>(d_Q, d_K, d_V, d_out, in.N);
  } else {
    split_planes<64><<<split_blocks, 256>>>(d_qkv, d_Q, d_K, d_V, in.B, in.N);
    attention_planes<64><<<grid, THREADS>>>(d_Q, d_K, d_V, d_out, in.N);
  }
  CHECK(hipGetLastError());
  CHECK(hipDeviceSynchronize());
  CHECK(hipFree(d_planes));
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

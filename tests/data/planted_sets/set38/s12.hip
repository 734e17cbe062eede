// hw4.hip: FlashAttention forward for AMD GPUs (HIP), homework 4 (speed-contest entry, "64-key tiles, transposed K").
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Port of my CUDA entry: a query row per warp/wavefront, 4 rows per block, 64-key tiles with two keys
// per lane, so that the butterflies and the block barriers are paid once per 64 keys instead of once
// per 32. K is stored TRANSPOSED in LDS (Kt[x][key], pitch 65), so the lanes of a wavefront read
// consecutive words for each head dim; V is row-major. Row max and sum by xor butterflies, P V with
// the weights broadcast by __shfl.
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
  Timing() : init(0), read(0), h2d(0), kernel(0), d2h(0), write(0), total(0), impl("attention_tk64") {}
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
#define ROWS 4  // query rows (warps / wavefronts) per block
#endif
#define TK 64      // keys per tile
#define KTP (TK + 1)  // pitch of a transposed K row

static_assert(ROWS >= 1 && ROWS * 64 <= 1024, "ROWS: warps per block");

template <int D>
__global__ void __launch_bounds__(ROWS * 64) attention_tk64(const float* qkv, float* out, int N) {
  constexpr int UPL = (D + 31) / 32;  // output dims per lane, at most
  __shared__ float Qs[ROWS * D];
  __shared__ float Kt[D * KTP];
  __shared__ float Vs[TK * D];
  const int W = warpSize, tid = threadIdx.x, w = tid / W, lane = tid % W;
  const int b = blockIdx.y, q0 = blockIdx.x * ROWS, i = q0 + w;
  const float* qg = qkv + (size_t)b * 3 * N * D;
  const float* kg = qg + (size_t)N * D;
  const float* vg = kg + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  for (int e = tid; e < ROWS * D; e += blockDim.x) Qs[e] = q0 + e / D < N ? qg[(size_t)q0 * D + e] * scale : 0.f;
  float o[UPL];
  for (int u = 0; u < UPL; ++u) o[u] = 0.f;
  float m = -INFINITY, l = 0.f;
  const int k0 = lane, k1 = lane + 32;  // this lane's two keys of a tile

  for (int j0 = 0; j0 < N; j0 += TK) {
    const int bc = N - j0 < TK ? N - j0 : TK;
    __syncthreads();
    for (int e = tid; e < TK * D; e += blockDim.x) {
      const int r = e / D, c = e % D;
      const bool ok = r < bc;
      Kt[c * KTP + r] = ok ? kg[(size_t)(j0 + r) * D + c] : 0.f;
      Vs[e] = ok ? vg[(size_t)j0 * D + e] : 0.f;
    }
    __syncthreads();
    float s0 = -INFINITY, s1 = -INFINITY;
    if (k0 < bc) {
      float acc = 0.f;
      for (int x = 0; x < D; ++x) acc += Qs[w * D + x] * Kt[x * KTP + k0];
      s0 = acc;
    }
    if (k1 < bc) {
      float acc = 0.f;
      for (int x = 0; x < D; ++x) acc += Qs[w * D + x] * Kt[x * KTP + k1];
      s1 = acc;
    }
    float tmax = fmaxf(s0, s1);
    for (int off = W / 2; off > 0; off >>= 1) tmax = fmaxf(tmax, __shfl_xor(tmax, off));
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    const float p0 = __expf(s0 - m_new), p1 = __expf(s1 - m_new);  // 0 for a key past the tile
    float psum = p0 + p1;
    for (int off = W / 2; off > 0; off >>= 1) psum += __shfl_xor(psum, off);
    l = l * alpha + psum;
    for (int u = 0; u < UPL; ++u) o[u] *= alpha;
    for (int jj = 0; jj < bc; ++jj) {
      const float pj = __shfl(jj < 32 ? p0 : p1, jj & 31);  // key jj is held by lane jj % 32
      for (int u = 0; u < UPL; ++u) {
        const int x = lane + u * W;
        if (x < D) o[u] += pj * Vs[jj * D + x];
      }
    }
    m = m_new;
  }
  if (i < N) {
    float* dst = out + ((size_t)b * N + i) * D;
    for (int u = 0; u < UPL; ++u) {
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
  const int threads = ROWS * prop.warpSize;  // a warp / wavefront per row
  const dim3 grid((unsigned)((in.N + ROWS - 1) / ROWS), (unsigned)in.B);
  if (in.d == 32)
    attention_tk64<32><<<grid, threads>>>(d_qkv, d_out, in.N);
  else
    attention_tk64<64><<<grid, threads>>>(d_qkv, d_out, in.N);
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

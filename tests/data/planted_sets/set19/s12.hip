// s12.hip: FlashAttention forward for AMD GPUs (HIP), the same program as hw4.cu (made by `fa init`).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// What is done: reading and checking the input (B, N, d, then Q_b K_b V_b per batch), the copies
// to and from the GPU, writing the output (B*N*d floats), and a kernel that is plain and correct:
// one thread per query row, walking every key once with an online softmax. What is yours: make
// the kernel fast. The place is marked TODO(tiles). Check your work with `fa run t01 --program ./hw4-amd`.
//
// With FA_TIMING=1 it also prints the time of each stage (optional: see "timing" below).
//
// Builds with the course's example line: hipcc -std=c++14 -O3 --offload-arch=gfx908 -o hw4-amd hw4.hip -lm
// (an MI210 is gfx90a). The only differences from hw4.cu: hip in place of cuda in the API's names,
// and the GPU's architecture read from gcnArchName.
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
// One 64-lane wavefront per query row, WAVES rows a block; keys in tiles of 64, lane t scoring key
// j0 + t (the whole scaled q row in each lane's registers). The tile's max and weight sum by xor
// butterflies over the 64 lanes; then the P V product: for d = 64 lane x accumulates dim x over the
// tile's keys, each key's weight fetched from the lane that scored it (__shfl); for d = 32 the two
// halves of the wavefront split the tile's keys (lanes 32h .. 32h + 31 take keys 32h .. 32h + 31,
// dim lane % 32) and the halves' sums are added with __shfl_xor(., 32).
#ifndef WAVES
#define WAVES 4  // wavefronts (query rows) per block
#endif

const int WAVE = 64;  // lanes of an MI210 wavefront, also the keys per tile
const int THREADS = WAVE * WAVES;
static_assert(THREADS <= 1024, "WAVES: a block holds 1024 threads at most");

template <int D>
__global__ void __launch_bounds__(THREADS) attention_wave_keys(const float* qkv, float* out, int B, int N) {
  const int lane = threadIdx.x % WAVE, wave = threadIdx.x / WAVE;
  const long long row = (long long)blockIdx.x * WAVES + wave;
  if (row >= (long long)B * N) return;  // a whole wavefront leaves together
  const int b = (int)(row / N), i = (int)(row % N);
  const float* q = qkv + (size_t)b * 3 * N * D + (size_t)i * D;
  const float* k = qkv + ((size_t)3 * b + 1) * N * D;
  const float* v = k + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);

  float qi[D];
  for (int x = 0; x < D; ++x) qi[x] = q[x] * scale;
  const int h = lane >> 5, x = (D == 64) ? lane : (lane & 31);  // d = 32: half h, dim x
  float o = 0.f, m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < N; j0 += WAVE) {
    const int bc = min(WAVE, N - j0);
    const int j = j0 + lane;
    float s = -INFINITY;
    if (lane < bc) {
      s = 0.f;
      const float* kr = k + (size_t)j * D;
      for (int y = 0; y < D; ++y) s += qi[y] * kr[y];
    }
    float tmax = s;
    for (int off = WAVE / 2; off > 0; off >>= 1) tmax = fmaxf(tmax, __shfl_xor(tmax, off));
    const float m_new = fmaxf(m, tmax);
    const float p = (lane < bc) ? __expf(s - m_new) : 0.f;
    float psum = p;
    for (int off = WAVE / 2; off > 0; off >>= 1) psum += __shfl_xor(psum, off);
    const float alpha = __expf(m - m_new);
    float pv = 0.f;
    if (D == 64) {
      for (int jj = 0; jj < bc; ++jj) pv += __shfl(p, jj) * v[(size_t)(j0 + jj) * D + x];
    } else {
      for (int u = 0; u < 32; ++u) {
        const int jj = h * 32 + u;  // this half's key
        const float w = __shfl(p, u);
        if (jj < bc) pv += w * v[(size_t)(j0 + jj) * D + x];
      }
      pv += __shfl_xor(pv, 32);  // both halves' keys
    }
    o = o * alpha + pv;
    l = l * alpha + psum;
    m = m_new;
  }
  if (D == 64 || h == 0) out[(size_t)row * D + x] = o / l;
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
  const long long rows = (long long)in.B * in.N;
  const unsigned blocks = (unsigned)((rows + WAVES - 1) / WAVES);
  if (in.d == 32)
    attention_wave_keys<32><<<blocks, THREADS>>>(d_qkv, d_out, in.B, in.N);
  else
    attention_wave_keys<64><<<blocks, THREADS>>>(d_qkv, d_out, in.B, in.N);
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

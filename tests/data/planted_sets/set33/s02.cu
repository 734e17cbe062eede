// hw4.cu: FlashAttention forward with the scores on the tensor cores (homework 4).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// S = Q K^T on the tensor cores (wmma, TF32 m16n16k8, 3xTF32 split for fp32 accuracy); the online
// softmax and P V on the CUDA cores. A block of 8 warps owns 128 query rows (16 per warp); K/V
// tiles of 32 keys in shared memory (K pitch d + 4 for wmma, V pitch d); each warp's 16 x 32 scores
// go through a shared scratch; lanes 2r and 2r + 1 hold row r's output, half of the dims each, in
// registers.
//
// Needs sm_80 or newer (TF32 wmma): nvcc -std=c++11 -O3 -arch=sm_80 -o hw4 hw4.cu -lm
#include <mma.h>
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
#ifndef BC
#define BC 32  // keys per K/V tile
#endif
#define WARPS 8
#define ROWS (16 * WARPS)  // query rows per block
const int THREADS = 32 * WARPS;
static_assert(BC % 16 == 0, "BC: whole 16-key fragments");

using namespace nvcuda;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragQ;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> FragK;
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> FragS;

template <typename Frag>
__device__ __forceinline__ void split_tf32(Frag& hi, Frag& lo) {
#pragma unroll
  for (int t = 0; t < hi.num_elements; ++t) {
    const float x = hi.x[t];
    hi.x[t] = wmma::__float_to_tf32(x);
    lo.x[t] = wmma::__float_to_tf32(x - hi.x[t]);
  }
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_tc(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  constexpr int KP = D + 4;   // K row pitch (ldm must be a multiple of 4)
  constexpr int SP = BC + 4;  // score row pitch
  constexpr int C4 = D / 4;
  constexpr int HD = D / 2;   // dims per lane
  __shared__ __align__(32) float Ks[BC * KP];
  __shared__ __align__(32) float Vs[BC * D];
  __shared__ __align__(32) float Ss[WARPS][16 * SP];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.y;
  const int q0 = blockIdx.x * ROWS + warp * 16;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);
  float* S = Ss[warp];

  // The warp's 16 query rows, 8 dims at a time, staged in the score scratch (zeros past N),
  // loaded into fragments and split into hi + lo.
  FragQ qh[D / 8], ql[D / 8];
#pragma unroll
  for (int k = 0; k < D / 8; ++k) {
    for (int e = lane; e < 16 * 8; e += 32) {
      const int rr = e >> 3, x = e & 7;
      S[rr * SP + x] = (q0 + rr < N) ? qb[(size_t)(q0 + rr) * D + k * 8 + x] * scale : 0.f;
    }
    __syncwarp();
    wmma::load_matrix_sync(qh[k], S, SP);
    split_tf32(qh[k], ql[k]);
    __syncwarp();
  }

  const int r = lane >> 1, half = lane & 1;
  float m = -INFINITY, l = 0.f, o[HD];
#pragma unroll
  for (int x = 0; x < HD; ++x) o[x] = 0.f;

  FragS acc[BC / 16];
#pragma unroll
  for (int n = 0; n < BC / 16; ++n) wmma::fill_fragment(acc[n], 0.f);

  for (int j0 = 0; j0 < N; j0 += BC) {
    for (int e = threadIdx.x; e < BC * C4; e += THREADS) {
      const int jr = e / C4, c = (e % C4) * 4;
      float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
      if (j0 + jr < N) {
        kv = *reinterpret_cast<const float4*>(kb + (size_t)(j0 + jr) * D + c);
        vv = *reinterpret_cast<const float4*>(vb + (size_t)(j0 + jr) * D + c);
      }
      *reinterpret_cast<float4*>(&Ks[jr * KP + c]) = kv;
      *reinterpret_cast<float4*>(&Vs[jr * D + c]) = vv;
    }
    __syncthreads();

#pragma unroll
    for (int n = 0; n < BC / 16; ++n) {
#pragma unroll
      for (int k = 0; k < D / 8; ++k) {
        FragK bh, bl;
        wmma::load_matrix_sync(bh, Ks + n * 16 * KP + k * 8, KP);
        split_tf32(bh, bl);
        wmma::mma_sync(acc[n], ql[k], bh, acc[n]);
        wmma::mma_sync(acc[n], qh[k], bl, acc[n]);
        wmma::mma_sync(acc[n], qh[k], bh, acc[n]);
      }
      wmma::store_matrix_sync(S + n * 16, acc[n], SP, wmma::mem_row_major);
    }
    __syncwarp();

    // Row r: the pair of lanes shares the tile's max and sum, each updates its half of the dims.
    const int bc = min(BC, N - j0);
    float tmax = -INFINITY;
    for (int c = half; c < bc; c += 2) tmax = fmaxf(tmax, S[r * SP + c]);
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float m_new = fmaxf(m, tmax);
    const float alpha = __expf(m - m_new);
    float psum = 0.f;
#pragma unroll
    for (int x = 0; x < HD; ++x) o[x] *= alpha;
    const float* vcol = Vs + half * HD;
    for (int c = 0; c < bc; ++c) {
      const float p = __expf(S[r * SP + c] - m_new);
      psum += p;
#pragma unroll
      for (int x = 0; x < HD; ++x) o[x] += p * vcol[c * D + x];
    }
    l = l * alpha + psum;
    m = m_new;
    __syncthreads();  // Ks / Vs / S are rewritten next
  }

  if (q0 + r < N) {
    float* dst = out + ((size_t)b * N + q0 + r) * D + half * HD;
    const float inv = 1.f / l;
#pragma unroll
    for (int x = 0; x < HD; ++x) dst[x] = o[x] * inv;
  }
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_tc";
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
    attention_tc<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_tc<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

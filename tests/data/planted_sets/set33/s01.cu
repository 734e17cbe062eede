// hw4.cu: FlashAttention forward, tensor-core version (homework 4).
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// Both products on the tensor cores through wmma with TF32 fragments (m16n16k8), made fp32-accurate
// by the 3xTF32 trick: every operand is split into a TF32 high part and a TF32 low part and
// S = Qh Kh + Qh Kl + Ql Kh (the same for P V). A block of 4 warps owns 64 query rows (16 per warp);
// K/V tiles of 32 keys are loaded with float4 into shared memory (row pitch d + 4: a multiple of 4
// for wmma's ldm and a bank shift between rows). Each warp keeps its 16 x d output in shared memory,
// rescales it by the online-softmax factor and accumulates P V into it. Base-2 softmax: log2(e) is
// folded into the query scale and exp2f is used everywhere.
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
#define WARPS 4                 // warps per block, 16 query rows each
#define ROWS (16 * WARPS)       // query rows per block
const int THREADS = 32 * WARPS;
static_assert(BC % 16 == 0, "BC: whole 16-key fragments");

using namespace nvcuda;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> FragBt;  // K^T
typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> FragB;   // V
typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> FragC;

// 3xTF32: x = hi + lo, both parts representable in TF32.
template <typename Frag>
__device__ __forceinline__ void split_tf32(Frag& hi, Frag& lo) {
#pragma unroll
  for (int t = 0; t < hi.num_elements; ++t) {
    const float x = hi.x[t];
    const float h = wmma::__float_to_tf32(x);
    hi.x[t] = h;
    lo.x[t] = wmma::__float_to_tf32(h - x);  // the rounding error, itself in tf32
  }
}

template <typename FA, typename FB>
__device__ __forceinline__ void mma3(FragC& acc, const FA& ah, const FA& al, const FB& bh, const FB& bl) {
  wmma::mma_sync(acc, al, bh, acc);
  wmma::mma_sync(acc, ah, bl, acc);
  wmma::mma_sync(acc, ah, bh, acc);
}

template <int D>
__global__ void __launch_bounds__(THREADS) attention_wmma(const float* __restrict__ qkv, float* __restrict__ out, int N) {
  constexpr int KP = D + 4;   // K / V / O row pitch (floats)
  constexpr int SP = BC + 4;  // score / weight row pitch
  constexpr int C4 = D / 4;   // float4 per row
  __shared__ __align__(32) float Ks[BC * KP];
  __shared__ __align__(32) float Vs[BC * KP];
  __shared__ __align__(32) float Ss[WARPS][16 * SP];
  __shared__ __align__(32) float Os[WARPS][16 * KP];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int b = blockIdx.y;
  const int q0 = blockIdx.x * ROWS + warp * 16;  // this warp's first query row
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float qscale = 1.4426950408889634f / sqrtf((float)D);  // log2(e) / sqrt(d)
  float* S = Ss[warp];
  float* O = Os[warp];

  // The warp's 16 query rows, scaled, staged in O (zeros past N), then split into registers.
  for (int e = lane; e < 16 * D; e += 32) {
    const int r = e / D, x = e % D;
    O[r * KP + x] = (q0 + r < N) ? qb[(size_t)(q0 + r) * D + x] * qscale : 0.f;
  }
  __syncwarp();
  FragA qh[D / 8], ql[D / 8];
#pragma unroll
  for (int k = 0; k < D / 8; ++k) {
    wmma::load_matrix_sync(qh[k], O + k * 8, KP);
    split_tf32(qh[k], ql[k]);
  }
  __syncwarp();
  for (int e = lane; e < 16 * KP; e += 32) O[e] = 0.f;

  // Lanes 2r and 2r + 1 own row r of the warp: keys (and dims) split in halves between them.
  const int r = lane >> 1, half = lane & 1;
  float m = -INFINITY, l = 0.f;

  for (int j0 = 0; j0 < N; j0 += BC) {
    for (int e = threadIdx.x; e < BC * C4; e += THREADS) {
      const int jr = e / C4, c = (e % C4) * 4;
      float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
      if (j0 + jr < N) {
        kv = *reinterpret_cast<const float4*>(kb + (size_t)(j0 + jr) * D + c);
        vv = *reinterpret_cast<const float4*>(vb + (size_t)(j0 + jr) * D + c);
      }
      *reinterpret_cast<float4*>(&Ks[jr * KP + c]) = kv;
      *reinterpret_cast<float4*>(&Vs[jr * KP + c]) = vv;
    }
    __syncthreads();

    // S (16 x BC) = Q K^T, one 16 x 16 fragment per 16 keys.
#pragma unroll
    for (int n = 0; n < BC / 16; ++n) {
      FragC acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int k = 0; k < D / 8; ++k) {
        FragBt bh, bl;
        wmma::load_matrix_sync(bh, Ks + n * 16 * KP + k * 8, KP);
        split_tf32(bh, bl);
        mma3(acc, qh[k], ql[k], bh, bl);
      }
      wmma::store_matrix_sync(S + n * 16, acc, SP, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax (base 2) of row r over this tile; weights written over the scores.
    const int kbeg = half * (BC / 2);
    float tmax = -INFINITY;
    for (int c = kbeg; c < kbeg + BC / 2; ++c)
      if (j0 + c < N) tmax = fmaxf(tmax, S[r * SP + c]);
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float m_new = fmaxf(m, tmax);
    float psum = 0.f;
    for (int c = kbeg; c < kbeg + BC / 2; ++c) {
      const float p = (j0 + c < N) ? exp2f(S[r * SP + c] - m_new) : 0.f;
      S[r * SP + c] = p;
      psum += p;
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    const float alpha = exp2f(m - m_new);
    l = l * alpha + psum;
    m = m_new;
    for (int x = half * (D / 2); x < (half + 1) * (D / 2); ++x) O[r * KP + x] *= alpha;
    __syncwarp();

    // O (16 x D) += P (16 x BC) V (BC x D).
#pragma unroll
    for (int n2 = 0; n2 < D / 16; ++n2) {
      FragC acc;
      wmma::load_matrix_sync(acc, O + n2 * 16, KP, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < BC / 8; ++k) {
        FragA ph, pl;
        FragB vh, vl;
        wmma::load_matrix_sync(ph, S + k * 8, SP);
        split_tf32(ph, pl);
        wmma::load_matrix_sync(vh, Vs + k * 8 * KP + n2 * 16, KP);
        split_tf32(vh, vl);
        mma3(acc, ph, pl, vh, vl);
      }
      wmma::store_matrix_sync(O + n2 * 16, acc, KP, wmma::mem_row_major);
    }
    __syncthreads();  // Ks / Vs are reloaded next
  }

  if (q0 + r < N) {
    float* dst = out + ((size_t)b * N + q0 + r) * D;
    const float inv = 1.f / l;
    for (int x = half * (D / 2); x < (half + 1) * (D / 2); ++x) dst[x] = O[r * KP + x] * inv;
  }
}

// ---------------------------------------------------------------- main
int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  Timing timing;
  timing.impl = "attention_wmma";
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
    attention_wmma<32><<<grid, THREADS>>>(d_qkv, d_out, in.N);
  else
    attention_wmma<64><<<grid, THREADS>>>(d_qkv, d_out, in.N);
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

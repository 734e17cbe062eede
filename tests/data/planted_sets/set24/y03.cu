// hw4.cu: FlashAttention forward with the key range split across the warps of a block.
//
//   ./hw4 INPUT OUTPUT       O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// A block of 4 warps serves 32 query rows of one batch: lane t is row q0 + t in every warp, and warp
// w walks its own quarter of the keys (a contiguous range) through a warp-private shared tile of KT
// keys, with its own online softmax state (m, l, o). At the end the four partial states are merged
// in shared memory (rescaled to the common max) by all 128 threads, the memory of the tiles reused.
//
// Builds with: nvcc -std=c++11 -O3 -arch=sm_90 -o hw4 hw4.cu
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
#ifndef KT
#define KT 16  // keys per warp-private tile
#endif
#define SPLITS 4  // warps per block, one key range each
#define ROWS 32   // query rows per block: one per lane

template <int D>
struct SplitSmem {
  static const int TILE = KT * D;                       // floats of one K or V tile
  static const int TILES = SPLITS * 2 * TILE;           // all warps' K and V tiles
  static const int MERGE = SPLITS * ROWS * (D + 1) + 2 * SPLITS * ROWS;  // partial o, m, l
  static const int FLOATS = TILES > MERGE ? TILES : MERGE;
};

template <int D>
__global__ void __launch_bounds__(SPLITS * 32) attention_split(const float* __restrict__ qkv,
                                                               float* __restrict__ out, int N) {
  __shared__ float smem[SplitSmem<D>::FLOATS];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int b = blockIdx.y, q0 = blockIdx.x * ROWS, i = q0 + lane;
  const float* qb = qkv + (size_t)b * 3 * N * D;
  const float* kb = qb + (size_t)N * D;
  const float* vb = kb + (size_t)N * D;
  const float scale = rsqrtf((float)D);
  const bool valid = i < N;

  float qi[D], o[D];
#pragma unroll
  for (int x = 0; x < D; ++x) {
    qi[x] = valid ? qb[(size_t)i * D + x] * scale : 0.f;
    o[x] = 0.f;
  }
  float m = -INFINITY, l = 0.f;

  // this warp's key range
  const int chunk = (N + SPLITS - 1) / SPLITS;
  const int kbeg = warp * chunk;
  const int kend = min(N, kbeg + chunk);
  float* Ks = smem + warp * 2 * SplitSmem<D>::TILE;
  float* Vs = Ks + SplitSmem<D>::TILE;

  for (int j0 = kbeg; j0 < kend; j0 += KT) {
    const int bc = min(KT, N - j0);
    __syncwarp();
    for (int e = lane; e < bc * D; e += 32) {
      Ks[e] = kb[(size_t)j0 * D + e];
      Vs[e] = vb[(size_t)j0 * D + e];
    }
    __syncwarp();
    for (int jj = 0; jj < bc; ++jj) {
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj * D + x];
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[jj * D + x];
      m = m_new;
    }
  }

  // merge the SPLITS partial states of each row
  __syncthreads();  // all warps are done with their tiles: the memory is reused
  float* Os = smem;                                // [SPLITS][ROWS][D + 1]
  float* Ms = smem + SPLITS * ROWS * (D + 1);      // [SPLITS][ROWS]
  float* Ls = Ms + SPLITS * ROWS;                  // [SPLITS][ROWS]
#pragma unroll
  for (int x = 0; x < D; ++x) Os[(warp * ROWS + lane) * (D + 1) + x] = o[x];
  Ms[warp * ROWS + lane] = m;
  Ls[warp * ROWS + lane] = l;
  __syncthreads();

  if (valid) {
    float M = -INFINITY;
#pragma unroll
    for (int s = 0; s < SPLITS; ++s) M = fmaxf(M, Ms[s * ROWS + lane]);
    float w[SPLITS], L = 0.f;
#pragma unroll
    for (int s = 0; s < SPLITS; ++s) {
      w[s] = __expf(Ms[s * ROWS + lane] - M);  // 0 for a warp with no keys (m = -inf)
      L += Ls[s * ROWS + lane] * w[s];
    }
    const float inv = 1.f / L;
    float* dst = out + ((size_t)b * N + i) * D;
    for (int x = warp; x < D; x += SPLITS) {  // each warp writes a quarter of the row's dims
      float acc = 0.f;
#pragma unroll
      for (int s = 0; s < SPLITS; ++s) acc += Os[(s * ROWS + lane) * (D + 1) + x] * w[s];
      dst[x] = acc * inv;
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
  timing.impl = "attention_split";
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
    attention_split<32><<<grid, SPLITS * 32>>>(d_qkv, d_out, in.N);
  else
    attention_split<64><<<grid, SPLITS * 32>>>(d_qkv, d_out, in.N);
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

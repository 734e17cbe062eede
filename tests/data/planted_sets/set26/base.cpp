// hw4 (FlashAttention forward) as a CPU emulation of the CUDA kernel, for testing on machines
// without a GPU. The loops below stand for the kernel's grid, its warps and lanes; arrays stand
// for shared memory and registers. Build: g++ -std=c++11 -O3 -o hw4 base.cpp
//   ./hw4 INPUT OUTPUT
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define BR 16      // query rows per block (one warp per row)
#define BC 32      // keys per K/V tile (one lane per key)
#define WARP 32    // lanes per warp
#define DMAX 64    // largest head dimension
#define NCMAX (DMAX / WARP)  // output columns per lane at most

// Shared memory of one block: Q tile, double-buffered K and V tiles (K padded by one float).
static float Qs[BR * DMAX];
static float Ks[2][BC * (DMAX + 1)];
static float Vs[2][BC * DMAX];

// Registers, per (warp, lane).
static float rs[BR][WARP];           // this lane's score of the current tile
static float rm[BR][WARP];           // running max
static float rl[BR][WARP];           // running sum
static float racc[BR][WARP][NCMAX];  // partial output of this lane's columns

// A K/V tile load by the block's BR * WARP threads, padded with zeros past N.
static void load_tile(const float* Kb, const float* Vb, int k0, int N, int d, int buf) {
  const int kp = d + 1;
  for (int tid = 0; tid < BR * WARP; ++tid)
    for (int idx = tid; idx < BC * d; idx += BR * WARP) {
      const int j = idx / d, k = idx % d;
      const bool in = k0 + j < N;
      Ks[buf][j * kp + k] = in ? Kb[(size_t)(k0 + j) * d + k] : 0.f;
      Vs[buf][j * d + k] = in ? Vb[(size_t)(k0 + j) * d + k] : 0.f;
    }
}

// The kernel: grid of B * nqt blocks, each BR warps of WARP lanes.
static void flash_kernel(const float* dQKV, float* dO, int B, int N, int d) {
  const int nqt = (N + BR - 1) / BR;
  const int nkt = (N + BC - 1) / BC;
  const int NC = d / WARP;
  const int kp = d + 1;
  const float scale = 1.0f / std::sqrt((float)d);
  float red[WARP], tmp[WARP], p[WARP];  // values exchanged by the warp's shuffles
  for (int blk = 0; blk < B * nqt; ++blk) {
    const int b = blk / nqt, q0 = (blk % nqt) * BR;
    const float* Qb = dQKV + (size_t)b * 3 * N * d;
    const float* Kb = Qb + (size_t)N * d;
    const float* Vb = Kb + (size_t)N * d;
    float* Ob = dO + (size_t)b * N * d;
    // Q tile to shared memory, zero rows past N.
    for (int tid = 0; tid < BR * WARP; ++tid)
      for (int idx = tid; idx < BR * d; idx += BR * WARP) {
        const int r = idx / d, k = idx % d;
        Qs[r * d + k] = q0 + r < N ? Qb[(size_t)(q0 + r) * d + k] : 0.f;
      }
    // Registers start.
    for (int r = 0; r < BR; ++r)
      for (int lane = 0; lane < WARP; ++lane) {
        rs[r][lane] = -INFINITY;
        rm[r][lane] = -INFINITY;
        rl[r][lane] = 0.f;
        for (int c = 0; c < NCMAX; ++c) racc[r][lane][c] = 0.f;
      }
    int cur = 0;
    load_tile(Kb, Vb, 0, N, d, 0);
    for (int t = 0; t < nkt; ++t) {
      const int k0 = t * BC;
      if (t + 1 < nkt) load_tile(Kb, Vb, k0 + BC, N, d, cur ^ 1);  // prefetch the next tile
      const float* K = Ks[cur];
      const float* V = Vs[cur];
      for (int r = 0; r < BR; ++r) {  // warp r
        // Scores: lane j takes key k0 + j.
        for (int lane = 0; lane < WARP; ++lane) {
          rs[r][lane] = -INFINITY;
          if (k0 + lane < N) {
            float dot = 0.f;
            for (int k = 0; k < d; ++k) dot += Qs[r * d + k] * K[lane * kp + k];
            rs[r][lane] = dot * scale;
          }
        }
        // Row max: xor butterfly.
        for (int lane = 0; lane < WARP; ++lane) red[lane] = rs[r][lane];
        for (int off = WARP / 2; off > 0; off >>= 1) {
          for (int lane = 0; lane < WARP; ++lane) tmp[lane] = std::fmax(red[lane], red[lane ^ off]);
          for (int lane = 0; lane < WARP; ++lane) red[lane] = tmp[lane];
        }
        float alpha[WARP];
        for (int lane = 0; lane < WARP; ++lane) {
          const float mnew = std::fmax(rm[r][lane], red[lane]);
          alpha[lane] = std::exp(rm[r][lane] - mnew);
          p[lane] = std::exp(rs[r][lane] - mnew);
          rm[r][lane] = mnew;
        }
        // Row sum: xor butterfly.
        for (int lane = 0; lane < WARP; ++lane) red[lane] = p[lane];
        for (int off = WARP / 2; off > 0; off >>= 1) {
          for (int lane = 0; lane < WARP; ++lane) tmp[lane] = red[lane] + red[lane ^ off];
          for (int lane = 0; lane < WARP; ++lane) red[lane] = tmp[lane];
        }
        for (int lane = 0; lane < WARP; ++lane) rl[r][lane] = rl[r][lane] * alpha[lane] + red[lane];
        // P V: lane owns columns lane + WARP * c; p of key j from lane j (__shfl_sync).
        for (int lane = 0; lane < WARP; ++lane)
          for (int c = 0; c < NC; ++c) {
            const int x = lane + WARP * c;
            float a = racc[r][lane][c] * alpha[lane];
            for (int j = 0; j < BC; ++j) a += p[j] * V[j * d + x];
            racc[r][lane][c] = a;
          }
      }
      cur ^= 1;
    }
    // O written once: each lane its columns, divided by the row sum.
    for (int r = 0; r < BR; ++r) {
      const int row = q0 + r;
      if (row >= N) continue;
      for (int lane = 0; lane < WARP; ++lane)
        for (int c = 0; c < NC; ++c) {
          const int x = lane + WARP * c;
          Ob[(size_t)row * d + x] = racc[r][lane][c] / rl[r][lane];
        }
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  FILE* in = std::fopen(argv[1], "rb");
  if (!in) {
    std::fprintf(stderr, "cannot open %s\n", argv[1]);
    return 2;
  }
  int head[3];
  if (std::fread(head, 4, 3, in) != 3) return 2;
  const int B = head[0], N = head[1], d = head[2];
  if (B < 1 || N < 1 || (d != 32 && d != 64)) {
    std::fprintf(stderr, "unsupported shape B=%d N=%d d=%d\n", B, N, d);
    return 2;
  }
  std::vector<float> qkv((size_t)B * 3 * N * d), out((size_t)B * N * d, 0.f);
  if (std::fread(qkv.data(), 4, qkv.size(), in) != qkv.size()) {
    std::fprintf(stderr, "short input\n");
    return 2;
  }
  std::fclose(in);
  flash_kernel(qkv.data(), out.data(), B, N, d);
  FILE* o = std::fopen(argv[2], "wb");
  if (!o) return 2;
  std::fwrite(out.data(), 4, out.size(), o);
  std::fclose(o);
  return 0;
}

// hw4 (CPU emulation of a CUDA kernel pair): two-pass FlashAttention, one warp per query row.
// Pass 1 (stats_kernel): each lane walks its share of the keys (lane, lane + 32 of every K tile)
// with its own running max and sum (log2 domain); a xor butterfly over the 32 lanes merges them
// into the row's max M and sum L. Pass 2 (out_kernel): p = exp2(s - M) / L for a tile of keys,
// lanes split the keys for p and the head dimension for O += p V. Grid: (query tiles, batches).
//
//   g++ -std=c++11 -O3 -o hw4 base.cpp && ./hw4 INPUT OUTPUT
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define WARP 32
#define RB 16    // query rows per block: one warp per row (block = RB * WARP threads)
#define KT 64    // keys per shared-memory tile: two per lane
#define DMAX 64  // largest head dimension
#define LOG2E 1.4426950408889634f

// Pass 1: row max M and row sum L (log2 domain) of rows bx * RB .. bx * RB + RB - 1 of batch by.
static void stats_kernel(int bx, int by, const float* Q, const float* K, float* Mg, float* Lg, int N, int d,
                         float sl2) {
  static float sQ[RB][DMAX];       // __shared__
  static float sK[KT][DMAX + 1];   // __shared__, padded row pitch
  float m[RB][WARP], l[RB][WARP];  // one register pair per thread (warp w, lane ln)
  const int nthreads = RB * WARP, row0 = bx * RB;
  const float* q = Q + (size_t)by * N * d;
  const float* k = K + (size_t)by * N * d;
  for (int t = 0; t < nthreads; ++t)  // Q tile, zero past row N
    for (int e = t; e < RB * d; e += nthreads) {
      const int r = e / d, c = e % d;
      sQ[r][c] = row0 + r < N ? q[(size_t)(row0 + r) * d + c] : 0.f;
    }
  for (int w = 0; w < RB; ++w)
    for (int ln = 0; ln < WARP; ++ln) m[w][ln] = -INFINITY, l[w][ln] = 0.f;
  // __syncthreads()
  for (int j0 = 0; j0 < N; j0 += KT) {
    const int cols = N - j0 < KT ? N - j0 : KT;
    for (int t = 0; t < nthreads; ++t)  // K tile, zero past key N
      for (int e = t; e < KT * d; e += nthreads) {
        const int r = e / d, c = e % d;
        sK[r][c] = r < cols ? k[(size_t)(j0 + r) * d + c] : 0.f;
      }
    // __syncthreads()
    for (int w = 0; w < RB; ++w)
      for (int ln = 0; ln < WARP; ++ln)
        for (int jj = ln; jj < cols; jj += WARP) {
          float s = 0.f;
          for (int x = 0; x < d; ++x) s += sQ[w][x] * sK[jj][x];
          s *= sl2;
          const float mn = std::fmax(m[w][ln], s);
          l[w][ln] = l[w][ln] * std::exp2(m[w][ln] - mn) + std::exp2(s - mn);
          m[w][ln] = mn;
        }
    // __syncthreads()
  }
  for (int w = 0; w < RB; ++w) {  // xor butterfly: every lane ends with the row's (M, L)
    for (int off = WARP / 2; off > 0; off /= 2) {
      float om[WARP], ol[WARP];
      for (int ln = 0; ln < WARP; ++ln) om[ln] = m[w][ln ^ off], ol[ln] = l[w][ln ^ off];  // __shfl_xor_sync
      for (int ln = 0; ln < WARP; ++ln) {
        const float mn = std::fmax(m[w][ln], om[ln]);
        const float a = m[w][ln] == -INFINITY ? 0.f : std::exp2(m[w][ln] - mn);
        const float b = om[ln] == -INFINITY ? 0.f : std::exp2(om[ln] - mn);
        l[w][ln] = l[w][ln] * a + ol[ln] * b;
        m[w][ln] = mn;
      }
    }
    const int row = row0 + w;
    if (row < N) Mg[(size_t)by * N + row] = m[w][0], Lg[(size_t)by * N + row] = l[w][0];
  }
}

// Pass 2: O = sum_j exp2(s_j - M) / L * V_j for the same rows; lane ln owns columns ln, ln + 32.
static void out_kernel(int bx, int by, const float* Q, const float* K, const float* V, const float* Mg,
                       const float* Lg, float* O, int N, int d, float sl2) {
  static float sQ[RB][DMAX];      // __shared__
  static float sK[KT][DMAX + 1];  // __shared__
  static float sV[KT][DMAX];      // __shared__
  static float sP[RB][KT];        // __shared__, one row of p per warp
  float acc[RB][WARP][DMAX / WARP], rm[RB][WARP], rinv[RB][WARP];  // registers
  const int nthreads = RB * WARP, row0 = bx * RB, CPL = (d + WARP - 1) / WARP;  // columns per lane
  const float* q = Q + (size_t)by * N * d;
  const float* k = K + (size_t)by * N * d;
  const float* v = V + (size_t)by * N * d;
  for (int t = 0; t < nthreads; ++t)
    for (int e = t; e < RB * d; e += nthreads) {
      const int r = e / d, c = e % d;
      sQ[r][c] = row0 + r < N ? q[(size_t)(row0 + r) * d + c] : 0.f;
    }
  for (int w = 0; w < RB; ++w)
    for (int ln = 0; ln < WARP; ++ln) {
      const int row = row0 + w;
      const size_t si = (size_t)by * N + row;  // this row's (M, L) from pass 1
      rm[w][ln] = row < N ? Mg[si] : 0.f;
      rinv[w][ln] = row < N ? 1.f / Lg[si] : 0.f;
      for (int c = 0; c < DMAX / WARP; ++c) acc[w][ln][c] = 0.f;
    }
  // __syncthreads()
  for (int j0 = 0; j0 < N; j0 += KT) {
    const int cols = N - j0 < KT ? N - j0 : KT;
    for (int t = 0; t < nthreads; ++t)  // K and V tiles, zero past key N
      for (int e = t; e < KT * d; e += nthreads) {
        const int r = e / d, c = e % d;
        sK[r][c] = r < cols ? k[(size_t)(j0 + r) * d + c] : 0.f;
        sV[r][c] = r < cols ? v[(size_t)(j0 + r) * d + c] : 0.f;
      }
    // __syncthreads()
    for (int w = 0; w < RB; ++w)  // lanes split the keys: p of keys ln and ln + 32
      for (int ln = 0; ln < WARP; ++ln)
        for (int jj = ln; jj < KT; jj += WARP) {
          float p = 0.f;
          if (jj < cols) {
            float s = 0.f;
            for (int x = 0; x < d; ++x) s += sQ[w][x] * sK[jj][x];
            p = std::exp2(s * sl2 - rm[w][ln]) * rinv[w][ln];
          }
          sP[w][ln] = p;
        }
    // __syncwarp()
    for (int w = 0; w < RB; ++w)  // lanes split the columns: O[row][x] += p V[x]
      for (int ln = 0; ln < WARP; ++ln)
        for (int c = 0; c < CPL; ++c) {
          const int x = ln + c * WARP;
          if (x >= d) continue;
          float a = acc[w][ln][c];
          for (int jj = 0; jj < cols; ++jj) a += sP[w][jj] * sV[jj][x];
          acc[w][ln][c] = a;
        }
    // __syncthreads()
  }
  for (int w = 0; w < RB; ++w)
    for (int ln = 0; ln < WARP; ++ln)
      for (int c = 0; c < CPL; ++c) {
        const int row = row0 + w, x = ln + c * WARP;
        if (row < N && x < d) O[((size_t)by * N + row) * d + x] = acc[w][ln][c];
      }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
    return 2;
  }
  FILE* in = std::fopen(argv[1], "rb");
  if (!in) return 2;
  int head[3];
  if (std::fread(head, 4, 3, in) != 3) return 2;
  const int B = head[0], N = head[1], d = head[2];
  if (B < 1 || N < 1 || d < 1 || d > DMAX) {
    std::fprintf(stderr, "unsupported shape B=%d N=%d d=%d\n", B, N, d);
    return 2;
  }
  const size_t nd = (size_t)N * d;
  std::vector<float> h_in((size_t)B * 3 * nd), h_out((size_t)B * nd);
  if (std::fread(h_in.data(), 4, h_in.size(), in) != h_in.size()) return 2;
  std::fclose(in);
  // "device" buffers; Q, K and V de-interleaved by the host copies (cudaMemcpy HostToDevice)
  std::vector<float> dQ(B * nd), dK(B * nd), dV(B * nd), dO(B * nd, 0.f), dM((size_t)B * N), dL((size_t)B * N);
  for (int b = 0; b < B; ++b) {
    const float* src = h_in.data() + (size_t)3 * b * nd;  // Q_b K_b V_b
    std::memcpy(dQ.data() + b * nd, src, nd * sizeof(float));
    std::memcpy(dK.data() + b * nd, src + nd, nd * sizeof(float));
    std::memcpy(dV.data() + b * nd, src + 2 * nd, nd * sizeof(float));
  }
  const float sqrt_d = std::sqrt((float)d);
  const float sl2 = LOG2E / sqrt_d;  // scores in the log2 domain: exp(x) = exp2(x * log2(e))
  const int gx = (N + RB - 1) / RB, gy = B;  // grid: (query tiles, batches)
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx) stats_kernel(bx, by, dQ.data(), dK.data(), dM.data(), dL.data(), N, d, sl2);
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx)
      out_kernel(bx, by, dQ.data(), dK.data(), dV.data(), dM.data(), dL.data(), dO.data(), N, d, sl2);
  std::memcpy(h_out.data(), dO.data(), h_out.size() * sizeof(float));  // cudaMemcpy DeviceToHost
  FILE* out = std::fopen(argv[2], "wb");
  if (!out) return 2;
  std::fwrite(h_out.data(), sizeof(float), h_out.size(), out);
  std::fclose(out);
  return 0;
}

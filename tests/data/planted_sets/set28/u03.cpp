// set28 base: a CPU emulation of a class's FlashAttention-1 style CUDA kernel.
// One "block" per tile of BR query rows, one "thread" per row; K and V tiles of BC keys in
// "shared memory", loaded cooperatively; S[BR][BC] in shared memory; m and l kept in "global
// memory" between tiles; O accumulated in global memory and rescaled each tile (FA-1, alg. 1).
//   g++ -std=c++11 -O3 -o base base.cpp && ./base INPUT OUTPUT
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#define BR 16    // query rows per block (threads per block)
#define BC 32    // keys per K/V tile
#define MAXD 64  // largest head dimension

// __shared__ memory of the one block running at a time
static float Qs[BR * MAXD];
static float Ks[BC * MAXD];
static float Vs[BC * MAXD];
static float S[BR * BC];

// The kernel for block (bx, b): query rows bx*BR .. bx*BR+BR-1 of batch b.
// Q, K, V, O: B x N x d in global memory; l, m: N floats (one batch).
static void flash_block(const float* Q, const float* K, const float* V, float* O, float* l,
                        float* m, int N, int d, int Tc, float scale, int bx, int b) {
  const size_t off = (size_t)b * N * d;  // this batch's Q, K, V, O
  const int row0 = bx * BR;
  const int rows = std::min(BR, N - row0);  // threads with a row (the last tile is partial)
  float row_m[BR], row_l[BR];               // registers of each thread
  // load the Q tile: thread tx loads its row
  for (int tx = 0; tx < BR; ++tx)
    for (int x = 0; x < d; ++x)
      Qs[tx * d + x] = row0 + tx < N ? Q[off + (size_t)(row0 + tx) * d + x] : 0.f;
  // __syncthreads();
  for (int j = 0; j < Tc; ++j) {
    const int col0 = j * BC;
    const int cols = std::min(BC, N - col0);  // keys in this tile (the last is partial)
    // cooperative load of the K and V tiles: thread tx loads rows tx, tx + BR, ...
    for (int tx = 0; tx < BR; ++tx)
      for (int r = tx; r < BC; r += BR)
        for (int x = 0; x < d; ++x) {
          Ks[r * d + x] = col0 + r < N ? K[off + (size_t)(col0 + r) * d + x] : 0.f;
          Vs[r * d + x] = col0 + r < N ? V[off + (size_t)(col0 + r) * d + x] : 0.f;
        }
    // __syncthreads();
    // S = Q K^T * scale and the row max, one row a thread
    for (int tx = 0; tx < rows; ++tx) {
      row_m[tx] = -INFINITY;
      for (int c = 0; c < cols; ++c) {
        float sum = 0.f;
        for (int x = 0; x < d; ++x) sum += Qs[tx * d + x] * Ks[c * d + x];
        S[tx * BC + c] = sum * scale;
        row_m[tx] = std::max(row_m[tx], S[tx * BC + c]);
      }
    }
    // P = exp(S - row max) and the row sum
    for (int tx = 0; tx < rows; ++tx) {
      row_l[tx] = 0.f;
      for (int c = 0; c < cols; ++c) {
        S[tx * BC + c] = std::exp(S[tx * BC + c] - row_m[tx]);
        row_l[tx] += S[tx * BC + c];
      }
    }
    // the online softmax update of m, l and O (FlashAttention-1, algorithm 1)
    for (int tx = 0; tx < rows; ++tx) {
      const int i = row0 + tx;
      const float m_new = std::max(m[i], row_m[tx]);
      const float l_new = std::exp(m[i] - m_new) * l[i] + std::exp(row_m[tx] - m_new) * row_l[tx];
      m[i] = m_new;
      l[i] = l_new;
      for (int x = 0; x < d; ++x) {
        float pv = 0.f;
        for (int c = 0; c < cols; ++c) pv += S[tx * BC + c] * Vs[c * d + x];
        float* o = &O[off + (size_t)i * d + x];
        *o = (1.f / l_new) * (l[i] * std::exp(m[i] - m_new) * *o + std::exp(row_m[tx] - m_new) * pv);
      }
    }
    // __syncthreads();
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
  if (B < 1 || N < 1 || d < 1 || d > MAXD) return 2;
  const size_t nd = (size_t)N * d;
  std::vector<float> file((size_t)3 * B * nd);  // Q_0 K_0 V_0 Q_1 K_1 V_1 ...
  if (std::fread(file.data(), 4, file.size(), in) != file.size()) return 2;
  std::fclose(in);
  // host arrays: all Q, then all K, then all V
  std::vector<float> hQ(B * nd), hK(B * nd), hV(B * nd), hO(B * nd);
  for (int b = 0; b < B; ++b) {
    const float* src = file.data() + (size_t)b * 3 * nd;
    std::memcpy(&hQ[b * nd], src, nd * sizeof(float));
    std::memcpy(&hK[b * nd], src + nd, nd * sizeof(float));
    std::memcpy(&hV[b * nd], src + 2 * nd, nd * sizeof(float));
  }
  // "device" buffers (cudaMalloc) and the copies host -> device (cudaMemcpy)
  std::vector<float> dQ(B * nd), dK(B * nd), dV(B * nd), dO(B * nd), dl(N), dm(N);
  std::memcpy(dQ.data(), hQ.data(), B * nd * sizeof(float));
  std::memcpy(dK.data(), hK.data(), B * nd * sizeof(float));
  std::memcpy(dV.data(), hV.data(), B * nd * sizeof(float));
  std::memset(dO.data(), 0, B * nd * sizeof(float));
  const int Tr = std::ceil((float)N / BR), Tc = std::ceil((float)N / BC);
  const float scale = 1.f / std::sqrt((float)d);
  for (int b = 0; b < B; ++b) {
    std::fill(dl.begin(), dl.end(), 0.f);        // cudaMemset(d_l, 0, N * sizeof(float))
    std::fill(dm.begin(), dm.end(), -INFINITY);  // an init kernel: m = -inf
    for (int bx = 0; bx < Tr; ++bx)  // flash_kernel<<<Tr, BR>>>(...)
      flash_block(dQ.data(), dK.data(), dV.data(), dO.data(), dl.data(), dm.data(), N, d, Tc, scale, bx, b);
  }
  // the copy device -> host, and the output
  std::memcpy(hO.data(), dO.data(), B * nd * sizeof(float));
  FILE* out = std::fopen(argv[2], "wb");
  if (!out) return 2;
  std::fwrite(hO.data(), 4, B * nd, out);
  std::fclose(out);
  return 0;
}

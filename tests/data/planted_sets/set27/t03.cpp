// hw4 on the CPU, written as an emulation of an optimised CUDA FlashAttention-2 forward kernel:
// one "block" per (batch, tile of BR query rows); the block's warps form two warp groups, group g
// walks half g of the keys (split-K) in tiles of BC keys; each warp owns RPW query rows, each lane
// a micro-tile (1 row x KPT keys of the score tile, 1 row x d/LPR columns of the output); Q, K
// and V tiles go to "shared memory" with float4 loads, K stored transposed with a padded pitch;
// scores are pre-multiplied by log2(e)/sqrt(d) and exponentiated with exp2; at the end the two
// groups' partial (m, l, acc) are merged and divided by l.
//
//   g++ -std=c++11 -O3 -o hw4 base.cpp && ./hw4 INPUT OUTPUT
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define BR 16                 // query rows per block (query tile)
#define BC 32                 // keys per K/V tile
#define WARP 32               // lanes per warp
#define RPW 4                 // query rows per warp
#define NWARPS (BR / RPW)     // warps per warp group
#define NGROUPS 2             // warp groups: group g takes half g of the keys
#define LPR (WARP / RPW)      // lanes per query row (8)
#define KPT (BC / LPR)        // keys per lane in a score tile (4)
#define GT (NWARPS * WARP)    // threads per warp group
#define KP (BC + 1)           // row pitch of the transposed K tile (padded against bank conflicts)
#define DMAX 64               // largest head dimension
#define CPL (DMAX / LPR)      // output columns per lane at most (8)
#define LOG2E 1.4426950408889634f

// "shared memory" of one block: one pool, carved up below, reused block after block
#define OFF_Q 0                                     // Q tile: BR x d
#define OFF_KT (OFF_Q + BR * DMAX)                  // K tiles, transposed: [group][d][KP]
#define OFF_V (OFF_KT + NGROUPS * DMAX * KP)        // V tiles: [group][BC][d]
#define OFF_P (OFF_V + NGROUPS * BC * DMAX)         // P tiles: [group][warp][RPW][BC]
#define OFF_M (OFF_P + NGROUPS * NWARPS * RPW * BC) // partial maxima: [group][BR]
#define OFF_L (OFF_M + NGROUPS * BR)                // partial sums: [group][BR]
#define OFF_O (OFF_L + NGROUPS * BR)                // partial outputs: [group][BR][DMAX]
#define SMEM_FLOATS 16384                           // 64 KiB of dynamic shared memory
static float smem[SMEM_FLOATS];

// "registers" of every lane of the block: [group][warp][lane]
static float m_r[NGROUPS][NWARPS][WARP], l_r[NGROUPS][NWARPS][WARP];
static float acc_r[NGROUPS][NWARPS][WARP][CPL], s_r[NGROUPS][NWARPS][WARP][KPT];

struct f4 {
  float x, y, z, w;
};
static inline f4 ld4(const float* p) {  // a float4 load (16-byte aligned address)
  f4 r = {p[0], p[1], p[2], p[3]};
  return r;
}
static inline void st4(float* p, f4 v) { p[0] = v.x, p[1] = v.y, p[2] = v.z, p[3] = v.w; }

static void attention_all(const float* in, float* out, int B, int N, int d) {
  const float scale_log2 = LOG2E / std::sqrt((float)d);  // scores in base 2: exp(s) = exp2(s * log2(e))
  const int nblk = (N + BR - 1) / BR;
  const int half = (N / 2 + BC - 1) / BC * BC;  // group 0: keys [0, half), group 1: keys [half, N)
  float* sQ = smem + OFF_Q;
  for (int b = 0; b < B; ++b) {
    const float* Q = in + (size_t)b * 3 * N * d;
    const float* K = in + (size_t)b * 3 * N * d + (size_t)N * d;
    const float* V = in + (size_t)b * 3 * N * d + (size_t)2 * N * d;
    float* O = out + (size_t)b * N * d;
    for (int blk = 0; blk < nblk; ++blk) {
      const int q0 = blk * BR;
      // cooperative float4 load of the Q tile by all the block's threads; rows past N are zeros
      for (int tid = 0; tid < NGROUPS * GT; ++tid)
        for (int idx = tid; idx < BR * d / 4; idx += NGROUPS * GT) {
          const int row = idx / (d / 4), c4 = idx % (d / 4);
          f4 v = {0.f, 0.f, 0.f, 0.f};
          if (q0 + row < N) v = ld4(Q + (size_t)(q0 + row) * d + 4 * c4);
          st4(sQ + row * d + 4 * c4, v);
        }
      for (int g = 0; g < NGROUPS; ++g) {
        const int kbeg = g == 0 ? 0 : half;
        const int kend = g == 0 ? (half < N ? half : N) : N;
        float* sKt = smem + OFF_KT + g * DMAX * KP;
        float* sV = smem + OFF_V + g * BC * DMAX;
        for (int w = 0; w < NWARPS; ++w)
          for (int lane = 0; lane < WARP; ++lane) {
            m_r[g][w][lane] = -INFINITY;
            l_r[g][w][lane] = 0.f;
            for (int c = 0; c < CPL; ++c) acc_r[g][w][lane][c] = 0.f;
          }
        for (int k0 = kbeg; k0 < kend; k0 += BC) {
          // cooperative float4 loads of the K tile (stored transposed: sKt[c][j]) and the V tile
          for (int t = 0; t < GT; ++t)
            for (int idx = t; idx < BC * d / 4; idx += GT) {
              const int j = idx / (d / 4), c4 = idx % (d / 4);
              f4 kv = {0.f, 0.f, 0.f, 0.f}, vv = {0.f, 0.f, 0.f, 0.f};
              if (k0 + j < kend) {
                kv = ld4(K + (size_t)(k0 + j) * d + 4 * c4);
                vv = ld4(V + (size_t)(k0 + j) * d + 4 * c4);
              }
              sKt[(4 * c4 + 0) * KP + j] = kv.x;
              sKt[(4 * c4 + 1) * KP + j] = kv.y;
              sKt[(4 * c4 + 2) * KP + j] = kv.z;
              sKt[(4 * c4 + 3) * KP + j] = kv.w;
              st4(sV + j * d + 4 * c4, vv);
            }
          for (int w = 0; w < NWARPS; ++w) {
            float* sP = smem + OFF_P + (g * NWARPS + w) * RPW * BC;
            // the lane's micro-tile of scores: row w * RPW + ty, keys tx + LPR * t
            float red[WARP], tmp[WARP];
            for (int lane = 0; lane < WARP; ++lane) {
              const int ty = lane / LPR, tx = lane % LPR, row = w * RPW + ty;
              float mt = -INFINITY;
              for (int t = 0; t < KPT; ++t) {
                const int j = tx + LPR * t;
                float dot = 0.f;
                for (int c = 0; c < d; ++c) dot += sQ[row * d + c] * sKt[c * (d + 1) + j];
                const float s = k0 + j < kend ? dot * scale_log2 : -INFINITY;
                s_r[g][w][lane][t] = s;
                mt = std::fmax(mt, s);
              }
              red[lane] = mt;
            }
            // the row's tile max across its LPR lanes (xor butterfly, as __shfl_xor_sync)
            for (int off = LPR / 2; off > 0; off >>= 1) {
              for (int lane = 0; lane < WARP; ++lane) tmp[lane] = std::fmax(red[lane], red[lane ^ off]);
              for (int lane = 0; lane < WARP; ++lane) red[lane] = tmp[lane];
            }
            // online softmax: rescale the lane's partial sum and accumulator, P to shared memory
            for (int lane = 0; lane < WARP; ++lane) {
              const int ty = lane / LPR, tx = lane % LPR;
              const float m_new = std::fmax(m_r[g][w][lane], red[lane]);
              const float alpha = std::exp2(m_r[g][w][lane] - m_new);
              l_r[g][w][lane] *= alpha;
              for (int c = 0; c < CPL; ++c) acc_r[g][w][lane][c] *= alpha;
              for (int t = 0; t < KPT; ++t) {
                const float p = std::exp2(s_r[g][w][lane][t] - m_new);
                l_r[g][w][lane] += p;
                sP[ty * BC + tx + LPR * t] = p;
              }
              m_r[g][w][lane] = m_new;
            }
            // acc += P V: the lane's columns are 4 * tx + 32 * u + e (float4 reads of the V tile)
            for (int lane = 0; lane < WARP; ++lane) {
              const int ty = lane / LPR, tx = lane % LPR;
              for (int j = 0; j < BC; ++j) {
                const float p = sP[ty * BC + j];
                for (int u = 0; u < d / 32; ++u) {
                  const f4 v = ld4(sV + j * d + 4 * tx + 32 * u);
                  float* a = acc_r[g][w][lane] + 4 * u;
                  a[0] += p * v.x, a[1] += p * v.y, a[2] += p * v.z, a[3] += p * v.w;
                }
              }
            }
          }
        }
        // the group's keys done: each row's sum across its LPR lanes, then (m, l, acc) to shared memory
        for (int w = 0; w < NWARPS; ++w) {
          float red[WARP], tmp[WARP];
          for (int lane = 0; lane < WARP; ++lane) red[lane] = l_r[g][w][lane];
          for (int off = 1; off < LPR; off <<= 1) {
            for (int lane = 0; lane < WARP; ++lane) tmp[lane] = red[lane] + red[lane ^ off];
            for (int lane = 0; lane < WARP; ++lane) red[lane] = tmp[lane];
          }
          for (int lane = 0; lane < WARP; ++lane) {
            const int ty = lane / LPR, tx = lane % LPR, row = w * RPW + ty;
            if (tx == 0) {
              smem[OFF_M + g * BR + row] = m_r[g][w][lane];
              smem[OFF_L + g * BR + row] = red[lane];
            }
            for (int u = 0; u < d / 32; ++u)
              st4(smem + OFF_O + (g * BR + row) * DMAX + 4 * tx + 32 * u, ld4(acc_r[g][w][lane] + 4 * u));
          }
        }
      }
      // merge of the two halves (by group 0's lanes) and the output store, float4 at a time
      for (int w = 0; w < NWARPS; ++w)
        for (int lane = 0; lane < WARP; ++lane) {
          const int ty = lane / LPR, tx = lane % LPR, row = w * RPW + ty;
          const float m0 = smem[OFF_M + row], m1 = smem[OFF_M + BR + row];
          const float m = std::fmax(m0, m1);
          const float f0 = std::exp2(m0 - m), f1 = std::exp2(m1 - m);
          const float l = smem[OFF_L + row] * f0 + smem[OFF_L + BR + row] * f1;
          const float inv_l = 1.f / l;
          if (q0 + row >= N) continue;
          for (int u = 0; u < d / 32; ++u) {
            const f4 a = ld4(smem + OFF_O + row * DMAX + 4 * tx + 32 * u);
            const f4 c = ld4(smem + OFF_O + (BR + row) * DMAX + 4 * tx + 32 * u);
            f4 o;
            o.x = (a.x * f0 + c.x * f1) * inv_l;
            o.y = (a.y * f0 + c.y * f1) * inv_l;
            o.z = (a.z * f0 + c.z * f1) * inv_l;
            o.w = (a.w * f0 + c.w * f1) * inv_l;
            st4(O + (size_t)(q0 + row) * d + 4 * (tx + LPR * u), o);
          }
        }
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* in = std::fopen(argv[1], "rb");
  if (!in) return 2;
  int head[3];
  if (std::fread(head, 4, 3, in) != 3) return 2;
  const int B = head[0], N = head[1], d = head[2];
  if (B < 1 || N < 1 || (d != 32 && d != 64)) {
    std::fprintf(stderr, "unsupported shape B=%d N=%d d=%d\n", B, N, d);
    return 2;
  }
  std::vector<float> qkv((size_t)B * 3 * N * d), out((size_t)B * N * d, 0.f);
  if (std::fread(qkv.data(), 4, qkv.size(), in) != qkv.size()) return 2;
  std::fclose(in);
  attention_all(qkv.data(), out.data(), B, N, d);
  FILE* o = std::fopen(argv[2], "wb");
  if (!o) return 2;
  std::fwrite(out.data(), 4, out.size(), o);
  std::fclose(o);
  return 0;
}

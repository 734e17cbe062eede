// Tiled attention on the CPU, FlashAttention style.
// Query rows are processed in tiles of BR, keys/values in tiles of BC.
// Scores are kept in the log2 domain (scale * log2(e) folded in) so exp2f can be used.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int BR = 8;     // query rows per tile
constexpr int BC = 24;    // keys per tile
constexpr int DMAX = 64;  // largest supported head dimension
constexpr float LOG2E = 1.4426950408889634f;

struct Shape {
    int B, N, d;
};

// Computes rows r0 .. r0+BR-1 (clipped to N) of one batch.
void attend_tile(const float* Q, const float* K, const float* V, float* O, int N, int d, int r0) {
    const int rows = std::min(BR, N - r0);
    const float c = LOG2E / std::sqrt(static_cast<float>(d));
    float m[BR];             // running max (log2 domain)
    float l[BR];             // running sum of exp2(s - m)
    float S[BR][BC] = {};    // scores, then probabilities, of the current tile
    float acc[BR][DMAX];     // unnormalised output rows
    for (int i = 0; i < BR; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int k = 0; k < d; ++k) acc[i][k] = 0.0f;
    }
    const int ntiles = (N + BC - 1) / BC;
    for (int t = 0; t < ntiles; ++t) {
        const int c0 = t * BC;
        const int cols = std::min(BC, N - c0);
        for (int i = 0; i < rows; ++i) {
            const float* q = Q + static_cast<size_t>(r0 + i) * d;
            for (int j = 0; j < cols; ++j) {
                const float* kr = K + (c0 + j);
                float s = 0.0f;
                for (int k = 0; k < d; ++k) s += q[k] * kr[static_cast<size_t>(k) * N];
                S[i][j] = s * c;
            }
        }
        for (int i = 0; i < rows; ++i) {
            float tmax = S[i][0];
            for (int j = 1; j < cols; ++j) tmax = std::max(tmax, S[i][j]);
            const float mnew = std::max(m[i], tmax);
            const float alpha = exp2f(m[i] - mnew);
            float psum = 0.0f;
            for (int j = 0; j < cols; ++j) {
                S[i][j] = exp2f(S[i][j] - mnew);
                psum += S[i][j];
            }
            l[i] = l[i] * alpha + psum;
            for (int k = 0; k < d; ++k) acc[i][k] *= alpha;
            for (int j = 0; j < cols; ++j) {
                const float p = S[i][j];
                const float* vr = V + static_cast<size_t>(c0 + j) * d;
                for (int k = 0; k < d; ++k) acc[i][k] += p * vr[k];
            }
            m[i] = mnew;
        }
    }
    for (int i = 0; i < rows; ++i) {
        const float inv = 1.0f / l[i];
        float* o = O + static_cast<size_t>(r0 + i) * d;
        for (int k = 0; k < d; ++k) o[k] = acc[i][k] * inv;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
        return 1;
    }
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) {
        std::perror(argv[1]);
        return 1;
    }
    int32_t hdr[3];
    if (std::fread(hdr, sizeof(int32_t), 3, f) != 3) {
        std::fprintf(stderr, "error: short header\n");
        return 1;
    }
    const Shape sh{hdr[0], hdr[1], hdr[2]};
    if (sh.B < 1 || sh.N < 1 || (sh.d != 32 && sh.d != 64)) {
        std::fprintf(stderr, "error: unsupported shape B=%d N=%d d=%d\n", sh.B, sh.N, sh.d);
        return 1;
    }
    const size_t mat = static_cast<size_t>(sh.N) * sh.d;
    std::vector<float> in(static_cast<size_t>(sh.B) * 3 * mat);
    if (std::fread(in.data(), sizeof(float), in.size(), f) != in.size()) {
        std::fprintf(stderr, "error: short data\n");
        return 1;
    }
    std::fclose(f);

    std::vector<float> out(static_cast<size_t>(sh.B) * mat, 0.0f);
    const int rtiles = (sh.N + BR - 1) / BR;
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int b = 0; b < sh.B; ++b) {
        for (int rt = 0; rt < rtiles; ++rt) {
            const float* qkv = in.data() + static_cast<size_t>(b) * 3 * mat;
            attend_tile(qkv, qkv + mat, qkv + 2 * mat, out.data() + static_cast<size_t>(b) * mat,
                        sh.N, sh.d, rt * BR);
        }
    }

    FILE* g = std::fopen(argv[2], "wb");
    if (!g) {
        std::perror(argv[2]);
        return 1;
    }
    if (std::fwrite(out.data(), sizeof(float), out.size(), g) != out.size()) {
        std::fprintf(stderr, "error: short write\n");
        return 1;
    }
    std::fclose(g);
    return 0;
}

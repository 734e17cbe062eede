// Attention forward pass, FlashAttention-style tiling on the CPU.
// Query tiles of BR = 16 rows, key/value tiles of BC = 32 rows, online softmax.
// Usage: ./prog INPUT OUTPUT
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

static const int BR = 16;
static const int BC = 32;
static const int DMAX = 64;

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
        return 2;
    }
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) { std::perror(argv[1]); return 1; }
    int32_t hdr[3];
    if (std::fread(hdr, sizeof(int32_t), 3, f) != 3) {
        std::fprintf(stderr, "input too short for header\n");
        return 1;
    }
    const long long B = hdr[0], N = hdr[1], d = hdr[2];
    if (B < 1 || N < 1 || (d != 32 && d != 64)) {
        std::fprintf(stderr, "unsupported shape B=%lld N=%lld d=%lld\n", B, N, d);
        return 1;
    }
    const long long count = 3 * B * N * d;
    std::fseek(f, 0, SEEK_END);
    const long long fsize = std::ftell(f);
    if (fsize != 12 + 4 * count) {
        std::fprintf(stderr, "input size %lld, expected %lld\n", fsize, 12 + 4 * count);
        return 1;
    }
    std::fseek(f, 12, SEEK_SET);
    std::vector<float> in(count);
    if ((long long)std::fread(in.data(), sizeof(float), count, f) != count) {
        std::fprintf(stderr, "read failed\n");
        return 1;
    }
    std::fclose(f);

    std::vector<float> out(B * N * d, 0.0f);
    const float scale = 1.0f / std::sqrt((float)d);
    const long long nqt = (N + BR - 1) / BR;
    const long long nkt = (N + BC - 1) / BC;

#pragma omp parallel for schedule(dynamic)
    for (long long job = 0; job < B * nqt; ++job) {
        const long long b = job / nqt;
        const long long qt = job % nqt;
        const float* Q = in.data() + b * 3 * N * d;
        const float* K = Q + N * d;
        const float* V = K + N * d;
        float* O = out.data() + b * N * d;
        const long long r0 = qt * BR;
        const int rows = (int)std::min<long long>(BR, N - r0);

        float m[BR], l[BR], acc[BR][DMAX], s[BR][BC];
        for (int i = 0; i < rows; ++i) {
            m[i] = -INFINITY;
            l[i] = 0.0f;
            for (int k = 0; k < d; ++k) acc[i][k] = 0.0f;
        }

        for (long long kt = 0; kt < nkt; ++kt) {
            const long long c0 = kt * BC;
            const int cols = (int)std::min<long long>(BC, N - c0);
            for (int i = 0; i < rows; ++i) {
                const float* q = Q + (r0 + i) * d;
                float tmax = -INFINITY;
                for (int j = 0; j < cols; ++j) {
                    const float* kr = K + (c0 + j) * d;
                    float dot = 0.0f;
                    for (int k = 0; k < d; ++k) dot += q[k] * kr[k];
                    s[i][j] = dot * scale;
                    tmax = std::max(tmax, s[i][j]);
                }
                const float m_new = std::max(m[i], tmax);
                const float alpha = std::exp(m[i] - m_new);
                float tsum = 0.0f;
                for (int j = 0; j < cols; ++j) {
                    s[i][j] = std::exp(s[i][j] - m_new);
                    tsum += s[i][j];
                }
                l[i] = l[i] * alpha + tsum;
                for (int k = 0; k < d; ++k) {
                    float pv = 0.0f;
                    for (int j = 0; j < cols; ++j) pv += s[i][j] * V[(c0 + j) * d + k];
                    acc[i][k] = acc[i][k] * alpha + pv;
                }
                m[i] = m_new;
            }
        }

        for (int i = 0; i < rows; ++i)
            for (int k = 0; k < d; ++k)
                O[k * N + (r0 + i)] = acc[i][k] / l[i];
    }

    FILE* g = std::fopen(argv[2], "wb");
    if (!g) { std::perror(argv[2]); return 1; }
    if ((long long)std::fwrite(out.data(), sizeof(float), out.size(), g) != (long long)out.size()) {
        std::fprintf(stderr, "write failed\n");
        return 1;
    }
    std::fclose(g);
    return 0;
}

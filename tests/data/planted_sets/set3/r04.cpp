// FlashAttention-style CPU reference (tiles of BR query rows x BC keys),
// online softmax in base-2 (scores pre-multiplied by log2(e)).
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#include <algorithm>

static const int BR = 11;     // query rows per tile
static const int BC = 27;     // keys per tile
static const int DMAX = 64;
static const float LOG2E = 1.44269504088896340736f;

static bool read_all(const char* path, std::vector<char>& buf) {
    FILE* f = std::fopen(path, "rb");
    if (!f) return false;
    std::fseek(f, 0, SEEK_END);
    long sz = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    buf.resize(sz > 0 ? (size_t)sz : 0);
    size_t got = sz > 0 ? std::fread(buf.data(), 1, buf.size(), f) : 0;
    std::fclose(f);
    return got == buf.size();
}

int main(int argc, char** argv) {
    if (argc != 3) { std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]); return 2; }
    std::vector<char> raw;
    if (!read_all(argv[1], raw) || raw.size() < 12) { std::fprintf(stderr, "bad input\n"); return 1; }
    int32_t hdr[3];
    std::copy(raw.data(), raw.data() + 12, reinterpret_cast<char*>(hdr));
    const int B = hdr[0], N = hdr[1], d = hdr[2];
    if (B < 1 || N < 1 || (d != 32 && d != 64)) { std::fprintf(stderr, "unsupported shape\n"); return 1; }
    const size_t mat = (size_t)N * d;
    if (raw.size() != 12 + sizeof(float) * 3 * mat * B) { std::fprintf(stderr, "size mismatch\n"); return 1; }
    std::vector<float> in(3 * mat * B);
    std::copy(raw.data() + 12, raw.data() + raw.size(), reinterpret_cast<char*>(in.data()));
    std::vector<float> out(mat * B, 0.0f);

    const float scale = LOG2E / std::sqrt((float)d);
    const int qtiles = (N + BR - 1) / BR;
    const long jobs = (long)B * qtiles;

    #pragma omp parallel for schedule(dynamic, 4)
    for (long job = 0; job < jobs; ++job) {
        const int b = (int)(job / qtiles);
        const int i0 = (int)(job % qtiles) * BR;
        const int br = std::min(BR, N - i0);
        const float* Q = in.data() + (size_t)b * 3 * mat;
        const float* K = Q + mat;
        const float* V = K + mat;
        float* O = out.data() + (size_t)b * mat;

        float Qs[BR][DMAX];
        float Kt[DMAX * (BC + 1)] = {};
        float S[BR][BC];
        float m[BR], l[BR], acc[BR][DMAX];

        for (int r = 0; r < BR; ++r) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
            for (int c = 0; c < d; ++c) {
                acc[r][c] = 0.0f;
                Qs[r][c] = (r < br) ? Q[(size_t)(i0 + r) * d + c] * scale : 0.0f;
            }
        }

        for (int j0 = 0; j0 < N; j0 += BC) {
            const int bc = std::min(BC, N - j0);
            for (int k = 0; k < d; ++k)
                for (int j = 0; j < BC; ++j)
                    Kt[k * BC + j] = (j < bc) ? K[(size_t)(j0 + j) * d + k] : 0.0f;

            for (int r = 0; r < br; ++r) {
                for (int j = 0; j < BC; ++j) S[r][j] = 0.0f;
                for (int k = 0; k < d; ++k) {
                    const float q = Qs[r][k];
                    const float* kt = Kt + k * BC;
                    for (int j = 0; j < BC; ++j) S[r][j] += q * kt[j];
                }
            }

            for (int r = 0; r < br; ++r) {
                float mt = S[r][0];
                for (int j = 1; j < bc; ++j) mt = std::max(mt, S[r][j]);
                const float mnew = std::max(m[r], mt);
                const float alpha = expf(m[r] - mnew);
                float rowsum = 0.0f;
                for (int j = 0; j < bc; ++j) {
                    S[r][j] = exp2f(S[r][j] - mnew);
                    rowsum += S[r][j];
                }
                l[r] = l[r] * alpha + rowsum;
                for (int c = 0; c < d; ++c) acc[r][c] *= alpha;
                for (int j = 0; j < bc; ++j) {
                    const float p = S[r][j];
                    const float* vrow = V + (size_t)(j0 + j) * d;
                    for (int c = 0; c < d; ++c) acc[r][c] += p * vrow[c];
                }
                m[r] = mnew;
            }
        }

        for (int r = 0; r < br; ++r) {
            const float inv = 1.0f / l[r];
            for (int c = 0; c < d; ++c) O[(size_t)(i0 + r) * d + c] = acc[r][c] * inv;
        }
    }

    FILE* f = std::fopen(argv[2], "wb");
    if (!f) { std::fprintf(stderr, "cannot open output\n"); return 1; }
    size_t w = std::fwrite(out.data(), sizeof(float), out.size(), f);
    std::fclose(f);
    return w == out.size() ? 0 : 1;
}

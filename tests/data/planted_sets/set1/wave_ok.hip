// Attention forward pass on the GPU (HIP), FlashAttention-style.
// One block per (batch, tile of BR = 16 query rows); block of BC x BR = 32 x 16 threads.
// Thread (tx, ty): query row ty of the tile, key tx of the current K/V tile of BC = 32 keys;
// output columns tx and tx + 32 of row ty. Online softmax with warp-shuffle row reductions.
// A row is 32 consecutive lanes; the code works for 32- and 64-lane wavefronts.
// Usage: ./prog INPUT OUTPUT
#include <hip/hip_runtime.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define BR 16
#define BC 32
#define DMAX 64

#define CHECK(call)                                                                  \
    do {                                                                             \
        hipError_t err_ = (call);                                                   \
        if (err_ != hipSuccess) {                                                   \
            std::fprintf(stderr, "HIP error %s at %s:%d\n", hipGetErrorString(err_), \
                         __FILE__, __LINE__);                                        \
            std::exit(1);                                                            \
        }                                                                            \
    } while (0)

__global__ void attention_kernel(const float* __restrict__ in, float* __restrict__ out,
                                 int N, int d, int nqt, float scale) {
    __shared__ float Qs[BR * DMAX];
    __shared__ float Ks[BC * (DMAX + 1)];
    __shared__ float Vs[BC * DMAX];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * BC + tx;
    const long long b = blockIdx.x / nqt;
    const int qt = blockIdx.x % nqt;
    const long long nd = (long long)N * d;
    const float* Q = in + b * 3 * nd;
    const float* K = Q + nd;
    const float* V = K + nd;
    const int r0 = qt * BR;
    const int kp = d + 1;
    const int lane0 = (tid % warpSize) & ~(BC - 1);

    for (int idx = tid; idx < BR * d; idx += BR * BC) {
        const int r = idx / d, c = idx % d;
        Qs[r * d + c] = (r0 + r < N) ? Q[(long long)(r0 + r) * d + c] : 0.0f;
    }

    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    const int nkt = (N + BC - 1) / BC;
    for (int kt = 0; kt < nkt; ++kt) {
        const int c0 = kt * BC;
        __syncthreads();
        for (int idx = tid; idx < BC * d; idx += BR * BC) {
            const int r = idx / d, c = idx % d;
            const bool ok = c0 + r < N;
            Ks[r * kp + c] = ok ? K[(long long)(c0 + r) * d + c] : 0.0f;
            Vs[r * d + c] = ok ? V[(long long)(c0 + r) * d + c] : 0.0f;
        }
        __syncthreads();

        float s = 0.0f;
        for (int k = 0; k < d; ++k) s += Qs[ty * d + k] * Ks[tx * kp + k];
        s = (c0 + tx < N) ? s * scale : -INFINITY;

        float tmax = s;
        for (int off = 16; off > 0; off >>= 1) tmax = fmaxf(tmax, __shfl_xor(tmax, off));
        const float m_new = fmaxf(m, tmax);
        const float alpha = expf(m - m_new);
        const float p = expf(s - m_new);
        float psum = p;
        for (int off = 16; off > 0; off >>= 1) psum += __shfl_xor(psum, off);
        l = l * alpha + psum;

        float pv0 = 0.0f, pv1 = 0.0f;
        for (int j = 0; j < BC; ++j) {
            const float pj = __shfl(p, lane0 + j);
            pv0 += pj * Vs[j * d + tx];
            if (d == 64) pv1 += pj * Vs[j * d + tx + 32];
        }
        acc0 = acc0 * alpha + pv0;
        acc1 = acc1 * alpha + pv1;
        m = m_new;
    }

    if (r0 + ty < N) {
        float* o = out + b * nd + (long long)(r0 + ty) * d;
        o[tx] = acc0 / l;
        if (d == 64) o[tx + 32] = acc1 / l;
    }
}

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
    std::vector<float> h_in(count), h_out(B * N * d);
    if ((long long)std::fread(h_in.data(), sizeof(float), count, f) != count) {
        std::fprintf(stderr, "read failed\n");
        return 1;
    }
    std::fclose(f);

    const long long nqt = (N + BR - 1) / BR;
    if (B * nqt > 2147483647LL) {
        std::fprintf(stderr, "too many blocks\n");
        return 1;
    }
    float *d_in = nullptr, *d_out = nullptr;
    CHECK(hipMalloc(&d_in, count * sizeof(float)));
    CHECK(hipMalloc(&d_out, B * N * d * sizeof(float)));
    CHECK(hipMemcpy(d_in, h_in.data(), count * sizeof(float), hipMemcpyHostToDevice));
    const float scale = 1.0f / std::sqrt((float)d);
    attention_kernel<<<(unsigned)(B * nqt), dim3(BC, BR)>>>(d_in, d_out, (int)N, (int)d, (int)nqt, scale);
    CHECK(hipGetLastError());
    CHECK(hipDeviceSynchronize());
    CHECK(hipMemcpy(h_out.data(), d_out, B * N * d * sizeof(float), hipMemcpyDeviceToHost));
    CHECK(hipFree(d_in));
    CHECK(hipFree(d_out));

    FILE* g = std::fopen(argv[2], "wb");
    if (!g) { std::perror(argv[2]); return 1; }
    if (std::fwrite(h_out.data(), sizeof(float), h_out.size(), g) != h_out.size()) {
        std::fprintf(stderr, "write failed\n");
        return 1;
    }
    std::fclose(g);
    return 0;
}

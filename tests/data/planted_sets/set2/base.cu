// FlashAttention forward pass, fp32, one thread per query row.
// Block: BR threads = BR query rows of one batch. K/V tiles of BC rows staged in shared memory.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

#define CK(call)                                                                  \
    do {                                                                          \
        cudaError_t err_ = (call);                                                \
        if (err_ != cudaSuccess) {                                                \
            std::fprintf(stderr, "CUDA error at %s:%d: %s: %s\n", __FILE__,       \
                         __LINE__, #call, cudaGetErrorString(err_));              \
            std::exit(1);                                                         \
        }                                                                         \
    } while (0)

constexpr int BR = 64;  // query rows per block (one per thread)
constexpr int BC = 32;  // keys per shared-memory tile

template <int D>
__global__ void __launch_bounds__(BR) attn_kernel(const float* __restrict__ in, float* __restrict__ out,
                                                  int N, float qscale) {
    __shared__ float Ks[BC][D + 1];
    __shared__ float Vs[BC][D];
    const int b = blockIdx.y;
    const int row = blockIdx.x * BR + threadIdx.x;
    const size_t mat = static_cast<size_t>(N) * D;
    const float* Q = in + static_cast<size_t>(b) * 3 * mat;
    const float* K = Q + mat;
    const float* V = Q + 2 * mat;
    const bool active = row < N;

    float q[D], acc[D];
#pragma unroll
    for (int k = 0; k < D; ++k) {
        q[k] = active ? Q[static_cast<size_t>(row) * D + k] * qscale : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY;  // running max, log2 domain
    float l = 0.0f;       // running denominator

    for (int c0 = 0; c0 < N; c0 += BC) {
        const int cols = min(BC, N - c0);
        __syncthreads();  // previous tile fully consumed
        for (int idx = threadIdx.x; idx < BC * D; idx += BR) {
            const int j = idx / D, k = idx % D;
            float kv = 0.0f, vv = 0.0f;
            if (j < cols) {
                kv = K[static_cast<size_t>(c0 + j) * D + k];
                vv = V[static_cast<size_t>(c0 + j) * D + k];
            }
            Ks[j][k] = kv;
            Vs[j][k] = vv;
        }
        __syncthreads();

        float s[BC];
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < BC; ++j) {
            if (j < cols) {
                float dot = 0.0f;
#pragma unroll
                for (int k = 0; k < D; ++k) dot = fmaf(q[k], Ks[j][k], dot);
                s[j] = dot;
                tmax = fmaxf(tmax, dot);
            } else {
                s[j] = -INFINITY;
            }
        }
        const float mnew = fmaxf(m, tmax);
        const float alpha = exp2f(m - mnew);
        l *= alpha;
#pragma unroll
        for (int k = 0; k < D; ++k) acc[k] *= alpha;
#pragma unroll
        for (int j = 0; j < BC; ++j) {
            const float p = exp2f(s[j] - mnew);
            l += p;
#pragma unroll
            for (int k = 0; k < D; ++k) acc[k] = fmaf(p, Vs[j][k], acc[k]);
        }
        m = mnew;
    }

    if (active) {
        const float inv = 1.0f / l;
        float* o = out + static_cast<size_t>(b) * mat + static_cast<size_t>(row) * D;
#pragma unroll
        for (int k = 0; k < D; ++k) o[k] = acc[k] * inv;
    }
}

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]);
        return 1;
    }
    FILE* f = std::fopen(argv[1], "rb");
    if (!f) { std::perror(argv[1]); return 1; }
    int32_t hdr[3];
    if (std::fread(hdr, sizeof(int32_t), 3, f) != 3) { std::fprintf(stderr, "error: short header\n"); return 1; }
    const int B = hdr[0], N = hdr[1], d = hdr[2];
    if (B < 1 || N < 1 || (d != 32 && d != 64)) {
        std::fprintf(stderr, "error: unsupported shape B=%d N=%d d=%d\n", B, N, d);
        return 1;
    }
    const size_t mat = static_cast<size_t>(N) * d;
    std::vector<float> h_in(static_cast<size_t>(B) * 3 * mat);
    if (std::fread(h_in.data(), sizeof(float), h_in.size(), f) != h_in.size()) {
        std::fprintf(stderr, "error: short data\n");
        return 1;
    }
    std::fclose(f);
    std::vector<float> h_out(static_cast<size_t>(B) * mat);

    float *d_in = nullptr, *d_out = nullptr;
    CK(cudaMalloc(&d_in, h_in.size() * sizeof(float)));
    CK(cudaMalloc(&d_out, h_out.size() * sizeof(float)));
    CK(cudaMemcpy(d_in, h_in.data(), h_in.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemset(d_out, 0, h_out.size() * sizeof(float)));

    const float qscale = 1.4426950408889634f / std::sqrt(static_cast<float>(d));
    const dim3 grid((N + BR - 1) / BR, B);
    if (d == 32) attn_kernel<32><<<grid, BR>>>(d_in, d_out, N, qscale);
    else         attn_kernel<64><<<grid, BR>>>(d_in, d_out, N, qscale);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h_out.data(), d_out, h_out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaFree(d_in));
    CK(cudaFree(d_out));

    FILE* g = std::fopen(argv[2], "wb");
    if (!g) { std::perror(argv[2]); return 1; }
    if (std::fwrite(h_out.data(), sizeof(float), h_out.size(), g) != h_out.size()) {
        std::fprintf(stderr, "error: short write\n");
        return 1;
    }
    std::fclose(g);
    return 0;
}

// A student's own attention kernel, for the similarity tests (fa class): one thread per query row,
// the online softmax over every key, the output normalized at the end.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void attention_rows(const float *q, const float *k, const float *v, float *o, int n, int d) {
    int batch = blockIdx.y;
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= n) return;
    const float *qb = q + (size_t)batch * n * d, *kb = k + (size_t)batch * n * d, *vb = v + (size_t)batch * n * d;
    float *ob = o + (size_t)batch * n * d;
    float running_max = -FLT_MAX, running_sum = 0.0f;
    float accumulator[64];
    for (int c = 0; c < d; ++c) accumulator[c] = 0.0f;
    float scale = rsqrtf((float)d);
    for (int key = 0; key < n; ++key) {
        float score = 0.0f;
        for (int c = 0; c < d; ++c) score += qb[row * d + c] * kb[key * d + c];
        score *= scale;
        float new_max = fmaxf(running_max, score);
        float correction = expf(running_max - new_max);
        float weight = expf(score - new_max);
        running_sum = running_sum * correction + weight;
        for (int c = 0; c < d; ++c) accumulator[c] = accumulator[c] * correction + weight * vb[key * d + c];
        running_max = new_max;
    }
    for (int c = 0; c < d; ++c) ob[row * d + c] = accumulator[c] / running_sum;
}

static void check(cudaError_t status, const char *what) {
    if (status != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s INPUT OUTPUT\n", argv[0]); return 1; }
    FILE *in = fopen(argv[1], "rb");
    if (!in) { perror(argv[1]); return 1; }
    int header[3];
    if (fread(header, sizeof(int), 3, in) != 3) { fprintf(stderr, "short header\n"); return 1; }
    int batches = header[0], n = header[1], d = header[2];
    size_t each = (size_t)batches * n * d;
    std::vector<float> host_q(each), host_k(each), host_v(each), host_o(each);
    for (int b = 0; b < batches; ++b) {
        size_t at = (size_t)b * n * d;
        if (fread(&host_q[at], sizeof(float), (size_t)n * d, in) != (size_t)n * d ||
            fread(&host_k[at], sizeof(float), (size_t)n * d, in) != (size_t)n * d ||
            fread(&host_v[at], sizeof(float), (size_t)n * d, in) != (size_t)n * d) {
            fprintf(stderr, "short input\n");
            return 1;
        }
    }
    fclose(in);
    float *device_q, *device_k, *device_v, *device_o;
    check(cudaMalloc(&device_q, each * sizeof(float)), "cudaMalloc q");
    check(cudaMalloc(&device_k, each * sizeof(float)), "cudaMalloc k");
    check(cudaMalloc(&device_v, each * sizeof(float)), "cudaMalloc v");
    check(cudaMalloc(&device_o, each * sizeof(float)), "cudaMalloc o");
    check(cudaMemcpy(device_q, host_q.data(), each * sizeof(float), cudaMemcpyHostToDevice), "copy q");
    check(cudaMemcpy(device_k, host_k.data(), each * sizeof(float), cudaMemcpyHostToDevice), "copy k");
    check(cudaMemcpy(device_v, host_v.data(), each * sizeof(float), cudaMemcpyHostToDevice), "copy v");
    dim3 block(128), grid((n + 127) / 128, batches);
    attention_rows<<<grid, block>>>(device_q, device_k, device_v, device_o, n, d);
    check(cudaGetLastError(), "launch");
    check(cudaMemcpy(host_o.data(), device_o, each * sizeof(float), cudaMemcpyDeviceToHost), "copy o");
    FILE *out = fopen(argv[2], "wb");
    if (!out || fwrite(host_o.data(), sizeof(float), each, out) != each) { perror(argv[2]); return 1; }
    fclose(out);
    return 0;
}

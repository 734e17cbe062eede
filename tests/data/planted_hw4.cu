// A student's hw4.cu with one real mistake planted, for the judge's tests on an NVIDIA GPU.
//
//   nvcc -std=c++11 -O3 -arch=sm_90 [-DPLANT=NAME] -o hw4 planted_hw4.cu -lm && ./hw4 INPUT OUTPUT
//
// Right when built plainly. Like many students' programs it checks no CUDA call and always exits
// 0, so a kernel that faults leaves the output as it was allocated: zeros. PLANT=
//   RACE          no __syncthreads between storing a K/V tile in shared memory and reading it
//   MISALIGNED    rows padded by one float (the card's bank-conflict pad) but still stored as
//                 float4: a misaligned shared-memory store, the kernel aborts, the output is zeros
//   INT_SIZE      a scratch of N*N scores sized in an int: 4 GiB wraps to 0 at N = 32768
//   HOST_OVERRUN  the input's byte count taken as a float count: the host copy runs 4x past both
//                 buffers, SIGSEGV
//   JITTER        three blocks add 1/6, 2/6, 3/6 of each output through atomicAdd: the order, and
//                 the last bit, vary run to run (right)
//   BATCH0        every block reads batch 0's Q, K, V (the batch offset left out): wrong the same
//                 way every run, no race
//   UNSYNCED      the kernel on a stream of its own and the output copied back on it into pinned
//                 memory with cudaMemcpyAsync, never waited for: the host prints the input's range
//                 (a debug line, 20 ms of host work) and writes. Right here, where the GPU finishes
//                 first; wrong where the device is slower than that host work
//   EARLY_WRITE   the same without the 20 ms: the host's write races the kernel and its copy, and
//                 mostly wins here (wrong in most runs, not all)
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#define RACE 1
#define MISALIGNED 2
#define INT_SIZE 3
#define HOST_OVERRUN 4
#define JITTER 5
#define BATCH0 6
#define UNSYNCED 7
#define EARLY_WRITE 8
#ifndef PLANT
#define PLANT 0
#endif

const int BR = 64;  // query rows per block: one per thread, two warps
const int BC = 64;  // keys per tile; warp 0 stores rows 0..31 of the tile, warp 1 rows 32..63
const int PAD = PLANT == MISALIGNED ? 1 : 4;  // floats after each shared row; 4 keeps float4 aligned
const int COPIES = PLANT == JITTER ? 3 : 1;   // blocks that compute the same rows
const bool ASYNC = PLANT == UNSYNCED || PLANT == EARLY_WRITE;  // the copy back never waited for

// Block (x, b): batch b, query rows tile * BR .. + BR - 1 (x = tile * COPIES + copy).
// Thread t owns query row tile * BR + t: q and o stay in registers.
template <int D>
__global__ void attention(const float* qkv, float* out, float* scores, int N) {
  __shared__ __align__(16) float Ks[BC][D + PAD];
  __shared__ __align__(16) float Vs[BC][D + PAD];
  const int b = blockIdx.y, t = threadIdx.x, copy = blockIdx.x % COPIES;
  const int row = (blockIdx.x / COPIES) * BR + t;
  const float* Q = qkv + (PLANT == BATCH0 ? 0 : (size_t)b * 3 * N * D);
  const float* K = Q + (size_t)N * D;
  const float* V = K + (size_t)N * D;
  const float scale = 1.0f / sqrtf((float)D);
  float q[D], o[D], m = -INFINITY, l = 0.f;
#pragma unroll
  for (int x = 0; x < D; ++x) {
    q[x] = row < N ? Q[(size_t)row * D + x] * scale : 0.f;
    o[x] = 0.f;
  }

  for (int k0 = 0; k0 < N; k0 += BC) {
    // Tile load: thread t stores key row t of the tile (keys past N as zeros).
    const int key = k0 + t;
#pragma unroll
    for (int x = 0; x < D; x += 4) {
      float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
      if (key < N) {
        kv = *(const float4*)&K[(size_t)key * D + x];
        vv = *(const float4*)&V[(size_t)key * D + x];
      }
      *(float4*)&Ks[t][x] = kv;  // at D + 1 floats a row (MISALIGNED), row t >= 1 is not 16-byte aligned
      *(float4*)&Vs[t][x] = vv;
    }
    // RACE: without this barrier a warp goes on to read rows that the other warp stores. Each warp
    // reads the other warp's half first, so it can read rows that hold the previous tile, or
    // another block's leftovers, because the other warp's global loads have not come back yet.
    if (PLANT != RACE) __syncthreads();
    const int keys = min(BC, N - k0), first = (t / 32 + 1) * 32;  // warp 0: row 32 first; warp 1: row 0
    for (int jj = 0; jj < BC; ++jj) {
      const int j = (first + jj) % BC;
      if (j >= keys) continue;
      float s = 0.f;
#pragma unroll
      for (int x = 0; x < D; ++x) s += q[x] * Ks[j][x];
      // What the student kept "for later": S, stored key-major so that a warp's stores coalesce.
      if (PLANT == INT_SIZE && row < N) scores[(size_t)(k0 + j) * N + row] = s;
      const float m_new = fmaxf(m, s), alpha = __expf(m - m_new), p = __expf(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int x = 0; x < D; ++x) o[x] = o[x] * alpha + p * Vs[j][x];
      m = m_new;
    }
    __syncthreads();  // everyone has read the tile before the next one is stored
  }
  if (row >= N) return;
  float* dst = out + ((size_t)b * N + row) * D;
  const float share = (copy + 1) / 6.0f;  // JITTER: 1/6 + 2/6 + 3/6, added in whatever order
#pragma unroll
  for (int x = 0; x < D; ++x) {
    if (PLANT == JITTER)
      atomicAdd(&dst[x], share * (o[x] / l));
    else
      dst[x] = o[x] / l;
  }
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  // Read the whole file at once, then take the header and the floats out of it.
  FILE* in = fopen(argv[1], "rb");
  if (!in) return 2;
  fseek(in, 0, SEEK_END);
  const long bytes = ftell(in);
  fseek(in, 0, SEEK_SET);
  if (bytes < 12) return 2;
  char* file = (char*)malloc(bytes);
  if (fread(file, 1, bytes, in) != (size_t)bytes) return 2;
  fclose(in);
  int B, N, d;
  memcpy(&B, file, 4);
  memcpy(&N, file + 4, 4);
  memcpy(&d, file + 8, 4);
  const size_t per_batch = (size_t)3 * N * d, values = (size_t)B * N * d;
  float* qkv = (float*)malloc(B * per_batch * sizeof(float));
#if PLANT == HOST_OVERRUN
  // The byte count used as a float count: the copy below reads 4x the payload from `file` and
  // writes 4x into `qkv`, 3x the input (>= 288 KiB at B*N*d = 8192) past both buffers' ends: past
  // the heap's top (not mapped) or, for mmap'ed buffers, into a library's read-only pages: SIGSEGV.
  // AddressSanitizer stops at the first read past `file` (heap-buffer-overflow, on the loop's line).
  const size_t count = bytes - 12;
#else
  const size_t count = (bytes - 12) / sizeof(float);  // floats after the header: B * per_batch
#endif
  const float* payload = (const float*)(file + 12);
  for (size_t i = 0; i < count; ++i) qkv[i] = payload[i];
  free(file);
  float* out = (float*)calloc(values, sizeof(float));

  float *d_qkv, *d_out, *d_scores = NULL;
  cudaMalloc(&d_qkv, B * per_batch * sizeof(float));
  cudaMalloc(&d_out, values * sizeof(float));
  cudaMemset(d_out, 0, values * sizeof(float));
  if (PLANT == INT_SIZE) {
    int size = N * N * sizeof(float);  // one batch's scores, reused by every batch; 2^32 -> 0 at N = 32768
    cudaMalloc(&d_scores, size);
  }
  cudaMemcpy(d_qkv, qkv, B * per_batch * sizeof(float), cudaMemcpyHostToDevice);
  dim3 grid((N + BR - 1) / BR * COPIES, B);
  cudaStream_t stream = 0;
  if (ASYNC) {
    cudaStreamCreate(&stream);
    free(out);
    cudaMallocHost(&out, values * sizeof(float));
  }
  if (d == 32)
    attention<32><<<grid, BR, 0, stream>>>(d_qkv, d_out, d_scores, N);
  else
    attention<64><<<grid, BR, 0, stream>>>(d_qkv, d_out, d_scores, N);
  if (ASYNC) {
    cudaMemcpyAsync(out, d_out, values * sizeof(float), cudaMemcpyDeviceToHost, stream);
    double lo = qkv[0], hi = qkv[0];  // the input's range, a debug line: host work while the device runs
    for (size_t i = 0; i < B * per_batch; ++i) lo = fmin(lo, qkv[i]), hi = fmax(hi, qkv[i]);
    fprintf(stderr, "input values in [%g, %g]\n", lo, hi);
    if (PLANT == UNSYNCED) usleep(20000);  // 20 ms more of it (a sleep stands for it): the GPU finishes first
  } else {
    cudaMemcpy(out, d_out, values * sizeof(float), cudaMemcpyDeviceToHost);
  }

  FILE* f = fopen(argv[2], "wb");
  fwrite(out, sizeof(float), values, f);
  fclose(f);
  free(qkv);
  if (ASYNC)
    cudaFreeHost(out);
  else
    free(out);
  cudaFree(d_qkv);
  cudaFree(d_out);
  cudaFree(d_scores);
  return 0;
}

// fa-cpu: FlashAttention forward on the CPU, the same contract as the course's hw4.
//
//   fa-cpu INPUT OUTPUT        O_b = softmax(Q_b K_b^T / sqrt(d)) V_b for every batch b
//
// The reference program for machines without a GPU, and the algorithm of the GPU kernels in
// plain C++: the query rows of a batch are cut into tiles of kBr rows; each tile walks the
// keys in tiles of kBc, keeping a running row max m, a running sum l and an output
// accumulator, rescaled whenever the max grows (online softmax). Memory is O(tile), never
// O(N^2). OpenMP spreads the (batch, query tile) pairs of a chunk of batches over the cores;
// chunks of about kChunkBytes are read, computed and written in turn, so any B fits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "../src_common/online_softmax.h"
#include "../src_common/host/input.h"
#include "../src_common/host/output.h"
#include "../src_common/host/program.h"
#include "../src_common/host/settings.h"
#include "../src_common/host/timing.h"

namespace {

constexpr int kBr = 32;                       // query rows per tile
constexpr int kBc = 64;                       // keys per tile
constexpr int64_t kChunkBytes = 64ll << 20;  // input bytes read per chunk (at least one batch)

struct ExpE {  // the online softmax's exponential here: scores in base e
  float operator()(float x) const { return std::exp(x); }
};

// One query tile [r0, r0 + rows) of one batch against all N keys.
template <int D>
void attention_tile(const float* q, const float* k, const float* v, float* o, int64_t N, int64_t r0, int rows) {
  const float scale = 1.0f / std::sqrt((float)D);
  float m[kBr], l[kBr], acc[kBr][D], s[kBr][kBc], kt[D][kBc];
  for (int i = 0; i < rows; ++i) {
    m[i] = -INFINITY, l[i] = 0.f;
    std::fill(acc[i], acc[i] + D, 0.f);
  }
  for (int64_t c0 = 0; c0 < N; c0 += kBc) {
    const int cols = (int)std::min<int64_t>(kBc, N - c0);
    // K tile transposed, so the score loop below runs along keys (vectorisable, no reassociation).
    for (int j = 0; j < kBc; ++j)
      for (int x = 0; x < D; ++x) kt[x][j] = j < cols ? k[(c0 + j) * D + x] : 0.f;
    for (int i = 0; i < rows; ++i) {
      const float* qi = q + (r0 + i) * D;
      float* si = s[i];
      std::fill(si, si + kBc, 0.f);
      for (int x = 0; x < D; ++x) {
        const float qx = qi[x] * scale;
        for (int j = 0; j < kBc; ++j) si[j] += qx * kt[x][j];
      }
      // Online softmax: new max, rescale what was accumulated, add this tile.
      float tile_max = -INFINITY;
      for (int j = 0; j < cols; ++j) tile_max = std::max(tile_max, si[j]);
      const float alpha = fa::online_rescale<ExpE>(m[i], l[i], tile_max);
      float sum = 0.f;
      for (int j = 0; j < cols; ++j) sum += (si[j] = std::exp(si[j] - m[i]));
      l[i] += sum;
      float* ai = acc[i];
      for (int x = 0; x < D; ++x) ai[x] *= alpha;
      for (int j = 0; j < cols; ++j) {
        const float p = si[j];
        const float* vj = v + (c0 + j) * D;
        for (int x = 0; x < D; ++x) ai[x] += p * vj[x];
      }
    }
  }
  for (int i = 0; i < rows; ++i)
    for (int x = 0; x < D; ++x) o[(r0 + i) * D + x] = acc[i][x] / l[i];
}

template <int D>
void attention_chunk(const float* qkv, float* out, int64_t batches, int64_t N) {
  const int64_t tiles = (N + kBr - 1) / kBr;
  const int64_t batch = N * D;
#pragma omp parallel for schedule(dynamic)
  for (int64_t work = 0; work < batches * tiles; ++work) {
    const int64_t b = work / tiles, r0 = (work % tiles) * kBr;
    const float* q = qkv + b * 3 * batch;
    attention_tile<D>(q, q + batch, q + 2 * batch, out + b * batch, N, r0, (int)std::min<int64_t>(kBr, N - r0));
  }
}

}  // namespace

int main(int argc, char** argv) {
  fa::name_program(argv);
  if (argc == 2 && std::strcmp(argv[1], "--settings") == 0) {
    fa::print_settings();
    return 0;
  }
  fa::check_usage(argc, "--settings");
  const double start = fa::now_seconds();
  fa::settings();  // read once, at start: a bad value is an error before any work
  fa::Timing timing;
  timing.device = "host CPU";
  const fa::InputFile in = fa::open_input(argv[1]);
  const fa::Shape s = in.shape;
  fa::OutputFile out(argv[2], in);

  const int64_t batch_bytes = 12 * s.batch_elements();
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(s.B, kChunkBytes / batch_bytes));
  std::vector<float> qkv, o;
  try {
    qkv.resize((size_t)(chunk * 3 * s.batch_elements()));
    o.resize((size_t)(chunk * s.batch_elements()));
  } catch (const std::bad_alloc&) {
    fa::fail(fa::kExitFailure, "cannot allocate %lld bytes of host memory for a chunk of batches",
             (long long)(chunk * batch_bytes * 4 / 3));
  }
  for (int64_t b0 = 0; b0 < s.B; b0 += chunk) {
    const int64_t n = std::min(chunk, s.B - b0);
    double t = fa::now_seconds();
    fa::read_exact(in.fd, qkv.data(), n * batch_bytes, fa::batch_offset(s, b0), argv[1]);
    timing.read += fa::now_seconds() - t;
    t = fa::now_seconds();
    if (s.d == 32)
      attention_chunk<32>(qkv.data(), o.data(), n, s.N);
    else
      attention_chunk<64>(qkv.data(), o.data(), n, s.N);
    timing.kernel += fa::now_seconds() - t;
    t = fa::now_seconds();
    out.write(o.data(), n * s.batch_elements() * 4);
    timing.write += fa::now_seconds() - t;
  }
  out.commit();
  timing.total = fa::now_seconds() - start;
  timing.print_if_asked();
  return 0;
}

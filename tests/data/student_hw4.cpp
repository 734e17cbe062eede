// A student's hw4 on the CPU, for the judge's tests: right when built plainly, and wrong in one
// of the usual ways when built with -DMISTAKE=NAME (see the switch below). It computes as a GPU
// kernel would: each query row walks the keys in tiles of BC with an online softmax.
//
//   g++ -O2 -DMISTAKE=NO_SCALE -o hw4 student_hw4.cpp && ./hw4 INPUT OUTPUT
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <unistd.h>
#include <vector>

#define NONE 0
#define NO_SCALE 1
#define ONE_OVER_D 2
#define NO_MAX 3
#define NOT_NORMALIZED 4
#define LAST_TILE_SUM 5
#define FIRST_TILE_ONLY 6
#define GRID_TOO_SMALL 7
#define PREVIOUS_BATCH 8
#define TRANSPOSED 9
#define QK_SWAPPED 10
#define V_AS_O 11
#define ZEROS 12
#define NOISE 13
#define SEGFAULT 14
#define SHORT_OUTPUT 15
#define SCATTERED 16      // 50 values off by 0.25, the same ones every run
#define FLAKY 17          // values off by 0.25 at places that change from run to run (a race's footprint)
#define JITTER 18         // values off by about 1e-6 that change from run to run (atomics' order): right
#define HOST_OVERRUN 19   // the output staged in a buffer of one batch: a host buffer overrun (SIGSEGV
                          // where it runs past the heap, as from 64x128x32 on)
#define TIMES_SQRT_D 20   // scores multiplied by sqrt(d)
#define BATCH_ZERO 21     // every batch computed from batch 0's Q, K, V (a missing batch offset)
#define FIRST_BATCH_ONLY 22  // a bound of N rows for B*N: batches after the first left zero
#define QUERY_AXIS 23     // softmax normalized over the queries (each column of S)
#define HARD_D 24         // the head dimension hard-coded as D (-DD=64), the header's d ignored
#define DROP_LAST_TILE 25 // N / BC key tiles: the last, partial one dropped
#define SKIP_LAST_KEY 26  // the key loop stops at N - 1
#define K_TRANSPOSED 27   // K read as d x N: k[x * N + j]
#define V_TRANSPOSED 28   // V read as d x N: v[x * N + j]
#define TILE_FIRST_ROW 29 // every row of a query tile of BR gets the tile's first row's result
#define OMP_RACE 30       // OpenMP threads share the running max and sum: a real race (needs -fopenmp)
#define FLAKY_QUARTER 31  // one run in four (at random) writes 50 values off by 0.25: a failure that comes and goes
#define THREAD_SEGV 32    // a worker thread (std::thread) writes through a null pointer: SIGSEGV in that thread
#define MAIN_SEGV 33      // the main thread writes through a null pointer while a worker thread runs
#define ZEROS_THEN_SEGV 34  // all zeros where N <= 128; a write through a null pointer (SIGSEGV) beyond
#define KEYS_CAPPED 35    // at most 256 keys a row (a fixed-size buffer of scores): right up to N = 256
#define AS_DOUBLE 36      // the output written as float64: 8 bytes a value, right in double
#define BATCH_TIMES4 37   // batch b's output written at batch 4b's place (a byte offset on a float pointer)
#define STATE_CARRIED 38  // m, l and the accumulator carried from row i - BR into row i (not reset per query tile)
#define ALPHA_AFTER_MAX 39  // alpha from the max already updated: exp(m_new - m_new) = 1, acc and l never rescaled
#define SUM_NOT_RESCALED 40  // l = l + sum where l * alpha + sum belongs (acc rescaled right)
#define WRITE_COUNT 41    // fwrite's item count checked against the float count: every value written, exit 2
#ifndef MISTAKE
#define MISTAKE NONE
#endif

// The tile sizes, replaced by -DBC=... and -DBR=... (fa sweep --program hw4.cpp --param BC=16,32).
#ifndef BC
#define BC 32  // keys per tile
#endif
#ifndef BR
#define BR 16  // query rows per block: the grid mistake drops the last partial block
#endif
#ifndef D
#define D 64  // HARD_D's head dimension
#endif

// O (N x d) of one batch.
static void attention(const float* q, const float* k, const float* v, float* o, int N, int d) {
  float scale = 1.0f / std::sqrt((float)d);
  if (MISTAKE == NO_SCALE) scale = 1.0f;
  if (MISTAKE == ONE_OVER_D) scale = 1.0f / d;
  if (MISTAKE == TIMES_SQRT_D) scale = std::sqrt((float)d);
  if (MISTAKE == QK_SWAPPED) std::swap(q, k);
  int rows = N, keys = N;
  if (MISTAKE == GRID_TOO_SMALL) rows = N / BR * BR;
  if (MISTAKE == DROP_LAST_TILE) keys = N / BC * BC;
  if (MISTAKE == SKIP_LAST_KEY) keys = N - 1;
  if (MISTAKE == KEYS_CAPPED && keys > 256) keys = 256;
  std::vector<float> acc(d), s(BC), carried_m(BR), carried_l(BR), carried_acc((size_t)BR * d);
  for (int i = 0; i < rows; ++i) {
    float m = -INFINITY, l = 0.f;
    const int qi = MISTAKE == TILE_FIRST_ROW ? i / BR * BR : i;  // the query row this row computes
    for (int x = 0; x < d; ++x) acc[x] = 0.f;
    if (MISTAKE == STATE_CARRIED && i >= BR) {  // a thread's state from its row of the query tile before
      m = carried_m[i % BR], l = carried_l[i % BR];
      for (int x = 0; x < d; ++x) acc[x] = carried_acc[(i % BR) * d + x];
    }
    for (int j0 = 0; j0 < keys; j0 += BC) {
      if (MISTAKE == FIRST_TILE_ONLY && j0 > 0) break;
      const int cols = keys - j0 < BC ? keys - j0 : BC;
      float m_new = m;
      for (int j = 0; j < cols; ++j) {
        float dot = 0.f;
        for (int x = 0; x < d; ++x)
          dot += q[qi * d + x] * (MISTAKE == K_TRANSPOSED ? k[x * N + j0 + j] : k[(j0 + j) * d + x]);
        s[j] = dot * scale;
        if (s[j] > m_new) m_new = s[j];
      }
      if (MISTAKE == NO_MAX) m_new = 0.f;
      const float alpha = MISTAKE == ALPHA_AFTER_MAX ? 1.f : std::exp(m - m_new);
      float sum = 0.f;
      for (int j = 0; j < cols; ++j) sum += (s[j] = std::exp(s[j] - m_new));
      l = MISTAKE == LAST_TILE_SUM ? sum : MISTAKE == SUM_NOT_RESCALED ? l + sum : l * alpha + sum;
      for (int x = 0; x < d; ++x) {
        float a = acc[x] * alpha;
        for (int j = 0; j < cols; ++j) a += s[j] * (MISTAKE == V_TRANSPOSED ? v[x * N + j0 + j] : v[(j0 + j) * d + x]);
        acc[x] = a;
      }
      m = m_new;
    }
    carried_m[i % BR] = m, carried_l[i % BR] = l;
    for (int x = 0; x < d; ++x) carried_acc[(i % BR) * d + x] = acc[x];
    for (int x = 0; x < d; ++x) {
      float value = MISTAKE == NOT_NORMALIZED ? acc[x] : acc[x] / l;
      if (MISTAKE == V_AS_O) value = v[i * d + x];
      if (MISTAKE == ZEROS || (MISTAKE == ZEROS_THEN_SEGV && N <= 128)) value = 0.f;
      if (MISTAKE == NOISE && i % 7 == 3) value += 0.01f * (x + 1);
      if (MISTAKE == TRANSPOSED)
        o[x * N + i] = value;
      else
        o[i * d + x] = value;
    }
  }
}

// O (N x d) of one batch, softmax over the queries: each key's column of S normalized over the rows.
static void attention_over_queries(const float* q, const float* k, const float* v, float* o, int N, int d) {
  const float scale = 1.0f / std::sqrt((float)d);
  std::vector<float> S((size_t)N * N), top(N, -INFINITY), total(N, 0.f);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) {
      float dot = 0.f;
      for (int x = 0; x < d; ++x) dot += q[i * d + x] * k[j * d + x];
      S[(size_t)i * N + j] = dot * scale;
      top[j] = std::fmax(top[j], dot * scale);
    }
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) total[j] += std::exp(S[(size_t)i * N + j] - top[j]);
  for (int i = 0; i < N; ++i)
    for (int x = 0; x < d; ++x) {
      float a = 0.f;
      for (int j = 0; j < N; ++j) a += std::exp(S[(size_t)i * N + j] - top[j]) / total[j] * v[j * d + x];
      o[i * d + x] = a;
    }
}

// O (N x d) of one batch on OpenMP threads, the running max m and sum l shared by all of them.
static void attention_shared_max(const float* q, const float* k, const float* v, float* o, int N, int d) {
  const float scale = 1.0f / std::sqrt((float)d);
  float m, l;  // the mistake: declared outside the parallel loop, so every thread updates the same two
#pragma omp parallel for
  for (int i = 0; i < N; ++i) {
    std::vector<float> acc(d, 0.f);
    m = -INFINITY;
    l = 0.f;
    for (int j = 0; j < N; ++j) {
      float dot = 0.f;
      for (int x = 0; x < d; ++x) dot += q[i * d + x] * k[j * d + x];
      const float s = dot * scale, m_new = std::fmax(m, s), alpha = std::exp(m - m_new), p = std::exp(s - m_new);
      l = l * alpha + p;
      for (int x = 0; x < d; ++x) acc[x] = acc[x] * alpha + p * v[j * d + x];
      m = m_new;
    }
    for (int x = 0; x < d; ++x) o[i * d + x] = acc[x] / l;
  }
}

static void crash() {
  volatile float* nowhere = nullptr;
  *nowhere = 1.f;  // SIGSEGV
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* in = std::fopen(argv[1], "rb");
  if (!in) return 2;
  int head[3];
  if (std::fread(head, 4, 3, in) != 3) return 2;
  const int B = head[0], N = head[1], d = MISTAKE == HARD_D ? D : head[2];
  std::vector<float> qkv((size_t)3 * N * d), first((size_t)3 * N * d), out((size_t)B * N * d, 0.f);
  for (int b = 0; b < B; ++b) {
    // HARD_D reads D columns whatever the file holds: past its end, what is left of the buffer
    const size_t got = std::fread(qkv.data(), 4, qkv.size(), in);
    if (got != qkv.size() && MISTAKE != HARD_D) return 2;
    if (b == 0) first = qkv;
    const float* data = MISTAKE == BATCH_ZERO ? first.data() : qkv.data();
    const int target = MISTAKE == PREVIOUS_BATCH ? b + 1 : b;  // an off-by-one batch offset
    float* o = out.data() + (size_t)target * N * d;
    if (target >= B || (MISTAKE == FIRST_BATCH_ONLY && b > 0)) continue;
    if (MISTAKE == QUERY_AXIS)
      attention_over_queries(data, data + (size_t)N * d, data + (size_t)2 * N * d, o, N, d);
    else if (MISTAKE == OMP_RACE)
      attention_shared_max(data, data + (size_t)N * d, data + (size_t)2 * N * d, o, N, d);
    else
      attention(data, data + (size_t)N * d, data + (size_t)2 * N * d, o, N, d);
  }
  std::fclose(in);
  if (MISTAKE == SEGFAULT) std::raise(SIGSEGV);
  if (MISTAKE == ZEROS_THEN_SEGV && N > 128) crash();
  if (MISTAKE == THREAD_SEGV) {
    std::thread worker(crash);
    worker.join();
  }
  if (MISTAKE == MAIN_SEGV) {
    std::thread worker([] { std::this_thread::sleep_for(std::chrono::seconds(5)); });
    crash();
    worker.join();
  }
  if (MISTAKE == BATCH_TIMES4) {  // slots past B dropped; the others left as allocated (zeros)
    std::vector<float> moved(out.size(), 0.0f);
    for (int b = 0; 4 * b < B; ++b)
      std::memcpy(moved.data() + (size_t)4 * b * N * d, out.data() + (size_t)b * N * d, (size_t)N * d * 4);
    out.swap(moved);
  }
  const size_t n = out.size();
  if (MISTAKE == SCATTERED)
    for (size_t k = 0; k < 50; ++k) out[(k * 7919 + 13) % n] += 0.25f;
  if (MISTAKE == FLAKY || MISTAKE == JITTER || MISTAKE == FLAKY_QUARTER) {
    std::srand((unsigned)std::time(nullptr) ^ ((unsigned)getpid() << 8));
    const bool spoil = MISTAKE != FLAKY_QUARTER || std::rand() % 4 == 0;
    // 50 distinct places from a random start, so no value is spoiled twice (off by 0.25 exactly)
    const size_t start = (size_t)std::rand() % n;
    for (size_t k = 0; spoil && k < 50; ++k) out[(start + k * 5003) % n] += MISTAKE == JITTER ? 1e-6f : 0.25f;
  }
  FILE* o = std::fopen(argv[2], "wb");
  const size_t values = MISTAKE == SHORT_OUTPUT ? out.size() / 2 + 100 : out.size();
  float* staged = out.data();
  if (MISTAKE == HOST_OVERRUN) {  // sized for one batch, filled with all of them
    staged = (float*)std::malloc((size_t)N * d * sizeof(float));
    for (int b = 0; b < B; ++b) std::memcpy(staged + (size_t)b * N * d, out.data() + (size_t)b * N * d, (size_t)N * d * 4);
  }
  if (MISTAKE == AS_DOUBLE) {
    std::vector<double> wide(staged, staged + values);
    std::fwrite(wide.data(), 8, values, o);
  } else if (MISTAKE == WRITE_COUNT) {  // rows of d floats written: fwrite returns B*N, not B*N*d
    if (std::fwrite(staged, sizeof(float) * d, (size_t)B * N, o) != values) {
      std::fprintf(stderr, "hw4: %s: write failed\n", argv[2]);
      std::exit(2);
    }
  } else {
    std::fwrite(staged, 4, values, o);
  }
  std::fclose(o);
  return 0;
}

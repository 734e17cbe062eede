// A planted program for fa's tests: tiles of BC keys with no mask in the last, partial tile. Keys
// N .. ceil(N / BC) * BC - 1 are scored too: their K rows are the floats after K (V's first rows),
// their V rows the floats after V (the next batch's Q rows; past the last batch, memory that other
// blocks write on a GPU, here drawn anew at every run). Right wherever N is a multiple of BC.
//   g++ -O2 -o hw4 unmasked_tile.cpp && ./hw4 INPUT OUTPUT
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>
#include <unistd.h>

const int BC = 32;

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* in = std::fopen(argv[1], "rb");
  if (!in) return 2;
  int head[3];
  if (std::fread(head, 4, 3, in) != 3) return 2;
  const int B = head[0], N = head[1], d = head[2];
  const size_t payload = (size_t)3 * B * N * d;
  std::vector<float> mem(payload + (size_t)BC * d);  // the input, then what lies after it
  if (std::fread(mem.data(), 4, payload, in) != payload) return 2;
  std::fclose(in);
  std::mt19937 draw((unsigned)std::time(nullptr) ^ ((unsigned)getpid() << 8));
  for (size_t i = payload; i < mem.size(); ++i) mem[i] = (float)(draw() % 6001) / 1000.f - 3.f;
  std::vector<float> out((size_t)B * N * d), o(d);
  const float scale = 1.0f / std::sqrt((float)d);
  for (int b = 0; b < B; ++b) {
    const float* q = mem.data() + (size_t)b * 3 * N * d;
    const float* k = q + (size_t)N * d;
    const float* v = k + (size_t)N * d;
    for (int i = 0; i < N; ++i) {
      float m = -INFINITY, l = 0.f;
      for (int x = 0; x < d; ++x) o[x] = 0.f;
      for (int j0 = 0; j0 < N; j0 += BC)
        for (int j = j0; j < j0 + BC; ++j) {  // the mistake: j < N is never checked
          float s = 0.f;
          for (int x = 0; x < d; ++x) s += q[(size_t)i * d + x] * k[(size_t)j * d + x];
          s *= scale;
          const float m_new = std::fmax(m, s), alpha = std::exp(m - m_new), p = std::exp(s - m_new);
          l = l * alpha + p;
          for (int x = 0; x < d; ++x) o[x] = o[x] * alpha + p * v[(size_t)j * d + x];
          m = m_new;
        }
      for (int x = 0; x < d; ++x) out[((size_t)b * N + i) * d + x] = o[x] / l;
    }
  }
  FILE* f = std::fopen(argv[2], "wb");
  if (!f || std::fwrite(out.data(), 4, out.size(), f) != out.size()) return 1;
  std::fclose(f);
  return 0;
}

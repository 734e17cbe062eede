/* Attention as one thread of a row computes it, its scores' dot product summed in half precision
 * (_Float16), dim after dim, q scaled first: fused (q and k rounded, each multiply-add rounded once,
 * as __hfma does) or not (each float product rounded, then added in half); fused = 2: even and odd
 * dims summed apart in a pair's two halves, added in float at the end, as __hfma2 does. The rest in
 * float: a student's __half score on the CPU. Built as a shared library by tests/test_precision.py. */
#include <math.h>

void attend(const float* q, const float* k, const float* v, float* out, int B, int N, int d, int fused) {
  const float scale = 1.0f / sqrtf((float)d);
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < N; ++i) {
      const float* qi = q + ((long)b * N + i) * d;
      float m = -INFINITY, l = 0, o[256] = {0};
      for (int j = 0; j < N; ++j) {
        const float* kj = k + ((long)b * N + j) * d;
        const float* vj = v + ((long)b * N + j) * d;
        _Float16 h[2] = {0, 0};
        for (int x = 0; x < d; ++x) {
          _Float16* acc = &h[fused == 2 ? x % 2 : 0];
          if (fused)
            *acc = (_Float16)((double)(_Float16)(qi[x] * scale) * (double)(_Float16)kj[x] + (double)*acc);
          else
            *acc = *acc + (_Float16)(qi[x] * scale * kj[x]);
        }
        const float s = (float)h[0] + (float)h[1], m_new = fmaxf(m, s), alpha = expf(m - m_new), p = expf(s - m_new);
        l = l * alpha + p;
        for (int x = 0; x < d; ++x) o[x] = o[x] * alpha + p * vj[x];
        m = m_new;
      }
      for (int x = 0; x < d; ++x) out[((long)b * N + i) * d + x] = o[x] / l;
    }
  }
}

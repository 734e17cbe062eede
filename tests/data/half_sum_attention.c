/* Attention as one thread of a row computes it, key after key, with the online softmax's running
 * sum l kept in half precision (_Float16): a student's __half l on the CPU. Built as a shared
 * library by tests/test_precision.py. */
#include <math.h>

void attend(const float* q, const float* k, const float* v, float* out, int B, int N, int d) {
  const float scale = 1.0f / sqrtf((float)d);
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < N; ++i) {
      const float* qi = q + ((long)b * N + i) * d;
      float m = -INFINITY, o[256] = {0};
      _Float16 l = 0;
      for (int j = 0; j < N; ++j) {
        const float* kj = k + ((long)b * N + j) * d;
        const float* vj = v + ((long)b * N + j) * d;
        float s = 0;
        for (int x = 0; x < d; ++x) s += qi[x] * kj[x] * scale;
        const float m_new = fmaxf(m, s), alpha = expf(m - m_new), p = expf(s - m_new);
        l = (_Float16)((float)l * alpha + p);
        for (int x = 0; x < d; ++x) o[x] = o[x] * alpha + p * vj[x];
        m = m_new;
      }
      for (int x = 0; x < d; ++x) out[((long)b * N + i) * d + x] = o[x] / (float)l;
    }
  }
}

// The float32 softmax fast path. This file is compiled with -fno-trapping-math and
// -fassociative-math (see CMakeLists.txt) so its loops vectorise: selects become blends and the
// max/sum reductions may be reordered. NaN and inf keep their meaning (no finite-math
// assumption), and the code handles them explicitly.
#include "cpu/softmax_f32.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace opforge::cpu {

namespace {

// exp(x) for x <= 0 within ~2 ulp (Cephes' expf): branch-free so the loop vectorises. Below
// -87.3 (where exp leaves the normal floats) it is 0, so a masked logit (-1e4, the float
// minimum, or a difference that overflowed to -inf) gets no probability at all; a NaN stays NaN.
inline float exp_nonpositive(float x) {
  const bool underflows = x < -87.3f;
  x = underflows ? -87.3f : x;
  // floor() by truncation, corrected for negatives: no library call, so the loop stays vectorised.
  const float v = x * 1.44269504f + 0.5f;
  float n = static_cast<float>(static_cast<int32_t>(v));
  n = n > v ? n - 1.0f : n;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += static_cast<uint32_t>(static_cast<int32_t>(n)) << 23;  // times 2^n
  std::memcpy(&p, &bits, sizeof p);
  return underflows ? 0.0f : p;
}

}  // namespace

// Contiguous float32 rows along the last dim: the common case, kept in float with a float64 sum.
void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t len) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * len;
    float* out = y + r * len;
    // NaN is skipped here; it reaches every output through exp and the sum instead.
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < len; ++i) max = in[i] > max ? in[i] : max;
    if (max == -std::numeric_limits<float>::infinity()) {
      // Nothing but -inf (or NaN): NaN throughout, as PyTorch.
      std::fill(out, out + len, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    for (int64_t i = 0; i < len; ++i) {
      const float e = exp_nonpositive(in[i] - max);
      out[i] = in[i] == -std::numeric_limits<float>::infinity() ? 0.0f : e;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < len; ++i) sum += out[i];
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < len; ++i) out[i] *= inv;
  }
}

}  // namespace opforge::cpu

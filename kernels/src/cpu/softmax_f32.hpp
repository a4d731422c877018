// Softmax over contiguous float32 rows (the common case), kept in float with a float64 sum.
#pragma once

#include <cstdint>

namespace opforge::cpu {

// y[r, :] = softmax(x[r, :]) for `rows` contiguous rows of `len` floats. A row holding a NaN, or
// only -inf, becomes NaN; -inf entries give exact zeros.
void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t len);

}  // namespace opforge::cpu

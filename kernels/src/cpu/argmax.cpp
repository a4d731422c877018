#include <cmath>

#include "backends.hpp"
#include "common/views.hpp"
#include "cpu/dispatch.hpp"

namespace opforge::cpu {
namespace {

void argmax_along(const Tensor& x, int dim, Tensor& out) {
  const int64_t len = x.shape[dim];
  const int64_t sx = x.strides[dim];
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    int64_t* po = out.ptr<int64_t>();
    for_each_index<2>(x.shape, dim, {&x.strides, &out.strides}, [&](const auto& o) {
      int64_t best = 0;
      float best_value = to_float(px[o[0]]);
      for (int64_t i = 1; i < len && !std::isnan(best_value); ++i) {
        const float v = to_float(px[o[0] + i * sx]);
        // Strictly greater keeps the first of equal values; the first NaN wins and ends the scan.
        if (std::isnan(v) || v > best_value) {
          best = i;
          best_value = v;
        }
      }
      po[o[1]] = best;
    });
  });
}

// The index into x flattened in row-major order; out holds one element.
void argmax_flat(const Tensor& x, Tensor& out) {
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    int64_t index = 0, best = 0;
    float best_value = 0.0f;
    for_each_index<1>(x.shape, -1, {&x.strides}, [&](const auto& o) {
      const float v = to_float(px[o[0]]);
      if (index == 0 || (!std::isnan(best_value) && (std::isnan(v) || v > best_value))) {
        best = index;
        best_value = v;
      }
      ++index;
    });
    out.ptr<int64_t>()[0] = best;
  });
}

}  // namespace

opforge_status argmax(const ops::Argmax& args) {
  if (!args.dim) {
    argmax_flat(*args.x, *args.out);
    return OPFORGE_OK;
  }
  const Tensor x = scalar_as_vector(*args.x);
  const int dim = static_cast<int>(*args.dim);
  Tensor out = with_reduced_dim(*args.out, x, dim);
  argmax_along(x, dim, out);
  return OPFORGE_OK;
}

}  // namespace opforge::cpu

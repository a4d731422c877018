#include <vector>

#include "backends.hpp"

namespace opforge::cpu {

void add(const Tensor& a, const Tensor& b, double alpha, Tensor& out) {
  const float alpha_f = static_cast<float>(alpha);
  auto* pa = reinterpret_cast<const float*>(a.data);
  auto* pb = reinterpret_cast<const float*>(b.data);
  auto* po = reinterpret_cast<float*>(out.data);
  const int64_t n = out.numel();
  if (n == 0) return;
  if (a.contiguous() && b.contiguous() && out.contiguous()) {
    for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + alpha_f * pb[i];
    return;
  }
  // Strided: walk a multi-index over the shape, keeping one element offset per tensor.
  const size_t nd = out.shape.size();
  std::vector<int64_t> index(nd, 0);
  int64_t oa = 0, ob = 0, oo = 0;
  for (int64_t i = 0; i < n; ++i) {
    po[oo] = pa[oa] + alpha_f * pb[ob];
    for (size_t d = nd; d-- > 0;) {
      if (++index[d] < out.shape[d]) {
        oa += a.strides[d];
        ob += b.strides[d];
        oo += out.strides[d];
        break;
      }
      oa -= a.strides[d] * (out.shape[d] - 1);
      ob -= b.strides[d] * (out.shape[d] - 1);
      oo -= out.strides[d] * (out.shape[d] - 1);
      index[d] = 0;
    }
  }
}

}  // namespace opforge::cpu

// The CPU reference of layer_norm and rms_norm (forward and backward): x seen as rows (its
// leading dims) of n elements (its trailing, normalized dims), any strides, float64 arithmetic.
// kCentered: layer_norm (subtract the mean, optional bias); else rms_norm.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/dispatch.hpp"

namespace opforge::cpu {

// Element offsets of the trailing `k` dims of `t`, in row-major order of those dims.
inline std::vector<int64_t> trailing_offsets(const Tensor& t, size_t k) {
  const std::vector<int64_t> shape(t.shape.end() - k, t.shape.end());
  const std::vector<int64_t> strides(t.strides.end() - k, t.strides.end());
  std::vector<int64_t> offsets;
  for_each_index<1>(shape, -1, {&strides}, [&](const auto& o) { offsets.push_back(o[0]); });
  return offsets;
}

// The number of rows of `t`: the product of its leading dims (all but the trailing `k`).
inline int64_t rows_of(const Tensor& t, size_t k) {
  int64_t rows = 1;
  for (size_t i = 0; i + k < t.shape.size(); ++i) rows *= t.shape[i];
  return rows;
}

// The strides of the leading dims of `t` (all but the trailing `k`).
inline std::vector<int64_t> leading_strides(const Tensor& t, size_t k) {
  return std::vector<int64_t>(t.strides.begin(), t.strides.end() - k);
}

// A parameter (weight or bias: float32 or the data's dtype) in row-major order; empty if absent.
inline std::vector<double> param_values(const Tensor* p) {
  std::vector<double> values;
  if (p == nullptr) return values;
  by_dtype(p->dtype, [&](auto tag) {
    using W = decltype(tag);
    for (const int64_t o : trailing_offsets(*p, p->shape.size())) {
      values.push_back(to_float(p->ptr<W>()[o]));
    }
  });
  return values;
}

// Element `offset` of a float32 tensor (statistics and parameter gradients).
inline float& f32_ref(Tensor& t, int64_t offset) { return t.ptr<float>()[offset]; }
inline double f32_value(const Tensor& t, int64_t offset) { return t.ptr<float>()[offset]; }

// Every element of a float32 tensor set to 0, any strides.
inline void fill_zeros(Tensor& t) {
  for_each_index<1>(t.shape, -1, {&t.strides}, [&](const auto& o) { f32_ref(t, o[0]) = 0.0f; });
}

// y = (x - mean) * rstd * weight + bias (centered) or x * rstd * weight; mean and rstd per row.
// With no element per row (n == 0) mean is 0 and rstd NaN, as PyTorch gives.
template <bool kCentered>
void norm_forward(const Tensor& x, size_t k, const Tensor* weight, const Tensor* bias, double eps,
                  Tensor& y, Tensor* mean, Tensor& rstd) {
  // No rows: nothing to write, and the offsets of a (0, 2^26) input's rows need not be laid out.
  if (rows_of(x, k) == 0) return;
  const std::vector<int64_t> ox = trailing_offsets(x, k), oy = trailing_offsets(y, k);
  const std::vector<double> w = param_values(weight), b = param_values(bias);
  const std::vector<int64_t> lead(x.shape.begin(), x.shape.end() - k);
  const std::vector<int64_t> lx = leading_strides(x, k), ly = leading_strides(y, k);
  const std::vector<int64_t>& lm = mean != nullptr ? mean->strides : rstd.strides;
  const size_t n = ox.size();
  std::vector<double> row(n);
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    T* py = y.ptr<T>();
    for_each_index<4>(lead, -1, {&lx, &ly, &lm, &rstd.strides}, [&](const auto& o) {
      double sum = 0.0;
      for (size_t j = 0; j < n; ++j) {
        row[j] = to_float(px[o[0] + ox[j]]);
        sum += row[j];
      }
      const double mu = kCentered && n > 0 ? sum / double(n) : 0.0;
      double sq = 0.0;
      for (size_t j = 0; j < n; ++j) sq += (row[j] - mu) * (row[j] - mu);
      const double rs = 1.0 / std::sqrt(sq / double(n) + eps);
      for (size_t j = 0; j < n; ++j) {
        double v = (row[j] - mu) * rs;
        if (!w.empty()) v *= w[j];
        if (!b.empty()) v += b[j];
        py[o[1] + oy[j]] = from_float<T>(static_cast<float>(v));
      }
      if (mean != nullptr) f32_ref(*mean, o[2]) = static_cast<float>(mu);
      f32_ref(rstd, o[3]) = static_cast<float>(rs);
    });
  });
}

// With xhat = (x - mean) * rstd (centered) or x * rstd and g = dy * weight, per row:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) (centered; without the mean(g) term for
// rms_norm); dweight = sum over rows of dy * xhat, dbias = sum over rows of dy.
template <bool kCentered>
void norm_backward(const Tensor& dy, const Tensor& x, size_t k, const Tensor* mean,
                   const Tensor& rstd, const Tensor* weight, Tensor& dx, Tensor& dweight,
                   Tensor* dbias) {
  if (rows_of(x, k) == 0) {
    // The parameters' gradients are sums over no rows.
    fill_zeros(dweight);
    if (dbias != nullptr) fill_zeros(*dbias);
    return;
  }
  const std::vector<int64_t> ox = trailing_offsets(x, k), og = trailing_offsets(dy, k),
                             od = trailing_offsets(dx, k);
  const std::vector<double> w = param_values(weight);
  const std::vector<int64_t> lead(x.shape.begin(), x.shape.end() - k);
  const std::vector<int64_t> lx = leading_strides(x, k), lg = leading_strides(dy, k),
                             ld = leading_strides(dx, k);
  const std::vector<int64_t>& lm = mean != nullptr ? mean->strides : rstd.strides;
  const size_t n = ox.size();
  std::vector<double> xhat(n), g(n), sum_w(n, 0.0), sum_b(n, 0.0);
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    const T* pg = dy.ptr<T>();
    T* pd = dx.ptr<T>();
    for_each_index<5>(lead, -1, {&lx, &lg, &ld, &lm, &rstd.strides}, [&](const auto& o) {
      const double mu = kCentered ? f32_value(*mean, o[3]) : 0.0;
      const double rs = f32_value(rstd, o[4]);
      double sum_g = 0.0, sum_gx = 0.0;
      for (size_t j = 0; j < n; ++j) {
        const double gy = to_float(pg[o[1] + og[j]]);
        xhat[j] = (double(to_float(px[o[0] + ox[j]])) - mu) * rs;
        g[j] = w.empty() ? gy : gy * w[j];
        sum_g += g[j];
        sum_gx += g[j] * xhat[j];
        sum_w[j] += gy * xhat[j];
        sum_b[j] += gy;
      }
      const double mean_g = kCentered ? sum_g / double(n) : 0.0, mean_gx = sum_gx / double(n);
      for (size_t j = 0; j < n; ++j) {
        const double v = rs * (g[j] - mean_g - xhat[j] * mean_gx);
        pd[o[2] + od[j]] = from_float<T>(static_cast<float>(v));
      }
    });
  });
  const std::vector<int64_t> ow = trailing_offsets(dweight, k);
  for (size_t j = 0; j < n; ++j) f32_ref(dweight, ow[j]) = static_cast<float>(sum_w[j]);
  if (dbias != nullptr) {
    const std::vector<int64_t> ob = trailing_offsets(*dbias, k);
    for (size_t j = 0; j < n; ++j) f32_ref(*dbias, ob[j]) = static_cast<float>(sum_b[j]);
  }
}

}  // namespace opforge::cpu

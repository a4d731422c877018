#include <cmath>
#include <vector>

#include "backends.hpp"
#include "common/views.hpp"
#include "cpu/dispatch.hpp"

namespace opforge::cpu {
namespace {

// Element offsets of channel 0 in each of K tensors; channel c adds c * stride[1].
template <size_t K>
std::vector<std::array<int64_t, K>> channel_offsets(
    const std::vector<int64_t>& shape, const std::array<const std::vector<int64_t>*, K>& strides) {
  std::vector<std::array<int64_t, K>> offsets;
  for_each_index<K>(shape, 1, strides, [&](const auto& o) { offsets.push_back(o); });
  return offsets;
}

float& at(const Tensor* v, int64_t c) { return v->ptr<float>()[c * v->strides[0]]; }

double weight_or(const Tensor* v, int64_t c, double fallback) {
  return v != nullptr ? double(at(v, c)) : fallback;
}

void batch_norm_forward_training(const BatchNorm& bn) {
  const Tensor& x = *bn.x;
  Tensor& y = *bn.out;
  const auto offsets = channel_offsets<2>(x.shape, {&x.strides, &y.strides});
  const double count = static_cast<double>(offsets.size());
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    T* py = y.ptr<T>();
    for (int64_t c = 0; c < bn.c; ++c) {
      if (offsets.empty()) {
        // Empty batch: like PyTorch, zero saved statistics and untouched running ones.
        if (bn.save_mean) at(bn.save_mean, c) = 0.0f;
        if (bn.save_invstd) at(bn.save_invstd, c) = 0.0f;
        continue;
      }
      const int64_t cx = c * x.strides[1], cy = c * y.strides[1];
      double sum = 0.0;
      for (const auto& o : offsets) sum += to_float(px[cx + o[0]]);
      const double mean = sum / count;
      double sq = 0.0;
      for (const auto& o : offsets) {
        const double d = double(to_float(px[cx + o[0]])) - mean;
        sq += d * d;
      }
      const double var = sq / count;
      const double invstd = 1.0 / std::sqrt(var + bn.eps);
      const double w = weight_or(bn.weight, c, 1.0), b = weight_or(bn.bias, c, 0.0);
      for (const auto& o : offsets) {
        const double xhat = (double(to_float(px[cx + o[0]])) - mean) * invstd;
        py[cy + o[1]] = from_float<T>(static_cast<float>(xhat * w + b));
      }
      if (bn.save_mean) at(bn.save_mean, c) = static_cast<float>(mean);
      if (bn.save_invstd) at(bn.save_invstd, c) = static_cast<float>(invstd);
      if (bn.running_mean) {
        const double m = bn.momentum;
        float& rm = at(bn.running_mean, c);
        float& rv = at(bn.running_var, c);
        rm = static_cast<float>((1.0 - m) * rm + m * mean);
        rv = static_cast<float>((1.0 - m) * rv + m * var * count / (count - 1.0));
      }
    }
  });
}

void batch_norm_forward_inference(const BatchNorm& bn) {
  const Tensor& x = *bn.x;
  Tensor& y = *bn.out;
  const auto offsets = channel_offsets<2>(x.shape, {&x.strides, &y.strides});
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    T* py = y.ptr<T>();
    // Every parameter and x are read before any saved statistic is written: the C ABI lets
    // those outputs share their memory (exactly the same view, or interleaved strides).
    struct Coef {
      double mean, invstd, w, b;
    };
    std::vector<Coef> coef(static_cast<size_t>(bn.c));
    for (int64_t c = 0; c < bn.c; ++c) {
      coef[c] = Coef{at(bn.running_mean, c),
                     1.0 / std::sqrt(double(at(bn.running_var, c)) + bn.eps),
                     weight_or(bn.weight, c, 1.0), weight_or(bn.bias, c, 0.0)};
    }
    for (int64_t c = 0; c < bn.c; ++c) {
      const int64_t cx = c * x.strides[1], cy = c * y.strides[1];
      const auto [mean, invstd, w, b] = coef[c];
      for (const auto& o : offsets) {
        const double xhat = (double(to_float(px[cx + o[0]])) - mean) * invstd;
        py[cy + o[1]] = from_float<T>(static_cast<float>(xhat * w + b));
      }
    }
    for (int64_t c = 0; c < bn.c; ++c) {
      at(bn.save_mean, c) = static_cast<float>(coef[c].mean);
      at(bn.save_invstd, c) = static_cast<float>(coef[c].invstd);
    }
  });
}

// In inference the statistics are constants: dx = dy * weight * invstd.
void batch_norm_backward(const BatchNorm& bn, bool training) {
  const Tensor& x = *bn.x;
  const Tensor& dy = *bn.dy;
  Tensor& dx = *bn.out;
  const auto offsets = channel_offsets<3>(x.shape, {&x.strides, &dy.strides, &dx.strides});
  const double count = static_cast<double>(offsets.size());
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    const T* pdy = dy.ptr<T>();
    T* pdx = dx.ptr<T>();
    for (int64_t c = 0; c < bn.c; ++c) {
      const int64_t cx = c * x.strides[1], cdy = c * dy.strides[1], cdx = c * dx.strides[1];
      const double mean = at(bn.save_mean, c), invstd = at(bn.save_invstd, c);
      double sum_dy = 0.0, sum_dy_xhat = 0.0;
      for (const auto& o : offsets) {
        const double g = to_float(pdy[cdy + o[1]]);
        sum_dy += g;
        sum_dy_xhat += g * (double(to_float(px[cx + o[0]])) - mean) * invstd;
      }
      const double scale = weight_or(bn.weight, c, 1.0) * invstd;
      for (const auto& o : offsets) {
        const double xhat = (double(to_float(px[cx + o[0]])) - mean) * invstd;
        const double g = to_float(pdy[cdy + o[1]]);
        const double value =
            training ? scale * (g - sum_dy / count - xhat * sum_dy_xhat / count) : scale * g;
        pdx[cdx + o[2]] = from_float<T>(static_cast<float>(value));
      }
      if (bn.dweight) at(bn.dweight, c) = static_cast<float>(sum_dy_xhat);
      if (bn.dbias) at(bn.dbias, c) = static_cast<float>(sum_dy);
    }
  });
}

}  // namespace

opforge_status batch_norm(const ops::BatchNorm& args) {
  BatchNorm bn;
  bn.x = args.x;
  bn.out = args.y;
  bn.weight = args.weight;
  bn.bias = args.bias;
  bn.running_mean = args.running_mean;
  bn.running_var = args.running_var;
  bn.save_mean = args.save_mean;
  bn.save_invstd = args.save_invstd;
  bn.momentum = args.momentum;
  bn.eps = args.eps;
  set_batch_norm_shape(*args.x, bn);
  // No channel: nothing to write, and the per-position offsets of an (N, 0) input need not be
  // laid out.
  if (bn.c == 0) return OPFORGE_OK;
  if (args.training) {
    batch_norm_forward_training(bn);
  } else {
    batch_norm_forward_inference(bn);
  }
  return OPFORGE_OK;
}

opforge_status batch_norm_backward(const ops::BatchNormBackward& args) {
  BatchNorm bn;
  bn.x = args.x;
  bn.dy = args.dy;
  bn.out = args.dx;
  bn.weight = args.weight;
  bn.save_mean = const_cast<Tensor*>(args.save_mean);
  bn.save_invstd = const_cast<Tensor*>(args.save_invstd);
  bn.dweight = args.dweight;
  bn.dbias = args.dbias;
  set_batch_norm_shape(*args.x, bn);
  if (bn.c == 0) return OPFORGE_OK;  // as the forward: every output is empty
  batch_norm_backward(bn, args.training);
  return OPFORGE_OK;
}

}  // namespace opforge::cpu

#include <cmath>
#include <limits>
#include <vector>

#include "backends.hpp"
#include "common/views.hpp"
#include "cpu/dispatch.hpp"
#include "cpu/softmax_f32.hpp"

namespace opforge::cpu {
void softmax_forward(const Tensor& x, int dim, Tensor& y) {
  if (x.dtype == DType::kFloat32 && dim == x.ndim() - 1 && x.contiguous() && y.contiguous()) {
    const int64_t len = x.shape[dim];
    if (len > 0) softmax_rows_f32(x.ptr<float>(), y.ptr<float>(), x.numel() / len, len);
    return;
  }
  const int64_t len = x.shape[dim];
  const int64_t sx = x.strides[dim], sy = y.strides[dim];
  by_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.ptr<T>();
    T* py = y.ptr<T>();
    std::vector<double> row(len);
    for_each_index<2>(x.shape, dim, {&x.strides, &y.strides}, [&](const auto& o) {
      double max = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t i = 0; i < len; ++i) {
        row[i] = to_float(px[o[0] + i * sx]);
        nan = nan || std::isnan(row[i]);
        if (row[i] > max) max = row[i];
      }
      double sum = 0.0;
      for (int64_t i = 0; i < len; ++i) {
        // An all -inf row has max -inf: exp(-inf - -inf) is NaN, as in PyTorch.
        row[i] = nan ? std::numeric_limits<double>::quiet_NaN() : std::exp(row[i] - max);
        sum += row[i];
      }
      for (int64_t i = 0; i < len; ++i) {
        py[o[1] + i * sy] = from_float<T>(static_cast<float>(row[i] / sum));
      }
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, int dim, Tensor& dx) {
  const int64_t len = y.shape[dim];
  const int64_t sy = y.strides[dim], sdy = dy.strides[dim], sdx = dx.strides[dim];
  by_dtype(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* py = y.ptr<T>();
    const T* pdy = dy.ptr<T>();
    T* pdx = dx.ptr<T>();
    for_each_index<3>(y.shape, dim, {&y.strides, &dy.strides, &dx.strides}, [&](const auto& o) {
      double dot = 0.0;
      for (int64_t i = 0; i < len; ++i) {
        dot += double(to_float(py[o[0] + i * sy])) * double(to_float(pdy[o[1] + i * sdy]));
      }
      for (int64_t i = 0; i < len; ++i) {
        const double yi = to_float(py[o[0] + i * sy]);
        const double gi = to_float(pdy[o[1] + i * sdy]);
        pdx[o[2] + i * sdx] = from_float<T>(static_cast<float>(yi * (gi - dot)));
      }
    });
  });
}

opforge_status softmax(const ops::Softmax& args) {
  Tensor y = scalar_as_vector(*args.y);
  softmax_forward(scalar_as_vector(*args.x), static_cast<int>(args.dim), y);
  return OPFORGE_OK;
}

opforge_status softmax_backward(const ops::SoftmaxBackward& args) {
  Tensor dx = scalar_as_vector(*args.dx);
  softmax_backward(scalar_as_vector(*args.y), scalar_as_vector(*args.dy),
                   static_cast<int>(args.dim), dx);
  return OPFORGE_OK;
}

}  // namespace opforge::cpu

#include "cuda/layout.hpp"

#include <algorithm>
#include <cstdlib>

namespace opforge::cuda {
namespace {

// A copy between two layouts of one shape, its dims merged where both layouts allow.
constexpr int kCopyDims = 16;
struct CopyDims {
  int ndim = 0;
  int64_t size[kCopyDims] = {};
  int64_t src[kCopyDims] = {};
  int64_t dst[kCopyDims] = {};
};

// Element e (in row-major order of the shape) of src goes to the same element of dst.
template <class E>
__global__ void strided_copy_kernel(const E* __restrict__ src, E* __restrict__ dst, CopyDims d,
                                    int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += step) {
    int64_t rest = e, from = 0, to = 0;
#pragma unroll
    for (int k = kCopyDims - 1; k >= 0; --k) {
      if (k < d.ndim) {
        const int64_t q = rest / d.size[k];
        const int64_t index = rest - q * d.size[k];
        from += index * d.src[k];
        to += index * d.dst[k];
        rest = q;
      }
    }
    dst[to] = src[from];
  }
}

opforge_status strided_copy(const char* op, const Tensor& src, const Tensor& dst,
                            cudaStream_t stream) {
  const int64_t n = src.numel();
  if (n == 0) return OPFORGE_OK;
  CopyDims d;
  for (int i = 0; i < src.ndim(); ++i) {
    if (src.shape[i] == 1) continue;
    const int last = d.ndim - 1;
    if (last >= 0 && d.src[last] == src.shape[i] * src.strides[i] &&
        d.dst[last] == src.shape[i] * dst.strides[i]) {
      d.size[last] *= src.shape[i];
      d.src[last] = src.strides[i];
      d.dst[last] = dst.strides[i];
      continue;
    }
    if (d.ndim == kCopyDims) {
      return fail(OPFORGE_ERROR_UNSUPPORTED,
                  std::string(op) + ": a tensor of shape " + shape_string(src.shape) +
                      " with strides " + shape_string(src.strides) + " has more than " +
                      std::to_string(kCopyDims) +
                      " dims that cannot be merged; pass a contiguous tensor");
    }
    d.size[d.ndim] = src.shape[i];
    d.src[d.ndim] = src.strides[i];
    d.dst[d.ndim] = dst.strides[i];
    ++d.ndim;
  }
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(ceil_div(n, 256), 4096));
  switch (src.dl_dtype.bits) {
    case 16:
      strided_copy_kernel<<<blocks, 256, 0, stream>>>(src.ptr<uint16_t>(), dst.ptr<uint16_t>(), d,
                                                      n);
      break;
    case 32:
      strided_copy_kernel<<<blocks, 256, 0, stream>>>(src.ptr<uint32_t>(), dst.ptr<uint32_t>(), d,
                                                      n);
      break;
    case 64:
      strided_copy_kernel<<<blocks, 256, 0, stream>>>(src.ptr<uint64_t>(), dst.ptr<uint64_t>(), d,
                                                      n);
      break;
    default:
      return fail(OPFORGE_ERROR_INTERNAL, std::string(op) + ": no strided copy for " +
                                              std::to_string(src.dl_dtype.bits) + "-bit elements");
  }
  return check_launch(op);
}

}  // namespace

ReduceView reduce_view(const std::vector<int64_t>& shape, int dim,
                       std::initializer_list<const Tensor*> operands) {
  ReduceView v;
  const Tensor* ops[kMaxOperands] = {};
  bool reduced[kMaxOperands] = {};
  int count = 0;
  for (const Tensor* t : operands) {
    if (count == kMaxOperands) return v;  // more operands than a view holds: the fallback
    ops[count] = t;
    reduced[count] = t->shape[dim] == shape[dim];
    ++count;
  }
  v.len = shape[dim];

  std::vector<int> dims;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (d != dim && shape[d] != 1) dims.push_back(d);
  }
  std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) {
    return std::llabs(ops[0]->strides[a]) > std::llabs(ops[0]->strides[b]);
  });
  struct Group {
    int64_t size;
    int64_t stride[kMaxOperands];
  };
  std::vector<Group> groups;
  for (int d : dims) {
    bool merge = !groups.empty();
    for (int k = 0; merge && k < count; ++k) {
      merge = groups.back().stride[k] == shape[d] * ops[k]->strides[d];
    }
    if (!merge) groups.push_back(Group{1, {}});
    Group& g = groups.back();
    g.size *= shape[d];
    for (int k = 0; k < count; ++k) g.stride[k] = ops[k]->strides[d];
  }

  bool unit_len = true;
  for (int k = 0; k < count; ++k) {
    if (reduced[k] && v.len > 1 && ops[k]->strides[dim] != 1) unit_len = false;
  }
  if (unit_len && groups.size() <= 1) {
    v.kind = ReduceView::Kind::kRows;
    for (int k = 0; k < count; ++k) v.len_stride[k] = 1;
    if (!groups.empty()) {
      v.outer = groups[0].size;
      for (int k = 0; k < count; ++k) v.outer_stride[k] = groups[0].stride[k];
    }
    return v;
  }
  if (groups.empty() || groups.size() > 2) return v;
  for (int k = 0; k < count; ++k) {
    if (groups.back().stride[k] != 1) return v;
  }
  v.kind = ReduceView::Kind::kColumns;
  v.inner = groups.back().size;
  if (groups.size() == 2) {
    v.outer = groups[0].size;
    for (int k = 0; k < count; ++k) v.outer_stride[k] = groups[0].stride[k];
  }
  for (int k = 0; k < count; ++k) {
    v.len_stride[k] = reduced[k] && v.len > 1 ? ops[k]->strides[dim] : 0;
  }
  return v;
}

opforge_status dense_like(const char* op, const Tensor& t, bool fill, Scratch& scratch,
                          cudaStream_t stream, Tensor& dense) {
  dense = t;
  if (t.contiguous()) return OPFORGE_OK;
  int64_t running = 1;
  for (int i = t.ndim() - 1; i >= 0; --i) {
    dense.strides[i] = running;
    running *= t.shape[i];
  }
  char* p = nullptr;
  const cudaError_t e = scratch.alloc(t.numel() * (t.dl_dtype.bits / 8), &p);
  if (e != cudaSuccess) return cuda_failure(op, "cudaMallocAsync (a contiguous copy)", e);
  dense.data = p;
  return fill ? strided_copy(op, t, dense, stream) : OPFORGE_OK;
}

opforge_status copy_back(const char* op, const Tensor& dense, const Tensor& t,
                         cudaStream_t stream) {
  if (dense.data == t.data) return OPFORGE_OK;
  return strided_copy(op, dense, t, stream);
}

}  // namespace opforge::cuda

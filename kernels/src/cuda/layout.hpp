// Choosing a kernel by the operands' actual strides, and the fallback for layouts no kernel
// reads directly: contiguous temporaries filled and drained by a strided copy on the stream.
#pragma once

#include <initializer_list>

#include "cuda/common.cuh"

namespace opforge::cuda {

constexpr int kMaxOperands = 3;

// The operands of a reduction along one dim, seen as [outer, len, inner] blocks of elements:
// - kRows: the reduced dim has stride 1 in every operand (inner == 1); row r starts at
//   r * outer_stride[k].
// - kColumns: stride 1 along inner in every operand; element (o, l, i) of operand k is at
//   o * outer_stride[k] + l * len_stride[k] + i.
// - kOther: neither; compute through contiguous copies.
// The non-reduced dims are ordered by the first operand's strides and merged where every
// operand allows, so transposed and permuted dense views and row-strided slices land in kRows
// or kColumns; a contiguous tensor always does.
struct ReduceView {
  enum class Kind { kRows, kColumns, kOther };
  Kind kind = Kind::kOther;
  int64_t outer = 1, len = 1, inner = 1;
  int64_t outer_stride[kMaxOperands] = {};
  int64_t len_stride[kMaxOperands] = {};
};

// `operands` share `shape` except that an operand may have size 1 at `dim` (argmax's out): such
// an operand is not reduced over, and its stride at `dim` is ignored.
ReduceView reduce_view(const std::vector<int64_t>& shape, int dim,
                       std::initializer_list<const Tensor*> operands);

// `dense` describes `t`'s elements in a contiguous layout: `t` itself when it is contiguous,
// else a temporary from `scratch`, filled with `t`'s values when `fill` (inputs).
opforge_status dense_like(const char* op, const Tensor& t, bool fill, Scratch& scratch,
                          cudaStream_t stream, Tensor& dense);

// Writes contiguous `dense` back into `t` (any strides); nothing when they are the same memory.
opforge_status copy_back(const char* op, const Tensor& dense, const Tensor& t, cudaStream_t stream);

}  // namespace opforge::cuda

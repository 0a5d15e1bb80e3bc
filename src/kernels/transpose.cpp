// transpose.cpp: the tiled transpose behind copy_box's transposes (shape.cpp), compiled once per
// kernel set (kernel_sets.hpp) so that the tiles use the set's registers.
#include "kernels/kernel_sets.hpp"
#include "kernels/transpose_block.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {

bool transpose_items(std::size_t item, const void* src, std::int64_t src_stride, void* dst, std::int64_t dst_stride,
                     std::int64_t rows, std::int64_t cols) {
  if (item == 4)
    transpose_block(static_cast<const float*>(src), src_stride, static_cast<float*>(dst), dst_stride, rows, cols);
  else if (item == 8)
    transpose_block(static_cast<const double*>(src), src_stride, static_cast<double*>(dst), dst_stride, rows, cols);
  else
    return false;
  return true;
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE

// random.cpp: the threefry2x32 kernel. (Stub: being written.)
#include "kernels/kernels.hpp"

namespace xjax::detail::kernels {

Array threefry2x32_kernel(const Array&, const Array&, const ShapedArray&) {
  throw Error("threefry2x32: not implemented yet");
}

}  // namespace xjax::detail::kernels

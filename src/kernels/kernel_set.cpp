// kernel_set.cpp: the table of one kernel set's entry points (compiled once per set, with the
// vectorized files; kernel_sets.hpp).
#include "kernels/kernel_sets.hpp"

#define XJAX_STRINGIFY2(x) #x
#define XJAX_STRINGIFY(x) XJAX_STRINGIFY2(x)

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {

const KernelSet& kernel_set() {
#define XJAX_KERNEL_SET_ADDRESS(name, ret, params, args) &name,
  static const KernelSet set{XJAX_STRINGIFY(XJAX_KERNEL_SET), XJAX_KERNEL_SET_ENTRIES(XJAX_KERNEL_SET_ADDRESS)};
#undef XJAX_KERNEL_SET_ADDRESS
  return set;
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE

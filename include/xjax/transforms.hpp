// transforms.hpp: the function transforms (make_jaxpr, grad, vjp, jvp, linearize, jac*, vmap, jit).
// Each is a thin template that flattens pytrees and calls a flat function compiled in src/ or
// transforms/.
#pragma once
#include "xjax/detail/flat.hpp"

namespace xjax {

/// make_jaxpr(f)(args...): the jaxpr of f traced at the abstract values of args.
template <class F> auto make_jaxpr(F f) {
  return [f](const auto&... args) -> ClosedJaxpr {
    detail::FlatArgs fa = detail::flatten_args(args...);
    auto flat = detail::flat_fn<F, decltype(args)...>(f, fa.defs, nullptr);
    auto avals = fa.avals();
    return detail::trace_flat(flat, avals);
  };
}

}  // namespace xjax

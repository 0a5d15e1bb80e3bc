// higher_order.hpp: the rules of higher-order primitives (those carrying jaxprs or functions in
// their params), which the core's rule tables dispatch to. Each primitive keeps all its rules in
// one file: custom_derivatives.cpp for custom_jvp_call, custom_vjp_call and custom_lin.
#pragma once
#include "ad.hpp"

namespace xjax::detail {

using ImplRule = std::vector<Array> (*)(std::span<const Array> in, const Params& params);
/// Evaluation rule of a higher-order primitive (nullptr: the primitive runs a kernel).
ImplRule impl_rule(Primitive p);

#define XJAX_DECLARE_HIGHER_ORDER_RULES(name)                                                   \
  std::vector<ShapedArray> name##_abstract_eval(std::span<const ShapedArray> in, const Params& ps); \
  std::vector<Array> name##_impl(std::span<const Array> in, const Params& ps);                  \
  JvpOut name##_jvp(const JvpArgs& a);                                                          \
  std::vector<Tangent> name##_transpose(const TransposeArgs& a);
XJAX_DECLARE_HIGHER_ORDER_RULES(custom_jvp_call)
XJAX_DECLARE_HIGHER_ORDER_RULES(custom_vjp_call)
XJAX_DECLARE_HIGHER_ORDER_RULES(custom_lin)
#undef XJAX_DECLARE_HIGHER_ORDER_RULES

/// A jaxpr whose constvars became its leading invars (closure conversion for a primitive that
/// stores a jaxpr in its params: consts, perhaps tracers, are passed as operands instead).
ClosedJaxpr consts_as_inputs(const ClosedJaxpr& j);

}  // namespace xjax::detail

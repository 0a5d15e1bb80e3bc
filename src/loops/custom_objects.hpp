// loops/custom_objects.hpp: the rule objects that custom_jvp_call, custom_vjp_call and custom_lin
// carry in their params (the user's jvp rule, the user's bwd with the avals it maps between).
// Not installed.
#pragma once
#include <string>
#include <vector>

#include "internal.hpp"
#include "xjax/custom_derivatives.hpp"

namespace xjax::detail {

struct JvpRuleObject : ParamObject {
  JvpFlatRule rule;
  std::optional<std::uint64_t> key;  // what the rule computes, where the library made it (custom_jvp_call_flat)
  std::string repr() const override { return "<custom jvp rule>"; }
  std::optional<std::uint64_t> structure_key() const override { return key; }
};

struct BwdObject : ParamObject {
  BwdFlat bwd;
  std::vector<ShapedArray> out_avals;  // avals of the tangent outputs (f's outputs)
  std::vector<ShapedArray> in_avals;   // avals of the primal arguments (bwd's results)
  std::size_t num_res = 0;
  std::string repr() const override { return "<custom vjp bwd>"; }
};

/// The rule object a parameter holds (the parameter was made from a T).
template <class T> const T& object(const params::Object& o) { return static_cast<const T&>(*o); }

/// The error of forward-mode differentiation (jvp, linearize, jacfwd) of a custom_vjp function.
[[noreturn]] void custom_vjp_no_forward_mode();

}  // namespace xjax::detail

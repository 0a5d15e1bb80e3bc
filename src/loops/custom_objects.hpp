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
  // What the rule computes, where the library made it (custom_jvp_call_flat's rule_key, and what
  // batching added); none for a user's rule.
  std::optional<std::vector<std::uint64_t>> key;
  // Per argument (consts excluded): whether it was weakly typed where the call was bound (a traced
  // C++ number). A pass re-tracing the call's jaxpr has strong tracers there, so the rule gets its
  // primals and tangents weak again, as JAX's tracers keep their weak_type.
  std::vector<char> weak;
  // How many of the call's consts (its last ones) the rule reads: what a user's rule, traced where
  // the call was made, captured. The rule takes them before the primals (custom_jvp_call_user).
  std::size_t num_rule_consts = 0;
  std::string repr() const override { return "<custom jvp rule>"; }
  bool structure_words(std::vector<std::uint64_t>& out) const override {
    if (!key) return false;
    out.push_back(0x6a76702072756c65ull);  // "jvp rule": no other kind of object's words start so
    out.insert(out.end(), key->begin(), key->end());
    return true;
  }
};

struct BwdObject : ParamObject {
  BwdFlat bwd;
  std::vector<ShapedArray> out_avals;  // avals of the tangent outputs (f's outputs)
  std::vector<ShapedArray> in_avals;   // avals of the primal arguments (bwd's results)
  std::vector<char> in_weak;           // which arguments were weakly typed (a traced C++ number)
  std::size_t num_res = 0;         // residuals, the last num_bwd_consts of them what bwd captured
  std::size_t num_bwd_consts = 0;  // which are also the call's last consts (custom_vjp_call_flat)
  std::string repr() const override { return "<custom vjp bwd>"; }
};

/// The rule object a parameter holds (the parameter was made from a T).
template <class T> const T& object(const params::Object& o) { return static_cast<const T&>(*o); }

/// The error of forward-mode differentiation (jvp, linearize, jacfwd) of a custom_vjp function.
[[noreturn]] void custom_vjp_no_forward_mode();

}  // namespace xjax::detail

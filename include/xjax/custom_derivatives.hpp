// custom_derivatives.hpp: custom_jvp and custom_vjp, with JAX's semantics.
#pragma once
#include <functional>
#include <tuple>
#include <utility>

#include "xjax/transforms.hpp"

namespace xjax {
namespace detail {

using JvpFlatRule = std::function<std::pair<std::vector<Array>, std::vector<Array>>(std::span<const Array>, std::span<const Array>)>;
using BwdFlat = std::function<std::vector<Array>(std::span<const Array> res, std::span<const Array> cts)>;
std::vector<Array> custom_jvp_call_flat(const ClosedJaxpr& f, JvpFlatRule rule, std::span<const Array> args);
std::vector<Array> custom_vjp_call_flat(const ClosedJaxpr& fwd, std::size_t num_out, BwdFlat bwd, std::span<const Array> args);

template <class T> std::vector<Array> leaves_of(const T& tree) { return tree_flatten(tree).first; }

}  // namespace detail

/// custom_jvp(f, rule): f with a user-defined forward derivative.
/// rule(std::tuple<Args...> primals, std::tuple<Args...> tangents) -> std::pair{out, tangent_out}.
/// Reverse mode works by transposing the rule's (linear) tangent computation, as in JAX.
template <class F, class Rule> auto custom_jvp(F f, Rule rule) {
  return [f, rule]<class... Args>(const Args&... args) {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    detail::FlatArgs fa = detail::flatten_args(args...);
    TreeDef out_def;
    auto flat = detail::flat_fn<F, Args...>(f, fa.defs, &out_def);
    auto avals = fa.avals();
    ClosedJaxpr j = detail::trace_flat(flat, avals);
    detail::JvpFlatRule flat_rule = [rule, defs = fa.defs, out_def](std::span<const Array> p, std::span<const Array> t) {
      auto primals = detail::unflatten_args<Args...>(defs, p);
      auto tangents = detail::unflatten_args<Args...>(defs, t);
      auto [out, tout] = rule(primals, tangents);
      auto [out_leaves, rule_out_def] = tree_flatten(out);
      auto [tout_leaves, tout_def] = tree_flatten(tout);
      detail::check_same_tree("custom_jvp: the rule's primal output differs from f's output", out_def, rule_out_def);
      detail::check_same_tree("custom_jvp: the rule's tangent output differs from f's output", out_def, tout_def);
      return std::pair{std::move(out_leaves), std::move(tout_leaves)};
    };
    return tree_unflatten<R>(out_def, detail::custom_jvp_call_flat(j, flat_rule, fa.leaves));
  };
}

/// custom_vjp(f, fwd, bwd): f with a user-defined reverse derivative.
/// fwd(args...) -> std::pair{out, residuals} (any pytree); bwd(residuals, out_cotangent) ->
/// std::tuple of one cotangent per argument. The primal value is fwd's (f and fwd must agree).
/// Forward mode (jvp) of a custom_vjp function raises xj::TransformError, as in JAX.
template <class F, class Fwd, class Bwd> auto custom_vjp(F f, Fwd fwd, Bwd bwd) {
  return [f, fwd, bwd]<class... Args>(const Args&... args) {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    using FwdOut = std::decay_t<std::invoke_result_t<const Fwd&, const Args&...>>;
    static_assert(std::is_same_v<R, std::decay_t<typename FwdOut::first_type>>, "custom_vjp: fwd must return std::pair{f's output, residuals}");
    (void)f;
    using Res = typename FwdOut::second_type;
    detail::FlatArgs fa = detail::flatten_args(args...);
    TreeDef fwd_def;
    auto flat = detail::flat_fn<Fwd, Args...>(fwd, fa.defs, &fwd_def);
    auto avals = fa.avals();
    ClosedJaxpr j = detail::trace_flat(flat, avals);
    TreeDef out_def = fwd_def.children.at(0), res_def = fwd_def.children.at(1);
    TreeDef args_def{TreeDef::Kind::node, TreeDef::Keyed::position, fa.defs, {}};
    detail::BwdFlat flat_bwd = [bwd, out_def, res_def, args_def](std::span<const Array> res, std::span<const Array> cts) {
      Res r = tree_unflatten<Res>(res_def, res);
      R ct = tree_unflatten<R>(out_def, cts);
      auto [leaves, def] = tree_flatten(bwd(r, ct));
      detail::check_same_tree("custom_vjp: bwd must return a std::tuple of one cotangent per argument, each of its "
                              "argument's structure; it differs", args_def, def);
      return leaves;
    };
    return tree_unflatten<R>(out_def, detail::custom_vjp_call_flat(j, out_def.num_leaves(), flat_bwd, fa.leaves));
  };
}

}  // namespace xjax

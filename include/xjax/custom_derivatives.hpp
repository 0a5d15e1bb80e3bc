// custom_derivatives.hpp: custom_jvp, custom_vjp, custom_linear_solve and custom_root, with JAX's semantics.
#pragma once
#include <cstdint>
#include <optional>
#include <source_location>
#include <memory>
#include <tuple>
#include <utility>

#include "xjax/detail/function.hpp"
#include "xjax/transforms.hpp"

namespace xjax {
namespace detail {

using JvpFlatRule = std::function<std::pair<std::vector<Array>, std::vector<Array>>(std::span<const Array>, std::span<const Array>)>;
using BwdFlat = std::function<std::vector<Array>(std::span<const Array> res, std::span<const Array> cts)>;
/// `rule_key`: a number standing for what `rule` computes, given only by the library's own
/// composites (relu, softmax ...: lean_composites.cpp), so that programs holding them can be
/// remembered by structure (ParamObject::structure_words); a user's rule has none.
std::vector<Array> custom_jvp_call_flat(const ClosedJaxpr& f, JvpFlatRule rule, std::span<const Array> args,
                                        std::source_location loc = std::source_location::current(),
                                        std::optional<std::uint64_t> rule_key = std::nullopt);
/// custom_jvp_call_flat for a user's rule: the rule is traced here, while the values it captures
/// are live, and they travel as operands of the call (a traced value outside the differentiated
/// arguments, captured by the rule, then has a value when the rule runs).
std::vector<Array> custom_jvp_call_user(const ClosedJaxpr& f, const JvpFlatRule& rule, std::span<const Array> args,
                                        std::source_location loc);
/// Under a trace, bwd is traced here, the values it captures travelling as residuals.
std::vector<Array> custom_vjp_call_flat(const ClosedJaxpr& fwd, std::size_t num_out, BwdFlat bwd, std::span<const Array> args);

template <class T> std::vector<Array> leaves_of(const T& tree) { return tree_flatten(tree).first; }

/// Marks, while alive, a custom_vjp (`self`: one address for the function and its copies) as
/// having its fwd traced on this thread; a call of the same custom_vjp made meanwhile (JAX's
/// documented fwd calls f itself) is `reentered`.
class FwdTraceGuard {
 public:
  explicit FwdTraceGuard(const void* self);
  ~FwdTraceGuard();
  FwdTraceGuard(const FwdTraceGuard&) = delete;
  FwdTraceGuard& operator=(const FwdTraceGuard&) = delete;
  bool reentered() const { return reentered_; }
  /// Ends the mark early (fwd is traced; bwd, traced next, calls the function as the custom_vjp).
  void release();

 private:
  const void* self_;
  bool reentered_ = false, released_ = false;
};

/// True while some trace is recording on this thread (src/trace.cpp).
bool tracing_active();

}  // namespace detail

namespace detail {
/// custom_jvp with the rule's key (custom_jvp_call_flat's rule_key).
template <class F, class Rule> auto keyed_custom_jvp(F f, Rule rule, std::source_location loc, std::optional<std::uint64_t> rule_key) {
  return [f, rule, loc, rule_key]<class... Args>(const Args&... args) {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    // Outside any trace nothing can differentiate the call: it is f itself (as JAX's eager
    // evaluation calls the function directly), without tracing f into a jaxpr first.
    if (!detail::tracing_active()) return R(f(args...));
    detail::FlatArgs fa = detail::flatten_args(args...);
    TreeDef out_def;
    auto flat = detail::flat_fn<F, Args...>(f, fa.defs, &out_def);
    auto avals = fa.avals();
    ClosedJaxpr j = detail::trace_flat(flat, avals, detail::weak_flags(fa.leaves));
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
    // The library's keyed rules capture no traced value; a user's rule is traced at the call.
    if (!rule_key) return tree_unflatten<R>(out_def, detail::custom_jvp_call_user(j, flat_rule, fa.leaves, loc));
    return tree_unflatten<R>(out_def, detail::custom_jvp_call_flat(j, flat_rule, fa.leaves, loc, rule_key));
  };
}
}  // namespace detail

/// custom_jvp(f, rule): f with a user-defined forward derivative.
/// rule(std::tuple<Args...> primals, std::tuple<Args...> tangents) -> std::pair{out, tangent_out}.
/// Reverse mode works by transposing the rule's (linear) tangent computation, as in JAX.
/// `loc` (where custom_jvp is called) is the location its equations, and those its rule makes
/// under differentiation, record (saved_residuals' descriptions).
template <class F, class Rule> auto custom_jvp(F f, Rule rule, std::source_location loc = std::source_location::current()) {
  return detail::keyed_custom_jvp(std::move(f), std::move(rule), loc, std::nullopt);
}

/// custom_vjp(f, fwd, bwd): f with a user-defined reverse derivative.
/// fwd(args...) -> std::pair{out, residuals} (any pytree); bwd(residuals, out_cotangent) ->
/// std::tuple of one cotangent per argument. Under a trace the primal value is fwd's (f and fwd
/// must agree); outside any trace, and called inside its own fwd, it is f's.
/// Forward mode (jvp) of a custom_vjp function raises xj::TransformError, as in JAX.
template <class F, class Fwd, class Bwd> auto custom_vjp(F f, Fwd fwd, Bwd bwd) {
  auto self = std::make_shared<const char>('\0');  // what copies of the function share
  return [f, fwd, bwd, self]<class... Args>(const Args&... args) {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    using FwdOut = std::decay_t<std::invoke_result_t<const Fwd&, const Args&...>>;
    static_assert(std::is_same_v<R, std::decay_t<typename FwdOut::first_type>>, "custom_vjp: fwd must return std::pair{f's output, residuals}");
    // Outside any trace nothing can differentiate the call: it is f itself (JAX evaluates f); so
    // is a call of this custom_vjp inside its own fwd (which would trace fwd again, forever).
    if (!detail::tracing_active()) return R(f(args...));
    detail::FwdTraceGuard guard(self.get());
    if (guard.reentered()) return R(f(args...));
    using Res = typename FwdOut::second_type;
    detail::FlatArgs fa = detail::flatten_args(args...);
    TreeDef fwd_def;
    auto flat = detail::flat_fn<Fwd, Args...>(fwd, fa.defs, &fwd_def);
    auto avals = fa.avals();
    std::vector<char> fwd_weak;  // which of fwd's output leaves are weakly typed (a residual standing for a C++ number)
    auto recording = [&flat, &fwd_weak](std::span<const Array> xs) {
      std::vector<Array> outs = flat(xs);
      fwd_weak = detail::weak_flags(outs);
      return outs;
    };
    ClosedJaxpr j = detail::trace_flat(recording, avals, detail::weak_flags(fa.leaves));
    guard.release();
    TreeDef out_def = fwd_def.children.at(0), res_def = fwd_def.children.at(1);
    TreeDef args_def;
    args_def.kind = TreeDef::Kind::node;
    args_def.children = fa.defs;
    // bwd gets its residuals weak where fwd made them weak (a pass re-tracing the jaxpr has strong tracers).
    std::vector<char> res_weak(fwd_weak.begin() + static_cast<std::ptrdiff_t>(out_def.num_leaves()), fwd_weak.end());
    detail::BwdFlat flat_bwd = [bwd, out_def, res_def, args_def, res_weak](std::span<const Array> res, std::span<const Array> cts) {
      Res r = tree_unflatten<Res>(res_def, detail::with_weak_types({res.begin(), res.end()}, res_weak, /*tracers_too=*/true));
      R ct = tree_unflatten<R>(out_def, cts);
      auto [leaves, def] = tree_flatten(bwd(r, ct));
      detail::check_same_tree("custom_vjp: bwd must return a std::tuple of one cotangent per argument, each of its "
                              "argument's structure; it differs", args_def, def);
      return leaves;
    };
    return tree_unflatten<R>(out_def, detail::custom_vjp_call_flat(j, out_def.num_leaves(), flat_bwd, fa.leaves));
  };
}

// ---- implicit differentiation: custom_linear_solve, custom_root ------------------------------

/// custom_linear_solve's options. symmetric: matvec is its own transpose (A = A^T), so reverse
/// mode calls `solve` for the transposed system and no transpose_solve is needed.
struct LinearSolveOptions {
  bool symmetric = false;
};

namespace detail {
/// A solver on flat leaves: solve(op, b) -> x with op(x) = b.
using LinearSolveFn = std::function<std::vector<Array>(const FlatFn& op, std::span<const Array> b)>;
std::vector<Array> custom_linear_solve_flat(const FlatFn& matvec, std::span<const Array> b, const LinearSolveFn& solve,
                                            const LinearSolveFn* transpose_solve, bool symmetric, std::source_location loc);
std::vector<Array> custom_root_flat(const FlatFn& f, std::span<const Array> initial_guess, const LinearSolveFn& solve,
                                    LinearSolveFn tangent_solve, std::source_location loc);

/// A function T -> T over flat leaves, for a user's function on trees of structure `def`.
template <class T> FlatFn flat_tree_fn(std::function<T(const T&)> f, const TreeDef& def, const char* what) {
  return [f = std::move(f), def, what](std::span<const Array> leaves) {
    auto [out, out_def] = tree_flatten(f(tree_unflatten<T>(def, leaves)));
    check_same_tree(what, def, out_def);
    return out;
  };
}
/// The user's solve(op, b) -> x on trees, as a LinearSolveFn.
template <class T, class Solve> LinearSolveFn flat_tree_solve(Solve solve, const TreeDef& def, const char* what) {
  return [solve = std::move(solve), def, what](const FlatFn& op, std::span<const Array> b) {
    std::function<T(const T&)> tree_op = [&op, &def](const T& x) { return tree_unflatten<T>(def, op(tree_flatten(x).first)); };
    auto [out, out_def] = tree_flatten(T(solve(tree_op, tree_unflatten<T>(def, b))));
    check_same_tree(what, def, out_def);
    return out;
  };
}
}  // namespace detail

/// x = custom_linear_solve(matvec, b, solve, transpose_solve): the solution of matvec(x) = b
/// computed by solve(matvec, b), differentiated implicitly as jax.lax.custom_linear_solve: the
/// tangent is solve(matvec, db - (d matvec)(x)) and reverse mode calls
/// transpose_solve(vecmat, ct), so the solver's own iterations are never differentiated (an
/// iterative solver under while_loop gets a gradient; the gradient's jaxpr holds no iteration).
/// matvec must be linear in x; only b and what matvec closes over carry derivatives (what the
/// solves close over is treated as constant). b and x are pytrees of one structure, shapes and
/// dtypes; solve and transpose_solve take (std::function<B(const B&)> op, const B& b).
template <class B, class Matvec, class Solve, class TransposeSolve>
  requires(!std::is_same_v<std::decay_t<TransposeSolve>, LinearSolveOptions>)
B custom_linear_solve(Matvec matvec, const B& b, Solve solve, TransposeSolve transpose_solve, LinearSolveOptions opts = {},
                      std::source_location loc = std::source_location::current()) {
  auto [leaves, def] = tree_flatten(b);
  const detail::FlatFn mv = detail::flat_tree_fn<B>(matvec, def, "custom_linear_solve: matvec's output differs from b");
  const detail::LinearSolveFn s = detail::flat_tree_solve<B>(solve, def, "custom_linear_solve: solve's output differs from b");
  const detail::LinearSolveFn ts =
      detail::flat_tree_solve<B>(transpose_solve, def, "custom_linear_solve: transpose_solve's output differs from b");
  return tree_unflatten<B>(def, detail::custom_linear_solve_flat(mv, leaves, s, &ts, opts.symmetric, loc));
}
/// custom_linear_solve without transpose_solve: reverse mode needs {.symmetric = true} (JAX's
/// symmetric=True: solve serves the transposed system too) and is a TransformError otherwise.
template <class B, class Matvec, class Solve>
B custom_linear_solve(Matvec matvec, const B& b, Solve solve, LinearSolveOptions opts = {},
                      std::source_location loc = std::source_location::current()) {
  auto [leaves, def] = tree_flatten(b);
  const detail::FlatFn mv = detail::flat_tree_fn<B>(matvec, def, "custom_linear_solve: matvec's output differs from b");
  const detail::LinearSolveFn s = detail::flat_tree_solve<B>(solve, def, "custom_linear_solve: solve's output differs from b");
  return tree_unflatten<B>(def, detail::custom_linear_solve_flat(mv, leaves, s, nullptr, opts.symmetric, loc));
}

/// x = custom_root(f, initial_guess, solve, tangent_solve): a root of f (f(x) = 0) found by
/// solve(f, initial_guess), differentiated by the implicit function theorem as
/// jax.lax.custom_root: with theta what f closes over, dx = -(d_x f)^-1 (d_theta f) dtheta at the
/// root, where tangent_solve(g, y) solves the linear g(v) = y (g is d_x f at the root). The
/// solver's iterations are never differentiated. For reverse mode tangent_solve must be
/// transposable in y (built from linear operations, xj::linalg::solve or custom_linear_solve).
/// x is a pytree; f maps it to its own structure; solve and tangent_solve take
/// (std::function<X(const X&)>, const X&).
template <class X, class F, class Solve, class TangentSolve>
X custom_root(F f, const X& initial_guess, Solve solve, TangentSolve tangent_solve,
              std::source_location loc = std::source_location::current()) {
  auto [leaves, def] = tree_flatten(initial_guess);
  const detail::FlatFn ff = detail::flat_tree_fn<X>(f, def, "custom_root: f's output differs from its argument");
  const detail::LinearSolveFn s = detail::flat_tree_solve<X>(solve, def, "custom_root: solve's output differs from x0");
  detail::LinearSolveFn ts =
      detail::flat_tree_solve<X>(tangent_solve, def, "custom_root: tangent_solve's output differs from x0");
  return tree_unflatten<X>(def, detail::custom_root_flat(ff, leaves, s, std::move(ts), loc));
}

}  // namespace xjax

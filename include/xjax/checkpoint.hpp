// checkpoint.hpp: rematerialization. checkpoint(f) (alias remat) returns f as one block whose
// intermediates are recomputed in the backward pass instead of stored; a policy chooses which
// values are saved anyway. checkpoint_name tags values for name-based policies.
// saved_residuals reports what reverse mode keeps between the forward and backward passes.
#pragma once
#include <algorithm>
#include <iosfwd>
#include <optional>
#include <set>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "xjax/detail/function.hpp"
#include "xjax/transforms.hpp"

namespace xjax {

/// Decides, for an equation of a checkpointed block whose inputs are known in the forward pass,
/// whether its outputs are saved (true) or recomputed in the backward pass (false). Any callable
/// of that signature is a Policy. `policy.as(xj::bf16)` is the same policy saving its residuals
/// in bf16 (see `as`).
class Policy {
 public:
  using Function = std::function<bool(const Primitive&, std::span<const ShapedArray> in_avals, const Params& params)>;
  Policy() = default;
  template <class F>
    requires std::is_invocable_r_v<bool, const F&, const Primitive&, std::span<const ShapedArray>, const Params&> &&
             (!std::is_same_v<std::decay_t<F>, Policy>)
  Policy(F f) : fn_(std::move(f)) {}  // NOLINT: implicit, as std::function's
  bool operator()(const Primitive& p, std::span<const ShapedArray> in_avals, const Params& params) const {
    return fn_(p, in_avals, params);
  }
  explicit operator bool() const { return static_cast<bool>(fn_); }
  /// This policy, saving each residual it chooses (an equation's output, not a block input) in
  /// `dtype` when that is a narrower float than the residual's own: converted at the end of the
  /// forward pass, converted back where the backward pass reads it, nothing recomputed. Halves
  /// the saved bytes of f32 residuals with bf16, at bf16's rounding (2^-9 relative) in what the
  /// backward pass reads. A block input the backward pass reads is kept as it is (under scan, a
  /// stack of every step's input); name it (`checkpoint_name(x, "layer_input")`) and let the
  /// policy save that name to have it saved narrower too. A residual read where rounding could
  /// move a choice (a comparison's mask, max_pool's element, pow's exponent, anything a custom_vjp
  /// bwd reads, eigh's / svd's order) stays wide, and such choices are saved, not recomputed. f16
  /// keeps 11 bits but only f16's range: a residual beyond 65504 is read back as inf (bf16 has
  /// f32's range but for its top: above 3.396e38 it rounds to inf).
  /// TypeError unless `dtype` is a floating dtype.
  Policy as(DType dtype) const;
  /// The dtype given by `as`, if any.
  std::optional<DType> residual_dtype() const { return residual_dtype_; }
  const Function& function() const { return fn_; }

 private:
  Function fn_;
  std::optional<DType> residual_dtype_;
};

namespace checkpoint_policies {
extern const Policy everything_saveable;
extern const Policy nothing_saveable;
/// Saves the results of dot_general (matmuls), recomputes the rest.
extern const Policy dots_saveable;
extern const Policy checkpoint_dots;  // alias of dots_saveable
/// Saves dot_general results without batch dimensions.
extern const Policy dots_with_no_batch_dims_saveable;
/// Saves values named (checkpoint_name) with one of `names`; recomputes everything else.
Policy save_only_these_names(std::set<std::string> names);
/// Saves every named value except those in `names`; recomputes unnamed values.
Policy save_any_names_but_these(std::set<std::string> names);
/// Saves everything except values named with one of `names`.
Policy save_anything_except_these_names(std::set<std::string> names);
/// Saves what either policy saves.
Policy save_from_both_policies(Policy a, Policy b);
/// Saves the results of collectives (psum, all_gather, ppermute, ...: distributed.hpp), so that
/// a recompute never communicates again; combine with another policy by save_from_both_policies.
extern const Policy save_collectives;
}  // namespace checkpoint_policies

struct CheckpointOptions {
  /// Without a policy nothing is saved but the block's inputs.
  std::optional<Policy> policy{};
  /// Keep the backward recompute from being merged with the forward computation (always true in
  /// effect: see docs/checkpointing.md).
  bool prevent_cse = true;
  /// Arguments that are compile-time values (their concrete value is baked into the block).
  /// Arguments that are not pytrees (ints, doubles, ...) are always static. A negative index
  /// counts from the end; one out of range is an xj::TransformError (as JAX's ValueError).
  std::vector<int> static_argnums{};
};

/// One value reverse mode saves: its type and where it comes from, in JAX's words.
struct Residual {
  ShapedArray aval;
  std::string description;  // "from the argument 0", "named 'h' from f.cpp:12", "output of sin from f.cpp:9"
};

namespace detail {
/// loc: where the block is made (checkpoint's caller), the location its equation carries.
std::vector<Array> checkpoint_flat(const ClosedJaxpr& body, std::span<const Array> args, const CheckpointOptions& opts,
                                   std::source_location loc);
Array name_flat(const Array& x, const std::string& name, std::source_location loc);
std::vector<Residual> saved_residuals_flat(const ClosedJaxpr& j, const FlatArgs& fa);
void print_residuals(std::ostream& os, const std::vector<Residual>& rs);
/// print_residuals to std::cout (defined in the library, so this header needs no <iostream>).
void print_residuals_to_stdout(const std::vector<Residual>& rs);

template <class... Args, std::size_t... I>
auto checkpoint_call(const auto& f, const CheckpointOptions& opts, const std::source_location& loc,
                     const std::tuple<const Args&...>& args, std::index_sequence<I...>) {
  std::vector<std::size_t> listed;  // static_argnums as positions (negative ones count from the end)
  for (int argnum : opts.static_argnums) listed.push_back(normalized_argnum(argnum, sizeof...(Args), "xj::checkpoint: static_argnums"));
  auto is_static = [&](std::size_t i, bool tree) {
    return !tree || std::find(listed.begin(), listed.end(), i) != listed.end();
  };
  constexpr bool trees[] = {Tree<std::decay_t<Args>>...};
  bool statics[] = {is_static(I, Tree<std::decay_t<Args>>)...};
  std::vector<Array> leaves;
  std::vector<TreeDef> defs(sizeof...(Args));
  auto flatten_one = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
    using A = std::decay_t<std::tuple_element_t<K, std::tuple<Args...>>>;
    if constexpr (Tree<A>)
      if (!statics[K]) PyTree<A>::flatten(std::get<K>(args), leaves, defs[K]);
  };
  (flatten_one(std::integral_constant<std::size_t, I>{}), ...);
  std::vector<std::size_t> offsets;
  {
    std::size_t off = 0;
    for (std::size_t k = 0; k < sizeof...(Args); ++k) {
      offsets.push_back(off);
      if (!statics[k]) off += defs[k].num_leaves();
    }
  }
  using R = std::decay_t<std::invoke_result_t<decltype(f), const Args&...>>;
  TreeDef out_def;
  FlatFn flat = [&](std::span<const Array> xs) {
    auto rebuild = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) -> std::decay_t<std::tuple_element_t<K, std::tuple<Args...>>> {
      using A = std::decay_t<std::tuple_element_t<K, std::tuple<Args...>>>;
      if constexpr (Tree<A>) {
        if (!statics[K]) return tree_unflatten<A>(defs[K], xs.subspan(offsets[K], defs[K].num_leaves()));
      }
      return std::get<K>(args);
    };
    R out = f(rebuild(std::integral_constant<std::size_t, I>{})...);
    std::vector<Array> outs;
    PyTree<R>::flatten(out, outs, out_def);
    return outs;
  };
  (void)trees;
  std::vector<ShapedArray> avals;
  for (const auto& x : leaves) avals.push_back(x.aval());
  ClosedJaxpr body = trace_flat(flat, avals, weak_flags(leaves));
  auto outs = checkpoint_flat(body, leaves, opts, loc);
  return tree_unflatten<R>(out_def, outs);
}
}  // namespace detail

/// checkpoint(f, {.policy, .prevent_cse, .static_argnums}): f as one rematerialized block (its
/// equation, and a narrowed policy's converts, carry the caller's line).
template <class F> auto checkpoint(F f, CheckpointOptions opts = {}, std::source_location loc = std::source_location::current()) {
  return [f, opts, loc]<class... Args>(const Args&... args) {
    return detail::checkpoint_call<Args...>(f, opts, loc, std::tuple<const Args&...>(args...), std::index_sequence_for<Args...>{});
  };
}
template <class F> auto remat(F f, CheckpointOptions opts = {}, std::source_location loc = std::source_location::current()) {
  return checkpoint(std::move(f), std::move(opts), loc);
}

/// Tags every leaf of x with `name` for name-based policies (the identity on values).
template <class T> T checkpoint_name(const T& x, const std::string& name, std::source_location loc = std::source_location::current()) {
  return tree_map([&](const Array& a) { return detail::name_flat(a, name, loc); }, x);
}

/// The residuals reverse mode saves for f at args (all float arguments differentiated).
template <class F, class... Args> std::vector<Residual> saved_residuals(F f, const Args&... args) {
  detail::FlatArgs fa = detail::flatten_args(args...);
  auto flat = detail::flat_fn<F, Args...>(f, fa.defs, nullptr);
  auto avals = fa.avals();
  return detail::saved_residuals_flat(detail::trace_flat(flat, avals, detail::weak_flags(fa.leaves)), fa);
}

/// Prints saved_residuals one per line, JAX's format: `f32[5,4] from the argument 0`.
template <class F, class... Args> void print_saved_residuals(F f, const Args&... args) {
  detail::print_residuals_to_stdout(saved_residuals(f, args...));
}

}  // namespace xjax

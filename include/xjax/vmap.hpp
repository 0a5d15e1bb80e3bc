// vmap.hpp: batching. vmap(f, in_axes, out_axes)(args...) applies f to every slice of its
// arguments along the batch axes at once, as jax.vmap: f is traced once at one member's types and
// the jaxpr batched (transforms/vmap.cpp), so the batched function runs as whole-array operations.
#pragma once
#include <concepts>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "xjax/detail/flat.hpp"

namespace xjax {

struct VmapOptions {
  /// The batch size, needed when no argument is batched (in_axes all None).
  std::optional<std::int64_t> axis_size{};
};

namespace detail {

/// An in_axes / out_axes specification: an axis (negative counts from the end), None (not
/// batched), or a node whose children match a container's: by position (a tuple, pair or vector
/// spec) or by key (a map spec, `keys` in the children's order; it matches a map's keys or a
/// struct's member names).
struct AxisSpec {
  enum class Kind { axis, none, node } kind = Kind::axis;
  std::int64_t axis = 0;
  std::vector<AxisSpec> children;
  std::vector<std::string> keys;
};

inline AxisSpec axis_spec(const AxisSpec& s) { return s; }
inline AxisSpec axis_spec(std::integral auto a) { return {AxisSpec::Kind::axis, static_cast<std::int64_t>(a), {}, {}}; }
inline AxisSpec axis_spec(None) { return {AxisSpec::Kind::none, 0, {}, {}}; }
template <class T> AxisSpec axis_spec(const std::optional<T>& a) { return a ? axis_spec(*a) : axis_spec(None{}); }
template <class... Ts> AxisSpec axis_spec(const std::tuple<Ts...>& t);
template <class A, class B> AxisSpec axis_spec(const std::pair<A, B>& p);
template <class T> AxisSpec axis_spec(const std::vector<T>& v);
template <class T> AxisSpec axis_spec(const std::map<std::string, T>& m);
template <class... Ts> AxisSpec axis_spec(const std::variant<Ts...>& v);
template <class... Ts> AxisSpec axis_spec(const std::tuple<Ts...>& t) {
  AxisSpec s{AxisSpec::Kind::node, 0, {}, {}};
  std::apply([&](const auto&... x) { (s.children.push_back(axis_spec(x)), ...); }, t);
  return s;
}
template <class A, class B> AxisSpec axis_spec(const std::pair<A, B>& p) {
  return {AxisSpec::Kind::node, 0, {axis_spec(p.first), axis_spec(p.second)}, {}};
}
template <class T> AxisSpec axis_spec(const std::vector<T>& v) {
  AxisSpec s{AxisSpec::Kind::node, 0, {}, {}};
  for (const auto& x : v) s.children.push_back(axis_spec(x));
  return s;
}
/// One spec among several kinds, e.g. the values of a map spec that mixes a whole-subtree int with
/// nested maps: std::map<std::string, std::variant<int, xj::None, std::map<std::string, int>>>.
template <class... Ts> AxisSpec axis_spec(const std::variant<Ts...>& v) {
  return std::visit([](const auto& x) { return axis_spec(x); }, v);
}
template <class T> AxisSpec axis_spec(const std::map<std::string, T>& m) {
  AxisSpec s{AxisSpec::Kind::node, 0, {}, {}};
  for (const auto& [k, x] : m) {
    s.keys.push_back(k);
    s.children.push_back(axis_spec(x));
  }
  return s;
}

/// The batch axis of every argument leaf (normalized; not_batched = -1), checked against the
/// arguments' structures and ranks: a TypeError naming the key path (`in_axes[0]['b']`) where a
/// spec is not a tree prefix of its argument (JAX's rule: a map spec needs the map's keys or the
/// struct's member names exactly, a positional spec a sequence or struct of as many children), a
/// ShapeError for an axis out of range.
std::vector<std::int64_t> vmap_in_dims(const AxisSpec& in_axes, const FlatArgs& fa);
/// The batch size: the batched leaves' sizes along their axes, which must agree (ShapeError
/// naming both arguments), or axis_size (which they must also equal).
std::int64_t vmap_axis_size(const FlatArgs& fa, const std::vector<std::int64_t>& in_dims,
                            std::optional<std::int64_t> axis_size);
/// One member's avals: the batched leaves without their batch axis.
std::vector<ShapedArray> vmap_member_avals(const FlatArgs& fa, const std::vector<std::int64_t>& in_dims);
/// The batch axis of every output leaf (normalized against the batched output's rank).
std::vector<std::int64_t> vmap_out_dims(const AxisSpec& out_axes, const TreeDef& out_def,
                                        const std::vector<ShapedArray>& member_out);
/// The batched jaxpr of j, evaluated on the arguments' leaves.
std::vector<Array> vmap_flat(const ClosedJaxpr& j, std::span<const Array> leaves, const std::vector<std::int64_t>& in_dims,
                             std::int64_t size, const std::vector<std::int64_t>& out_dims);

}  // namespace detail

/// vmap(f, in_axes = 0, out_axes = 0, {.axis_size})(args...): f applied to each slice of its
/// arguments along their batch axes, results stacked along out_axes, as jax.vmap. An axis spec
/// is an int (negative counts from the end), xj::None{} (not batched), or a pytree of those: a
/// std::tuple with one entry per argument at the top level, and below it containers matching the
/// argument's (an int or None covers a whole subtree): sequences by position, a std::map spec
/// matching a map's keys or a struct's member names exactly (a std::variant where its values mix
/// kinds); a spec that is not a tree prefix of its argument is a TypeError naming the key path; nest with std::make_tuple, since
/// `std::tuple{std::tuple{0, 1}}` copies its argument instead of nesting it. The batched arguments must agree on the
/// batch size; with no batched argument give {.axis_size = n}. Traces f on every call (wrap it in
/// xj::jit to trace once per signature); composes with grad, jvp, jit, scan, checkpoint, ...
template <class F, class InAxes = int, class OutAxes = int>
auto vmap(F f, const InAxes& in_axes = 0, const OutAxes& out_axes = 0, VmapOptions opts = {}) {
  return [f, in = detail::axis_spec(in_axes), out = detail::axis_spec(out_axes), opts](const auto&... args) {
    using R = std::decay_t<std::invoke_result_t<const F&, decltype(args)...>>;
    detail::FlatArgs fa = detail::flatten_args(args...);
    std::vector<std::int64_t> in_dims = detail::vmap_in_dims(in, fa);
    std::int64_t size = detail::vmap_axis_size(fa, in_dims, opts.axis_size);
    auto member = detail::vmap_member_avals(fa, in_dims);
    TreeDef out_def;
    auto flat = detail::flat_fn<F, decltype(args)...>(f, fa.defs, &out_def);
    ClosedJaxpr j = detail::trace_flat(flat, member, detail::weak_flags(fa.leaves));
    std::vector<std::int64_t> out_dims = detail::vmap_out_dims(out, out_def, j.out_avals());
    std::vector<Array> outs = detail::vmap_flat(j, fa.leaves, in_dims, size, out_dims);
    return tree_unflatten<R>(out_def, outs);
  };
}

}  // namespace xjax

// control_flow.hpp: structured control flow as primitives carrying jaxprs: scan.
// (cond, switch_, while_loop and fori_loop are not built yet: see docs/status.md.)
#pragma once
#include <optional>
#include <source_location>

#include "xjax/transforms.hpp"

namespace xjax {

struct ScanOptions {
  /// Number of iterations; required when xs is xj::None{}, else checked against xs' leading axis.
  std::optional<std::int64_t> length{};
  /// Iterate from the last slice to the first (ys still line up with xs).
  bool reverse = false;
  /// Iterations per loop step of a compiled plan (the interpreter ignores it; results agree).
  std::int64_t unroll = 1;
};

namespace detail {
std::vector<Array> scan_flat(const ClosedJaxpr& body, std::span<const Array> init, std::span<const Array> xs,
                             std::int64_t length, bool reverse, std::int64_t unroll, std::source_location loc);
/// The number of iterations from the xs leaves and the length option (ShapeError on mismatch).
std::int64_t scan_length(std::span<const Array> xs, const std::optional<std::int64_t>& length, std::source_location loc);
/// Checks that the body's carry output matches the carry input (TypeError naming the leaf).
void check_carry(const TreeDef& in_def, const TreeDef& out_def, std::span<const ShapedArray> in,
                 std::span<const ShapedArray> out, std::source_location loc);
[[noreturn]] void scan_body_not_pair(std::source_location loc);
std::vector<ShapedArray> slice_avals(std::span<const Array> xs);
}  // namespace detail

/// auto [carry, ys] = scan(body, init, xs, {.length, .reverse, .unroll}) with
/// body(carry, x) -> std::pair{new_carry, y}. Carry, xs and y are pytrees; xs may be xj::None{}
/// (then .length is required) and y may be xj::None{} (no stacked output is built).
template <class Body, class Carry, class Xs>
auto scan(Body body, const Carry& init, const Xs& xs, ScanOptions opts = {},
          std::source_location loc = std::source_location::current()) {
  using Out = std::decay_t<std::invoke_result_t<const Body&, const Carry&, const Xs&>>;
  if constexpr (!detail::is_pair<Out>::value) {
    detail::scan_body_not_pair(loc);
  } else {
    using Y = std::decay_t<typename Out::second_type>;
    if (opts.unroll < 1) throw Error("scan: unroll must be at least 1, got " + std::to_string(opts.unroll) + " (at " + where(loc) + ")");
    auto [init_leaves, init_def] = tree_flatten(init);
    auto [xs_leaves, xs_def] = tree_flatten(xs);
    std::int64_t length = detail::scan_length(xs_leaves, opts.length, loc);
    std::vector<ShapedArray> avals;
    for (const auto& c : init_leaves) avals.push_back(c.aval());
    for (const auto& a : detail::slice_avals(xs_leaves)) avals.push_back(a);
    TreeDef out_def;
    std::size_t ncarry = init_leaves.size();
    detail::FlatFn flat = [&, ncarry](std::span<const Array> args) {
      Carry c = tree_unflatten<Carry>(init_def, args.subspan(0, ncarry));
      Xs x = tree_unflatten<Xs>(xs_def, args.subspan(ncarry));
      Out o = body(c, x);
      std::vector<Array> leaves;
      PyTree<Out>::flatten(o, leaves, out_def);
      return leaves;
    };
    ClosedJaxpr j = detail::trace_flat(flat, avals);
    auto out_avals = j.out_avals();
    detail::check_carry(init_def, out_def.children.at(0), std::span(avals).subspan(0, ncarry),
                        std::span(out_avals).subspan(0, std::min(out_avals.size(), out_def.children.at(0).num_leaves())), loc);
    auto outs = detail::scan_flat(j, init_leaves, xs_leaves, length, opts.reverse, opts.unroll, loc);
    std::span<const Array> all(outs);
    return std::pair<Carry, Y>{tree_unflatten<Carry>(init_def, all.subspan(0, ncarry)),
                               tree_unflatten<Y>(out_def.children.at(1), all.subspan(ncarry))};
  }
}

}  // namespace xjax

// control_flow.hpp: structured control flow as primitives carrying jaxprs: scan, cond,
// switch_, while_loop, fori_loop.
#pragma once
#include <concepts>
#include <initializer_list>
#include <limits>
#include <optional>
#include <source_location>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xjax/detail/function.hpp"
#include "xjax/ops.hpp"
#include "xjax/transforms.hpp"

namespace xjax {

struct ScanCheckpointsFactory;
/// scan's `unroll` option, as in JAX: an iteration count per loop step, or a bool (true unrolls
/// the whole loop into one step, false is 1). `{.unroll = 4}` and `{.unroll = true}` both work.
class ScanUnroll {
 public:
  template <std::integral T>
  constexpr ScanUnroll(T n)  // NOLINT: implicit on purpose, so `.unroll = 4` reads as in JAX
      : full_(std::same_as<T, bool> && n != 0), count_(std::same_as<T, bool> ? 1 : static_cast<std::int64_t>(n)) {}
  /// true when given as `true` (fully unrolled).
  constexpr bool full() const { return full_; }
  /// The iterations per step for a loop of `length` iterations.
  constexpr std::int64_t count(std::int64_t length) const { return full_ ? (length > 1 ? length : 1) : count_; }

 private:
  bool full_;
  std::int64_t count_;
};

/// How reverse mode through a scan or while_loop keeps the loop's carries (ScanOptions and
/// WhileOptions `.checkpoints`; docs/checkpointing.md, "Schedules"). Make one with
/// scan_checkpoints::all(), binomial(s) or online(s).
class ScanCheckpoints {
 public:
  enum class Kind { all, binomial, online };
  constexpr Kind kind() const { return kind_; }
  /// The most carries the schedule stores (0 for all()).
  constexpr std::int64_t snapshots() const { return snapshots_; }

 private:
  constexpr ScanCheckpoints(Kind k, std::int64_t s) : kind_(k), snapshots_(s) {}
  friend struct ScanCheckpointsFactory;
  Kind kind_ = Kind::all;
  std::int64_t snapshots_ = 0;
};

namespace scan_checkpoints {
/// Reverse mode keeps what every step needs (its residuals, or its input carry when the body is a
/// checkpoint): the default, fastest, memory linear in the length.
ScanCheckpoints all();
/// Griewank and Walther's binomial schedule (revolve) for scan: at most s stored carries, the
/// minimal number of recomputed steps for them (scan_schedule_stats). s >= 1.
ScanCheckpoints binomial(std::int64_t s);
/// For while_loop, whose trip count is unknown until it ends: at most s stored carries, placed
/// while the loop runs (docs/checkpointing.md gives the bound on recomputation). s >= 1.
ScanCheckpoints online(std::int64_t s);
}  // namespace scan_checkpoints

/// What a schedule costs for a loop of `length` steps: the body's forward runs `advances` times
/// without keeping residuals (the first sweep and recomputation) and `taped_steps` times keeping
/// them for the step's backward (once per step); forward_steps is their sum.
struct ScanScheduleStats {
  std::int64_t advances = 0;
  std::int64_t taped_steps = 0;
  std::int64_t forward_steps = 0;
  /// The most carries stored at once (the initial carry included).
  std::int64_t peak_snapshots = 0;
};
/// The cost of reversing a scan of `length` steps under `checkpoints`: for binomial(s), Griewank
/// and Walther's minimum, advances = t(l, s) = r l - C(s + r, s + 1) where r is the least integer
/// with C(s + r, s) >= l; for online(s), the cost when the loop turns out to run `length` steps;
/// for all(), one forward pass with every step kept (advances 0, peak_snapshots = length).
ScanScheduleStats scan_schedule_stats(std::int64_t length, ScanCheckpoints checkpoints);

struct ScanOptions {
  /// Number of iterations; required when xs is xj::None{}, else checked against xs' leading axis.
  std::optional<std::int64_t> length{};
  /// Iterate from the last slice to the first (ys still line up with xs).
  bool reverse = false;
  /// Iterations per loop step: the evaluator runs the body composed `unroll` times per step;
  /// `true` unrolls fully (JAX's `unroll=True`), `false` means 1.
  ScanUnroll unroll = 1;
  /// What reverse mode stores: every step (default) or scan_checkpoints::binomial(s).
  ScanCheckpoints checkpoints = scan_checkpoints::all();
};

namespace detail {
std::vector<Array> scan_flat(const ClosedJaxpr& body, std::span<const Array> init, std::span<const Array> xs,
                             std::int64_t length, bool reverse, std::int64_t unroll, std::source_location loc,
                             std::int64_t snapshots = 0);
/// The snapshots parameter of a scan (Error for online(s), which is while_loop's).
std::int64_t scan_snapshots(const ScanCheckpoints& c, std::source_location loc);
/// The number of iterations from the xs leaves and the length option (ShapeError on mismatch).
std::int64_t scan_length(std::span<const Array> xs, const std::optional<std::int64_t>& length, std::source_location loc);
/// Checks that a loop body's carry output matches the carry input (TypeError naming the loop,
/// the body as the user knows it, and the differing key path or leaf).
void check_carry(const char* loop, const char* body, const TreeDef& in_def, const TreeDef& out_def,
                 std::span<const ShapedArray> in, std::span<const ShapedArray> out, std::source_location loc);
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
    auto [init_leaves, init_def] = tree_flatten(init);
    auto [xs_leaves, xs_def] = tree_flatten(xs);
    std::int64_t length = detail::scan_length(xs_leaves, opts.length, loc);
    std::int64_t unroll = opts.unroll.count(length);
    if (unroll < 1) throw Error("scan: unroll must be at least 1, got " + std::to_string(unroll) + " (at " + format_location(loc) + ")");
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
    const std::size_t carry_outs = out_def.children.at(0).num_leaves();
    detail::check_carry("scan", "the body", init_def, out_def.children.at(0), std::span(avals).subspan(0, ncarry),
                        std::span(out_avals).subspan(0, out_avals.size() < carry_outs ? out_avals.size() : carry_outs), loc);
    auto outs = detail::scan_flat(j, init_leaves, xs_leaves, length, opts.reverse, unroll, loc,
                                  detail::scan_snapshots(opts.checkpoints, loc));
    std::span<const Array> all(outs);
    return std::pair<Carry, Y>{tree_unflatten<Carry>(init_def, all.subspan(0, ncarry)),
                               tree_unflatten<Y>(out_def.children.at(1), all.subspan(ncarry))};
  }
}

// ---- cond, switch_ ---------------------------------------------------------------------------

namespace detail {
/// pred (bool, or a number compared with 0) as the i32 index 0 (false) / 1 (true).
Array cond_index(const Array& pred, std::source_location loc);
/// An integer index as i32, clamped to [0, n).
Array switch_index(const Array& index, std::size_t n, std::source_location loc);
/// TypeError naming the branch whose output structure or leaf types differ from branch 0's.
void check_branches(const char* what, std::span<const std::string> names, std::span<const TreeDef> out_defs,
                    std::span<const ClosedJaxpr> branches, std::source_location loc);
std::vector<Array> cond_flat(const Array& index, std::span<const ClosedJaxpr> branches, std::span<const Array> ops,
                             std::source_location loc);

template <class T> struct is_tuple : std::false_type {};
template <class... Ts> struct is_tuple<std::tuple<Ts...>> : std::true_type {};

/// Applies f to each branch of a std::tuple of callables or of a range (std::vector, std::array).
template <class Branches, class F> void for_each_branch(const Branches& bs, F&& f) {
  if constexpr (is_tuple<Branches>::value) std::apply([&](const auto&... b) { (f(b), ...); }, bs);
  else
    for (const auto& b : bs) f(b);
}
template <class Branches> const auto& first_branch(const Branches& bs) {
  if constexpr (is_tuple<Branches>::value) return std::get<0>(bs);
  else return *std::begin(bs);
}

/// Traces each branch on the operands' avals (a weakly typed operand traced weak, as JAX's
/// branches see it: a traced C++ number times an f32 array computes in f32 there), checks that
/// they agree and binds a cond.
template <class Out, class Branches, class... Ops>
Out switch_impl(const char* what, const Array& index, const Branches& branches, std::vector<std::string> names,
                std::source_location loc, const Ops&... operands) {
  FlatArgs fa = flatten_args(operands...);
  auto avals = fa.avals();
  const std::vector<char> weak = weak_flags(fa.leaves);
  std::vector<ClosedJaxpr> jaxprs;
  std::vector<TreeDef> out_defs;
  for_each_branch(branches, [&](const auto& b) {
    TreeDef def;
    auto flat = flat_fn<std::decay_t<decltype(b)>, Ops...>(b, fa.defs, &def);
    jaxprs.push_back(trace_flat(flat, avals, weak));
    out_defs.push_back(def);
  });
  check_branches(what, names, out_defs, jaxprs, loc);
  auto outs = cond_flat(index, jaxprs, fa.leaves, loc);
  return tree_unflatten<Out>(out_defs[0], outs);
}
}  // namespace detail

/// cond(pred, true_fn, false_fn, operands...): true_fn(operands...) when the scalar pred is true
/// (nonzero), else false_fn(operands...), as lax.cond. Both branches are traced and staged as
/// one `cond` primitive (index 0 = false_fn, 1 = true_fn), so every transform applies; they must
/// return the same C++ type and the same structure, shapes and dtypes (else xj::TypeError).
/// Operands are pytrees; a branch may also read arrays from its enclosing scope.
template <class TrueFn, class FalseFn, class... Ops>
auto cond(detail::Located<Array> pred, TrueFn true_fn, FalseFn false_fn, const Ops&... operands) {
  using Out = std::decay_t<std::invoke_result_t<const TrueFn&, const Ops&...>>;
  static_assert(std::is_same_v<Out, std::decay_t<std::invoke_result_t<const FalseFn&, const Ops&...>>>,
                "xj::cond: true_fn and false_fn must return the same type");
  Array index = detail::cond_index(pred.value, pred.loc);
  return detail::switch_impl<Out>("cond", index, std::tuple<const FalseFn&, const TrueFn&>(false_fn, true_fn),
                                  {"false_fn", "true_fn"}, pred.loc, operands...);
}

/// switch_(index, branches, operands...): branches[clamp(index, 0, n - 1)](operands...), as
/// lax.switch. `branches` is a std::tuple of callables (any mix of lambdas), or a std::vector /
/// std::array of one callable type (e.g. std::function<Array(const Array&)>); every branch takes
/// the operands and returns the same C++ type and the same structure, shapes and dtypes. index is
/// an integer scalar Array (converted to i32). Examples:
///   xj::switch_(i, std::tuple{f0, f1, f2}, x);
///   xj::switch_(i, std::vector<std::function<xj::Array(const xj::Array&)>>{f0, f1, f2}, x);
template <class Branches, class... Ops>
auto switch_(detail::Located<Array> index, const Branches& branches, const Ops&... operands) {
  using First = std::decay_t<decltype(detail::first_branch(branches))>;
  using Out = std::decay_t<std::invoke_result_t<const First&, const Ops&...>>;
  std::size_t n = 0;
  detail::for_each_branch(branches, [&](const auto& b) {
    using B = std::decay_t<decltype(b)>;
    static_assert(std::is_same_v<Out, std::decay_t<std::invoke_result_t<const B&, const Ops&...>>>,
                  "xj::switch_: every branch must return the same type");
    ++n;
  });
  if (n == 0) throw TypeError("switch_: no branches (at " + format_location(index.loc) + ")");
  Array i = detail::switch_index(index.value, n, index.loc);
  if (n == 1) return Out(detail::first_branch(branches)(operands...));  // as lax.switch
  return detail::switch_impl<Out>("switch_", i, branches, {}, index.loc, operands...);
}

/// switch_(index, {f0, f1, f2}, operands...): the branches as a braced list, as JAX's
/// lax.switch(index, [f0, f1, f2], x). Each branch becomes a std::function returning `Out`
/// (default xj::Array; name another type for pytree results: `xj::switch_<MyTree>(i, {...}, x)`).
template <class Out = Array, class... Ops>
auto switch_(detail::Located<Array> index,
             std::initializer_list<std::function<std::type_identity_t<Out>(const std::type_identity_t<Ops>&...)>> branches,
             const Ops&... operands) {
  using Branch = std::function<Out(const Ops&...)>;
  return switch_(std::move(index), std::vector<Branch>(branches.begin(), branches.end()), operands...);
}

// ---- while_loop, fori_loop -------------------------------------------------------------------

struct WhileOptions {
  /// Reverse mode: none (default, as in JAX: grad raises TransformError) or
  /// scan_checkpoints::online(s), which stores at most s carries.
  ScanCheckpoints checkpoints = scan_checkpoints::all();
};

namespace detail {
std::vector<Array> while_flat(const ClosedJaxpr& cond, const ClosedJaxpr& body, std::span<const Array> init,
                              std::source_location loc, std::int64_t snapshots = 0);
/// The snapshots parameter of a while_loop (Error for binomial(s), which needs a known length).
std::int64_t while_snapshots(const ScanCheckpoints& c, std::source_location loc);
/// TypeError unless cond_fn returns bool[] and body_fn returns the carry's structure and types.
void check_while(const TreeDef& in_def, const TreeDef& out_def, std::span<const ShapedArray> in,
                 std::span<const ShapedArray> out, std::span<const ShapedArray> pred, std::source_location loc);
/// A fori_loop bound as a counter scalar: a C++ integer as i32 (outside i32's range an Error: the
/// counter wrapped); an integer scalar Array in its own dtype, or as i64 when its dtype is u32 or
/// u64 (a concrete u64 past i64's range is an Error).
Array fori_bound(const Array& b, std::source_location loc);
[[noreturn]] void fori_bound_out_of_range(const std::string& value, std::source_location loc);
template <std::integral I> Array fori_bound(I b, std::source_location loc) {
  if constexpr (sizeof(I) >= sizeof(std::int32_t) && !std::is_same_v<I, bool>) {  // narrower types always fit
    const bool out_of_range = std::is_signed_v<I> ? static_cast<std::int64_t>(b) < std::numeric_limits<std::int32_t>::min() ||
                                                        static_cast<std::int64_t>(b) > std::numeric_limits<std::int32_t>::max()
                                                  : static_cast<std::uint64_t>(b) > std::uint64_t{std::numeric_limits<std::int32_t>::max()};
    if (out_of_range)
      fori_bound_out_of_range(std::is_signed_v<I> ? std::to_string(static_cast<std::int64_t>(b)) : std::to_string(static_cast<std::uint64_t>(b)),
                              loc);
  }
  return scalar(static_cast<double>(b), i32);
}
/// A C++ integer bound beside an Array bound: in that bound's counter dtype when it is i64 (JAX's
/// weak int takes the other bound's dtype: 5000000000 beside an i64 Array is no error), else as
/// above.
template <std::integral I> Array fori_bound_beside(I b, const Array& other, std::source_location loc) {
  if (other.dtype() != i64) return fori_bound(b, loc);
  if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(std::int64_t))
    if (b > static_cast<I>(std::numeric_limits<std::int64_t>::max())) fori_bound_out_of_range(std::to_string(b), loc);
  return scalar(static_cast<std::int64_t>(b), i64);
}
}  // namespace detail

/// while_loop(cond_fn, body_fn, init): carry = init; while (cond_fn(carry)) carry = body_fn(carry);
/// as lax.while_loop. cond_fn returns a bool scalar Array; body_fn returns the carry with the same
/// structure, shapes and dtypes. Evaluation and forward mode (jvp) work; reverse mode (grad, vjp)
/// needs {.checkpoints = scan_checkpoints::online(s)} and raises xj::TransformError without it.
template <class CondFn, class BodyFn, class Carry>
Carry while_loop(CondFn cond_fn, BodyFn body_fn, const Carry& init, WhileOptions opts = {},
                 std::source_location loc = std::source_location::current()) {
  detail::FlatArgs fa = detail::flatten_args(init);
  auto avals = fa.avals();
  TreeDef pred_def, out_def;
  auto cflat = detail::flat_fn<CondFn, Carry>(cond_fn, fa.defs, &pred_def);
  auto bflat = detail::flat_fn<BodyFn, Carry>(body_fn, fa.defs, &out_def);
  ClosedJaxpr cj = detail::trace_flat(cflat, avals);
  ClosedJaxpr bj = detail::trace_flat(bflat, avals);
  auto pred = cj.out_avals();
  auto outs = bj.out_avals();
  detail::check_while(fa.defs[0], out_def, avals, outs, pred, loc);
  auto res = detail::while_flat(cj, bj, fa.leaves, loc, detail::while_snapshots(opts.checkpoints, loc));
  return tree_unflatten<Carry>(fa.defs[0], res);
}

/// fori_loop(lo, hi, body, init): for i in [lo, hi): carry = body(i, carry), as lax.fori_loop,
/// with i a scalar Array of the bounds' dtype (i32 for C++ integers; an Array bound's own integer
/// dtype, i64 for u32 and u64; unequal strong Array bounds their result type, where JAX raises a
/// TypeError). i is weakly typed as JAX's counter: always with bounds
/// known when it is called (JAX counts from the Python int int(lower)), so `carry + i` keeps an i8
/// or bf16 carry's dtype; with traced bounds when the lower bound is weak (a C++ integer, a traced
/// C++ number) and keeps its dtype (a weak bound beside a strong Array bound of another dtype
/// takes that dtype, strongly). With bounds known when it is called (C++ integers, or concrete
/// Arrays: JAX's int(lower) succeeding) it lowers to scan, so every transform including reverse
/// mode works; with traced Array bounds it lowers to while_loop (evaluation and forward mode only).
template <class Lo, class Hi, class Body, class Carry>
  requires((std::integral<Lo> || std::same_as<Lo, Array>) && (std::integral<Hi> || std::same_as<Hi, Array>))
Carry fori_loop(Lo lo, Hi hi, Body body, const Carry& init, std::source_location loc = std::source_location::current()) {
  using IC = std::pair<Array, Carry>;
  auto is_weak = [](const auto& bound) {
    if constexpr (std::integral<std::decay_t<decltype(bound)>>) return true;
    else return detail::weak_flags(std::span<const Array>(&bound, 1))[0] != 0;
  };
  // the body's view of the counter (weak as JAX's where `weak`)
  auto counter = [](const Array& i, bool weak) { return weak ? detail::weakly_typed(i) : i; };
  // hi - lo trips (none if negative) of a scan whose carry counts from `first`, i weak
  auto as_scan = [&](const Array& first, std::int64_t trips) {
    auto step = [&body, &counter](const IC& ic, const None&) {
      return std::pair<IC, None>{IC{ic.first + 1, Carry(body(counter(ic.first, true), ic.second))}, None{}};
    };
    auto [out, ys] = scan(step, IC{first, init}, None{}, {.length = trips > 0 ? trips : 0}, loc);
    (void)ys;
    return out.second;
  };
  if constexpr (std::integral<Lo> && std::integral<Hi>) {
    (void)detail::fori_bound(hi, loc);  // both bounds in the counter's range (the counter wrapped past hi)
    return as_scan(detail::fori_bound(lo, loc), static_cast<std::int64_t>(hi) - static_cast<std::int64_t>(lo));
  } else {
    Array lower, upper;
    if constexpr (std::integral<Lo>) {
      upper = detail::fori_bound(hi, loc);
      lower = detail::fori_bound_beside(lo, upper, loc);
    } else if constexpr (std::integral<Hi>) {
      lower = detail::fori_bound(lo, loc);
      upper = detail::fori_bound_beside(hi, lower, loc);
    } else {
      lower = detail::fori_bound(lo, loc);
      upper = detail::fori_bound(hi, loc);
    }
    if (lower.dtype() != upper.dtype()) {
      if constexpr (std::same_as<Lo, Array> && std::same_as<Hi, Array>) {
        // the weak bound takes the strong one's dtype (JAX's rule)
        if (is_weak(lo) && !is_weak(hi)) lower = astype(lower, upper.dtype(), loc);
        else if (is_weak(hi) && !is_weak(lo)) upper = astype(upper, lower.dtype(), loc);
      }
      if (lower.dtype() != upper.dtype()) {  // both strong: the bounds' result type (i8 and u8: i16; i32 and i64: i64)
        const DType both = promote_types(lower.dtype(), upper.dtype());
        lower = astype(lower, both, loc);
        upper = astype(upper, both, loc);
      }
    }
    if (lower.is_concrete() && upper.is_concrete())
      return as_scan(lower, upper.template item<std::int64_t>() - lower.template item<std::int64_t>());
    // traced: JAX's counter is `lower` itself, weak when it is and was not converted (a C++ lower
    // bound, JAX's weak int64, keeps its dtype beside an i64 bound)
    bool weak = false;
    if constexpr (std::integral<Lo>) weak = upper.dtype() == i64;
    else weak = is_weak(lo) && lower.impl() == lo.impl();
    auto c = [upper](const IC& ic) { return lt(ic.first, upper); };
    auto b = [&body, &counter, weak](const IC& ic) { return IC{ic.first + 1, Carry(body(counter(ic.first, weak), ic.second))}; };
    return while_loop(c, b, IC{lower, init}, {}, loc).second;
  }
}

}  // namespace xjax

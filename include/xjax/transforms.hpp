// transforms.hpp: the function transforms: make_jaxpr, grad, value_and_grad, vjp, jvp,
// linearize, jacfwd, jacrev, hessian, jit. Each is a thin template that flattens pytrees and calls a
// flat function compiled once in transforms/ (see transforms/api.cpp).
#pragma once
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "xjax/detail/function.hpp"
#include "xjax/detail/flat.hpp"

namespace xjax {

/// make_jaxpr(f)(args...): the jaxpr of f traced at the abstract values of args, a weakly typed
/// argument traced weak (as jit traces it: JAX's make_jaxpr is jit(f).trace(args)).
template <class F> auto make_jaxpr(F f, std::source_location loc = std::source_location::current()) {
  return [f, loc](const auto&... args) -> ClosedJaxpr {
    detail::FlatArgs fa = detail::flatten_args(args...);
    auto flat = detail::flat_fn<F, decltype(args)...>(f, fa.defs, nullptr);
    auto avals = fa.avals();
    return detail::trace_flat(flat, avals, detail::weak_flags(fa.leaves), loc);
  };
}

/// Which arguments grad differentiates: `xj::argnums<0, 2>` gives a std::tuple of gradients, and
/// one index (`argnums<1>`) the gradient itself, as JAX's argnums=1. `xj::argnums_tuple<1>` gives
/// a std::tuple even for one index, as JAX's argnums=(1,).
template <bool AsTuple, int... I> struct Argnums {};
template <int... I> inline constexpr Argnums<false, I...> argnums{};
template <int... I> inline constexpr Argnums<true, I...> argnums_tuple{};

struct GradOptions {
  /// f returns std::pair{scalar, aux}; aux is returned beside the gradient, not differentiated.
  bool has_aux = false;
  /// Accept integer (and bool) leaves among the differentiated arguments: their gradient is a
  /// zero array of their own dtype (xjax's float0). Without it they are a TypeError, as in JAX.
  bool allow_int = false;
};

namespace detail {

struct TraceCache;
std::shared_ptr<TraceCache> new_trace_cache();
struct Traced {
  ClosedJaxpr jaxpr;
  TreeDef out_def;
  /// jit: the jaxpr's execution plan, built once. The jaxpr has no owner outside this entry, so
  /// it cannot change and a call need not look the plan up (which hashes every equation).
  std::shared_ptr<const EvalPlan> plan;
  /// jit: which outputs the trace computed from weakly typed values only (a C++ number times 2):
  /// a call's concrete outputs keep that weak type, as JAX's jit keeps an output's weak_type.
  std::vector<char> out_weak;
};
/// The cached result for `key`, or build() stored under it (only when its consts are concrete:
/// a jaxpr closing over tracers of an enclosing trace is not reusable). Thread-safe.
std::shared_ptr<const Traced> cached(TraceCache& cache, const std::string& key, const std::function<Traced()>& build);
std::string signature_key(const FlatArgs& fa, const std::vector<bool>& mask);
std::vector<bool> argnum_mask(const FlatArgs& fa, std::initializer_list<int> argnums);

/// (kept outputs..., one gradient per masked leaf) of a scalar function whose first output is
/// the value and the rest aux. Kept: all outputs with_value, else only the aux outputs.
ClosedJaxpr grad_jaxpr(const ClosedJaxpr& j, const std::vector<bool>& diff, bool has_aux, bool with_value);
/// A transformed function's memo of transformed programs (transforms/transform_memo.cpp).
struct TransformMemo;
std::shared_ptr<TransformMemo> new_transform_memo();
/// How many calls found their program in the memo.
std::int64_t transform_memo_hits(TransformMemo& memo);
/// A transform of a traced program whose first `nconsts` inputs are its former consts.
using MemoTransform = std::function<ClosedJaxpr(const ClosedJaxpr& j, std::size_t nconsts)>;
struct MemoizedProgram {
  ClosedJaxpr program;
  std::vector<Array> inputs;  // what to run it with: the trace's consts (when remembered), then args
};
/// transform(traced with its consts as leading inputs), remembered in `memo` under traced's
/// structure and `tag`; or, when traced cannot be remembered (or memo is null), transform(traced, 0).
MemoizedProgram memoized(TransformMemo* memo, const ClosedJaxpr& traced, std::span<const Array> args,
                         std::vector<std::uint64_t> tag, const MemoTransform& transform);
/// grad_jaxpr(traced, ...) evaluated at args, through the memo (may be null).
std::vector<Array> eval_grad(TransformMemo* memo, const ClosedJaxpr& traced, std::span<const Array> args,
                             const std::vector<bool>& diff, bool has_aux, bool with_value);

struct VjpState;
/// Runs the forward pass of f's jaxpr on args now; the state keeps the residuals.
std::shared_ptr<const VjpState> vjp_forward(const ClosedJaxpr& j, std::span<const Array> args, std::vector<Array>* outs);
/// One cotangent per input leaf (zeros for integer leaves).
std::vector<Array> vjp_backward(const VjpState& s, std::span<const Array> cts);

/// (outs, output tangents) of f's jaxpr at primals along tangents.
std::pair<std::vector<Array>, std::vector<Array>> jvp_flat(const ClosedJaxpr& j, std::span<const Array> primals,
                                                           std::span<const Array> tangents);

struct LinearState;
std::shared_ptr<const LinearState> linearize_forward(const ClosedJaxpr& j, std::span<const Array> args,
                                                     std::vector<Array>* outs);
std::vector<Array> linearize_apply(const LinearState& s, std::span<const Array> tangents);


template <class T> struct is_pair : std::false_type {};
template <class A, class B> struct is_pair<std::pair<A, B>> : std::true_type {};
[[noreturn]] void aux_mismatch(bool returns_pair);

// The gradient type: the argument's own type for one index (unless AsTuple), a std::tuple else.
template <class Tuple, bool AsTuple, int... I> struct grads_type_impl {
  using type = std::tuple<std::decay_t<std::tuple_element_t<static_cast<std::size_t>(I), Tuple>>...>;
};
template <class Tuple, int I> struct grads_type_impl<Tuple, false, I> {
  using type = std::decay_t<std::tuple_element_t<static_cast<std::size_t>(I), Tuple>>;
};
template <class Tuple, bool AsTuple, int... I> using grads_type = typename grads_type_impl<Tuple, AsTuple, I...>::type;

template <class T>
T unflatten_arg(const FlatArgs& fa, const std::vector<Array>& full, int i) {
  const auto k = static_cast<std::size_t>(i);
  return tree_unflatten<T>(fa.defs[k], std::span<const Array>(full).subspan(fa.offsets[k], fa.offsets[k + 1] - fa.offsets[k]));
}

/// TypeError when a differentiated leaf is not a float array and allow_int is not set.
void check_grad_inputs(const FlatArgs& fa, const std::vector<bool>& diff, bool allow_int);

/// The part of a grad call that does not depend on f's or the arguments' types (out of line,
/// transforms/api.cpp, so that each grad in user code compiles only its flattening; issue 26).
struct GradCall {
  /// Checks the differentiated leaves (argnums) are floats unless allow_int.
  GradCall(FlatArgs args, std::initializer_list<int> argnums, bool allow_int);
  GradCall(const GradCall&) = delete;
  GradCall& operator=(const GradCall&) = delete;
  ~GradCall();
  /// Traces flat (which writes out_def), evaluates the gradient program: `full` gets one
  /// gradient per leaf (empty where not differentiated), `kept` the outputs grad returns besides
  /// (the value when with_value, else the aux outputs).
  /// `loc` is where the trace's tracers are created (error messages' "created at").
  void run(TransformMemo* memo, const FlatFn& flat, bool has_aux, bool with_value,
           std::source_location loc = std::source_location::current());
  FlatArgs fa;
  std::vector<bool> diff;
  TreeDef out_def;
  std::vector<Array> full, kept;
};

/// The callable returned by grad / value_and_grad. Traces f on every call, as JAX's grad does:
/// f may read state that changes between calls (an array captured by reference), and a cached
/// jaxpr would silently keep the old value. The *transformed* program is remembered per traced
/// structure (eval_grad: a captured array's values are inputs, never part of it), so a loop
/// calling it pays for the trace, not for the transform. xj::jit traces once per signature.
template <class F, bool WithValue, bool AsTuple, int... I> class GradFn {
 public:
  GradFn(F f, GradOptions opts) : f_(std::move(f)), opts_(opts) {}

  template <class... Args> auto operator()(const Args&... args) const {
    static_assert(sizeof...(I) > 0, "argnums needs at least one argument index");
    static_assert(((I >= 0 && I < static_cast<int>(sizeof...(Args))) && ...), "argnums index out of range");
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    if (is_pair<R>::value != opts_.has_aux) aux_mismatch(is_pair<R>::value);
    GradCall c(flatten_args(args...), {I...}, opts_.allow_int);
    c.run(memo_.get(), flat_fn<F, Args...>(f_, c.fa.defs, &c.out_def), opts_.has_aux, WithValue);
    const FlatArgs& fa = c.fa;
    const std::vector<Array>& full = c.full;
    const std::vector<Array>& kept = c.kept;
    const TreeDef& out_def = c.out_def;
    using Tuple = std::tuple<Args...>;
    using Grads = grads_type<Tuple, AsTuple, I...>;
    Grads grads = [&] {
      if constexpr (sizeof...(I) == 1 && !AsTuple) return unflatten_arg<Grads>(fa, full, (I + ... + 0));
      else return Grads{unflatten_arg<std::decay_t<std::tuple_element_t<static_cast<std::size_t>(I), Tuple>>>(fa, full, I)...};
    }();
    if constexpr (WithValue) {
      R value = tree_unflatten<R>(out_def, kept);
      return std::pair<R, decltype(grads)>{std::move(value), std::move(grads)};
    } else if constexpr (is_pair<R>::value) {
      using Aux = typename R::second_type;
      return std::pair<decltype(grads), Aux>{std::move(grads), tree_unflatten<Aux>(out_def.children.at(1), kept)};
    } else {
      return grads;
    }
  }

 private:
  F f_;
  GradOptions opts_;
  std::shared_ptr<TransformMemo> memo_ = new_transform_memo();  // shared by copies; null once moved from
};

}  // namespace detail

/// grad(f)(args...): the gradient of scalar-valued f with respect to argument 0, in its structure.
/// Traces and transforms f on every call (as JAX's grad); `jit(grad(f))` traces once per signature.
template <class F> auto grad(F f, GradOptions opts = {}) { return detail::GradFn<F, false, false, 0>(std::move(f), opts); }
/// grad(f, argnums<0, 2>): a std::tuple of gradients (a single one when one index is given;
/// argnums_tuple<1> for a std::tuple of one).
template <class F, bool T, int... I> auto grad(F f, Argnums<T, I...>, GradOptions opts = {}) {
  return detail::GradFn<F, false, T, I...>(std::move(f), opts);
}
/// value_and_grad(f)(args...) -> std::pair{value, grads}; with has_aux the value is {value, aux}.
template <class F> auto value_and_grad(F f, GradOptions opts = {}) {
  return detail::GradFn<F, true, false, 0>(std::move(f), opts);
}
template <class F, bool T, int... I> auto value_and_grad(F f, Argnums<T, I...>, GradOptions opts = {}) {
  return detail::GradFn<F, true, T, I...>(std::move(f), opts);
}

namespace detail {
/// f traced at the abstract values of the flattened arguments, and the structure of its output.
template <class F, class... Args> std::pair<ClosedJaxpr, TreeDef> trace_tree(const F& f, const FlatArgs& fa) {
  TreeDef out_def;
  auto flat = flat_fn<F, Args...>(f, fa.defs, &out_def);
  auto avals = fa.avals();
  ClosedJaxpr j = trace_flat(flat, avals, weak_flags(fa.leaves));
  return {std::move(j), std::move(out_def)};
}
}  // namespace detail

/// auto [out, f_vjp] = vjp(f, args...); f_vjp(out_cotangent) -> std::tuple of one cotangent per arg.
template <class F, class... Args> auto vjp(F f, const Args&... args) {
  using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
  detail::FlatArgs fa = detail::flatten_args(args...);
  auto [j, out_def] = detail::trace_tree<F, Args...>(f, fa);
  std::vector<Array> outs;
  auto state = detail::vjp_forward(j, fa.leaves, &outs);
  R out = tree_unflatten<R>(out_def, outs);
  auto f_vjp = [state, defs = fa.defs, out_def](const R& ct) {
    auto [leaves, def] = tree_flatten(ct);
    if (!(def == out_def))
      detail::tree_mismatch("vjp: the cotangent's structure " + def.str() + " differs from the output's " + out_def.str() + " " +
                            detail::tree_difference(out_def, def, "output"));
    auto cts = detail::vjp_backward(*state, leaves);
    return detail::unflatten_args<std::decay_t<Args>...>(defs, cts);
  };
  return std::pair<R, decltype(f_vjp)>{std::move(out), std::move(f_vjp)};
}

/// auto [out, t_out] = jvp(f, std::tuple{primals...}, std::tuple{tangents...}).
template <class F, class... Ps, class... Ts>
auto jvp(F f, const std::tuple<Ps...>& primals, const std::tuple<Ts...>& tangents) {
  static_assert(sizeof...(Ps) == sizeof...(Ts), "jvp: one tangent per primal");
  using R = std::decay_t<std::invoke_result_t<const F&, const Ps&...>>;
  detail::FlatArgs fa = std::apply([](const auto&... p) { return detail::flatten_args(p...); }, primals);
  detail::FlatArgs ft = std::apply([](const auto&... t) { return detail::flatten_args(t...); }, tangents);
  detail::check_same_args("jvp: the tangents", fa.defs, ft.defs);
  auto [j, out_def] = detail::trace_tree<F, Ps...>(f, fa);
  auto [outs, touts] = detail::jvp_flat(j, fa.leaves, ft.leaves);
  return std::pair<R, R>{tree_unflatten<R>(out_def, outs), tree_unflatten<R>(out_def, touts)};
}

/// auto [out, f_lin] = linearize(f, args...); f_lin(tangents...) evaluates the linear map.
template <class F, class... Args> auto linearize(F f, const Args&... args) {
  using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
  detail::FlatArgs fa = detail::flatten_args(args...);
  auto [j, out_def] = detail::trace_tree<F, Args...>(f, fa);
  std::vector<Array> outs;
  auto state = detail::linearize_forward(j, fa.leaves, &outs);
  R out = tree_unflatten<R>(out_def, outs);
  auto f_lin = [state, out_def, defs = fa.defs](const Args&... tangents) {
    detail::FlatArgs ft = detail::flatten_args(tangents...);
    detail::check_same_args("linearize: the tangents", defs, ft.defs);
    return tree_unflatten<R>(out_def, detail::linearize_apply(*state, ft.leaves));
  };
  return std::pair<R, decltype(f_lin)>{std::move(out), std::move(f_lin)};
}

namespace detail {
/// The part of a jacfwd / jacrev call that does not depend on f's or the arguments' types (out of
/// line, transforms/api.cpp, as GradCall).
struct JacobianCall {
  /// Checks the differentiated leaves (argnums) are floats (JAX: "jacfwd requires real-valued inputs").
  JacobianCall(FlatArgs args, std::initializer_list<int> argnums, bool forward);
  JacobianCall(const JacobianCall&) = delete;
  JacobianCall& operator=(const JacobianCall&) = delete;
  ~JacobianCall();
  /// Traces flat (which writes out_def) and evaluates the Jacobian in one batched program: `blocks`
  /// gets one array per pair (output leaf i, differentiated leaf k), i outer, k in argnums' order,
  /// of shape out_i.shape + leaf_k.shape.
  void run(TransformMemo* memo, const FlatFn& flat, std::source_location loc = std::source_location::current());
  /// The blocks of traced at the arguments (i outer, the differentiated leaves in flatten order).
  std::vector<Array> evaluate_blocks(TransformMemo* memo, const ClosedJaxpr& traced, const std::vector<ShapedArray>& outs,
                                     const std::vector<ShapedArray>& wrt, const std::vector<std::int64_t>& in_at,
                                     const std::vector<std::int64_t>& out_at) const;
  /// The Jacobian's structure (JAX's): the output's, each of its leaves replaced by the structure
  /// of the differentiated argument (or, as_tuple, of a tuple of the differentiated arguments in
  /// argnums' order).
  TreeDef jacobian_def(bool as_tuple) const;
  FlatArgs fa;
  std::vector<bool> diff;
  std::vector<int> argnums;
  bool forward;
  TreeDef out_def;
  std::vector<Array> blocks;
};

/// The Jacobian's type: Out with every Array leaf replaced by In (output structure outside, the
/// differentiated arguments' inside, as JAX nests them).
template <class Out, class In, class = void> struct leaves_replaced;
template <class In> struct leaves_replaced<Array, In> { using type = In; };
template <class In> struct leaves_replaced<None, In> { using type = None; };
template <class... Ts, class In> struct leaves_replaced<std::tuple<Ts...>, In> {
  using type = std::tuple<typename leaves_replaced<Ts, In>::type...>;
};
template <class A, class B, class In> struct leaves_replaced<std::pair<A, B>, In> {
  using type = std::pair<typename leaves_replaced<A, In>::type, typename leaves_replaced<B, In>::type>;
};
template <class T, class In> struct leaves_replaced<std::vector<T>, In> {
  using type = std::vector<typename leaves_replaced<T, In>::type>;
};
template <class T, std::size_t N, class In> struct leaves_replaced<std::array<T, N>, In> {
  using type = std::array<typename leaves_replaced<T, In>::type, N>;
};
template <class T, class In> struct leaves_replaced<std::map<std::string, T>, In> {
  using type = std::map<std::string, typename leaves_replaced<T, In>::type>;
};
template <class S, class In> struct leaves_replaced<S, In, std::enable_if_t<boost::hana::Struct<S>::value>> {
  // A struct's members have fixed types: its Jacobian with respect to a pytree has no C++ type.
  static_assert(std::is_same_v<In, Array>,
                "jacfwd / jacrev: a function returning a struct can be differentiated only with respect to one "
                "Array argument; return a std::tuple or std::map of its arrays instead");
  using type = S;
};

/// The callable returned by jacfwd / jacrev: traces f on every call (as grad) and evaluates the
/// Jacobian with respect to arguments I... as one batched program, remembered per traced
/// structure.
template <class F, bool Forward, bool AsTuple, int... I> class JacobianFn {
 public:
  explicit JacobianFn(F f) : f_(std::move(f)) {}

  template <class... Args> auto operator()(const Args&... args) const {
    static_assert(sizeof...(I) > 0, "argnums needs at least one argument index");
    static_assert(((I >= 0 && I < static_cast<int>(sizeof...(Args))) && ...), "argnums index out of range");
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    constexpr bool as_tuple = AsTuple || sizeof...(I) > 1;
    using In = grads_type<std::tuple<Args...>, as_tuple, I...>;
    using Jacobian = typename leaves_replaced<R, In>::type;
    JacobianCall c(flatten_args(args...), {I...}, Forward);
    c.run(memo_.get(), flat_fn<F, Args...>(f_, c.fa.defs, &c.out_def));
    return tree_unflatten<Jacobian>(c.jacobian_def(as_tuple), c.blocks);
  }

 private:
  F f_;
  std::shared_ptr<TransformMemo> memo_ = new_transform_memo();  // shared by copies; null once moved from
};
}  // namespace detail

/// jacfwd(f)(args...): the Jacobian of f with respect to argument 0 by forward mode (one jvp per
/// input element, batched). As JAX's: f's output structure outside, the argument's inside, each
/// block of shape out_leaf.shape + arg_leaf.shape (for f : Array -> Array, f(x).shape + x.shape);
/// blocks in the output's dtype. Inputs and outputs must be floats.
template <class F> auto jacfwd(F f) { return detail::JacobianFn<F, true, false, 0>(std::move(f)); }
/// jacfwd(f, argnums<0, 2>): with respect to those arguments (inside: a std::tuple of their structures).
template <class F, bool T, int... I> auto jacfwd(F f, Argnums<T, I...>) {
  return detail::JacobianFn<F, true, T, I...>(std::move(f));
}
/// jacrev(f)(args...): the same Jacobian by reverse mode (one vjp per output element, batched);
/// blocks in the argument's dtype.
template <class F> auto jacrev(F f) { return detail::JacobianFn<F, false, false, 0>(std::move(f)); }
template <class F, bool T, int... I> auto jacrev(F f, Argnums<T, I...>) {
  return detail::JacobianFn<F, false, T, I...>(std::move(f));
}

namespace detail {
/// The optimized jaxpr jit runs: DCE and CSE of the traced one.
ClosedJaxpr jit_prepare(const ClosedJaxpr& j);
}  // namespace detail

struct JitOptions {
  /// Arguments that are compile-time values: part of the cache key by value. A C++ number at a
  /// parameter that takes an Array reaches f as a concrete rank-0 array (not traced); any other
  /// static argument reaches f as it is (f may branch on it). Arguments that are neither pytrees
  /// nor numbers traced (see jit) are always static; they must be printable with operator<< (that
  /// is their key). Here and in donate_argnums a negative index counts from the end (as JAX's);
  /// one out of range is an xj::TransformError.
  std::vector<int> static_argnums{};
  /// Array arguments whose buffers the call may reuse for its outputs (JAX's donate_argnums):
  /// after the call, every leaf of a donated argument is invalid (using it is an xj::Error naming
  /// it). Outside any trace only; under an enclosing transform donation does nothing.
  std::vector<int> donate_argnums{};
};

namespace detail {
[[noreturn]] void jit_static_array(std::size_t index);
/// An argument index of static_argnums / donate_argnums (`where` names the option) as a position:
/// a negative one counts from the end (as JAX's); out of range is a TransformError.
std::size_t normalized_argnum(int index, std::size_t num_args, const char* where);
[[noreturn]] void jit_donated_not_array(std::size_t index);
/// Appends argument `index`'s part of jit's cache key, "|index:part" (out of line: GCC 12 at -O3
/// warned -Wrestrict inside std::string's operator+ inlined into user code, a false positive).
void append_key_part(std::string& key, std::size_t index, std::string_view part);
/// A C++ number passed to jit as a weakly typed rank-0 array: f64 (double), f32 (float), i64 (integers).
Array jit_number(double v, DType dtype);
Array jit_number(std::int64_t v);
/// A traced input marked weakly typed (the tracer f receives for a C++ number).
Array jit_weak(const Array& x);
/// outs, each one weakly typed exactly where `weak` says so (a weak handle the flags call strong,
/// an input passed through a loop that ran no step, is made strong): only the concrete ones (jit's
/// outputs, Traced::out_weak), or tracers too (jit's inputs).
std::vector<Array> with_weak_types(std::vector<Array> outs, const std::vector<char>& weak, bool tracers_too = false);
/// Replaces the leaves of the donated arguments by handles that own their buffers, and
/// invalidates the caller's (jit's donate_argnums); not under a trace, and not a leaf that is
/// also one of `consts` (captured by the function).
void donate_args(FlatArgs& fa, const std::vector<int>& argnums, std::span<const Array> consts);

/// A C++ number (not bool): jit traces it where f's parameter accepts an Array. f is asked with
/// an Array at every number's place first; where it does not accept that, one place at a time.
template <class A> inline constexpr bool kJitNumber = std::is_arithmetic_v<A> && !std::is_same_v<A, bool>;
template <std::size_t K, class F, class... Args, std::size_t... J>
constexpr bool takes_array_at(std::index_sequence<J...>) {
  return std::is_invocable_v<const F&, std::conditional_t<J == K, const Array&, const Args&>...>;
}
template <class F, class... Args> constexpr bool takes_arrays_for_numbers() {
  return std::is_invocable_v<const F&, std::conditional_t<kJitNumber<std::decay_t<Args>>, const Array&, const Args&>...>;
}
template <std::size_t K, class F, class... Args> constexpr bool jit_traces_number() {
  using A = std::decay_t<std::tuple_element_t<K, std::tuple<Args...>>>;
  if constexpr (!kJitNumber<A>) return false;
  else if constexpr (takes_arrays_for_numbers<F, Args...>()) return true;
  else return takes_array_at<K, F, Args...>(std::index_sequence_for<Args...>{});
}
/// What f receives at parameter K: an Array for a number jit traces, else the argument's type.
template <std::size_t K, class F, class... Args>
using JitParam = std::conditional_t<jit_traces_number<K, F, Args...>(), const Array&,
                                    const std::tuple_element_t<K, std::tuple<Args...>>&>;
template <class A> Array jit_number_of(A v) {
  if constexpr (std::is_floating_point_v<A>) return jit_number(static_cast<double>(v), sizeof(A) == 4 ? f32 : f64);
  else {
    if constexpr (std::is_unsigned_v<A> && sizeof(A) >= sizeof(std::int64_t))
      if (v > static_cast<A>(INT64_MAX))
        throw TypeError("xj::jit: the integer argument " + std::to_string(v) + " does not fit in i64; make it static");
    return jit_number(static_cast<std::int64_t>(v));
  }
}

/// A stream that collects text (an std::ostringstream kept out of this header, which is parsed by
/// every user file).
class KeyStream {
 public:
  KeyStream();
  KeyStream(const KeyStream&) = delete;
  KeyStream& operator=(const KeyStream&) = delete;
  ~KeyStream();
  std::ostream& stream();
  std::string str() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
/// "type=value" with '|' and '\\' escaped (key parts are joined with '|': two different values
/// never join alike).
std::string static_key_from(const char* type_name, const std::string& value);
/// The hex text of a floating-point value's `n` value bytes.
std::string static_key_bytes(const unsigned char* bytes, std::size_t n);

/// A static argument's part of jit's cache key: its type and its value, as text. Numbers, enums
/// and strings are keyed here; any other type by its operator<< (through KeyStream, so that this
/// header needs no <ostream>: the type's own operator<< brings what it needs).
template <class A> std::string static_key(const A& a) {
  const char* type = typeid(A).name();
  if constexpr (std::is_floating_point_v<A>) {
    // Floating-point values are keyed by their bits: no two values share a key (text would
    // merge long doubles that differ past 17 digits); 0.0 and -0.0 are different keys.
    // x87's 80-bit long double (64 mantissa digits) holds 10 value bytes; the rest is padding.
    constexpr std::size_t n = std::is_same_v<A, long double> && LDBL_MANT_DIG == 64 ? 10 : sizeof(A);
    unsigned char bytes[sizeof(A)] = {};
    std::memcpy(bytes, &a, n);
    return static_key_from(type, static_key_bytes(bytes, n));
  } else if constexpr (std::is_integral_v<A>) {
    return static_key_from(type, std::to_string(a));  // bool and characters by their number
  } else if constexpr (std::is_enum_v<A>) {
    return static_key_from(type, std::to_string(static_cast<std::underlying_type_t<A>>(a)));
  } else if constexpr (std::is_convertible_v<const A&, std::string_view>) {
    return static_key_from(type, std::string(std::string_view(a)));
  } else {
    static_assert(requires(std::ostream& os) { os << a; },
                  "xj::jit: a static argument must be a number, an enum, a string or printable with operator<< "
                  "(it is part of the cache key)");
    KeyStream text;
    text.stream() << a;
    return static_key_from(type, text.str());
  }
}

template <class F, class... Args, std::size_t... I>
auto jit_call(const F& f, TraceCache& cache, const JitOptions& opts, const std::tuple<const Args&...>& args,
              std::index_sequence<I...>) {
  using R = std::decay_t<std::invoke_result_t<const F&, JitParam<I, F, Args...>...>>;
  constexpr bool trees[] = {true, Tree<std::decay_t<Args>>...};
  std::vector<char> is_static(sizeof...(Args), 0);
  for (int argnum : opts.static_argnums) {
    const std::size_t s = normalized_argnum(argnum, sizeof...(Args), "xj::jit: static_argnums");
    if (trees[s + 1]) jit_static_array(s);
    is_static[s] = 1;
  }
  std::vector<int> donated;  // donate_argnums as positions
  for (int argnum : opts.donate_argnums) {
    const std::size_t d = normalized_argnum(argnum, sizeof...(Args), "xj::jit: donate_argnums");
    if (!trees[d + 1]) jit_donated_not_array(d);
    donated.push_back(static_cast<int>(d));
  }
  FlatArgs fa;
  // The calling thread's dtype promotion mode changes what a trace computes (JAX keys jit on
  // jax_numpy_dtype_promotion): a strict trace answered standard calls with its dtypes.
  std::string statics = promotion_mode() == PromotionMode::strict ? "|strict" : "";
  std::vector<Array> static_numbers(sizeof...(Args));
  auto flatten_one = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
    using A = std::decay_t<std::tuple_element_t<K, std::tuple<Args...>>>;
    fa.begin_arg();
    if constexpr (Tree<A>) {
      PyTree<A>::flatten(std::get<K>(args), fa.leaves, fa.defs.back());
      // The C++ type is part of the key, as a treedef's node types are JAX's: a tuple and a
      // vector (or two structs with the same member names) flatten alike, and a function
      // overloaded on them reused the first one's trace.
      append_key_part(statics, K, typeid(A).name());
    } else if constexpr (jit_traces_number<K, F, Args...>()) {
      if (is_static[K]) {
        static_numbers[K] = jit_number_of(std::get<K>(args));
        append_key_part(statics, K, static_key(std::get<K>(args)));
      } else {
        PyTree<Array>::flatten(jit_number_of(std::get<K>(args)), fa.leaves, fa.defs.back());
        append_key_part(statics, K, typeid(A).name());
        statics += " weak";
      }
    } else {
      append_key_part(statics, K, static_key(std::get<K>(args)));
    }
    fa.end_arg();
  };
  (flatten_one(std::integral_constant<std::size_t, I>{}), ...);
  // A weakly typed leaf (a traced number, a weak output of another jit) is traced weak: its weak
  // type is part of the key, as in JAX.
  const std::vector<char> in_weak = weak_flags(fa.leaves);
  for (std::size_t k = 0; k < in_weak.size(); ++k)
    if (in_weak[k]) statics += "|w" + std::to_string(k);
  auto traced = cached(cache, signature_key(fa, std::vector<bool>(fa.leaves.size(), false)) + statics, [&] {
    Traced t;
    FlatFn flat = [&](std::span<const Array> tracers) {
      const std::vector<Array> xs = with_weak_types({tracers.begin(), tracers.end()}, in_weak, /*tracers_too=*/true);
      auto rebuild = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
        using A = std::decay_t<std::tuple_element_t<K, std::tuple<Args...>>>;
        if constexpr (Tree<A>) return tree_unflatten<A>(fa.defs[K], std::span<const Array>(xs).subspan(fa.offsets[K], fa.offsets[K + 1] - fa.offsets[K]));
        else if constexpr (jit_traces_number<K, F, Args...>()) return is_static[K] ? static_numbers[K] : xs[fa.offsets[K]];  // weak (a number's leaf)
        else return std::get<K>(args);
      };
      R out = f(rebuild(std::integral_constant<std::size_t, I>{})...);
      std::vector<Array> outs;
      PyTree<R>::flatten(out, outs, t.out_def);
      t.out_weak = weak_flags(outs);
      return outs;
    };
    t.jaxpr = jit_prepare(trace_flat(flat, fa.avals()));
    t.plan = plan_for_jit(t.jaxpr);  // plan now, once, rather than on the first call's evaluation
    return t;
  });
  if (donated.empty())
    return tree_unflatten<R>(traced->out_def,
                             with_weak_types(eval_jaxpr_with_plan(traced->jaxpr, *traced->plan, fa.leaves), traced->out_weak));
  donate_args(fa, donated, traced->jaxpr.consts);
  return tree_unflatten<R>(traced->out_def, with_weak_types(eval_jaxpr_consuming(traced->jaxpr, *traced->plan, std::move(fa.leaves)),
                                                            traced->out_weak));
}
}  // namespace detail

/// jit(f, {.static_argnums}): traces f once per abstract signature (shapes, dtypes, pytree
/// structure, and the values of static arguments), optimizes the jaxpr (DCE, CSE), builds its
/// execution plan (kernels resolved once, elementwise chains fused, transposes folded into GEMMs,
/// buffers from the arena) and reuses both on every later call. The caching rule (JAX's): what f
/// reads besides its arguments is baked in at the first trace of a signature. An array captured
/// by reference and reassigned later is NOT seen by later calls; pass it as an argument instead
/// (or make a new jit). grad, vjp, jvp, linearize and the Jacobians trace on every call.
template <class F> auto jit(F f, JitOptions opts = {}) {
  auto cache = detail::new_trace_cache();
  return [f, cache, opts]<class... Args>(const Args&... args) {
    return detail::jit_call(f, *cache, opts, std::tuple<const Args&...>(args...), std::index_sequence_for<Args...>{});
  };
}

/// Hessian of scalar-valued f with respect to argument 0, as jacfwd(jacrev(f)): for a pytree
/// argument, its structure nested in itself (JAX's).
template <class F> auto hessian(F f) { return jacfwd(jacrev(std::move(f))); }
/// hessian(f, argnums<0, 1>): jacfwd(jacrev(f, argnums), argnums), a std::tuple of std::tuples.
template <class F, bool T, int... I> auto hessian(F f, Argnums<T, I...> argnums) {
  return jacfwd(jacrev(std::move(f), argnums), argnums);
}

}  // namespace xjax

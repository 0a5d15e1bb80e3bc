// detail/flat.hpp: the bridge between user callables on pytrees and the flat core.
#pragma once
#include <memory>
#include <source_location>
#include <span>
#include <tuple>
#include <type_traits>
#include <vector>

#include "xjax/jaxpr.hpp"
#include "xjax/pytree.hpp"

namespace xjax::detail {

/// A function on flat lists of arrays (leaves in, leaves out); its copies share one callable.
/// Not std::function: each callable costs one small class here (a constructor, a destructor and
/// a virtual call), where std::function instantiates a manager and an invoker per callable, and
/// every transform call of user code makes one (compile time, issue 26).
class FlatFn {
 public:
  FlatFn() = default;
  template <class G>
    requires(!std::is_same_v<std::decay_t<G>, FlatFn> && std::is_invocable_v<const G&, std::span<const Array>>)
  FlatFn(G g) : FlatFn(std::unique_ptr<const Body>(new BodyOf<G>(std::move(g)))) {}
  /// Calls the function; an Error when there is none (a default-constructed FlatFn).
  std::vector<Array> operator()(std::span<const Array> leaves) const;
  explicit operator bool() const { return body_ != nullptr; }

  /// What a FlatFn calls; flat_fn derives its own body from it, other callables get BodyOf.
  struct Body {
    Body() = default;
    Body(const Body&) = delete;
    Body& operator=(const Body&) = delete;
    virtual ~Body();
    virtual std::vector<Array> call(std::span<const Array> leaves) const = 0;
  };
  /// A FlatFn that owns `body` (its copies share it).
  explicit FlatFn(std::unique_ptr<const Body> body);

 private:
  template <class G> struct BodyOf final : Body {
    explicit BodyOf(G fn) : g(std::move(fn)) {}
    std::vector<Array> call(std::span<const Array> leaves) const override { return g(leaves); }
    G g;
  };
  std::shared_ptr<const Body> body_;
};

/// Traces f on fresh tracers of in_avals (created_at = loc, the transform's call site).
ClosedJaxpr trace_flat(const FlatFn& f, std::span<const ShapedArray> in_avals,
                       std::source_location loc = std::source_location::current());
/// The same, each tracer weakly typed where `weak` says so: a transform traces an argument that
/// is weak (a C++ number jit traced, a weak jit output) weak, as JAX's tracers keep their avals'
/// weak_type (promotion inside f then treats it as the number it stands for).
ClosedJaxpr trace_flat(const FlatFn& f, std::span<const ShapedArray> in_avals, std::span<const char> weak,
                       std::source_location loc = std::source_location::current());
/// Whether each of xs is weakly typed.
std::vector<char> weak_flags(std::span<const Array> xs);
/// x, marked weakly typed (a new handle: the same value or tracer).
Array weakly_typed(const Array& x);
/// x weakly typed exactly when `weak` (x itself when it already is as asked; else a new handle).
Array with_weak_type(const Array& x, bool weak);

/// The arguments of a call, flattened: all leaves in order, and one TreeDef per argument.
struct FlatArgs {
  std::vector<Array> leaves;
  std::vector<TreeDef> defs;
  std::vector<std::size_t> offsets;  // first leaf of each argument; offsets.back() == leaves.size()
  // Out of line (transforms/api.cpp), as TreeDef's: compile time of user code (issue 26).
  FlatArgs();
  FlatArgs(FlatArgs&&) noexcept;
  FlatArgs& operator=(FlatArgs&&) noexcept;
  ~FlatArgs();
  /// Appends an argument's (empty) TreeDef; flatten it into leaves and defs.back(), then end_arg.
  void begin_arg();
  void end_arg();
  std::vector<ShapedArray> avals() const;
};

/// Throws an Error when the argument structures `got` differ from `expected` (one TreeDef per
/// argument): "WHAT differ from the arguments at [i]['key']...: ...".
/// Throws an Error "WHAT at PATH: ..." when `got` differs from `expected`.
void check_same_tree(const std::string& what, const TreeDef& expected, const TreeDef& got);
void check_same_args(const std::string& what, std::span<const TreeDef> expected, std::span<const TreeDef> got);

/// T is a pytree (arrays in containers); other argument types (int, double, ...) are static values.
template <class T> concept Tree = requires(const T& t, std::vector<Array>& leaves, TreeDef& def) {
  PyTree<T>::flatten(t, leaves, def);
};

template <class... Args> FlatArgs flatten_args(const Args&... args) {
  FlatArgs fa;
  auto one = [&](const auto& a) {
    fa.begin_arg();
    PyTree<std::decay_t<decltype(a)>>::flatten(a, fa.leaves, fa.defs.back());
    fa.end_arg();
  };
  (one(args), ...);
  return fa;
}

template <class... Args, std::size_t... I>
std::tuple<Args...> unflatten_args_impl(const std::vector<TreeDef>& defs, std::span<const Array> leaves,
                                        std::index_sequence<I...>) {
  std::span<const Array> rest = leaves;
  return std::tuple<Args...>{PyTree<Args>::unflatten(defs[I], rest)...};
}

template <class... Args>
std::tuple<Args...> unflatten_args(const std::vector<TreeDef>& defs, std::span<const Array> leaves) {
  return unflatten_args_impl<Args...>(defs, leaves, std::index_sequence_for<Args...>{});
}

/// flat_fn's body: unflattens the leaves into Args, calls f, flattens its result.
template <class F, class... Args> struct TreeFnBody final : FlatFn::Body {
  TreeFnBody(const F& fn, const std::vector<TreeDef>& arg_defs, TreeDef* result_def)
      : f(fn), defs(arg_defs), out_def(result_def) {}
  std::vector<Array> call(std::span<const Array> leaves) const override {
    auto args = unflatten_args<std::decay_t<Args>...>(defs, leaves);
    auto result = std::apply(f, args);
    std::vector<Array> outs;
    TreeDef def;
    PyTree<std::decay_t<decltype(result)>>::flatten(result, outs, def);
    if (out_def) *out_def = def;
    return outs;
  }
  F f;
  std::vector<TreeDef> defs;
  TreeDef* out_def;
};

/// f as a function on flat leaves; the result's structure is written to *out_def when it runs.
template <class F, class... Args>
FlatFn flat_fn(const F& f, const std::vector<TreeDef>& defs, TreeDef* out_def) {
  return FlatFn(std::unique_ptr<const FlatFn::Body>(new TreeFnBody<F, Args...>(f, defs, out_def)));
}

}  // namespace xjax::detail

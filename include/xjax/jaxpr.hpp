// jaxpr.hpp: the IR. A Jaxpr is a typed SSA list of primitive equations; it is immutable after
// construction and may be shared between threads. Printing writes JAX's text form.
#pragma once
#include <atomic>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <variant>
#include <vector>

#include "xjax/array.hpp"
#include "xjax/primitives.hpp"

namespace xjax {

/// A variable: a typed name bound once. Identity is by object; names are given when printing.
class Var {
 public:
  Var() = default;
  explicit Var(ShapedArray aval);
  const ShapedArray& aval() const { return p_->aval; }
  std::uint64_t id() const { return p_->id; }
  bool valid() const { return p_ != nullptr; }
  friend bool operator==(const Var& a, const Var& b) { return a.p_ == b.p_; }
  friend bool operator<(const Var& a, const Var& b) { return a.p_ < b.p_; }

 private:
  struct Impl {
    ShapedArray aval;
    std::uint64_t id;
  };
  std::shared_ptr<const Impl> p_;
};

/// A rank-0 constant written inline in an equation.
struct Literal {
  Array value;
};

/// An operand of an equation: a variable or a literal.
using Atom = std::variant<Var, Literal>;
const ShapedArray& atom_aval(const Atom& a);

struct ClosedJaxpr;
using ClosedJaxprPtr = std::shared_ptr<const ClosedJaxpr>;

/// Extension point for parameters that are objects (e.g. a checkpoint policy).
struct ParamObject {
  virtual ~ParamObject() = default;
  virtual std::string repr() const = 0;
};

using Param = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>, DType,
                           ClosedJaxprPtr, std::vector<ClosedJaxprPtr>,
                           std::shared_ptr<const ParamObject>>;
/// Parameters of an equation, printed sorted by name.
using Params = std::map<std::string, Param, std::less<>>;

/// Typed access to a parameter; throws xj::Error naming the parameter when absent or mistyped.
template <class T> const T& param(const Params& ps, std::string_view name);
std::int64_t param_int(const Params& ps, std::string_view name);
const std::vector<std::int64_t>& param_ints(const Params& ps, std::string_view name);

/// One equation `outs = prim[params] inputs`, with the user's source location.
struct Eqn {
  Primitive prim;
  std::vector<Atom> inputs;
  std::vector<Var> outputs;
  Params params;
  std::source_location loc;
};

struct Jaxpr;
namespace detail {
struct EvalPlan;
/// What is derived from a jaxpr and kept with it: its execution plan (built on first evaluation)
/// and jaxprs built from it (scan's unrolled bodies). Copying or assigning a Jaxpr gives an
/// empty cache, so a copy may be edited before it is first evaluated. Thread-safe.
class PlanCache {
 public:
  PlanCache() = default;
  PlanCache(const PlanCache&) {}
  PlanCache& operator=(const PlanCache&) {
    std::lock_guard lock(mutex_);
    ready_.store(nullptr);
    plan_.reset();
    derived_.clear();
    return *this;
  }
  const EvalPlan& get(const Jaxpr& j) const;
  /// The jaxpr stored under `key`, built by `build` (outside the lock) the first time.
  using DerivedKey = std::vector<std::int64_t>;
  ClosedJaxprPtr derived(const DerivedKey& key, const std::function<ClosedJaxprPtr()>& build) const;

 private:
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const EvalPlan> plan_;
  mutable std::atomic<const EvalPlan*> ready_{nullptr};  // plan_ once built: get() without the lock
  mutable std::map<DerivedKey, ClosedJaxprPtr> derived_;
};
}  // namespace detail

struct Jaxpr {
  detail::PlanCache plan;  // not part of the value; see PlanCache
  std::vector<Var> constvars;
  std::vector<Var> invars;
  std::vector<Eqn> eqns;
  std::vector<Atom> outvars;

  std::vector<ShapedArray> in_avals() const;
  std::vector<ShapedArray> out_avals() const;
};

/// A jaxpr with values for its constvars. A const is concrete, or a tracer of an enclosing trace
/// (closure conversion lifted it).
struct ClosedJaxpr {
  std::shared_ptr<const Jaxpr> jaxpr;
  std::vector<Array> consts;

  const Jaxpr& operator*() const { return *jaxpr; }
  const Jaxpr* operator->() const { return jaxpr.get(); }
  std::vector<ShapedArray> in_avals() const { return jaxpr->in_avals(); }
  std::vector<ShapedArray> out_avals() const { return jaxpr->out_avals(); }
  std::string str() const;
};

std::ostream& operator<<(std::ostream& os, const Jaxpr& j);
std::ostream& operator<<(std::ostream& os, const ClosedJaxpr& j);

/// Evaluates a closed jaxpr. Outside any trace it runs the interpreter (freeing each buffer after
/// its last use); inside a trace it records the equations into that trace.
std::vector<Array> eval_jaxpr(const ClosedJaxpr& j, std::span<const Array> args);

/// Builds the execution plans of j and of every jaxpr in its equations' params (scan and
/// checkpoint bodies, branches...), so that the first evaluation does not pay for them. Optional:
/// evaluation builds each plan on first use. Thread-safe; a plan is built once per jaxpr.
void prepare(const ClosedJaxpr& j);

/// Checks that every variable is defined before use with matching types and that every equation's
/// outputs are what its shape rule says. Throws xj::TypeError naming the equation.
void typecheck(const Jaxpr& j);

template <class T> const T& param(const Params& ps, std::string_view name) {
  auto it = ps.find(name);
  if (it == ps.end()) throw Error("missing parameter '" + std::string(name) + "'");
  const T* v = std::get_if<T>(&it->second);
  if (!v) throw Error("parameter '" + std::string(name) + "' has the wrong type");
  return *v;
}

}  // namespace xjax

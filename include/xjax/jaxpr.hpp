// jaxpr.hpp: the IR. A Jaxpr is a typed SSA list of primitive equations; it is immutable after
// construction and may be shared between threads. Printing writes JAX's text form.
#pragma once
#include <iosfwd>
#include <memory>
#include <source_location>
#include <string>
#include <variant>
#include <vector>

#include "xjax/array.hpp"
#include "xjax/params.hpp"
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

/// One equation `outs = prim[params] inputs`, with the user's source location.
struct Eqn {
  Primitive prim;
  std::vector<Atom> inputs;
  std::vector<Var> outputs;
  Params params;
  std::source_location loc;
};

/// A plain value. Its execution plan is not part of it: eval_jaxpr keeps plans in a side table
/// keyed by the shared jaxpr object (src/plan_cache.cpp), so copying, assigning or destroying a
/// Jaxpr never touches a plan another thread is running.
struct Jaxpr {
  std::vector<Var> constvars;
  std::vector<Var> invars;
  std::vector<Eqn> eqns;
  std::vector<Atom> outvars;

  std::vector<ShapedArray> in_avals() const;
  std::vector<ShapedArray> out_avals() const;
};

/// A jaxpr with values for its constvars. A const is concrete, or a tracer of an enclosing trace
/// (closure conversion lifted it).
namespace detail {
/// The Error for a ClosedJaxpr without a jaxpr (default-constructed) used as one.
[[noreturn]] void no_jaxpr(const char* what);
}  // namespace detail

struct ClosedJaxpr {
  std::shared_ptr<const Jaxpr> jaxpr;
  std::vector<Array> consts;

  const Jaxpr& operator*() const { return body("*"); }
  const Jaxpr* operator->() const { return &body("->"); }
  std::vector<ShapedArray> in_avals() const { return body("in_avals").in_avals(); }
  std::vector<ShapedArray> out_avals() const { return body("out_avals").out_avals(); }
  std::string str() const;

 private:
  const Jaxpr& body(const char* what) const {
    if (!jaxpr) detail::no_jaxpr(what);
    return *jaxpr;
  }
};

std::ostream& operator<<(std::ostream& os, const Jaxpr& j);
std::ostream& operator<<(std::ostream& os, const ClosedJaxpr& j);

/// Evaluates a closed jaxpr. Outside any trace it runs the jaxpr's execution plan (docs/status.md:
/// plans, raw plans); inside a trace it records the equations into that trace.
std::vector<Array> eval_jaxpr(const ClosedJaxpr& j, std::span<const Array> args);

namespace detail {
struct EvalPlan;
/// jit: plans j and the jaxprs inside it (prepare) and returns j's plan, which jit keeps beside j.
std::shared_ptr<const EvalPlan> plan_for_jit(const ClosedJaxpr& j);
/// eval_jaxpr(j, args), running `plan` (j's plan) when outside a trace instead of looking it up.
std::vector<Array> eval_jaxpr_with_plan(const ClosedJaxpr& j, const EvalPlan& plan, std::span<const Array> args);
/// As eval_jaxpr_with_plan, the plan owning `args` (jit's donated inputs): a buffer no one else
/// holds may be overwritten by an output at its last use.
std::vector<Array> eval_jaxpr_consuming(const ClosedJaxpr& j, const EvalPlan& plan, std::vector<Array> args);
}  // namespace detail

/// Builds the execution plans of j and of every jaxpr in its equations' params (scan and
/// checkpoint bodies, branches...), so that the first evaluation does not pay for them. Optional:
/// evaluation builds each plan on first use. Thread-safe; a plan is built once per jaxpr.
void prepare(const ClosedJaxpr& j);

/// Drops every cached execution plan and derived jaxpr (scan's unrolled bodies), like JAX's
/// jax.clear_caches. They are rebuilt on next use. Plans of jaxprs that are gone are also dropped
/// automatically, in batches, as new plans are built. (A jit object's traces and their plans
/// belong to it and are not touched.) Thread-safe: a plan being run stays alive until its run ends.
void clear_caches();

/// Checks that every variable is defined before use with matching types and that every equation's
/// outputs are what its shape rule says. Throws xj::TypeError naming the equation.
void typecheck(const Jaxpr& j);

}  // namespace xjax

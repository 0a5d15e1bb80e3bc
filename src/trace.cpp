// trace.cpp: tracing. A Builder records the equations of one jaxpr; a thread-local stack holds
// the builders active on this thread (innermost last). bind() is the single entry of every
// primitive application: it records into the innermost builder, or runs the kernel when no trace
// is active. Operands from enclosing traces are lifted into consts (closure conversion).
#include <algorithm>
#include <atomic>
#include <optional>
#include <unordered_map>

#include "loops/loops.hpp"
#include "internal.hpp"
#include "small_blocks.hpp"
#include "xjax/runtime.hpp"
#include "per_thread.hpp"

namespace xjax {

namespace detail {

struct Builder : std::enable_shared_from_this<Builder> {
  std::vector<Var> invars;
  std::vector<Var> constvars;
  std::vector<Array> consts;
  std::vector<Array> captured;  // the caller's handles of consts (see add_const)
  std::unordered_map<const ArrayImpl*, Var> const_of;
  std::vector<Eqn> eqns;

  Array new_tracer(const ShapedArray& aval, const std::source_location& loc) {
    // Both from the per-thread small-block cache (a trace makes one per equation output).
    auto tracer = std::allocate_shared<Tracer>(SmallBlockAllocator<Tracer>{});
    tracer->builder = weak_from_this();
    tracer->owner = this;
    tracer->var = Var(aval);
    tracer->created_at = loc;
    auto impl = std::allocate_shared<ArrayImpl>(SmallBlockAllocator<ArrayImpl>{});
    impl->aval = aval;
    impl->tracer = std::move(tracer);
    return Array(std::move(impl));
  }

  // A captured concrete array is held through a handle of the jaxpr's own (on the same buffer):
  // donating the caller's array to another jit then leaves this jaxpr's value alone (it reset the
  // one handle both shared: a later call read freed memory). `captured` keeps the caller's handle
  // alive so that `const_of`'s keys stay unique while the trace lasts.
  Var add_const(const Array& a) {
    auto it = const_of.find(a.impl().get());
    if (it != const_of.end()) return it->second;
    Var v(a.aval());
    constvars.push_back(v);
    consts.push_back(detail::fresh_handle(a));
    captured.push_back(a);
    const_of.emplace(a.impl().get(), v);
    return v;
  }
};

namespace {

// The builders of the traces under way on this thread, innermost last (valid also in a static
// object's destructor at exit: per_thread_always).
struct TraceStack {
  std::vector<std::shared_ptr<Builder>> builders;
};
std::vector<std::shared_ptr<Builder>>& trace_stack() { return per_thread_always<TraceStack>().builders; }
thread_local const std::source_location* t_loc_override XJAX_INITIAL_EXEC_TLS = nullptr;

bool on_stack(const Builder* b) {
  for (const auto& s : trace_stack())
    if (s.get() == b) return true;
  return false;
}

Atom to_atom(Builder& b, const Array& a, const std::source_location* used_at = nullptr) {
  if (!a.valid()) throw Error("an empty xj::Array (default-constructed) was passed to an operation");
  const auto& im = *a.impl();
  if (!im.tracer) {
    detail::check_not_donated(a, "used in a traced function");
    // a literal of its own handle, as consts (add_const): donating the caller's scalar later
    // leaves the jaxpr's value, and an output that is this literal is not the caller's array
    if (im.aval.ndim() == 0) return Literal{detail::fresh_handle(a)};
    return b.add_const(a);
  }
  auto owner = im.tracer->builder.lock();
  if (owner.get() == &b) return im.tracer->var;
  if (!owner || !on_stack(owner.get())) tracer_escaped(a, used_at);
  return b.add_const(a);  // a tracer of an enclosing trace: closure conversion
}

template <class E> [[noreturn]] void rethrow_at(const E& e, const std::source_location& loc) {
  throw E(std::string(e.what()) + " (at " + format_location(loc) + ")");
}

// JAX's weak-type rule for a first-order primitive, the dtype an equation's outputs are weak in
// (nullopt: none is weak), from its n operands' weak flags and dtypes (weak_at(i), dtype_at(i)): a
// conversion's is its weak_type parameter's; an index's (argmax, argmin) and a logical reduction's
// never; a gather's, dynamic_slice's or scatter's is its operand's (indices and updates not
// counted); otherwise the operands' dtype when every operand is weak (a comparison's bool output
// is not), select_n's selector not counted (its cases are).
template <class WeakAt, class DtypeAt>
std::optional<DType> weak_output_dtype(Primitive p, const Params& params, std::size_t n, WeakAt weak_at, DtypeAt dtype_at) {
  using P = Primitive;
  if (p == P::convert_element_type) {
    const auto& c = params.get<params::ConvertElementType>();
    return c.weak_type ? std::optional(c.new_dtype) : std::nullopt;
  }
  if (p == P::argmax || p == P::argmin || p == P::reduce_and || p == P::reduce_or) return std::nullopt;
  std::size_t first = 0;
  if (p == P::gather || p == P::dynamic_slice || p == P::scatter || p == P::scatter_add || p == P::scatter_mul ||
      p == P::scatter_min || p == P::scatter_max)
    n = std::min<std::size_t>(n, 1);
  if (p == P::select_n && n > 0) first = 1;
  if (first >= n) return std::nullopt;
  for (std::size_t i = first; i < n; ++i)
    if (!weak_at(i)) return std::nullopt;
  return dtype_at(first);
}

// Whether p carries a body whose outputs' weak types its outputs take (call_out_weak).
bool weak_types_from_body(Primitive p) {
  using P = Primitive;
  return p == P::checkpoint || p == P::custom_jvp_call || p == P::custom_vjp_call || p == P::scan || p == P::cond || p == P::while_;
}
// The loops reverse mode emits for a checkpointed scan or while_loop: their outputs are strong, as
// the plain loops' computed from their carries (read strong, below), so that value_and_grad's value
// has the dtype of the function's.
bool strong_outputs(Primitive p) {
  using P = Primitive;
  return p == P::revolve_fwd || p == P::online_fwd || p == P::revolve_lin || p == P::revolve_bwd;
}

std::optional<std::vector<char>> call_out_weak(Primitive p, const Params& params, std::span<const char> in_weak);

/// Which of cj's outputs are weakly typed when its inputs' are `in_weak` (its consts' from the
/// arrays): the weak types its trace gives them, rederived equation by equation (a jaxpr records
/// weak types only where they start: weak literals and conversions). nullopt when in_weak does not
/// fit cj's inputs.
std::optional<std::vector<char>> jaxpr_out_weak(const ClosedJaxpr& cj, std::span<const char> in_weak) {
  const Jaxpr& j = *cj;
  if (in_weak.size() != j.invars.size() || cj.consts.size() != j.constvars.size()) return std::nullopt;
  std::unordered_map<std::uint64_t, char> weak_of;  // by variable id; absent: strong
  for (std::size_t i = 0; i < j.invars.size(); ++i)
    if (in_weak[i]) weak_of[j.invars[i].id()] = 1;
  for (std::size_t i = 0; i < j.constvars.size(); ++i)
    if (is_weak(cj.consts[i])) weak_of[j.constvars[i].id()] = 1;
  auto atom_weak = [&](const Atom& a) -> char {
    if (const auto* v = std::get_if<Var>(&a)) return weak_of.count(v->id()) ? 1 : 0;
    return is_weak(std::get<Literal>(a).value) ? 1 : 0;
  };
  std::vector<DType> dtypes;
  std::vector<char> weak;
  for (const Eqn& e : j.eqns) {
    dtypes.clear();
    weak.clear();
    for (const Atom& a : e.inputs) {
      dtypes.push_back(atom_aval(a).dtype);
      weak.push_back(atom_weak(a));
    }
    if (strong_outputs(e.prim)) continue;
    if (const auto call = call_out_weak(e.prim, e.params, weak)) {
      for (std::size_t k = 0; k < e.outputs.size() && k < call->size(); ++k)
        if ((*call)[k]) weak_of[e.outputs[k].id()] = 1;
      continue;
    }
    if (const auto w = weak_output_dtype(e.prim, e.params, weak.size(), [&](std::size_t i) { return weak[i] != 0; },
                                         [&](std::size_t i) { return dtypes[i]; }))
      for (const Var& o : e.outputs)
        if (o.aval().dtype == *w) weak_of[o.id()] = 1;
  }
  std::vector<char> out;
  for (const Atom& a : j.outvars) out.push_back(atom_weak(a));
  return out;
}

// The weak types of a call primitive's outputs: its body's, from its operands' (JAX takes a call's
// output avals from its traced body: checkpoint(max)(weak x) * 100 is strong, as max's result).
// nullopt for a first-order primitive, and for the calls ruled by the standard rule (custom_lin,
// custom_linear_solve, the revolve loops).
std::optional<std::vector<char>> call_out_weak(Primitive p, const Params& params, std::span<const char> in_weak) {
  using P = Primitive;
  if (p == P::checkpoint) return jaxpr_out_weak(*params.get<params::Checkpoint>().jaxpr, in_weak);
  if (p == P::custom_jvp_call) return jaxpr_out_weak(*params.get<params::CustomJvpCall>().call_jaxpr, in_weak);
  if (p == P::custom_vjp_call) return jaxpr_out_weak(*params.get<params::CustomVjpCall>().call_jaxpr, in_weak);
  // scan and while_loop trace their bodies with strong carries and scanned operands (docs/status.md):
  // read so, as the body's promotions did (a weak init would otherwise make sum(x) of a weak x,
  // recorded without JAX's conversion, look weak); their consts keep their weak types.
  auto strong_after = [](std::span<const char> w, std::size_t n) {
    std::vector<char> r(w.begin(), w.end());
    for (std::size_t i = n; i < r.size(); ++i) r[i] = 0;
    return r;
  };
  if (p == P::scan) {  // consts, carry, xs: its invars
    const auto& sc = params.get<params::Scan>();
    return jaxpr_out_weak(*sc.jaxpr, strong_after(in_weak, static_cast<std::size_t>(sc.num_consts)));
  }
  if (p == P::cond) {  // the index, then the branches' operands; the outputs branch 0's (JAX's)
    const auto& branches = params.get<params::Cond>().branches;
    if (branches.empty() || in_weak.empty()) return std::nullopt;
    return jaxpr_out_weak(*branches[0], in_weak.subspan(1));
  }
  if (p == P::while_) {  // cond consts, body consts, carry; the body's outputs
    const auto& w = params.get<params::While>();
    const auto skip = static_cast<std::size_t>(w.cond_nconsts);
    if (skip > in_weak.size()) return std::nullopt;
    return jaxpr_out_weak(*w.body_jaxpr, strong_after(in_weak.subspan(skip), static_cast<std::size_t>(w.body_nconsts)));
  }
  return std::nullopt;
}

// The weak types of p's outputs applied to `inputs`: per output for a call primitive (its body's),
// else the dtype its outputs are weak in.
struct OutWeak {
  std::optional<std::vector<char>> per_output;
  std::optional<DType> dtype;
};
OutWeak out_weak(Primitive p, const Params& params, std::span<const Array> inputs, std::size_t num_outputs) {
  if (strong_outputs(p)) return {std::vector<char>(num_outputs, 0), {}};
  if (weak_types_from_body(p))
    if (auto call = call_out_weak(p, params, weak_flags(inputs)); call && call->size() == num_outputs) return {std::move(call), {}};
  return {{}, weak_output_dtype(p, params, inputs.size(), [&](std::size_t i) { return is_weak(inputs[i]); },
                                [&](std::size_t i) { return inputs[i].dtype(); })};
}

// outs, each weakly typed exactly as `weak` says (an output that is an operand's handle, a loop
// that ran no step returning its init, loses a weak type the rule does not give it).
std::vector<Array> with_weak_outputs(const OutWeak& weak, std::vector<Array> outs) {
  for (std::size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].valid()) continue;
    const bool w = weak.per_output ? (k < weak.per_output->size() && (*weak.per_output)[k]) : weak.dtype && outs[k].dtype() == *weak.dtype;
    outs[k] = with_weak_type(outs[k], w);
  }
  return outs;
}

}  // namespace

bool tracing_active() { return !trace_stack().empty(); }

bool tracer_in_active_trace(const Tracer& t) {
  auto owner = t.builder.lock();
  return owner && on_stack(owner.get());
}

void tracer_escaped(const Array& a, const std::source_location* used_at) {
  throw TracerError("a tracer of " + a.aval().str() + " created at " + format_location(a.impl()->tracer->created_at) +
                    (used_at ? " and used at " + format_location(*used_at) : std::string()) +
                    " escaped the transform that created it: its trace has ended, so it has no value "
                    "(it was stored outside the traced function, or captured by a closure called after "
                    "its transform returned). Return it from the function instead: as an output, or "
                    "as aux data with {.has_aux = true}");
}

LocationScope::LocationScope(const std::source_location* loc) : saved_(t_loc_override) { t_loc_override = loc; }
LocationScope::~LocationScope() { t_loc_override = saved_; }

std::vector<Array> bind(Primitive p, std::span<const Array> inputs, Params params,
                        std::source_location loc) {
  if (t_loc_override) loc = *t_loc_override;
  if (!params_match(p, params))
    throw InternalError("bind", std::string(primitive_name(p)) + " bound with params::" +
                                    params_struct_name(params.index()));
  std::vector<ShapedArray> in_avals;
  in_avals.reserve(inputs.size());
  for (const auto& x : inputs) {
    if (!x.valid())
      throw Error(std::string(primitive_name(p)) + ": an operand is an empty xj::Array (at " +
                  format_location(loc) + ")");
    if (x.impl()->donated) check_not_donated(x, (std::string("used by ") + std::string(primitive_name(p)) + " at " + format_location(loc)).c_str());
    in_avals.push_back(x.aval());
  }
  std::vector<ShapedArray> out_avals;
  try {
    out_avals = abstract_eval(p, in_avals, params);
  } catch (const ShapeError& e) {
    rethrow_at(e, loc);
  } catch (const TypeError& e) {
    rethrow_at(e, loc);
  }
  const OutWeak weak = out_weak(p, params, inputs, out_avals.size());

  auto& stack = trace_stack();
  if (stack.empty()) {
    for (const auto& x : inputs)
      if (x.is_tracer()) tracer_escaped(x, &loc);
    ImplRule impl = impl_rule(p);
    auto outs = impl ? impl(inputs, params) : run_kernel(p, inputs, params, out_avals);
    count_eval(p);
    return with_weak_outputs(weak, std::move(outs));
  }

  Builder& b = *stack.back();
  Eqn eqn{p, {}, {}, std::move(params), loc};
  eqn.inputs.reserve(inputs.size());
  for (const auto& x : inputs) eqn.inputs.push_back(to_atom(b, x, &loc));
  std::vector<Array> outs;
  outs.reserve(out_avals.size());
  eqn.outputs.reserve(out_avals.size());
  for (const auto& aval : out_avals) {
    outs.push_back(b.new_tracer(aval, loc));
    eqn.outputs.push_back(outs.back().impl()->tracer->var);
  }
  // Room for 16 equations at first: most traces are that short, and a longer one grows from there
  // without the four smallest reallocations (each moving every equation).
  if (b.eqns.capacity() == 0) b.eqns.reserve(16);
  b.eqns.push_back(std::move(eqn));
  return with_weak_outputs(weak, std::move(outs));
}

Array bind1(Primitive p, std::span<const Array> inputs, Params params, std::source_location loc) {
  return bind(p, inputs, std::move(params), loc).at(0);
}

FlatFn::Body::~Body() = default;
FlatFn::FlatFn(std::unique_ptr<const Body> body) : body_(std::move(body)) {}
std::vector<Array> FlatFn::operator()(std::span<const Array> leaves) const {
  if (!body_) throw Error("a flat function was called before it was given a callable");
  return body_->call(leaves);
}

ClosedJaxpr trace_flat(const FlatFn& f, std::span<const ShapedArray> in_avals, std::source_location loc) {
  return trace_flat(f, in_avals, {}, loc);
}

ClosedJaxpr trace_flat(const FlatFn& f, std::span<const ShapedArray> in_avals, std::span<const char> weak,
                       std::source_location loc) {
  auto b = std::make_shared<Builder>();
  trace_stack().push_back(b);
  struct Pop {
    ~Pop() { trace_stack().pop_back(); }
  } pop;
  std::vector<Array> args;
  args.reserve(in_avals.size());
  for (const auto& aval : in_avals) {
    args.push_back(b->new_tracer(aval, loc));
    b->invars.push_back(args.back().impl()->tracer->var);
    if (args.size() <= weak.size() && weak[args.size() - 1]) args.back() = weakly_typed(args.back());
  }
  std::vector<Array> outs = f(args);
  auto jaxpr = std::make_shared<Jaxpr>();
  for (const auto& o : outs) jaxpr->outvars.push_back(to_atom(*b, o));
  jaxpr->constvars = std::move(b->constvars);
  jaxpr->invars = std::move(b->invars);
  jaxpr->eqns = std::move(b->eqns);
#if XJAX_CHECKS
  typecheck(*jaxpr);
#endif
  return ClosedJaxpr{std::move(jaxpr), std::move(b->consts)};
}

}  // namespace detail
}  // namespace xjax

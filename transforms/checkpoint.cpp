// checkpoint.cpp: the checkpoint primitive and all its rules, the policies, checkpoint_name's
// entry and saved_residuals.
//   outs... = checkpoint[jaxpr, policy, prevent_cse, differentiated] consts... args...
// Evaluation runs the body. jvp keeps the block: checkpoint(jvp(body)). Partial evaluation asks
// the policy, equation by equation of the body, whether a known value is saved or recomputed:
// the known part becomes a checkpoint that also returns the saved residuals, the staged part a
// checkpoint that recomputes what was not saved (the body's inputs are always available to it).
// Transposition emits a checkpoint around the transposed body, so the recompute runs when the
// backward pass reaches the block, never earlier. Nesting follows JAX: inside an enclosing
// checkpoint's partial evaluation, the enclosing policy governs this body too.
#include <algorithm>
#include <iostream>
#include <ostream>
#include <string_view>
#include <unordered_map>
#include <numeric>
#include <unordered_set>

#include "higher_order.hpp"
#include "pe_rules.hpp"
#include "xjax/checkpoint.hpp"
#include "xjax/ops.hpp"

namespace xjax {

Policy Policy::as(DType dtype) const {
  if (!fn_) throw TypeError("Policy::as: the policy is empty (a default-constructed xj::Policy)");
  if (!is_floating(dtype))
    throw TypeError(std::string("Policy::as: residuals are saved in a floating dtype, got ") + dtype_name(dtype));
  Policy p = *this;
  p.residual_dtype_ = dtype;
  return p;
}

namespace checkpoint_policies {
namespace {
const std::string* name_of(const Primitive& p, const Params& ps) {
  if (p != Primitive::name) return nullptr;
  return &ps.get<params::Name>().name;
}
}  // namespace

const Policy everything_saveable = [](const Primitive&, std::span<const ShapedArray>, const Params&) { return true; };
const Policy nothing_saveable = [](const Primitive&, std::span<const ShapedArray>, const Params&) { return false; };
// Convolutions are dot-like, as in JAX's dots_saveable.
const Policy dots_saveable = [](const Primitive& p, std::span<const ShapedArray>, const Params&) {
  return p == Primitive::dot_general || p == Primitive::conv_general_dilated;
};
const Policy checkpoint_dots = dots_saveable;
const Policy dots_with_no_batch_dims_saveable = [](const Primitive& p, std::span<const ShapedArray>, const Params& ps) {
  return p == Primitive::dot_general && ps.get<params::DotGeneral>().lhs_batch.empty();
};
Policy save_only_these_names(std::set<std::string> names) {
  return [names = std::move(names)](const Primitive& p, std::span<const ShapedArray>, const Params& ps) {
    const std::string* n = name_of(p, ps);
    return n && names.count(*n) > 0;
  };
}
Policy save_any_names_but_these(std::set<std::string> names) {
  return [names = std::move(names)](const Primitive& p, std::span<const ShapedArray>, const Params& ps) {
    const std::string* n = name_of(p, ps);
    return n && names.count(*n) == 0;
  };
}
Policy save_anything_except_these_names(std::set<std::string> names) {
  return [names = std::move(names)](const Primitive& p, std::span<const ShapedArray>, const Params& ps) {
    const std::string* n = name_of(p, ps);
    return !n || names.count(*n) == 0;
  };
}
const Policy save_collectives = [](const Primitive& p, std::span<const ShapedArray>, const Params&) {
  return p == Primitive::psum || p == Primitive::pmax || p == Primitive::all_gather || p == Primitive::psum_scatter ||
         p == Primitive::ppermute;
};
Policy save_from_both_policies(Policy a, Policy b) {
  if (!a || !b) throw TypeError("save_from_both_policies: a policy is empty (a default-constructed xj::Policy)");
  // A residual dtype given to either (a's first) stays with the combination.
  const std::optional<DType> as = a.residual_dtype() ? a.residual_dtype() : b.residual_dtype();
  Policy both = [a = std::move(a), b = std::move(b)](const Primitive& p, std::span<const ShapedArray> in, const Params& ps) {
    return a(p, in, ps) || b(p, in, ps);
  };
  return as ? both.as(*as) : both;
}
}  // namespace checkpoint_policies

namespace detail {
namespace {

struct PolicyObject : ParamObject {
  std::optional<Policy> policy;  // none: nothing saveable
  std::string repr() const override { return policy ? "<policy>" : "None"; }
  /// Known without calling it: no policy, or one of the captureless built-in policies; anything
  /// else (a user's policy, save_only_these_names, a narrowed one ...) by identity.
  bool structure_words(std::vector<std::uint64_t>& out) const override {
    out.push_back(0x706f6c6963790000ull);  // "policy": no other kind of object's words start so
    if (!policy) {
      out.push_back(1);
      return true;
    }
    // Captureless lambdas: a policy holding one of these types behaves as that one.
    namespace cp = checkpoint_policies;
    const Policy* known[] = {&cp::everything_saveable, &cp::nothing_saveable, &cp::dots_saveable,
                             &cp::dots_with_no_batch_dims_saveable, &cp::save_collectives};
    if (policy->residual_dtype()) return false;
    for (std::size_t i = 0; i < std::size(known); ++i)
      if (policy->function().target_type() == known[i]->function().target_type()) {
        out.push_back(2 + i);
        return true;
      }
    return false;
  }
};

const ClosedJaxpr& body_of(const Params& ps) { return *ps.get<params::Checkpoint>().jaxpr; }

Saveable policy_saveable(const Params& ps) {
  const auto& obj = static_cast<const PolicyObject&>(*ps.get<params::Checkpoint>().policy);
  if (!obj.policy) return [](const Eqn&) { return false; };
  Policy pol = *obj.policy;
  return [pol](const Eqn& e) {
    std::vector<ShapedArray> in;
    for (const auto& a : e.inputs) in.push_back(atom_aval(a));
    return call_user([&] { return pol(e.prim, in, e.params); });
  };
}

std::optional<DType> residual_dtype_of(const Params& ps) {
  const auto& obj = static_cast<const PolicyObject&>(*ps.get<params::Checkpoint>().policy);
  return obj.policy ? obj.policy->residual_dtype() : std::nullopt;
}

// Policy::as: each residual the known part computes (not a block input passed through) of a
// wider float dtype than `to` leaves the known part converted to `to`, and the staged part
// converts it back before anything reads it.
// A residual that a staged equation reads where narrowing could change its result by more than
// rounding (select_and_gather_add's choice of max_pool's element, a comparison: narrowing.cpp),
// directly or inside a loop's or cond's body, stays wide.
void save_residuals_as(PartialEval& pe, DType to, std::source_location loc) {
  Jaxpr known = *pe.known.jaxpr, staged = *pe.staged.jaxpr;
  const std::size_t first = known.outvars.size() - pe.num_res;
  // Walked backwards: what a changed equation reads, and what that is computed from, is tainted.
  std::unordered_set<std::uint64_t> kept_wide, residual_ins;
  for (std::size_t r = 0; r < pe.num_res; ++r) residual_ins.insert(staged.invars[r].id());
  const Fills fills = literal_fills(staged);
  const Definitions definitions = definitions_of(staged);
  const SavedAsIs residual = sign_faithful([&](const Var& v) { return residual_ins.count(v.id()) > 0; },
                                           definition_in(definitions), fills);
  for (auto it = staged.eqns.rbegin(); it != staged.eqns.rend(); ++it) {
    const Eqn& e = *it;
    const bool feeds = std::any_of(e.outputs.begin(), e.outputs.end(), [&](const Var& o) { return kept_wide.count(o.id()); });
    std::vector<std::size_t> changed = operands_changed_by_narrowing(e, to, fills, residual);
    for (const auto& sub : sub_jaxprs(e.params))
      if (changed.size() < e.inputs.size() && reads_changed_by_narrowing(*sub->jaxpr, to)) {
        changed.resize(e.inputs.size());
        std::iota(changed.begin(), changed.end(), std::size_t{0});
      }
    for (std::size_t i = 0; i < e.inputs.size(); ++i)
      if (const Var* v = std::get_if<Var>(&e.inputs[i]);
          v && (feeds || std::find(changed.begin(), changed.end(), i) != changed.end()))
        kept_wide.insert(v->id());
  }
  std::vector<Eqn> widen;
  for (std::size_t r = 0; r < pe.num_res; ++r) {
    const Var* v = std::get_if<Var>(&known.outvars[first + r]);
    if (!v || std::find(known.invars.begin(), known.invars.end(), *v) != known.invars.end() ||
        std::find(known.constvars.begin(), known.constvars.end(), *v) != known.constvars.end() ||
        kept_wide.count(staged.invars[r].id()))
      continue;
    const ShapedArray& aval = v->aval();
    if (!is_floating(aval.dtype) || itemsize(aval.dtype) <= itemsize(to)) continue;
    const Var narrow(ShapedArray{aval.shape, to});
    // the convert carries the location of the equation whose output it narrows (describe reads
    // it as "..., saved as bf16")
    std::source_location at = loc;
    for (const Eqn& e : known.eqns)
      if (std::find(e.outputs.begin(), e.outputs.end(), *v) != e.outputs.end()) at = e.loc;
    known.eqns.push_back(Eqn{Primitive::convert_element_type, {*v}, {narrow}, params::ConvertElementType{.new_dtype = to, .weak_type = false}, at});
    known.outvars[first + r] = narrow;
    pe.residual_vars[r] = narrow;
    const Var wide = staged.invars[r], narrow_in(ShapedArray{aval.shape, to});
    widen.push_back(Eqn{Primitive::convert_element_type, {narrow_in}, {wide}, params::ConvertElementType{.new_dtype = aval.dtype, .weak_type = false}, loc});
    staged.invars[r] = narrow_in;
  }
  if (widen.empty()) return;
  staged.eqns.insert(staged.eqns.begin(), widen.begin(), widen.end());
  pe.known.jaxpr = std::make_shared<const Jaxpr>(std::move(known));
  pe.staged.jaxpr = std::make_shared<const Jaxpr>(std::move(staged));
}

Params with_body(const Params& ps, ClosedJaxpr body, bool differentiated) {
  params::Checkpoint out = ps.get<params::Checkpoint>();
  out.jaxpr = std::make_shared<const ClosedJaxpr>(consts_as_inputs(body));
  out.differentiated = differentiated;
  return out;
}

// Binds a checkpoint of a traced body: its consts (if any) become leading operands.
std::vector<Array> bind_checkpoint(const Params& ps, const ClosedJaxpr& body, std::vector<Array> operands,
                                   bool differentiated, std::source_location loc) {
  std::vector<Array> ops = body.consts;
  ops.insert(ops.end(), operands.begin(), operands.end());
  return bind(Primitive::checkpoint, ops, with_body(ps, body, differentiated), loc);
}

}  // namespace

std::vector<Array> checkpoint_flat(const ClosedJaxpr& body, std::span<const Array> args, const CheckpointOptions& opts,
                                   std::source_location loc) {
  // An empty Policy (default-constructed) failed later as a bare std::bad_function_call.
  if (opts.policy && !*opts.policy)
    throw TypeError("checkpoint: the policy is empty (a default-constructed xj::Policy; leave .policy out to save nothing) (at " +
                    format_location(loc) + ")");
  auto pol = std::make_shared<PolicyObject>();
  pol->policy = opts.policy;
  Params ps = params::Checkpoint{.jaxpr = nullptr, .policy = pol, .prevent_cse = opts.prevent_cse, .differentiated = false};
  return bind_checkpoint(ps, body, std::vector<Array>(args.begin(), args.end()), false, loc);
}

Array name_flat(const Array& x, const std::string& name, std::source_location loc) {
  return bind1(Primitive::name, {x}, params::Name{.name = name}, loc);
}

// ---- rules -----------------------------------------------------------------------------------

// d checkpoint(f)(x) = checkpoint(jvp f)(x, dx)
JvpOut checkpoint_jvp(const JvpArgs& a) {
  const ClosedJaxpr& body = body_of(a.params);
  std::vector<bool> nz(a.t.size());
  std::vector<Array> ops(a.x.begin(), a.x.end());
  for (std::size_t i = 0; i < a.t.size(); ++i) {
    nz[i] = !a.t[i].is_zero() && differentiable(a.x[i].aval());
    if (nz[i]) ops.push_back(a.t[i].value());
  }
  std::vector<bool> present;
  ClosedJaxpr jb = jvp_jaxpr(body, nz, std::vector<bool>(body->outvars.size(), false), &present);
  auto outs = bind_checkpoint(a.params, jb, ops, a.params.get<params::Checkpoint>().differentiated, a.loc);
  std::size_t n = body->outvars.size();
  JvpOut r{std::vector<Array>(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(n)), {}};
  std::size_t o = n;
  for (std::size_t k = 0; k < n; ++k)
    r.tangents.push_back(present[k] ? Tangent(outs[o++]) : Tangent::zero(r.primals[k].aval()));
  return r;
}

PeSplit checkpoint_partial_eval(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable& saveable) {
  const ClosedJaxpr& body = body_of(e.params);
  Saveable effective = saveable ? saveable : policy_saveable(e.params);
  // This block's own policy saves its residuals in a narrower dtype (an enclosing policy governs
  // when one does).
  const std::optional<DType> to = saveable ? std::nullopt : residual_dtype_of(e.params);
  PartialEval pe = partial_eval(body, in_unknown, std::vector<bool>(body->outvars.size(), false), effective, to);
  if (to) save_residuals_as(pe, *to, e.loc);
  PeSplit split;
  split.out_unknown = pe.out_unknown;

  // The known part is inlined (hoisted out of the block, as JAX does): the forward pass computes
  // it once; the known outputs are renamed to what the inlined equations produce.
  std::vector<Atom> known_in;
  for (std::size_t i = 0; i < e.inputs.size(); ++i)
    if (!in_unknown[i]) known_in.push_back(e.inputs[i]);
  ClosedJaxpr known = consts_as_inputs(pe.known);
  std::vector<Atom> ins = known_in;
  if (!pe.known.consts.empty()) throw Error("checkpoint: unexpected consts in a known part");
  std::vector<Atom> produced = inline_jaxpr(*known.jaxpr, ins, split.known);
  std::size_t p = 0;
  for (std::size_t k = 0; k < e.outputs.size(); ++k)
    if (!pe.out_unknown[k]) split.aliases.emplace_back(e.outputs[k], produced[p++]);
  std::vector<Atom> res(produced.begin() + static_cast<std::ptrdiff_t>(p), produced.end());

  Eqn staged{Primitive::checkpoint, {}, {}, with_body(e.params, pe.staged, true), e.loc};
  for (const auto& r : res) staged.inputs.push_back(r);
  for (std::size_t i = 0; i < e.inputs.size(); ++i)
    if (in_unknown[i]) staged.inputs.push_back(e.inputs[i]);
  for (std::size_t k = 0; k < e.outputs.size(); ++k)
    if (pe.out_unknown[k]) staged.outputs.push_back(e.outputs[k]);
  split.staged.push_back(std::move(staged));
  return split;
}

// checkpoint(f)^T ct = checkpoint(f^T)(non-linear inputs, ct): the recompute runs inside
std::vector<Tangent> checkpoint_transpose(const TransposeArgs& a) {
  const ClosedJaxpr& body = body_of(a.params);
  std::vector<bool> used(a.ct.size());
  for (std::size_t k = 0; k < a.ct.size(); ++k) used[k] = !a.ct[k].is_zero();
  ClosedJaxpr live = dce(body, used);
  std::vector<bool> lin;
  std::vector<Array> ops;
  for (const auto& in : a.in) {
    lin.push_back(in.is_linear());
    if (!in.is_linear()) ops.push_back(in.value);
  }
  for (std::size_t k = 0; k < a.ct.size(); ++k)
    if (used[k]) ops.push_back(a.ct[k].value());
  ClosedJaxpr bt = transpose_jaxpr(live, lin);
  auto cts = bind_checkpoint(a.params, bt, ops, true, a.loc);
  std::vector<Tangent> out;
  std::size_t c = 0;
  for (const auto& in : a.in) out.push_back(in.is_linear() ? Tangent(cts[c++]) : Tangent::zero(in.aval));
  return out;
}

// Keeps the used outputs and what they need; drops inputs nothing reads.
Eqn checkpoint_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in) {
  ClosedJaxpr body = dce(body_of(e.params), used_out, &used_in);
  Eqn out{Primitive::checkpoint, {}, {}, e.params, e.loc};
  out.params.get<params::Checkpoint>().jaxpr = std::make_shared<const ClosedJaxpr>(prune_invars(body, used_in));
  for (std::size_t i = 0; i < e.inputs.size(); ++i)
    if (used_in[i]) out.inputs.push_back(e.inputs[i]);
  for (std::size_t k = 0; k < e.outputs.size(); ++k)
    if (used_out[k]) out.outputs.push_back(e.outputs[k]);
  return out;
}

// checkpoint(f)[b] = checkpoint(vmap f): the block stays a checkpoint with the same policy, so
// the batched function still recomputes it; names inside keep tagging their (batched) values.
BatchOut checkpoint_batch(const BatchArgs& a) {
  const ClosedJaxpr& body = body_of(a.params);
  std::vector<bool> in_b = batched_mask(a.dims), out_b;
  ClosedJaxpr jb = batch_jaxpr_leading(body, in_b, a.size, std::vector<bool>(body->outvars.size(), false), &out_b);
  auto outs = bind_checkpoint(a.params, jb, batch_to_front(a), a.params.get<params::Checkpoint>().differentiated, a.loc);
  BatchDims dims;
  for (bool b : out_b) dims.push_back(b ? 0 : not_batched);
  return {outs, dims};
}

// ---- saved residuals -------------------------------------------------------------------------

namespace {

// The name JAX prints for a function (its co_name) from C++'s source_location::function_name():
// "layer" for "xjax::Array {anonymous}::layer(const xjax::Array&)", "forward" for a member
// function, "<lambda>" for a lambda (Python's name for one); "" when it cannot tell.
std::string short_function_name(std::string_view full) {
  if (full.empty()) return "";
  if (const auto with = full.find(" [with "); with != std::string_view::npos) full = full.substr(0, with);  // a template's arguments (a generic lambda's auto)
  if (full.back() == '>' && full.find("<lambda") != std::string_view::npos) return "<lambda>";
  int depth = 0;  // of template arguments
  std::size_t params = std::string_view::npos;
  for (std::size_t i = 0; i < full.size() && params == std::string_view::npos; ++i) {
    if (full[i] == '<') ++depth;
    else if (full[i] == '>') depth = std::max(depth - 1, 0);
    else if (full[i] == '(' && depth == 0) {
      if (full.substr(0, i).ends_with("operator") && full.substr(i).starts_with("()")) ++i;  // operator()'s own parentheses
      else params = i;
    }
  }
  if (params == std::string_view::npos) return "";
  std::string_view head = full.substr(0, params);
  if (const auto space = head.rfind(' '); space != std::string_view::npos) head = head.substr(space + 1);
  if (const auto scope = head.rfind("::"); scope != std::string_view::npos) head = head.substr(scope + 2);
  return std::string(head);
}

// Where an equation comes from, as JAX prints it: "file:line (function)".
std::string origin(const std::source_location& loc) {
  const std::string function = short_function_name(loc.function_name());
  return format_location(loc) + (function.empty() ? "" : " (" + function + ")");
}

// Describes value v of jaxpr j whose invars stand for `inputs` (descriptions of the values the
// enclosing context passes in).
std::string describe(const Jaxpr& j, const Var& v, const std::vector<std::string>& inputs) {
  for (std::size_t i = 0; i < j.invars.size(); ++i)
    if (j.invars[i] == v) return inputs[i];
  for (const Eqn& e : j.eqns)
    for (std::size_t k = 0; k < e.outputs.size(); ++k) {
      if (!(e.outputs[k] == v)) continue;
      if (e.prim == Primitive::name) return "named '" + e.params.get<params::Name>().name + "' from " + origin(e.loc);
      // A named value converted (a Policy::as residual, or the user's astype of it), or a
      // Policy::as convert of an unnamed one (it carries its source equation's location).
      // (Policy::as only narrows floats: a jvp rule's convert of a mask at the same line is not one.)
      if (e.prim == Primitive::convert_element_type)
        if (auto* in = std::get_if<Var>(&e.inputs[0]);
            in && is_floating(in->aval().dtype) && is_floating(e.outputs[0].aval().dtype) &&
            itemsize(e.outputs[0].aval().dtype) < itemsize(in->aval().dtype))
          if (std::string d = describe(j, *in, inputs);
              d.starts_with("named") || d.ends_with(" from " + origin(e.loc)))
            return d + ", saved as " + dtype_name(e.outputs[0].aval().dtype);
      if (e.prim == Primitive::checkpoint) {
        const Jaxpr& b = *body_of(e.params).jaxpr;
        std::vector<std::string> sub;
        for (const auto& in : e.inputs) {
          if (auto* iv = std::get_if<Var>(&in)) sub.push_back(describe(j, *iv, inputs));
          else sub.push_back("a literal");
        }
        if (auto* ov = std::get_if<Var>(&b.outvars[k])) return describe(b, *ov, sub);
        return "a literal";
      }
      return "output of " + std::string(primitive_name(e.prim)) + " from " + origin(e.loc);
    }
  return "a constant";
}

}  // namespace

std::vector<Residual> saved_residuals_flat(const ClosedJaxpr& j, const FlatArgs& fa) try {
  AdModeScope reverse(AdMode::reverse);
  std::vector<bool> all(j->invars.size(), true);
  Linearized lin = linearize_jaxpr(j, all);
  const Jaxpr& known = *lin.pe.known.jaxpr;
  std::vector<std::string> args;
  for (std::size_t a = 0; a + 1 < fa.offsets.size(); ++a)
    for (std::size_t k = fa.offsets[a]; k < fa.offsets[a + 1]; ++k)
      args.push_back(fa.offsets[a + 1] - fa.offsets[a] == 1 ? "from the argument " + std::to_string(a)
                                                             : "from the argument " + std::to_string(a) + " (leaf " + std::to_string(k - fa.offsets[a]) + ")");
  std::vector<Residual> out;
  for (const Var& r : lin.pe.residual_vars) out.push_back({r.aval(), describe(known, r, args)});
  return out;
} catch (...) {
  rethrow_internal("saved_residuals");
}

void print_residuals(std::ostream& os, const std::vector<Residual>& rs) {
  for (const auto& r : rs) os << r.aval.str() << " " << r.description << "\n";
}

void print_residuals_to_stdout(const std::vector<Residual>& rs) { print_residuals(std::cout, rs); }

}  // namespace detail
}  // namespace xjax

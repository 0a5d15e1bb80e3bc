// partial_eval.cpp: splitting a jaxpr into what can be computed now and what must wait.
// partial_eval : (a -> b) -> (known a -> (known b, r), (r, unknown a) -> unknown b)
// An equation with an unknown input is staged; the others are known. A known equation that the
// `saveable` predicate rejects is also copied into the staged jaxpr, so the staged side recomputes
// it instead of receiving it as a residual (this is how checkpoint policies act); so are values
// built from literals and broadcasts that enlarge their operand (cheap to rebuild). Residuals are
// the known values the staged jaxpr reads after dead code is removed from both sides.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ad.hpp"
#include "higher_order.hpp"
#include "passes.hpp"
#include "pe_rules.hpp"

namespace xjax::detail {
namespace {

const Var* as_var(const Atom& a) { return std::get_if<Var>(&a); }

/// `out = broadcast_in_dim(0)`: an equation defining `out` as zeros of its aval.
Eqn zeros_eqn(const Var& out, const std::source_location& loc) {
  const ShapedArray& a = out.aval();
  params::BroadcastInDim ps{.shape = a.shape, .broadcast_dimensions = {}};
  return Eqn{Primitive::broadcast_in_dim, {Literal{scalar(0.0, a.dtype)}}, {out}, std::move(ps), loc};
}

/// The dtype an enclosing checkpoint's Policy::as narrows its residuals to, while it partially
/// evaluates its body: the loops, conds and checkpoints inside it split their bodies under it.
thread_local std::optional<DType> enclosing_narrowing;

struct NarrowingScope {
  std::optional<DType> saved = enclosing_narrowing;
  explicit NarrowingScope(std::optional<DType> to) { if (to) enclosing_narrowing = to; }
  ~NarrowingScope() { enclosing_narrowing = saved; }
  NarrowingScope(const NarrowingScope&) = delete;
  NarrowingScope& operator=(const NarrowingScope&) = delete;
};

}  // namespace

PartialEval partial_eval(const ClosedJaxpr& cj, const std::vector<bool>& in_unknown,
                         const std::vector<bool>& instantiate, const Saveable& saveable,
                         std::optional<DType> narrowed_to) try {
  const Jaxpr& j = *cj.jaxpr;
  // Inside a narrowing checkpoint's body (a scan's, a cond's, an inner checkpoint's) any float
  // input may be a narrowed residual too.
  const bool nested_in_narrowing = !narrowed_to && enclosing_narrowing;
  if (nested_in_narrowing) narrowed_to = enclosing_narrowing;
  const NarrowingScope scope(narrowed_to);
  std::unordered_set<std::uint64_t> unknown;
  for (std::size_t i = 0; i < j.invars.size(); ++i)
    if (in_unknown[i]) unknown.insert(j.invars[i].id());
  auto is_unknown = [&](const Atom& a) { return as_var(a) && unknown.count(as_var(a)->id()); };

  std::vector<Eqn> known_eqns, staged_eqns;
  std::vector<std::size_t> staged_from;  // the position in j.eqns of each staged equation's source
  std::unordered_map<std::uint64_t, std::size_t> known_def;  // var id -> its known equation's position in j.eqns
  std::unordered_map<std::uint64_t, Eqn> known_by_var;       // var id -> its known comparison (renamed inputs)
  std::unordered_map<std::uint64_t, Var> named;              // var id -> its checkpoint_name (the same value)
  auto stage = [&](Eqn e, std::size_t from) {
    staged_eqns.push_back(std::move(e));
    staged_from.push_back(from);
  };
  // Policy::as narrows the residuals the known side computes (not the block's inputs) of a wider
  // float dtype (checkpoint.cpp's save_residuals_as).
  // The bookkeeping below is built only then (partial evaluation runs on every grad trace).
  std::unordered_set<std::uint64_t> block_inputs;
  Fills fills;
  Definitions definitions, name_of;  // var id -> its equation / its checkpoint_name
  if (narrowed_to) {
    for (const auto* vs : {&j.invars, &j.constvars})
      for (const Var& v : *vs) block_inputs.insert(v.id());
    fills = literal_fills(j);
    definitions = definitions_of(j);
    for (const Eqn& e : j.eqns)
      if (e.prim == Primitive::name && as_var(e.inputs[0])) name_of.emplace(as_var(e.inputs[0])->id(), &e);
  }
  // The values that may reach the backward pass narrowed: what the policy saves (an equation's
  // outputs, a value under a saved name) and what is recomputed from such values. The block's own
  // inputs are kept as they are, except inside a loop or cond of the block (they may be
  // recomputed from narrowed values there). sign(x @ w) recomputed from wide inputs needs no
  // saved mask (it was saved whenever x @ w was computed in the block).
  std::unordered_set<std::uint64_t> maybe_narrowed;
  if (narrowed_to) {
    if (nested_in_narrowing) maybe_narrowed = block_inputs;
    for (const Eqn& e : j.eqns) {
      const bool narrowed = !saveable || saveable(e) || std::any_of(e.inputs.begin(), e.inputs.end(), [&](const Atom& a) {
        return as_var(a) && maybe_narrowed.count(as_var(a)->id());
      });
      for (const Var& o : e.outputs) {
        const auto name = name_of.find(o.id());
        if (narrowed || (name != name_of.end() && saveable(*name->second))) maybe_narrowed.insert(o.id());
      }
    }
  }
  const auto would_narrow = [&](const Var& v) {
    return maybe_narrowed.count(v.id()) && is_floating(v.aval().dtype) && itemsize(v.aval().dtype) > itemsize(*narrowed_to);
  };
  // An equation whose result a narrowed input could change by more than rounding (a comparison's
  // mask flips: exp(x) = 0.5004 > 0.5 read back as 0.5) is saved, not recomputed from it.
  const auto mask_of_narrowed = [&](const Eqn& e, const SavedAsIs& saved_as_is) {
    if (!narrowed_to) return false;
    const std::vector<std::size_t> changed = operands_changed_by_narrowing(e, *narrowed_to, fills, saved_as_is);
    return std::any_of(changed.begin(), changed.end(), [&](std::size_t i) {
      return as_var(e.inputs[i]) && would_narrow(*as_var(e.inputs[i]));
    });
  };
  // What the policy keeps as it is: a value whose equation (or checkpoint_name) it saves.
  const Definition defined_by = definition_in(definitions);
  // (Inside a narrowing block's loop or cond, an input may be recomputed from narrowed values.)
  const SavedAsIs kept_by_policy = !narrowed_to ? SavedAsIs{} : sign_faithful(
      [&](const Var& v) {
        const auto saved = [&](const Definitions& m) {
          auto it = m.find(v.id());
          return it != m.end() && saveable(*it->second);
        };
        return !saveable || (!nested_in_narrowing && block_inputs.count(v.id())) || saved(definitions) || saved(name_of);
      },
      defined_by, fills);
  const auto recomputed = [&](const Eqn& e) { return saveable && !saveable(e) && !mask_of_narrowed(e, kept_by_policy); };
  std::unordered_map<std::uint64_t, Atom> alias;  // renamings introduced by pe rules
  auto rename = [&](const Atom& a) -> Atom {
    if (auto* v = as_var(a)) {
      auto it = alias.find(v->id());
      if (it != alias.end()) return it->second;
    }
    return a;
  };
  for (std::size_t pos = 0; pos < j.eqns.size(); ++pos) {
    Eqn e = j.eqns[pos];
    for (auto& in : e.inputs) in = rename(in);
    bool any_unknown = std::any_of(e.inputs.begin(), e.inputs.end(), is_unknown);
    if (!any_unknown && e.prim == Primitive::custom_lin) {
      // custom_lin is linear in its tangents; tangents that do not depend on the unknown inputs
      // are zero (e.g. a custom_jvp rule that returned zeros_like), so its outputs are zeros.
      // It must never be evaluated: that would be forward mode of the custom_vjp function.
      for (const Var& o : e.outputs) {
        known_eqns.push_back(zeros_eqn(o, e.loc));
        stage(known_eqns.back(), pos);  // rebuilt where read, not saved (as literals)
      }
      continue;
    }
    if (!any_unknown) {
      known_eqns.push_back(e);
      if (family_of(e.prim) == Family::comparison) known_by_var.emplace(e.outputs[0].id(), e), known_def.emplace(e.outputs[0].id(), pos);
      if (e.prim == Primitive::name && as_var(e.inputs[0])) named.emplace(as_var(e.inputs[0])->id(), e.outputs[0]);
      // Recomputed on the staged side: what the policy does not save, values built from literals
      // alone (e.g. broadcast zeros), and broadcasts that enlarge a value (a norm's per-row scale
      // spread over the row): cheaper to rebuild than to keep, so the smaller operand is what a
      // residual holds (PyTorch's layer_norm keeps its (B, T, 1) statistics, not their broadcast).
      bool from_literals = std::none_of(e.inputs.begin(), e.inputs.end(), [](const Atom& a) { return as_var(a) != nullptr; });
      const Var* operand = e.inputs.empty() ? nullptr : as_var(e.inputs[0]);
      bool enlarging_broadcast = e.prim == Primitive::broadcast_in_dim && operand &&
                                 e.outputs[0].aval().size() > operand->aval().size();
      if (recomputed(e) || from_literals || enlarging_broadcast) stage(e, pos);
      continue;
    }
    std::vector<bool> ins_unknown;
    for (const auto& in : e.inputs) ins_unknown.push_back(is_unknown(in));
    if (PeRule rule = pe_rule(e.prim)) {
      PeSplit split = rule(e, ins_unknown, saveable);
      known_eqns.insert(known_eqns.end(), split.known.begin(), split.known.end());
      // Inside a checkpoint the enclosing policy governs the known part too: what it does not
      // save is recomputed on the staged side (a known scan or cond reruns there).
      for (const Eqn& k : split.known)
        if (recomputed(k)) stage(k, pos);
      for (const Eqn& st : split.staged) stage(st, pos);
      for (std::size_t k = 0; k < e.outputs.size(); ++k)
        if (split.out_unknown[k]) unknown.insert(e.outputs[k].id());
      for (const auto& [v, a] : split.aliases) alias.emplace(v.id(), a);
      continue;
    }
    stage(e, pos);
    for (const auto& o : e.outputs) unknown.insert(o.id());
  }

  PartialEval pe;
  std::vector<Atom> known_outs, staged_outs;
  for (std::size_t k = 0; k < j.outvars.size(); ++k) {
    Atom o = rename(j.outvars[k]);
    bool u = is_unknown(o) || instantiate[k];
    pe.out_unknown.push_back(u);
    (u ? staged_outs : known_outs).push_back(o);
  }

  std::vector<Eqn> live_staged;
  std::vector<Var> residuals;
  for (;;) {
    // Dead code on the staged side: keep what its outputs need, walking backwards.
    std::unordered_set<std::uint64_t> needed;
    for (const auto& o : staged_outs)
      if (auto* v = as_var(o)) needed.insert(v->id());
    live_staged.clear();
    std::vector<bool> used_out, used_in;
    for (auto it = staged_eqns.rbegin(); it != staged_eqns.rend(); ++it) {
      used_out.clear();
      for (const auto& v : it->outputs) used_out.push_back(needed.count(v.id()) > 0);
      if (std::none_of(used_out.begin(), used_out.end(), [](bool b) { return b; })) continue;
      // A control-flow equation prunes its body and the operands it no longer reads (a staged
      // cond's tangent of a capture only dead code reads kept that tangent's computation, and
      // the residuals it reads, alive; a scan's ys without a tangent kept their per-step
      // residuals), and so does a scheduled loop's revolve_lin (then revolve_fwd loses the
      // residuals it no longer reads when the known side is pruned).
      DceRule rule = dce_rule(it->prim);
      if (rule) {
        used_in.clear();
        live_staged.push_back(rule(*it, used_out, used_in));
        for (std::size_t k = 0; k < it->inputs.size(); ++k)
          if (auto* v = as_var(it->inputs[k]); v && used_in[k]) needed.insert(v->id());
        continue;
      }
      for (const auto& in : it->inputs)
        if (auto* v = as_var(in)) needed.insert(v->id());
      live_staged.push_back(*it);
    }
    std::reverse(live_staged.begin(), live_staged.end());

    // Residuals: known values read on the staged side but not defined there, in order of first use.
    std::unordered_set<std::uint64_t> defined_staged;
    for (std::size_t i = 0; i < j.invars.size(); ++i)
      if (in_unknown[i]) defined_staged.insert(j.invars[i].id());
    residuals.clear();
    std::unordered_set<std::uint64_t> seen;
    auto consider = [&](const Atom& a) {
      auto* v = as_var(a);
      if (!v || defined_staged.count(v->id()) || seen.count(v->id())) return;
      seen.insert(v->id());
      residuals.push_back(*v);
    };
    for (const Eqn& e : live_staged) {
      for (const auto& in : e.inputs) consider(in);
      for (const auto& o : e.outputs) defined_staged.insert(o.id());
    }
    for (const auto& o : staged_outs) consider(o);

    // Masks rebuilt from what is kept anyway: a residual computed by a comparison whose variable
    // operands are residuals too (relu's mask of its saved output), or values the staged side
    // rebuilds from literals, is recomputed there instead (a comparison pass in exchange for one
    // byte an element; PyTorch's relu keeps its output alone). Staged at its source position, so
    // its operands are defined before it; repeated until no residual qualifies.
    std::unordered_set<std::uint64_t> staged_defs;
    for (const Eqn& e : staged_eqns)
      for (const auto& o : e.outputs) staged_defs.insert(o.id());
    bool moved = false;
    // A value kept under its checkpoint_name stands in for the value it names wherever the
    // staged side reads that value (e.g. relu's output, whose mask a policy recomputes), so its
    // recomputation (here a product) goes.
    for (Eqn& e : staged_eqns) {
      if (e.prim == Primitive::name) continue;
      for (Atom& a : e.inputs) {
        const Var* v = as_var(a);
        if (!v || seen.count(v->id())) continue;
        auto same = named.find(v->id());
        if (same != named.end() && seen.count(same->second.id())) a = same->second, moved = true;
      }
    }
    for (const Var& r : residuals) {
      auto it = known_by_var.find(r.id());
      if (it == known_by_var.end() || staged_defs.count(r.id())) continue;
      Eqn cmp = it->second;
      bool operands_kept = true;
      for (Atom& a : cmp.inputs) {
        const Var* v = as_var(a);
        if (!v || seen.count(v->id()) || staged_defs.count(v->id())) continue;
        auto same = named.find(v->id());  // kept under its name (a policy's named residual)
        if (same != named.end() && seen.count(same->second.id())) a = same->second;
        else operands_kept = false;
      }
      if (!operands_kept) continue;
      // rebuilt from rounded residuals, or values recomputed from them, the mask could flip
      if (narrowed_to &&
          mask_of_narrowed(cmp, sign_faithful(
                                    [&](const Var& v) {
                                      return seen.count(v.id()) && !staged_defs.count(v.id()) &&
                                             !(nested_in_narrowing && block_inputs.count(v.id()));
                                    },
                                    defined_by, fills)))
        continue;
      const std::size_t from = known_def.at(r.id());
      const auto at = std::upper_bound(staged_from.begin(), staged_from.end(), from) - staged_from.begin();
      staged_eqns.insert(staged_eqns.begin() + at, cmp);
      staged_from.insert(staged_from.begin() + at, from);
      staged_defs.insert(r.id());
      moved = true;
    }
    if (!moved) break;
  }

  auto known = std::make_shared<Jaxpr>();
  known->constvars = j.constvars;
  for (std::size_t i = 0; i < j.invars.size(); ++i)
    if (!in_unknown[i]) known->invars.push_back(j.invars[i]);
  known->eqns = std::move(known_eqns);
  known->outvars = known_outs;
  for (const auto& r : residuals) known->outvars.push_back(r);
  std::vector<bool> all_used(known->outvars.size(), true);
  pe.known = dce(ClosedJaxpr{known, cj.consts}, all_used);

  auto staged = std::make_shared<Jaxpr>();
  staged->invars = residuals;
  for (std::size_t i = 0; i < j.invars.size(); ++i)
    if (in_unknown[i]) staged->invars.push_back(j.invars[i]);
  staged->eqns = std::move(live_staged);
  staged->outvars = staged_outs;
  pe.staged = ClosedJaxpr{staged, {}};
  pe.num_res = residuals.size();
  pe.residual_vars = residuals;
#if XJAX_CHECKS
  typecheck(*pe.known.jaxpr);
  typecheck(*pe.staged.jaxpr);
#endif
  return pe;
} catch (...) {
  rethrow_internal("partial_eval");
}

}  // namespace xjax::detail

namespace xjax::detail {

// Only control_flow primitives split their bodies (stem##_partial_eval); the rest are staged
// whole when any input is unknown.
#define XJAX_PE_float_unary(stem) nullptr
#define XJAX_PE_numeric_unary(stem) nullptr
#define XJAX_PE_power(stem) nullptr
#define XJAX_PE_binary(stem) nullptr
#define XJAX_PE_comparison(stem) nullptr
#define XJAX_PE_structural(stem) nullptr
#define XJAX_PE_collective(stem) nullptr
#define XJAX_PE_factorization(stem) nullptr
#define XJAX_PE_higher_order(stem) nullptr
#define XJAX_PE_control_flow(stem) stem##_partial_eval

PeRule pe_rule(Primitive p) {
  switch (p) {
#define XJAX_PE_CASE(name, stem, S, family, kinds) \
  case Primitive::name: return XJAX_PE_##family(stem);
    XJAX_PRIMITIVES(XJAX_PE_CASE)
#undef XJAX_PE_CASE
  }
  return nullptr;
}

}  // namespace xjax::detail

// cond.cpp: the cond primitive and all its rules.
//   outs... = cond[branches] index ops...
// with every branch : (ops...) -> (outs...) and index an i32 scalar, clamped to [0, n) as
// lax.switch does. Branches are const-free: what a branch closed over is passed as leading ops,
// and every branch takes the whole list (ignoring the other branches' consts), as JAX does.
// Read in order: helpers (joining separately traced branches), shape rule and evaluation, jvp
// (union of nonzero tangents, instantiated so branches agree), partial evaluation (index known:
// split every branch with the same unknowns, residuals merged across branches by type; index
// unknown: stage everything), transpose (a cond over the transposed branches), DCE, and the
// flat entries the API (xj::cond, xj::switch_ in control_flow.hpp) calls.
#include <algorithm>

#include "higher_order.hpp"
#include "pe_rules.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

const std::vector<ClosedJaxprPtr>& branches_of(const Params& ps) { return ps.get<params::Cond>().branches; }

Params cond_params(std::vector<ClosedJaxprPtr> bs) { return params::Cond{.branches = std::move(bs)}; }

// Branches traced separately (each perhaps closing over values) as const-free jaxprs that all
// take (consts of branch 0..., consts of branch 1..., ..., ops...); `consts` lists those values.
struct Joined {
  std::vector<ClosedJaxprPtr> branches;
  std::vector<Array> consts;
};

Joined join_branches(const std::vector<ClosedJaxpr>& bs) {
  Joined r;
  for (const auto& b : bs) r.consts.insert(r.consts.end(), b.consts.begin(), b.consts.end());
  for (std::size_t k = 0; k < bs.size(); ++k) {
    auto j = std::make_shared<Jaxpr>(*bs[k].jaxpr);
    j->invars.clear();
    for (std::size_t o = 0; o < bs.size(); ++o) {
      if (o == k) j->invars.insert(j->invars.end(), bs[k]->constvars.begin(), bs[k]->constvars.end());
      else
        for (const auto& c : bs[o]->constvars) j->invars.emplace_back(c.aval());
    }
    j->invars.insert(j->invars.end(), bs[k]->invars.begin(), bs[k]->invars.end());
    j->constvars.clear();
    r.branches.push_back(share(ClosedJaxpr{j, {}}));
  }
  return r;
}

std::vector<Array> bind_cond(const Array& index, const std::vector<ClosedJaxpr>& bs, std::span<const Array> ops,
                             std::source_location loc) {
  Joined j = join_branches(bs);
  std::vector<Array> in{index};
  in.insert(in.end(), j.consts.begin(), j.consts.end());
  in.insert(in.end(), ops.begin(), ops.end());
  return bind(Primitive::cond, in, cond_params(std::move(j.branches)), loc);
}

}  // namespace

// ---- jvp -------------------------------------------------------------------------------------

// d cond(i, ops) = cond(i, jvp(branch_k)) over (ops, dops): the tangent inputs are the union of
// the nonzero ones; an output tangent is present when any branch makes it nonzero, and then
// every branch instantiates it, so all branches agree on their outputs.
JvpOut cond_jvp(const JvpArgs& a) {
  const auto& bs = branches_of(a.params);
  std::size_t nops = a.x.size() - 1, nout = bs[0]->jaxpr->outvars.size();
  std::vector<bool> nz(nops);
  for (std::size_t i = 0; i < nops; ++i) nz[i] = !a.t[i + 1].is_zero() && differentiable(a.x[i + 1].aval());
  std::vector<bool> out_nz(nout, false), present;
  for (const auto& b : bs) {
    jvp_jaxpr(*b, nz, false, &present);
    for (std::size_t k = 0; k < nout; ++k) out_nz[k] = out_nz[k] || present[k];
  }
  std::vector<ClosedJaxpr> jb;
  for (const auto& b : bs) jb.push_back(jvp_jaxpr(*b, nz, out_nz, &present));
  std::vector<Array> ops(a.x.begin() + 1, a.x.end());
  for (std::size_t i = 0; i < nops; ++i)
    if (nz[i]) ops.push_back(a.t[i + 1].instantiate());
  auto outs = bind_cond(a.x[0], jb, ops, a.loc);
  JvpOut r;
  r.primals.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(nout));
  std::size_t t = nout;
  for (std::size_t k = 0; k < nout; ++k)
    r.tangents.push_back(out_nz[k] ? Tangent(outs[t++]) : Tangent::zero(r.primals[k].aval()));
  return r;
}

// ---- batching --------------------------------------------------------------------------------

// cond(i, branches)[b]: an unbatched index keeps one cond over batched branches (an output
// batched in any branch is batched in all); a batched index (members take different branches)
// evaluates every branch and selects per member, as JAX does.
BatchOut cond_batch(const BatchArgs& a) {
  const auto& bs = branches_of(a.params);
  std::size_t nout = bs[0]->jaxpr->outvars.size();
  std::vector<Array> ops(a.x.begin() + 1, a.x.end());
  std::span<const std::int64_t> op_dims = a.dims.subspan(1);
  if (a.dims[0] == not_batched) {
    std::vector<bool> in_b = batched_mask(op_dims), out_b(nout, false), got;
    for (const auto& b : bs) {
      batch_jaxpr_leading(*b, in_b, a.size, std::vector<bool>(nout, false), &got);
      for (std::size_t k = 0; k < nout; ++k) out_b[k] = out_b[k] || got[k];
    }
    std::vector<ClosedJaxpr> batched;
    for (const auto& b : bs) batched.push_back(batch_jaxpr_leading(*b, in_b, a.size, out_b, nullptr));
    for (std::size_t i = 0; i < ops.size(); ++i)
      if (in_b[i]) ops[i] = move_batch_dim(ops[i], op_dims[i], 0, a.size);
    auto outs = bind_cond(a.x[0], batched, ops, a.loc);
    BatchDims dims;
    for (std::size_t k = 0; k < nout; ++k) dims.push_back(out_b[k] ? 0 : not_batched);
    return {outs, dims};
  }
  Array index = move_batch_dim(a.x[0], a.dims[0], 0, a.size);  // i32[size], already clamped
  std::vector<std::vector<Array>> per_branch;
  for (std::size_t i = 0; i < bs.size(); ++i) {
    const ClosedJaxpr& b = *bs[i];
    // Branch i reads each float operand as select(index == i, op, stop_gradient(op)), as JAX's
    // rule does (its issue 1052): a row's cotangent then never reaches an operand through a branch
    // the row did not take, where 0 * (an infinite derivative, or a NaN value) would be NaN (grad
    // of vmap(cond(x > 0, sqrt, identity)) at x = -1, or of a parameter w in w * log(x); a helper's
    // hunt of the thirty-seventh session). JAX broadcasts an unbatched operand per row for it;
    // here only one whose B copies are no larger than the batched operands the branch reads or
    // its outputs, which are batched (a parameter beside the data, or shared by a switch over
    // members: a third review): B copies of a weight matrix made vmap(cond) 15-39x slower and
    // its gradient keep 128x the memory (a matrix product became B matrix-vector products, their
    // copies residuals; XLA folds JAX's select of two equal broadcasts away, xjax's planner does
    // not). Such a weight's cotangent can still take a NaN that way (docs/status.md).
    std::vector<bool> reads;
    (void)dce(b, std::vector<bool>(nout, true), &reads);
    std::int64_t batched_in = 0, batched_out = 0;
    for (std::size_t k = 0; k < ops.size(); ++k)
      if (reads[k] && op_dims[k] != not_batched) batched_in += ops[k].size();
    for (const auto& o : b.jaxpr->outvars) batched_out += a.size * atom_aval(o).size();
    const std::int64_t copy_budget = std::max(batched_in, batched_out);  // elements a parameter's B copies may take
    std::vector<Array> ops_i = ops;
    std::vector<std::int64_t> dims_i(op_dims.begin(), op_dims.end());
    const Array taken = eq(index, scalar(static_cast<std::int64_t>(i), index.dtype()), a.loc);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      if (!reads[k] || !is_floating(ops[k].dtype())) continue;
      if (op_dims[k] == not_batched && a.size * ops[k].size() > copy_budget) continue;  // a weight
      const Array op = move_batch_dim(ops[k], op_dims[k], 0, a.size);
      ops_i[k] = bind1(Primitive::select_n, {broadcast_in_dim(taken, op.shape(), {0}), stop_gradient(op, a.loc), op}, {}, a.loc);
      dims_i[k] = 0;
    }
    BatchOut r = batch_eval(b, ops_i, dims_i, a.size);
    for (std::size_t k = 0; k < nout; ++k) r.outs[k] = move_batch_dim(r.outs[k], r.dims[k], 0, a.size);
    per_branch.push_back(std::move(r.outs));
  }
  std::vector<Array> outs;
  for (std::size_t k = 0; k < nout; ++k) {
    std::vector<Array> cases{broadcast_in_dim(index, per_branch[0][k].shape(), {0})};
    for (const auto& r : per_branch) cases.push_back(r[k]);
    outs.push_back(bind1(Primitive::select_n, cases, {}, a.loc));
  }
  return {outs, BatchDims(nout, 0)};
}

// ---- partial evaluation ----------------------------------------------------------------------

// Index known: every branch is split with the same unknown operands; an output is unknown when it
// is in any branch (instantiated in the others). The known cond computes the known outputs and
// the residuals of whichever branch runs: residual slots are shared between branches by type
// (a slot holds one residual of each branch at most), and a branch writes zeros into the slots
// it does not use. The staged cond reads (index, slots, unknown ops). Index unknown: the whole
// cond is staged.
PeSplit cond_partial_eval(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable& saveable) {
  PeSplit split;
  if (in_unknown[0]) {
    split.staged.push_back(e);
    split.out_unknown.assign(e.outputs.size(), true);
    return split;
  }
  const auto& bs = branches_of(e.params);
  std::size_t nb = bs.size(), nout = e.outputs.size();
  std::vector<bool> uk(in_unknown.begin() + 1, in_unknown.end());
  std::vector<bool> out_uk(nout, false);
  for (const auto& b : bs) {
    PartialEval pe = partial_eval(*b, uk, std::vector<bool>(nout, false), saveable);
    for (std::size_t k = 0; k < nout; ++k) out_uk[k] = out_uk[k] || pe.out_unknown[k];
  }
  std::vector<PartialEval> pes;
  for (const auto& b : bs) pes.push_back(partial_eval(*b, uk, out_uk, saveable));

  // Residual slots, merged by type.
  std::vector<ShapedArray> slot_avals;
  std::vector<std::vector<std::size_t>> slot_of(nb);
  for (std::size_t k = 0; k < nb; ++k) {
    std::vector<bool> taken(slot_avals.size(), false);
    for (const Var& r : pes[k].residual_vars) {
      std::size_t s = 0;
      while (s < slot_avals.size() && (taken[s] || slot_avals[s] != r.aval())) ++s;
      if (s == slot_avals.size()) {
        slot_avals.push_back(r.aval());
        taken.push_back(false);
      }
      taken[s] = true;
      slot_of[k].push_back(s);
    }
  }
  std::size_t n_known_out = 0;
  for (bool u : out_uk) n_known_out += u ? 0 : 1;

  // Known branches: (known ops) -> (known outs, slots).
  std::vector<ShapedArray> known_in;
  for (std::size_t i = 0; i < uk.size(); ++i)
    if (!uk[i]) known_in.push_back(bs[0]->jaxpr->invars[i].aval());
  std::vector<ClosedJaxpr> known_bs;
  for (std::size_t k = 0; k < nb; ++k) {
    auto body = [&](std::span<const Array> args) {
      auto outs = eval_jaxpr(pes[k].known, args);
      std::vector<Array> res(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(n_known_out));
      std::vector<Array> slots(slot_avals.size());
      for (std::size_t r = 0; r < slot_of[k].size(); ++r) slots[slot_of[k][r]] = outs[n_known_out + r];
      for (std::size_t s = 0; s < slots.size(); ++s)
        res.push_back(slots[s].valid() ? slots[s] : broadcast_to(scalar(0.0, slot_avals[s].dtype), slot_avals[s].shape));
      return res;
    };
    known_bs.push_back(trace_flat(body, known_in));
  }
  if (n_known_out + slot_avals.size() > 0) {
    Joined kj = join_branches(known_bs);
    if (!kj.consts.empty()) throw Error("cond: partial evaluation produced a known branch with consts");
    Eqn ke{Primitive::cond, {e.inputs[0]}, {}, cond_params(std::move(kj.branches)), e.loc};
    for (std::size_t i = 0; i < uk.size(); ++i)
      if (!uk[i]) ke.inputs.push_back(e.inputs[i + 1]);
    for (std::size_t k = 0; k < nout; ++k)
      if (!out_uk[k]) ke.outputs.push_back(e.outputs[k]);
    for (const auto& s : slot_avals) ke.outputs.emplace_back(s);
    split.known.push_back(std::move(ke));
  }

  // Staged branches: (slots, unknown ops) -> unknown outs.
  if (n_known_out < nout) {
    std::vector<ClosedJaxprPtr> staged_bs;
    for (std::size_t k = 0; k < nb; ++k) {
      const Jaxpr& sj = *pes[k].staged.jaxpr;
      auto j = std::make_shared<Jaxpr>(sj);
      j->invars.clear();
      for (std::size_t s = 0; s < slot_avals.size(); ++s) {
        auto it = std::find(slot_of[k].begin(), slot_of[k].end(), s);
        if (it != slot_of[k].end()) j->invars.push_back(sj.invars[static_cast<std::size_t>(it - slot_of[k].begin())]);
        else j->invars.emplace_back(slot_avals[s]);
      }
      j->invars.insert(j->invars.end(), sj.invars.begin() + static_cast<std::ptrdiff_t>(pes[k].num_res), sj.invars.end());
      staged_bs.push_back(share(ClosedJaxpr{j, pes[k].staged.consts}));
    }
    Eqn se{Primitive::cond, {e.inputs[0]}, {}, cond_params(std::move(staged_bs)), e.loc};
    if (!split.known.empty()) {
      const auto& kouts = split.known.back().outputs;
      for (std::size_t s = 0; s < slot_avals.size(); ++s) se.inputs.push_back(kouts[n_known_out + s]);
    }
    for (std::size_t i = 0; i < uk.size(); ++i)
      if (uk[i]) se.inputs.push_back(e.inputs[i + 1]);
    for (std::size_t k = 0; k < nout; ++k)
      if (out_uk[k]) se.outputs.push_back(e.outputs[k]);
    split.staged.push_back(std::move(se));
  }
  split.out_unknown = out_uk;
  return split;
}

// ---- transpose -------------------------------------------------------------------------------

// cond(i, branches)^T = cond(i, branches_k^T): the index and the non-linear ops are read as they
// are; outputs whose cotangent is zero are dropped from the branches before transposing.
std::vector<Tangent> cond_transpose(const TransposeArgs& a) {
  if (a.in[0].is_linear())
    throw TransformError("transpose: the index of cond is linear, so cond cannot be transposed (at " + format_location(a.loc) + ")");
  const auto& bs = branches_of(a.params);
  std::size_t nops = a.in.size() - 1;
  std::vector<bool> lin(nops), used_ct;
  for (std::size_t i = 0; i < nops; ++i) lin[i] = a.in[i + 1].is_linear();
  for (const auto& c : a.ct) used_ct.push_back(!c.is_zero());
  std::vector<ClosedJaxpr> tb;
  for (const auto& b : bs) tb.push_back(transpose_jaxpr(dce(*b, used_ct), lin));
  std::vector<Array> ops;
  for (std::size_t i = 0; i < nops; ++i)
    if (!lin[i]) ops.push_back(a.in[i + 1].value);
  for (const auto& c : a.ct)
    if (!c.is_zero()) ops.push_back(c.value());
  auto outs = bind_cond(a.in[0].value, tb, ops, a.loc);
  std::vector<Tangent> res;
  for (const auto& in : a.in) res.push_back(Tangent::zero(in.aval));
  std::size_t o = 0;
  for (std::size_t i = 0; i < nops; ++i)
    if (lin[i]) res[i + 1] = outs[o++];
  return res;
}

// ---- DCE -------------------------------------------------------------------------------------

// Unused outputs are pruned in every branch; an operand is kept when any branch still reads it.
Eqn cond_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in) {
  const auto& bs = branches_of(e.params);
  std::size_t nops = e.inputs.size() - 1;
  std::vector<ClosedJaxpr> d;
  std::vector<bool> any(nops, false), ui;
  for (const auto& b : bs) {
    d.push_back(dce(*b, used_out, &ui));
    for (std::size_t i = 0; i < nops; ++i) any[i] = any[i] || ui[i];
  }
  std::vector<ClosedJaxprPtr> pruned;
  for (const auto& b : d) pruned.push_back(share(prune_invars(b, any)));
  Eqn out{Primitive::cond, {e.inputs[0]}, {}, cond_params(std::move(pruned)), e.loc};
  for (std::size_t i = 0; i < nops; ++i)
    if (any[i]) out.inputs.push_back(e.inputs[i + 1]);
  for (std::size_t k = 0; k < e.outputs.size(); ++k)
    if (used_out[k]) out.outputs.push_back(e.outputs[k]);
  used_in.assign(1, true);
  used_in.insert(used_in.end(), any.begin(), any.end());
  return out;
}

// ---- the flat entries ------------------------------------------------------------------------

Array cond_index(const Array& pred, std::source_location loc) {
  if (pred.ndim() != 0)
    throw TypeError("cond: pred must be a scalar (a boolean or a number), got " + pred.aval().str() + " (at " +
                    format_location(loc) + ")");
  Array p = pred.dtype() == bool_ ? pred : ne(pred, scalar(0.0, pred.dtype()), loc);
  return astype(p, i32, loc);
}

Array switch_index(const Array& index, std::size_t n, std::source_location loc) {
  if (index.ndim() != 0 || is_floating(index.dtype()) || index.dtype() == bool_)
    throw TypeError("switch_: the index must be an integer scalar, got " + index.aval().str() + " (at " + format_location(loc) +
                    ")");
  Array i = index.dtype() == i32 ? index : astype(index, i32, loc);
  i = maximum(i, scalar(0.0, i32), loc);
  return minimum(i, scalar(static_cast<double>(n) - 1, i32), loc);
}

void check_branches(const char* what, std::span<const std::string> names, std::span<const TreeDef> out_defs,
                    std::span<const ClosedJaxpr> branches, std::source_location loc) {
  auto name = [&](std::size_t k) {
    return "branch " + std::to_string(k) + (k < names.size() ? " (" + names[k] + ")" : std::string());
  };
  auto ref = branches[0].out_avals();
  for (std::size_t k = 1; k < branches.size(); ++k) {
    if (!(out_defs[k] == out_defs[0]))
      throw TypeError(std::string(what) + ": " + name(k) + " returns a tree of structure " + out_defs[k].str() +
                      " but " + name(0) + " returns " + out_defs[0].str() + ", " +
                      tree_difference(out_defs[0], out_defs[k], "output") +
                      "; every branch must return the same structure, shapes and dtypes (at " + format_location(loc) + ")");
    auto o = branches[k].out_avals();
    for (std::size_t i = 0; i < o.size(); ++i)
      if (o[i] != ref[i])
        throw TypeError(std::string(what) + ": " + name(k) + " returns " + o[i].str() + " as output leaf " +
                        std::to_string(i) + " but " + name(0) + " returns " + ref[i].str() +
                        "; every branch must return the same structure, shapes and dtypes (at " + format_location(loc) + ")");
  }
}

std::vector<Array> cond_flat(const Array& index, std::span<const ClosedJaxpr> branches, std::span<const Array> ops,
                             std::source_location loc) {
  return bind_cond(index, std::vector<ClosedJaxpr>(branches.begin(), branches.end()), ops, loc);
}

}  // namespace xjax::detail

// scan.cpp: the transformation rules of scan (its meaning, shape rule and evaluation are in
// src/loops/scan.cpp). Read in order: jvp (fixpoint on which carries have tangents), batching,
// partial evaluation (fixpoint on unknown carries; residuals hoisted when loop-invariant,
// forwarded when they are consts or xs slices, stacked otherwise), transpose (a scan running the
// other way that accumulates const cotangents in its carry) and DCE (fixpoint on used carries).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "higher_order.hpp"
#include "loops/loops.hpp"
#include "pe_rules.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

// Binds a scan whose body was built by tracing: the body's consts (if any) become leading consts.
std::vector<Array> bind_scan(const ScanParams& sp, ClosedJaxpr body, std::size_t nc, std::size_t ncar, bool reverse,
                             const std::vector<Array>& operands, std::source_location loc) {
  std::vector<Array> ops = body.consts;
  ops.insert(ops.end(), operands.begin(), operands.end());
  std::size_t extra = body.consts.size();
  return bind(Primitive::scan, ops, sp.with(consts_as_inputs(body), nc + extra, ncar, reverse), loc);
}

}  // namespace

// ---- jvp -------------------------------------------------------------------------------------

// d scan(body) = scan(jvp(body)) over (consts, dconsts), (carry, dcarry), (xs, dxs), with the set
// of carries that have tangents grown to a fixpoint.
JvpOut scan_jvp(const JvpArgs& a) {
  ScanParams sp = ScanParams::read(a.params);
  std::size_t nc = sp.nconsts, ncar = sp.ncarry, nx = sp.nxs(), ny = sp.nys();
  std::vector<bool> nz(a.t.size());
  for (std::size_t i = 0; i < a.t.size(); ++i) nz[i] = !a.t[i].is_zero() && differentiable(a.x[i].aval());
  ClosedJaxpr jb;
  std::vector<bool> present;
  while (true) {
    std::vector<bool> inst(ncar + ny, false);
    for (std::size_t k = 0; k < ncar; ++k) inst[k] = nz[nc + k];
    jb = jvp_jaxpr(*sp.body, nz, inst, &present);
    bool grew = false;
    for (std::size_t k = 0; k < ncar; ++k)
      if (present[k] && !nz[nc + k] && differentiable(a.x[nc + k].aval())) nz[nc + k] = grew = true;
    if (!grew) break;
  }
  // jb inputs: consts, carry, xs, then tangents of the nz inputs in that order; reorder to
  // (consts, dconsts), (carry, dcarry), (xs, dxs). Outputs: carry, ys, dcarry, dys -> regroup.
  std::vector<std::size_t> tpos(a.t.size(), 0);
  std::size_t next = nc + ncar + nx;
  for (std::size_t i = 0; i < a.t.size(); ++i)
    if (nz[i]) tpos[i] = next++;
  std::vector<std::size_t> in_order;
  std::vector<Array> operands;
  auto group = [&](std::size_t first, std::size_t n) {
    for (std::size_t i = first; i < first + n; ++i) { in_order.push_back(i); operands.push_back(a.x[i]); }
    std::size_t count = 0;
    for (std::size_t i = first; i < first + n; ++i)
      if (nz[i]) { in_order.push_back(tpos[i]); operands.push_back(a.t[i].instantiate()); ++count; }
    return count;
  };
  std::size_t ndc = group(0, nc), ndcar = group(nc, ncar);
  group(nc + ncar, nx);
  std::vector<bool> ys_present(present.begin() + static_cast<std::ptrdiff_t>(ncar), present.end());
  std::vector<std::size_t> out_order;
  for (std::size_t k = 0; k < ncar; ++k) out_order.push_back(k);
  std::size_t t = ncar + ny;
  for (std::size_t k = 0; k < ncar; ++k)
    if (present[k]) out_order.push_back(t++);
  for (std::size_t k = 0; k < ny; ++k) out_order.push_back(ncar + k);
  for (std::size_t k = 0; k < ny; ++k)
    if (ys_present[k]) out_order.push_back(t++);
  ClosedJaxpr body = permute_outvars(permute_invars(jb, in_order), out_order);
  auto outs = bind_scan(sp, body, nc + ndc, ncar + ndcar, sp.reverse, operands, a.loc);
  JvpOut r;
  std::size_t o = 0;
  for (std::size_t k = 0; k < ncar; ++k) r.primals.push_back(outs[o++]);
  for (std::size_t k = 0; k < ncar; ++k)
    r.tangents.push_back(present[k] ? Tangent(outs[o++]) : Tangent::zero(r.primals[k].aval()));
  std::vector<Array> ys(outs.begin() + static_cast<std::ptrdiff_t>(o), outs.begin() + static_cast<std::ptrdiff_t>(o + ny));
  o += ny;
  for (std::size_t k = 0; k < ny; ++k) {
    r.primals.push_back(ys[k]);
    r.tangents.push_back(ys_present[k] ? Tangent(outs[o++]) : Tangent::zero(ys[k].aval()));
  }
  return r;
}

// ---- batching --------------------------------------------------------------------------------

// scan(body)[b] = scan(vmap body): batched consts and carries carry the batch at 0, batched xs at
// 1 (so that each step's slice has it at 0), batched ys come out at 1. A carry the body makes
// batched is batched from the start (a fixpoint, as JAX does).
BatchOut scan_batch(const BatchArgs& a) {
  ScanParams sp = ScanParams::read(a.params);
  std::size_t nc = sp.nconsts, ncar = sp.ncarry, nx = sp.nxs(), ny = sp.nys();
  std::vector<bool> b = batched_mask(a.dims);
  ClosedJaxpr body;
  std::vector<bool> out_b;
  while (true) {
    std::vector<bool> force(ncar + ny, false);
    for (std::size_t k = 0; k < ncar; ++k) force[k] = b[nc + k];
    body = batch_jaxpr_leading(*sp.body, b, a.size, force, &out_b);
    bool grew = false;
    for (std::size_t k = 0; k < ncar; ++k)
      if (out_b[k] && !b[nc + k]) b[nc + k] = grew = true;
    if (!grew) break;
  }
  std::vector<Array> ops;
  for (std::size_t i = 0; i < nc + ncar + nx; ++i) {
    std::int64_t to = i < nc + ncar ? 0 : 1;
    ops.push_back(b[i] ? move_batch_dim(a.x[i], a.dims[i], to, a.size) : a.x[i]);
  }
  auto outs = bind_scan(sp, body, nc, ncar, sp.reverse, ops, a.loc);
  BatchDims dims;
  for (std::size_t k = 0; k < ncar + ny; ++k) dims.push_back(out_b[k] ? (k < ncar ? 0 : 1) : not_batched);
  return {outs, dims};
}

// ---- partial evaluation ----------------------------------------------------------------------

namespace {

enum class ResKind { const_fwd, xs_fwd, invariant, stacked };

// partial_eval of the body with the unknown carries grown to a fixpoint (a carry is unknown if
// its initial value is or the body makes it so); `uk` (which outer inputs are unknown) is updated.
PartialEval body_partial_eval(const ScanParams& sp, std::vector<bool>& uk, const Saveable& saveable) {
  const std::size_t nc = sp.nconsts, ncar = sp.ncarry;
  while (true) {
    std::vector<bool> inst(ncar + sp.nys(), false);
    for (std::size_t k = 0; k < ncar; ++k) inst[k] = uk[nc + k];
    PartialEval pe = partial_eval(*sp.body, uk, inst, saveable);
    bool grew = false;
    for (std::size_t k = 0; k < ncar; ++k)
      if (pe.out_unknown[k] && !uk[nc + k]) uk[nc + k] = grew = true;
    if (!grew) return pe;
  }
}

// How each residual of the known body reaches the staged scan: a known const or an xs slice is
// forwarded as is, a value computed from known consts alone is hoisted before the loop
// (invariant), anything else is stacked by the known scan.
// `invariant` receives the ids of the known body's values computed from known consts alone.
std::vector<ResKind> classify_residuals(const ScanParams& sp, const PartialEval& pe, const std::vector<bool>& uk,
                                        const std::unordered_map<std::uint64_t, std::size_t>& outer_index,
                                        std::unordered_set<std::uint64_t>& invariant) {
  const Jaxpr& b = *sp.body->jaxpr;
  const std::size_t nc = sp.nconsts, ncar = sp.ncarry;
  for (std::size_t i = 0; i < nc; ++i)
    if (!uk[i]) invariant.insert(b.invars[i].id());
  for (const Eqn& q : pe.known.jaxpr->eqns) {
    bool inv = std::all_of(q.inputs.begin(), q.inputs.end(), [&](const Atom& x) {
      auto* v = std::get_if<Var>(&x);
      return !v || invariant.count(v->id());
    });
    if (inv)
      for (const auto& o : q.outputs) invariant.insert(o.id());
  }
  std::vector<ResKind> kind;
  for (const Var& r : pe.residual_vars) {
    auto it = outer_index.find(r.id());
    if (it != outer_index.end() && it->second < nc) kind.push_back(ResKind::const_fwd);
    else if (it != outer_index.end() && it->second >= nc + ncar) kind.push_back(ResKind::xs_fwd);
    else if (invariant.count(r.id())) kind.push_back(ResKind::invariant);
    else kind.push_back(ResKind::stacked);
  }
  return kind;
}

// Inlines into `known` the computation of the invariant residuals from the known consts; returns
// the atom holding each (by residual var id).
std::unordered_map<std::uint64_t, Atom> hoist_invariants(const Eqn& e, const ScanParams& sp, const PartialEval& pe,
                                                         const std::vector<bool>& uk,
                                                         const std::vector<ResKind>& kind,
                                                         const std::unordered_set<std::uint64_t>& invariant,
                                                         std::vector<Eqn>& known) {
  const Jaxpr& b = *sp.body->jaxpr;
  std::vector<Atom> known_const_atoms;
  auto hj = std::make_shared<Jaxpr>();
  for (std::size_t i = 0; i < sp.nconsts; ++i)
    if (!uk[i]) { known_const_atoms.push_back(e.inputs[i]); hj->invars.push_back(b.invars[i]); }
  std::vector<Var> inv_res;
  for (std::size_t r = 0; r < kind.size(); ++r)
    if (kind[r] == ResKind::invariant) inv_res.push_back(pe.residual_vars[r]);
  std::unordered_map<std::uint64_t, Atom> hoisted;
  if (inv_res.empty()) return hoisted;
  for (const Eqn& q : pe.known.jaxpr->eqns)  // the invariant equations (all outputs invariant)
    if (std::all_of(q.outputs.begin(), q.outputs.end(), [&](const Var& v) { return invariant.count(v.id()) > 0; }))
      hj->eqns.push_back(q);
  hj->outvars.assign(inv_res.begin(), inv_res.end());
  ClosedJaxpr h = dce(ClosedJaxpr{hj, {}}, std::vector<bool>(hj->outvars.size(), true));
  auto atoms = inline_jaxpr(*h.jaxpr, known_const_atoms, known);
  for (std::size_t r = 0; r < inv_res.size(); ++r) hoisted.emplace(inv_res[r].id(), atoms[r]);
  return hoisted;
}

}  // namespace

PeSplit scan_partial_eval(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable& saveable) {
  ScanParams sp = ScanParams::read(e.params);
  const Jaxpr& b = *sp.body->jaxpr;
  std::size_t nc = sp.nconsts, ncar = sp.ncarry, nx = sp.nxs(), ny = sp.nys();
  std::vector<bool> uk = in_unknown;
  PartialEval pe = body_partial_eval(sp, uk, saveable);

  // Where each body invar comes from in the outer equation.
  std::unordered_map<std::uint64_t, std::size_t> outer_index;
  for (std::size_t i = 0; i < b.invars.size(); ++i) outer_index[b.invars[i].id()] = i;
  std::unordered_set<std::uint64_t> invariant;
  const std::vector<ResKind> kind = classify_residuals(sp, pe, uk, outer_index, invariant);

  PeSplit split;
  const auto hoisted = hoist_invariants(e, sp, pe, uk, kind, invariant, split.known);
  if (sp.snapshots > 0) {
    // A schedule keeps loop invariants as the plain scan does: forwarded consts and hoisted
    // values, once, from outside the loop (issue 33).
    std::vector<std::optional<Atom>> outside(kind.size());
    for (std::size_t r = 0; r < kind.size(); ++r) {
      if (kind[r] == ResKind::const_fwd) outside[r] = e.inputs[outer_index.at(pe.residual_vars[r].id())];
      else if (kind[r] == ResKind::invariant) outside[r] = hoisted.at(pe.residual_vars[r].id());
    }
    if (auto scheduled = revolve_partial_eval(e, uk, pe, outside)) {
      scheduled->known.insert(scheduled->known.begin(), split.known.begin(), split.known.end());
      return *scheduled;
    }
  }

  // The known scan: known inputs -> known carry, known ys, stacked residuals.
  std::size_t n_known_out = 0;
  for (bool u : pe.out_unknown) n_known_out += u ? 0 : 1;
  auto kj = std::make_shared<Jaxpr>(*pe.known.jaxpr);
  kj->outvars.resize(n_known_out);
  for (std::size_t r = 0; r < kind.size(); ++r)
    if (kind[r] == ResKind::stacked) kj->outvars.push_back(pe.residual_vars[r]);
  ClosedJaxpr known_body = dce(ClosedJaxpr{kj, pe.known.consts}, std::vector<bool>(kj->outvars.size(), true));
  if (!known_body.consts.empty()) known_body = consts_as_inputs(known_body);  // never expected
  Eqn ke{Primitive::scan, {}, {}, {}, e.loc};
  std::size_t knc = 0, kncar = 0;
  for (std::size_t i = 0; i < e.inputs.size(); ++i)
    if (!uk[i]) {
      ke.inputs.push_back(e.inputs[i]);
      if (i < nc) ++knc;
      else if (i < nc + ncar) ++kncar;
    }
  for (std::size_t k = 0; k < ncar + ny; ++k)
    if (!pe.out_unknown[k]) ke.outputs.push_back(e.outputs[k]);
  ke.params = sp.with(known_body, knc, kncar, sp.reverse);
  std::vector<Var> stacked_vars;
  for (std::size_t r = 0; r < kind.size(); ++r)
    if (kind[r] == ResKind::stacked) {
      stacked_vars.emplace_back(stacked(pe.residual_vars[r].aval(), sp.length));
      ke.outputs.push_back(stacked_vars.back());
    }
  split.known.push_back(std::move(ke));

  // The staged scan: consts = (forwarded consts, hoisted, unknown consts), carry = unknown
  // carry, xs = (stacked residuals, forwarded xs, unknown xs). The staged body's invars are
  // (residuals..., unknown inputs...); `order` lists them in the staged scan's operand order.
  const std::size_t nres = kind.size();
  std::vector<std::size_t> order;
  Eqn se{Primitive::scan, {}, {}, {}, e.loc};
  auto add_res = [&](ResKind k) {
    std::size_t stacked_i = 0;
    for (std::size_t r = 0; r < nres; ++r) {
      if (kind[r] == ResKind::stacked && k == ResKind::stacked) {
        order.push_back(r);
        se.inputs.push_back(stacked_vars[stacked_i]);
      } else if (kind[r] == k) {
        order.push_back(r);
        if (k == ResKind::invariant) se.inputs.push_back(hoisted.at(pe.residual_vars[r].id()));
        else se.inputs.push_back(e.inputs[outer_index.at(pe.residual_vars[r].id())]);
      }
      if (kind[r] == ResKind::stacked) ++stacked_i;
    }
  };
  auto add_unknown = [&](std::size_t first, std::size_t n) {
    std::size_t pos = nres;
    for (std::size_t i = 0; i < first; ++i) pos += uk[i] ? 1 : 0;
    std::size_t count = 0;
    for (std::size_t i = first; i < first + n; ++i)
      if (uk[i]) { order.push_back(pos++); se.inputs.push_back(e.inputs[i]); ++count; }
    return count;
  };
  add_res(ResKind::const_fwd);
  add_res(ResKind::invariant);
  std::size_t snc = order.size() + add_unknown(0, nc);
  std::size_t sncar = add_unknown(nc, ncar);
  add_res(ResKind::stacked);
  add_res(ResKind::xs_fwd);
  add_unknown(nc + ncar, nx);
  se.params = sp.with(permute_invars(pe.staged, order), snc, sncar, sp.reverse);
  for (std::size_t k = 0; k < ncar + ny; ++k)
    if (pe.out_unknown[k]) se.outputs.push_back(e.outputs[k]);
  split.staged.push_back(std::move(se));

  split.out_unknown = pe.out_unknown;
  for (std::size_t k = 0; k < ncar; ++k) split.out_unknown[k] = uk[nc + k];
  return split;
}

// ---- transpose -------------------------------------------------------------------------------

TransposedBody transpose_scan_body(const ClosedJaxpr& body, std::size_t nc, std::size_t ncar, const std::vector<bool>& lin_in) {
  const Jaxpr& b = *body.jaxpr;
  const std::size_t nx = b.invars.size() - nc - ncar, ny = b.outvars.size() - ncar;
  std::vector<bool> lin = lin_in;
  for (std::size_t k = 0; k < ncar; ++k) lin[nc + k] = true;
  TransposedBody tb;
  for (std::size_t i = 0; i < nc; ++i) (lin[i] ? tb.c_lin : tb.c_nl).push_back(i);
  for (std::size_t i = nc + ncar; i < nc + ncar + nx; ++i) (lin[i] ? tb.x_lin : tb.x_nl).push_back(i);
  std::vector<ShapedArray> avals;
  for (auto i : tb.c_nl) avals.push_back(b.invars[i].aval());
  for (auto i : tb.c_lin) avals.push_back(b.invars[i].aval());
  for (std::size_t k = 0; k < ncar; ++k) avals.push_back(b.invars[nc + k].aval());
  for (auto i : tb.x_nl) avals.push_back(b.invars[i].aval());
  for (std::size_t k = 0; k < ny; ++k) avals.push_back(atom_aval(b.outvars[ncar + k]));
  auto body_t = [&](std::span<const Array> args) {
    std::size_t p = 0;
    std::vector<Array> nonlin(b.invars.size());
    for (auto i : tb.c_nl) nonlin[i] = args[p++];
    std::vector<Array> acc(args.begin() + static_cast<std::ptrdiff_t>(p), args.begin() + static_cast<std::ptrdiff_t>(p + tb.c_lin.size()));
    p += tb.c_lin.size();
    std::vector<Tangent> cts;
    for (std::size_t k = 0; k < ncar; ++k) cts.push_back(args[p++]);
    for (auto i : tb.x_nl) nonlin[i] = args[p++];
    for (std::size_t k = 0; k < ny; ++k) cts.push_back(args[p++]);
    std::vector<Array> nl_args;
    for (std::size_t i = 0; i < b.invars.size(); ++i)
      if (!lin[i]) nl_args.push_back(nonlin[i]);
    auto got = backward_pass(body, lin, nl_args, cts);  // cts of linear invars, in order
    std::vector<Array> out;
    std::size_t g = 0;
    for (std::size_t c = 0; c < tb.c_lin.size(); ++c) out.push_back(add(acc[c], got[g++].instantiate()));
    for (std::size_t k = 0; k < ncar; ++k) out.push_back(got[g++].instantiate());
    for (std::size_t k = 0; k < tb.x_lin.size(); ++k) out.push_back(got[g++].instantiate());
    return out;
  };
  tb.jaxpr = trace_flat(body_t, avals);
  return tb;
}

// scan(body)^T runs body^T the other way: carry (ct of linear consts, ct of carry),
// xs (non-linear xs, ct of ys) -> ys (ct of linear xs).
std::vector<Tangent> scan_transpose(const TransposeArgs& a) {
  ScanParams sp = ScanParams::read(a.params);
  std::size_t nc = sp.nconsts, ncar = sp.ncarry, ny = sp.nys();
  std::vector<bool> lin(a.in.size());
  for (std::size_t i = 0; i < a.in.size(); ++i) lin[i] = a.in[i].is_linear();
  // The body is linear in every carry. An initial carry that is not linear is a known value that
  // only a linear computation reads (e.g. an instantiated zero tangent): it gets no cotangent.
  TransposedBody tb = transpose_scan_body(*sp.body, nc, ncar, lin);
  std::vector<Array> operands;
  for (auto i : tb.c_nl) operands.push_back(a.in[i].value);
  for (auto i : tb.c_lin) operands.push_back(broadcast_to(scalar(0.0, a.in[i].aval.dtype), a.in[i].aval.shape));
  for (std::size_t k = 0; k < ncar; ++k) operands.push_back(a.ct[k].instantiate());
  for (auto i : tb.x_nl) operands.push_back(a.in[i].value);
  for (std::size_t k = 0; k < ny; ++k) operands.push_back(a.ct[ncar + k].instantiate());
  auto outs = bind_scan(sp, tb.jaxpr, tb.c_nl.size(), tb.c_lin.size() + ncar, !sp.reverse, operands, a.loc);
  std::vector<Tangent> res;
  for (const auto& in : a.in) res.push_back(Tangent::zero(in.aval));
  std::size_t o = 0;
  for (auto i : tb.c_lin) res[i] = outs[o++];
  for (std::size_t k = 0; k < ncar; ++k, ++o)
    if (lin[nc + k]) res[nc + k] = outs[o];
  for (auto i : tb.x_lin) res[i] = outs[o++];
  return res;
}

// ---- DCE -------------------------------------------------------------------------------------

ClosedJaxpr loop_body_dce(const ClosedJaxpr& body, std::size_t nc, std::size_t ncar, const std::vector<bool>& used_out,
                          std::vector<bool>& used_carry, std::vector<bool>& reads) {
  for (;;) {
    std::vector<bool> keep = used_out;
    for (std::size_t k = 0; k < ncar; ++k) keep[k] = used_carry[k];
    ClosedJaxpr live = dce(body, keep, &reads);
    bool grew = false;
    for (std::size_t k = 0; k < ncar; ++k)
      if (reads[nc + k] && !used_carry[k]) used_carry[k] = grew = true;
    if (!grew) return live;
  }
}

// Keeps the ys that are used and the carries that are used or read by what is kept (fixpoint).
Eqn scan_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in) {
  ScanParams sp = ScanParams::read(e.params);
  std::size_t nc = sp.nconsts, ncar = sp.ncarry;
  std::vector<bool> used_carry(used_out.begin(), used_out.begin() + static_cast<std::ptrdiff_t>(ncar));
  std::vector<bool> body_used_in;
  ClosedJaxpr body = loop_body_dce(*sp.body, nc, ncar, used_out, used_carry, body_used_in);
  std::vector<bool> keep_in = body_used_in;
  for (std::size_t k = 0; k < ncar; ++k) keep_in[nc + k] = used_carry[k];
  body = prune_invars(body, keep_in);
  Eqn out{Primitive::scan, {}, {}, {}, e.loc};
  std::size_t knc = 0, kncar = 0;
  for (std::size_t i = 0; i < e.inputs.size(); ++i)
    if (keep_in[i]) {
      out.inputs.push_back(e.inputs[i]);
      if (i < nc) ++knc;
      else if (i < nc + ncar) ++kncar;
    }
  for (std::size_t k = 0; k < e.outputs.size(); ++k)
    if (k < ncar ? used_carry[k] : used_out[k]) out.outputs.push_back(e.outputs[k]);
  out.params = sp.with(body, knc, kncar, sp.reverse);
  used_in = keep_in;
  return out;
}

}  // namespace xjax::detail

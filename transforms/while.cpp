// while.cpp: the transformation rules of the while primitive (printed `while`; its meaning,
// shape rule and evaluation are in src/loops/while.cpp). Read in order: jvp (fixpoint on which
// carries have tangents; the cond ignores them), partial evaluation (a known loop over the known carries; the staged loop recomputes them),
// transpose (an error: the trip count is only known at run time), DCE (dropping the carries that
// nothing live reads) and the flat entry the API (xj::while_loop, xj::fori_loop with Array bounds
// in control_flow.hpp) calls.
#include <algorithm>
#include <limits>

#include "higher_order.hpp"
#include "loops/loops.hpp"
#include "pe_rules.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

// Binds a while whose cond and body may close over values (traced jaxprs): their consts become
// leading cond / body consts.
std::vector<Array> bind_while(const ClosedJaxpr& cond, const ClosedJaxpr& body, std::span<const Array> cconsts,
                              std::span<const Array> bconsts, std::span<const Array> init, std::source_location loc,
                              std::int64_t snapshots) {
  std::vector<Array> ops = cond.consts;
  ops.insert(ops.end(), cconsts.begin(), cconsts.end());
  ops.insert(ops.end(), body.consts.begin(), body.consts.end());
  ops.insert(ops.end(), bconsts.begin(), bconsts.end());
  ops.insert(ops.end(), init.begin(), init.end());
  return bind(Primitive::while_, ops,
              while_params(consts_as_inputs(cond), consts_as_inputs(body), cond.consts.size() + cconsts.size(),
                           body.consts.size() + bconsts.size(), snapshots),
              loc);
}

}  // namespace

// ---- jvp -------------------------------------------------------------------------------------

// d while(cond, body) = while(cond', jvp(body)) over (bconsts, dbconsts), (carry, dcarry), where
// cond' ignores the tangents and the carries with tangents grow to a fixpoint.
JvpOut while_loop_jvp(const JvpArgs& a) {
  WhileParams w = WhileParams::read(a.params);
  std::size_t cn = w.cn, bn = w.bn, ncar = a.x.size() - cn - bn;
  std::vector<bool> nz(bn + ncar);  // body inputs with tangents: bconsts, carry
  for (std::size_t i = 0; i < bn + ncar; ++i)
    nz[i] = !a.t[cn + i].is_zero() && differentiable(a.x[cn + i].aval());
  ClosedJaxpr jb;
  std::vector<bool> present;
  while (true) {
    std::vector<bool> inst(nz.begin() + static_cast<std::ptrdiff_t>(bn), nz.end());
    jb = jvp_jaxpr(*w.body, nz, inst, &present);
    bool grew = false;
    for (std::size_t k = 0; k < ncar; ++k)
      if (present[k] && !nz[bn + k] && differentiable(a.x[cn + bn + k].aval())) nz[bn + k] = grew = true;
    if (!grew) break;
  }
  // jb inputs: bconsts, carry, dbconsts, dcarry -> (bconsts, dbconsts), (carry, dcarry).
  std::size_t ndb = 0, ndc = 0;
  for (std::size_t i = 0; i < bn; ++i) ndb += nz[i] ? 1 : 0;
  for (std::size_t k = 0; k < ncar; ++k) ndc += nz[bn + k] ? 1 : 0;
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < bn; ++i) order.push_back(i);
  for (std::size_t i = 0; i < ndb; ++i) order.push_back(bn + ncar + i);
  for (std::size_t k = 0; k < ncar; ++k) order.push_back(bn + k);
  for (std::size_t k = 0; k < ndc; ++k) order.push_back(bn + ncar + ndb + k);
  ClosedJaxpr body = permute_invars(jb, order);
  // cond' : (cconsts, carry, dcarry) -> cond(cconsts, carry)
  auto cj = std::make_shared<Jaxpr>(*w.cond->jaxpr);
  for (std::size_t k = 0; k < ncar; ++k)
    if (nz[bn + k]) cj->invars.emplace_back(a.x[cn + bn + k].aval());
  ClosedJaxpr cond{cj, {}};

  std::vector<Array> cconsts(a.x.begin(), a.x.begin() + static_cast<std::ptrdiff_t>(cn));
  std::vector<Array> bconsts(a.x.begin() + static_cast<std::ptrdiff_t>(cn), a.x.begin() + static_cast<std::ptrdiff_t>(cn + bn));
  for (std::size_t i = 0; i < bn; ++i)
    if (nz[i]) bconsts.push_back(a.t[cn + i].instantiate());
  std::vector<Array> init(a.x.begin() + static_cast<std::ptrdiff_t>(cn + bn), a.x.end());
  for (std::size_t k = 0; k < ncar; ++k)
    if (nz[bn + k]) init.push_back(a.t[cn + bn + k].instantiate());
  auto outs = bind_while(cond, body, cconsts, bconsts, init, a.loc, w.snapshots);
  JvpOut r;
  r.primals.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(ncar));
  std::size_t t = ncar;
  for (std::size_t k = 0; k < ncar; ++k)
    r.tangents.push_back(nz[bn + k] ? Tangent(outs[t++]) : Tangent::zero(r.primals[k].aval()));
  return r;
}

// ---- batching --------------------------------------------------------------------------------

// while(cond, body)[b]: a carry the body makes batched is batched from the start (fixpoint). An
// unbatched predicate keeps one loop over the batched body. A batched predicate (members stop at
// different times) loops while any member's predicate holds, and a member whose predicate is
// false keeps its carry: carry = where(pred, body(carry), carry), every carry batched.
BatchOut while_loop_batch(const BatchArgs& a) {
  WhileParams w = WhileParams::read(a.params);
  std::size_t cn = w.cn, bn = w.bn, ncar = a.x.size() - cn - bn;
  std::vector<bool> b = batched_mask(a.dims);
  std::vector<bool> cb(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(cn));
  std::vector<bool> bb(b.begin() + static_cast<std::ptrdiff_t>(cn), b.end());  // bconsts, carry
  auto carry_batched = [&] { return std::vector<bool>(bb.begin() + static_cast<std::ptrdiff_t>(bn), bb.end()); };
  auto grow = [&] {  // the body's fixpoint on batched carries
    std::vector<bool> out_b;
    while (true) {
      batch_jaxpr_leading(*w.body, bb, a.size, carry_batched(), &out_b);
      bool grew = false;
      for (std::size_t k = 0; k < ncar; ++k)
        if (out_b[k] && !bb[bn + k]) bb[bn + k] = grew = true;
      if (!grew) break;
    }
  };
  grow();
  auto cond_in = [&] {
    std::vector<bool> in = cb;
    auto c = carry_batched();
    in.insert(in.end(), c.begin(), c.end());
    return in;
  };
  std::vector<bool> pred_b;
  batch_jaxpr_leading(*w.cond, cond_in(), a.size, {false}, &pred_b);
  if (pred_b[0])
    for (std::size_t k = 0; k < ncar; ++k) bb[bn + k] = true;
  std::vector<bool> carry_b = carry_batched();
  ClosedJaxpr cond = batch_jaxpr_leading(*w.cond, cond_in(), a.size, {pred_b[0]}, nullptr);
  ClosedJaxpr body = batch_jaxpr_leading(*w.body, bb, a.size, carry_b, nullptr);
  std::vector<Array> ops;
  for (std::size_t i = 0; i < a.x.size(); ++i) {
    bool batched = i < cn ? cb[i] : bb[i - cn];
    ops.push_back(batched ? move_batch_dim(a.x[i], a.dims[i], 0, a.size) : a.x[i]);
  }
  std::span<const Array> all(ops);
  std::vector<Array> cconsts(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(cn));
  std::vector<Array> bconsts(all.begin() + static_cast<std::ptrdiff_t>(cn), all.begin() + static_cast<std::ptrdiff_t>(cn + bn));
  std::vector<Array> init(all.begin() + static_cast<std::ptrdiff_t>(cn + bn), all.end());
  BatchDims dims;
  for (std::size_t k = 0; k < ncar; ++k) dims.push_back(carry_b[k] ? 0 : not_batched);
  if (!pred_b[0]) return {bind_while(cond, body, cconsts, bconsts, init, a.loc, w.snapshots), dims};
  // Batched predicate: cond' = any(pred); body' over (cconsts, bconsts, carry) keeps finished
  // members' carries. With reverse mode (online(s)) the body reads a finished member's float
  // carries (and batched consts) through stop_gradient, as vmap of cond reads an untaken branch's
  // operands: its zero cotangent then goes nowhere, where 0 * (an infinite derivative at the
  // frozen value) was NaN (a helper's hunt of the thirty-seventh session). Without online(s) no
  // cotangent comes (forward mode drops the frozen members' tangents by the select below), so the
  // selects would only cost time (2-2.5x: a review); with it, forward-only evaluation pays them.
  // An unbatched body const is read as it is: a NaN can still reach its cotangent that way
  // (docs/status.md).
  const bool guard_frozen = w.snapshots > 0;
  std::vector<ShapedArray> cond_avals, body_avals;
  for (const auto& x : cconsts) cond_avals.push_back(x.aval());
  for (const auto& x : init) cond_avals.push_back(x.aval());
  for (const auto& x : cconsts) body_avals.push_back(x.aval());
  for (const auto& x : bconsts) body_avals.push_back(x.aval());
  for (const auto& x : init) body_avals.push_back(x.aval());
  ClosedJaxpr any_cond = trace_flat(
      [&](std::span<const Array> args) {
        Array pred = eval_jaxpr(cond, args)[0];
        return std::vector<Array>{bind1(Primitive::reduce_max, {pred}, params::Reduce{.axes = {0}}, a.loc)};
      },
      cond_avals);
  ClosedJaxpr masked_body = trace_flat(
      [&](std::span<const Array> args) {
        std::vector<Array> c_in(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(cn));
        std::vector<Array> carry(args.begin() + static_cast<std::ptrdiff_t>(cn + bn), args.end());
        c_in.insert(c_in.end(), carry.begin(), carry.end());
        Array pred = eval_jaxpr(cond, c_in)[0];
        std::vector<Array> body_in(args.begin() + static_cast<std::ptrdiff_t>(cn), args.end());
        for (std::size_t i = 0; guard_frozen && i < body_in.size(); ++i)
          if ((i >= bn || bb[i]) && is_floating(body_in[i].dtype()))
            body_in[i] = where(broadcast_in_dim(pred, body_in[i].shape(), {0}), body_in[i], stop_gradient(body_in[i], a.loc));
        std::vector<Array> next = eval_jaxpr(body, body_in);
        for (std::size_t k = 0; k < ncar; ++k)
          next[k] = where(broadcast_in_dim(pred, next[k].shape(), {0}), next[k], carry[k]);
        return next;
      },
      body_avals);
  std::vector<Array> both_consts = cconsts;
  both_consts.insert(both_consts.end(), bconsts.begin(), bconsts.end());
  return {bind_while(any_cond, masked_body, cconsts, both_consts, init, a.loc, w.snapshots), dims};
}

// ---- partial evaluation ----------------------------------------------------------------------

// JAX's _while_partial_eval: the carries that stay known (fixpoint over the body) are computed by
// a known loop over the known part of the body, provided the cond reads only known values; the
// staged loop is the whole loop again (recomputing the known carries, like a checkpoint), so the
// loop keeps no per-iteration residuals. Otherwise everything is staged.
PeSplit while_loop_partial_eval(const Eqn& e, const std::vector<bool>& in_unknown, const Saveable&) {
  WhileParams w = WhileParams::read(e.params);
  std::size_t cn = w.cn, bn = w.bn, ncar = e.outputs.size();
  PeSplit split;
  auto stage_all = [&] {
    split.staged.push_back(e);
    split.out_unknown.assign(ncar, true);
    return split;
  };
  std::vector<bool> carry_uk(in_unknown.begin() + static_cast<std::ptrdiff_t>(cn + bn), in_unknown.end());
  std::vector<bool> body_uk;
  while (true) {
    body_uk.assign(in_unknown.begin() + static_cast<std::ptrdiff_t>(cn), in_unknown.begin() + static_cast<std::ptrdiff_t>(cn + bn));
    body_uk.insert(body_uk.end(), carry_uk.begin(), carry_uk.end());
    PartialEval pe = partial_eval(*w.body, body_uk, carry_uk);
    bool grew = false;
    for (std::size_t k = 0; k < ncar; ++k)
      if (pe.out_unknown[k] && !carry_uk[k]) carry_uk[k] = grew = true;
    if (!grew) break;
  }
  if (std::all_of(carry_uk.begin(), carry_uk.end(), [](bool u) { return u; })) return stage_all();
  std::vector<bool> cond_uk(in_unknown.begin(), in_unknown.begin() + static_cast<std::ptrdiff_t>(cn));
  cond_uk.insert(cond_uk.end(), carry_uk.begin(), carry_uk.end());
  std::vector<bool> cond_used, body_used;
  ClosedJaxpr cond = dce(*w.cond, {true}, &cond_used);
  for (std::size_t i = 0; i < cond_uk.size(); ++i)
    if (cond_uk[i] && cond_used[i]) return stage_all();
  std::vector<bool> known_carry(ncar);
  for (std::size_t k = 0; k < ncar; ++k) known_carry[k] = !carry_uk[k];
  ClosedJaxpr body = dce(*w.body, known_carry, &body_used);
  // The known loop can only read known inputs. The fixpoint above makes the known carries
  // independent of the unknown ones; DCE must see that too (a nested loop's DCE rule prunes the
  // carries its kept part does not read), else stage everything rather than read an unknown.
  for (std::size_t i = 0; i < body_uk.size(); ++i)
    if (body_uk[i] && body_used[i]) return stage_all();
  std::vector<bool> cond_keep(cond_uk.size()), body_keep(body_uk.size());
  for (std::size_t i = 0; i < cond_uk.size(); ++i) cond_keep[i] = !cond_uk[i];
  for (std::size_t i = 0; i < body_uk.size(); ++i) body_keep[i] = !body_uk[i];
  cond = prune_invars(cond, cond_keep);
  if (w.snapshots > 0)
    if (auto s = online_partial_eval(e, cond, cond_keep, body_uk, carry_uk)) return *s;
  body = prune_invars(body, body_keep);
  Eqn ke{Primitive::while_, {}, {}, {}, e.loc};
  std::size_t kcn = 0, kbn = 0;
  for (std::size_t i = 0; i < e.inputs.size(); ++i) {
    bool known = i < cn ? cond_keep[i] : i < cn + bn ? body_keep[i - cn] : !carry_uk[i - cn - bn];
    if (!known) continue;
    ke.inputs.push_back(e.inputs[i]);
    if (i < cn) ++kcn;
    else if (i < cn + bn) ++kbn;
  }
  for (std::size_t k = 0; k < ncar; ++k)
    if (!carry_uk[k]) ke.outputs.push_back(e.outputs[k]);
  ke.params = while_params(cond, body, kcn, kbn, w.snapshots);
  split.known.push_back(std::move(ke));
  Eqn se = e;  // the whole loop; its known outputs get fresh names (the known loop defines them)
  for (std::size_t k = 0; k < ncar; ++k)
    if (!carry_uk[k]) se.outputs[k] = Var(e.outputs[k].aval());
  split.staged.push_back(std::move(se));
  split.out_unknown = carry_uk;
  return split;
}

// ---- transpose -------------------------------------------------------------------------------

// A while loop's trip count is only known when it runs, so its linearization cannot be
// transposed (JAX's error); fori_loop with static bounds lowers to scan, which can, and a
// while_loop given an online checkpoint schedule is differentiated by its own loops.
std::vector<Tangent> while_loop_transpose(const TransposeArgs& a) {
  throw TransformError(
      "reverse-mode differentiation of while_loop is not supported (its number of iterations is only known at run "
      "time, so the values of each iteration cannot be saved for the backward pass); use xj::fori_loop with static "
      "integer bounds (it lowers to scan; with traced bounds it lowers to while_loop) or xj::scan instead, or "
      "call xj::while_loop with {.checkpoints = xj::scan_checkpoints::online(s)} (reverse mode with s snapshots) (at " +
      format_location(a.loc) + ")");
}

// ---- dce -------------------------------------------------------------------------------------

// Carry k is live if its output is used, the cond reads it, or the body computes a live carry
// from it (a fixpoint, as JAX's rule); the loop keeps the live carries and the consts they read.
Eqn while_loop_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in) {
  WhileParams w = WhileParams::read(e.params);
  std::size_t cn = w.cn, bn = w.bn, ncar = e.outputs.size();
  std::vector<bool> cond_used, body_used;
  ClosedJaxpr cond = dce(*w.cond, {true}, &cond_used);
  std::vector<bool> live = used_out;
  for (std::size_t k = 0; k < ncar; ++k)
    if (cond_used[cn + k]) live[k] = true;
  ClosedJaxpr body;
  while (true) {
    body = dce(*w.body, live, &body_used);
    bool grew = false;
    for (std::size_t k = 0; k < ncar; ++k)
      if (body_used[bn + k] && !live[k]) live[k] = grew = true;
    if (!grew) break;
  }
  std::vector<bool> cond_keep(cond_used.begin(), cond_used.begin() + static_cast<std::ptrdiff_t>(cn));
  std::vector<bool> body_keep(body_used.begin(), body_used.begin() + static_cast<std::ptrdiff_t>(bn));
  cond_keep.insert(cond_keep.end(), live.begin(), live.end());
  body_keep.insert(body_keep.end(), live.begin(), live.end());
  cond = prune_invars(cond, cond_keep);
  body = prune_invars(body, body_keep);
  Eqn out{Primitive::while_, {}, {}, {}, e.loc};
  used_in.assign(e.inputs.size(), false);
  std::size_t kcn = 0, kbn = 0;
  for (std::size_t i = 0; i < e.inputs.size(); ++i) {
    bool keep = i < cn ? cond_keep[i] : i < cn + bn ? body_keep[i - cn] : live[i - cn - bn];
    if (!keep) continue;
    used_in[i] = true;
    out.inputs.push_back(e.inputs[i]);
    if (i < cn) ++kcn;
    else if (i < cn + bn) ++kbn;
  }
  for (std::size_t k = 0; k < ncar; ++k)
    if (live[k]) out.outputs.push_back(e.outputs[k]);
  out.params = while_params(cond, body, kcn, kbn, w.snapshots);
  return out;
}

// ---- the flat entry --------------------------------------------------------------------------

std::vector<Array> while_flat(const ClosedJaxpr& cond, const ClosedJaxpr& body, std::span<const Array> init,
                              std::source_location loc, std::int64_t snapshots) {
  return bind_while(cond, body, {}, {}, init, loc, snapshots);
}

Array fori_bound(const Array& b, std::source_location loc) {
  if (b.ndim() != 0 || is_floating(b.dtype()) || b.dtype() == bool_)
    throw TypeError("fori_loop: a bound must be an integer scalar, got " + b.aval().str() + " (at " + format_location(loc) + ")");
  // lax.fori_loop's counter has the bounds' dtype: i8, i16, u8, u16 and i32 bounds count in
  // their own (a traced i8 bound's counter was i32, so `x + i` turned an i8 carry into i32: a
  // helper's hunt of the thirty-seventh session; the counter stops at the upper bound, which fits);
  // i64, u32 and u64 bounds count in i64 (a traced i64 bound converted to i32 wrapped: 2^32 + 2
  // ran 2 trips); a traced u64 past i64's range converts as astype does (documented)
  const bool wide = b.dtype() == i64 || b.dtype() == u32 || b.dtype() == u64;
  if (b.dtype() == u64 && !b.is_tracer() && b.item<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    fori_bound_out_of_range(std::to_string(b.item<std::uint64_t>()), loc);
  return wide && b.dtype() != i64 ? astype(b, i64, loc) : b;
}

void fori_bound_out_of_range(const std::string& value, std::source_location loc) {
  throw Error("fori_loop: the bound " + value + " is outside the range of the loop counter (i32 for a C++ integer, i64 for an "
              "i64 / u32 / u64 array; at " + format_location(loc) + ")");
}

void check_while(const TreeDef& in_def, const TreeDef& out_def, std::span<const ShapedArray> in,
                 std::span<const ShapedArray> out, std::span<const ShapedArray> pred, std::source_location loc) {
  if (pred.size() != 1 || pred[0].ndim() != 0 || pred[0].dtype != bool_) {
    std::string got = pred.size() == 1 ? pred[0].str() : std::to_string(pred.size()) + " values";
    throw TypeError("while_loop: cond_fn must return a boolean scalar (bool[]), got " + got + " (at " + format_location(loc) +
                    ")");
  }
  check_carry("while_loop", "body_fn", in_def, out_def, in, out, loc);
}

}  // namespace xjax::detail

// revolve.cpp: reverse mode of loops under a checkpoint schedule (scan_checkpoints::binomial(s)
// for scan, online(s) for while_loop): partial evaluation emits the primitives of
// src/loops/revolve.hpp (revolve_fwd / online_fwd on the known side, revolve_lin on the staged
// side), and their transformation rules: revolve_lin transposes to revolve_bwd; the jvp and
// batching rules transform a plain-scan expansion of each primitive (a second derivative or a
// vmap of a scheduled gradient is correct but does not keep the schedule's memory bound).
#include <algorithm>
#include <optional>
#include <unordered_set>

#include "higher_order.hpp"
#include "loops/revolve.hpp"
#include "pe_rules.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

JvpOut jvp_by_expansion(const JvpArgs& a, const FlatFn& expansion) {
  std::vector<ShapedArray> avals;
  for (const auto& x : a.x) avals.push_back(x.aval());
  return jvp_eval(trace_flat(expansion, avals), a.x, a.t);
}

BatchOut batch_by_expansion(const BatchArgs& a, const FlatFn& expansion) {
  std::vector<ShapedArray> avals;
  for (std::size_t i = 0; i < a.x.size(); ++i) {
    ShapedArray v = a.x[i].aval();
    if (a.dims[i] != not_batched) v.shape.erase(v.shape.begin() + a.dims[i]);
    avals.push_back(v);
  }
  return batch_eval(trace_flat(expansion, avals), a.x, a.dims, a.size);
}

// revolve_lin's params: K, and S reordered from partial_eval's (res, unknown consts, unknown
// carry, unknown xs) to (unknown consts, unknown carry, res, unknown xs).
params::Revolve linear_params(const ClosedJaxprPtr& k, const ClosedJaxpr& staged, std::size_t nres, std::int64_t length,
                              bool reverse, std::int64_t snapshots, std::size_t knc, std::size_t kncar, std::size_t nlc,
                              std::size_t nlcar) {
  const std::size_t nstaged = staged->invars.size();
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < nlc + nlcar; ++i) order.push_back(nres + i);
  for (std::size_t i = 0; i < nres; ++i) order.push_back(i);
  for (std::size_t i = nres + nlc + nlcar; i < nstaged; ++i) order.push_back(i);
  return params::Revolve{.jaxpr = k,
                         .linear_jaxpr = std::make_shared<const ClosedJaxpr>(permute_invars(staged, order)),
                         .length = length,
                         .reverse = reverse,
                         .snapshots = snapshots,
                         .num_consts = static_cast<std::int64_t>(knc),
                         .num_carry = static_cast<std::int64_t>(kncar),
                         .num_res = static_cast<std::int64_t>(nres),
                         .num_linear_consts = static_cast<std::int64_t>(nlc),
                         .num_linear_carry = static_cast<std::int64_t>(nlcar)};
}

// A body (K or S) with the consts among its inputs [first, first + n) that it never reads dropped:
// a loop invariant the body reads only in dead code, or its tangent. The plain loop's DCE drops
// them, so revolve_fwd / online_fwd and revolve_lin must not take them as operands and keep them,
// or what computes them, alive as residuals (fuzz seed 363901). keep[i] says whether const i stays.
struct ReadConsts {
  ClosedJaxprPtr body;
  std::vector<bool> keep;
  std::size_t count() const { return static_cast<std::size_t>(std::count(keep.begin(), keep.end(), true)); }
};
ReadConsts without_unread_consts(const ClosedJaxpr& body, std::size_t first, std::size_t n) {
  std::vector<bool> reads;
  ClosedJaxpr live = dce(body, std::vector<bool>(body.jaxpr->outvars.size(), true), &reads);
  std::vector<bool> keep(body.jaxpr->invars.size(), true);
  for (std::size_t i = first; i < first + n; ++i) keep[i] = reads.at(i);
  const auto at = [&](std::size_t i) { return keep.begin() + static_cast<std::ptrdiff_t>(i); };
  return {std::make_shared<const ClosedJaxpr>(prune_invars(live, keep)), std::vector<bool>(at(first), at(first + n))};
}

// Which of K's carries (its inputs [nc, nc + ncar)) a replay needs: those a per-step residual
// (step_res[r]) reads, and those the next values of needed carries read, to a fixpoint. Any other
// carry (one whose tangent nothing needs, a metric the loss takes through stop_gradient) only
// feeds the loop's outputs: the forward sweep steps it, no snapshot stores it. (scan's carry
// fixpoint, loop_body_dce, from the residual outputs alone.) *reads: which of K's inputs those
// residuals and needed carries read.
std::vector<bool> replayed_carries(const ClosedJaxpr& k, std::size_t nc, std::size_t ncar, const std::vector<bool>& step_res,
                                   std::vector<bool>* reads = nullptr) {
  std::vector<bool> used(k.jaxpr->outvars.size(), false), needed(ncar, false), read;
  std::copy(step_res.begin(), step_res.end(), used.end() - static_cast<std::ptrdiff_t>(step_res.size()));
  (void)loop_body_dce(k, nc, ncar, used, needed, read);
  if (reads) *reads = std::move(read);
  return needed;
}

// K for revolve_lin's replays: the needed carries and every residual, its other carries dropped
// from its inputs (none of what is kept reads them), and the xs it does not read (revolve_lin
// would hold them: a review). No ys: the forward sweep computed them once, and a replayed step
// would compute them for nothing (an RNN's readout per replayed step: a helper's hunt of the
// thirty-seventh session). xs_read: which of K's xs stay.
struct ReplayStep {
  ClosedJaxprPtr k;
  std::vector<bool> xs_read;
};
ReplayStep replay_step(const ClosedJaxpr& k, std::size_t nc, std::size_t ncar, std::size_t nres, const std::vector<bool>& needed) {
  const std::size_t nout = k.jaxpr->outvars.size();
  std::vector<bool> used(nout, false), reads;
  for (std::size_t c = 0; c < ncar; ++c) used[c] = needed[c];
  std::fill(used.end() - static_cast<std::ptrdiff_t>(nres), used.end(), true);
  const ClosedJaxpr live = dce(k, used, &reads);
  std::vector<bool> keep_in(k.jaxpr->invars.size(), true);
  for (std::size_t c = 0; c < ncar; ++c) keep_in[nc + c] = needed[c];
  for (std::size_t i = nc + ncar; i < keep_in.size(); ++i) keep_in[i] = reads[i];
  return {std::make_shared<const ClosedJaxpr>(prune_invars(live, keep_in)),
          std::vector<bool>(keep_in.begin() + static_cast<std::ptrdiff_t>(nc + ncar), keep_in.end())};
}

}  // namespace

// ---- partial evaluation ------------------------------------------------------------------------

std::optional<PeSplit> revolve_partial_eval(const Eqn& e, const std::vector<bool>& uk, const PartialEval& pe,
                                            const std::vector<std::optional<Atom>>& outside) {
  const auto& ps = e.params.get<params::Scan>();
  const Jaxpr& b = *ps.jaxpr->jaxpr;
  const auto nc = static_cast<std::size_t>(ps.num_consts), ncar = static_cast<std::size_t>(ps.num_carry);
  const std::size_t nin = b.invars.size(), nout = b.outvars.size();
  std::size_t knc = 0, kncar = 0, nlc = 0, nlcar = 0;
  for (std::size_t i = 0; i < nin; ++i) {
    if (i < nc) (uk[i] ? nlc : knc) += 1;
    else if (i < nc + ncar) (uk[i] ? nlcar : kncar) += 1;
  }
  const bool any_unknown = std::find(uk.begin(), uk.end(), true) != uk.end();
  // (one step: its residuals are what the schedule keeps for its last step anyway, plus a snapshot)
  if (ps.length < 2 || kncar == 0 || !any_unknown || !pe.known.consts.empty() || !pe.staged.consts.empty())
    return std::nullopt;
  const std::size_t nres = pe.residual_vars.size();
  const std::int64_t slots = std::min(ps.snapshots, ps.length);
  const ReadConsts read = without_unread_consts(pe.known, 0, knc);
  const ReadConsts read_linear = without_unread_consts(pe.staged, nres, nlc);
  const ClosedJaxprPtr& k = read.body;
  // A loop-invariant residual (a known const of the body, a weight, or a value computed from
  // known consts alone) is not an output of revolve_fwd: revolve_lin reads it from outside the
  // loop, so it is kept once, as the plain scan keeps it (issue 33).
  if (outside.size() != nres) throw InternalError("partial_eval", "revolve: one outside atom per residual expected");
  // Without a per-step residual the backward sweep never replays a step: the plain scan keeps
  // nothing per step, so storing carries would only cost memory (fuzzer seed 3009108). An x the
  // body's derivative reads as it is costs the plain scan nothing either (it forwards the xs):
  // `c' = c + x * x` kept s snapshots of c for it (a review of the thirty-sixth session).
  const auto forwarded_x = [&](std::size_t r) {
    for (std::size_t i = nc + ncar; i < nin; ++i)
      if (b.invars[i].id() == pe.residual_vars[r].id()) return true;
    return false;
  };
  std::vector<bool> step_res(nres);
  for (std::size_t r = 0; r < nres; ++r) step_res[r] = !outside[r] && !forwarded_x(r);
  // Only the carries the per-step residuals read, directly or through other carries, are
  // snapshot. Where there are none, each residual is computed from its step's x (and invariants)
  // alone: the plain scan keeps them per step, which costs no more than the xs where they are no
  // larger than one step's x (`c' = c + sin(x) w`: sin(x)); larger ones (`c' = c cos(w x)`, w a
  // vector: cos(w x) per step, 62x the schedule's memory when the plain scan kept it: a review of
  // the thirty-seventh session) keep the schedule with every carry stored, as before.
  std::vector<bool> reads;  // K's inputs the per-step residuals read
  std::vector<bool> needed = replayed_carries(*k, read.count(), kncar, step_res, &reads);
  if (std::find(needed.begin(), needed.end(), true) == needed.end()) {
    // (the xs those residuals read: an x nothing reads does not make them cheap; a review)
    std::size_t res_bytes = 0, x_bytes = 0;
    for (std::size_t r = 0; r < nres; ++r)
      if (step_res[r]) res_bytes += pe.residual_vars[r].aval().nbytes();
    for (std::size_t i = read.count() + kncar; i < k->jaxpr->invars.size(); ++i)
      if (reads[i]) x_bytes += k->jaxpr->invars[i].aval().nbytes();
    if (res_bytes <= x_bytes) return std::nullopt;
    needed.assign(kncar, true);
  }
  params::Ints stored;
  for (std::size_t c = 0; c < kncar; ++c)
    if (needed[c]) stored.push_back(static_cast<std::int64_t>(c));
  ClosedJaxprPtr k_fwd = k;  // K without the loop-invariant residuals among its outputs
  std::size_t nres_fwd = nres;
  if (std::any_of(outside.begin(), outside.end(), [](const std::optional<Atom>& a) { return a.has_value(); })) {
    auto j = std::make_shared<Jaxpr>(*k->jaxpr);
    const std::size_t first_res = j->outvars.size() - nres;
    for (std::size_t r = nres; r-- > 0;)
      if (outside[r]) {
        j->outvars.erase(j->outvars.begin() + static_cast<std::ptrdiff_t>(first_res + r));
        --nres_fwd;
      }
    k_fwd = std::make_shared<const ClosedJaxpr>(dce(ClosedJaxpr{std::move(j), k->consts},
                                                    std::vector<bool>(first_res + nres_fwd, true)));
  }

  PeSplit split;
  split.out_unknown = pe.out_unknown;
  // The known consts K reads, then the known carries and xs: revolve_fwd's and revolve_lin's
  // leading operands.
  std::vector<Atom> known_consts;
  for (std::size_t i = 0, kc = 0; i < nc; ++i)
    if (!uk[i] && read.keep[kc++]) known_consts.push_back(e.inputs[i]);
  Eqn fwd{Primitive::revolve_fwd, known_consts, {}, {}, e.loc};
  for (std::size_t i = nc; i < nin; ++i)
    if (!uk[i]) fwd.inputs.push_back(e.inputs[i]);
  for (std::size_t o = 0; o < nout; ++o)
    if (!pe.out_unknown[o]) fwd.outputs.push_back(e.outputs[o]);
  std::vector<Var> snaps, res;
  for (std::size_t i = nc, c = 0; i < nc + ncar; ++i)
    if (!uk[i] && needed[c++]) snaps.emplace_back(stacked(b.invars[i].aval(), slots));
  std::vector<Atom> res_operands;  // revolve_lin's last-step residuals
  for (std::size_t r = 0; r < nres; ++r) {
    if (outside[r]) {
      res_operands.push_back(*outside[r]);
    } else {
      res.emplace_back(pe.residual_vars[r].aval());
      res_operands.push_back(res.back());
    }
  }
  fwd.outputs.insert(fwd.outputs.end(), snaps.begin(), snaps.end());
  fwd.outputs.insert(fwd.outputs.end(), res.begin(), res.end());
  fwd.params = params::RevolveFwd{.jaxpr = k_fwd, .length = ps.length, .reverse = ps.reverse, .snapshots = ps.snapshots,
                                  .num_consts = static_cast<std::int64_t>(read.count()), .num_carry = static_cast<std::int64_t>(kncar),
                                  .num_res = static_cast<std::int64_t>(nres_fwd), .stored_carries = stored};
  split.known.push_back(std::move(fwd));

  const ReplayStep replay = replay_step(*k, read.count(), kncar, nres, needed);
  Eqn lin{Primitive::revolve_lin, known_consts, {}, {}, e.loc};
  lin.inputs.insert(lin.inputs.end(), snaps.begin(), snaps.end());
  for (std::size_t i = nc + ncar, kx = 0; i < nin; ++i)
    if (!uk[i] && replay.xs_read[kx++]) lin.inputs.push_back(e.inputs[i]);
  lin.inputs.insert(lin.inputs.end(), res_operands.begin(), res_operands.end());
  for (std::size_t i = 0, lc = 0; i < nin; ++i)
    if (uk[i] && (i >= nc || read_linear.keep[lc++])) lin.inputs.push_back(e.inputs[i]);
  for (std::size_t o = 0; o < nout; ++o)
    if (pe.out_unknown[o]) lin.outputs.push_back(e.outputs[o]);
  lin.params = linear_params(replay.k, *read_linear.body, nres, ps.length, ps.reverse, ps.snapshots, read.count(), stored.size(),
                             read_linear.count(), nlcar);
  split.staged.push_back(std::move(lin));
  return split;
}

JvpOut revolve_fwd_jvp(const JvpArgs& a) { return jvp_by_expansion(a, fwd_expansion(a.params.get<params::RevolveFwd>(), a.loc)); }
BatchOut revolve_fwd_batch(const BatchArgs& a) {
  return batch_by_expansion(a, fwd_expansion(a.params.get<params::RevolveFwd>(), a.loc));
}
std::vector<Tangent> revolve_fwd_transpose(const TransposeArgs&) {
  throw InternalError("transpose", "revolve_fwd is not linear: reverse mode transposes revolve_lin instead");
}


// ---- revolve_lin -------------------------------------------------------------------------------

namespace {
[[noreturn]] void online_unsupported(const char* what, std::source_location loc) {
  throw TransformError(std::string(what) + " of the reverse mode of a while_loop with scan_checkpoints::online is not "
                       "supported (its trip count is only known at run time); write the loop as a scan with "
                       "scan_checkpoints::binomial for that (at " + format_location(loc) + ")");
}
}  // namespace

namespace {
// The params of a revolve_lin / revolve_bwd whose expansion a jvp or batching rule transforms:
// only a scan's (its length known when traced).
template <class Args> const params::Revolve& expandable(const Args& a, const char* what) {
  const auto& ps = a.params.template get<params::Revolve>();
  if (ps.length < 0) online_unsupported(what, a.loc);
  return ps;
}
}  // namespace

JvpOut revolve_lin_jvp(const JvpArgs& a) {
  return jvp_by_expansion(a, lin_expansion(expandable(a, "forward-mode differentiation"), a.loc));
}
BatchOut revolve_lin_batch(const BatchArgs& a) { return batch_by_expansion(a, lin_expansion(expandable(a, "vmap"), a.loc)); }

// revolve_lin^T = revolve_bwd with S's transposed step (transpose_scan_body, as scan's
// transpose): the ct state carries the cotangents of S's carry and its linear consts.
std::vector<Tangent> revolve_lin_transpose(const TransposeArgs& a) {
  const auto& ps = a.params.get<params::Revolve>();
  const StepShape sh = shape_of(ps);
  const LinLayout l = LinLayout::of(sh, ps);
  const auto nlc = static_cast<std::size_t>(ps.num_linear_consts), nlcar = static_cast<std::size_t>(ps.num_linear_carry);
  const std::size_t nlx = a.in.size() - l.per_step;
  for (std::size_t i = 0; i < l.lin_consts; ++i)
    if (a.in[i].is_linear()) throw InternalError("transpose", "revolve_lin: a known operand is linear");
  // S's invars: (lin consts, lin carry, res, lin xs); as a scan body its xs are (res, lin xs).
  std::vector<bool> lin(nlc + nlcar + sh.nres + nlx, false);
  for (std::size_t i = 0; i < nlc; ++i) lin[i] = a.in[l.lin_consts + i].is_linear();
  for (std::size_t i = 0; i < nlx; ++i) lin[nlc + nlcar + sh.nres + i] = a.in[l.per_step + i].is_linear();
  TransposedBody tb = transpose_scan_body(*ps.linear_jaxpr, nlc, nlcar, lin);
  std::vector<Array> ops;
  for (std::size_t i = 0; i < l.lin_consts; ++i) ops.push_back(a.in[i].value);
  for (auto i : tb.c_nl) ops.push_back(a.in[l.lin_consts + i].value);
  // The linear consts' cotangent accumulators start at a traced broadcast of 0 (as scan's): a
  // concrete zeros array would be a const of the transposed jaxpr, held as long as it (a vjp's
  // pullback kept a zero copy of every loop-invariant weight).
  for (auto i : tb.c_lin)
    ops.push_back(broadcast_to(scalar(0.0, a.in[l.lin_consts + i].aval.dtype), a.in[l.lin_consts + i].aval.shape));
  for (std::size_t k = 0; k < nlcar; ++k) ops.push_back(a.ct[k].instantiate());
  for (auto i : tb.x_nl)
    if (i >= nlc + nlcar + sh.nres) ops.push_back(a.in[l.per_step + (i - nlc - nlcar - sh.nres)].value);
  for (std::size_t k = nlcar; k < a.ct.size(); ++k) ops.push_back(a.ct[k].instantiate());
  params::Revolve bp = ps;
  bp.linear_jaxpr = std::make_shared<const ClosedJaxpr>(std::move(tb.jaxpr));
  bp.num_linear_consts = static_cast<std::int64_t>(tb.c_nl.size());
  bp.num_linear_carry = static_cast<std::int64_t>(tb.c_lin.size() + nlcar);
  auto outs = bind(Primitive::revolve_bwd, ops, bp, a.loc);
  std::vector<Tangent> r;
  for (const auto& in : a.in) r.push_back(Tangent::zero(in.aval));
  std::size_t o = 0;
  for (auto i : tb.c_lin) r[l.lin_consts + i] = outs[o++];
  for (std::size_t k = 0; k < nlcar; ++k, ++o)
    if (a.in[l.lin_carry + k].is_linear()) r[l.lin_carry + k] = outs[o];
  for (auto i : tb.x_lin) r[l.per_step + (i - nlc - nlcar - sh.nres)] = outs[o++];
  return r;
}

// ---- revolve_bwd -------------------------------------------------------------------------------

// ---- revolve_bwd -------------------------------------------------------------------------------

JvpOut revolve_bwd_jvp(const JvpArgs& a) { return jvp_by_expansion(a, bwd_expansion(expandable(a, "differentiation"), a.loc)); }
BatchOut revolve_bwd_batch(const BatchArgs& a) { return batch_by_expansion(a, bwd_expansion(expandable(a, "vmap"), a.loc)); }
std::vector<Tangent> revolve_bwd_transpose(const TransposeArgs&) {
  throw InternalError("transpose", "revolve_bwd is transposed only through its jvp's expansion");
}

// ---- DCE ---------------------------------------------------------------------------------------

namespace {
// Which of K's residual outputs (its last nres) depend on the step, reading a carry or an x: the
// others are loop invariants (partial evaluation passed them from outside the loop).
std::vector<bool> step_dependent_residuals(const Jaxpr& k, std::size_t nc, std::size_t nres) {
  std::unordered_set<std::uint64_t> varies;
  for (std::size_t i = nc; i < k.invars.size(); ++i) varies.insert(k.invars[i].id());
  const auto reads_varying = [&](const Atom& a) {
    const Var* v = std::get_if<Var>(&a);
    return v && varies.count(v->id()) > 0;
  };
  for (const Eqn& e : k.eqns)
    if (std::any_of(e.inputs.begin(), e.inputs.end(), reads_varying))
      for (const auto& o : e.outputs) varies.insert(o.id());
  std::vector<bool> dependent;
  for (std::size_t r = k.outvars.size() - nres; r < k.outvars.size(); ++r) dependent.push_back(reads_varying(k.outvars[r]));
  return dependent;
}

// The operands flagged `keep`.
std::vector<Atom> kept_atoms(const std::vector<Atom>& atoms, const std::vector<bool>& keep) {
  std::vector<Atom> out;
  for (std::size_t i = 0; i < atoms.size(); ++i)
    if (keep[i]) out.push_back(atoms[i]);
  return out;
}
std::size_t count_in(const std::vector<bool>& flags, std::size_t first, std::size_t n) {
  return static_cast<std::size_t>(std::count(flags.begin() + static_cast<std::ptrdiff_t>(first),
                                             flags.begin() + static_cast<std::ptrdiff_t>(first + n), true));
}
}  // namespace

// revolve_fwd: the ys and residual outputs nothing reads go, with what only they need (and the
// consts and xs then unread). With its snapshots unread too (revolve_lin became a plain scan, or
// went), it is the plain scan of K without residuals, pruned by scan_dce.
Eqn revolve_fwd_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in) {
  const auto& ps = e.params.get<params::RevolveFwd>();
  const StepShape sh = shape_of(ps);
  const std::size_t nstored = ps.stored_carries.size();
  const std::size_t first_snap = sh.ncar + sh.ny, first_res = first_snap + nstored;
  const std::size_t snaps_used = count_in(used_out, first_snap, nstored), res_used = count_in(used_out, first_res, sh.nres);
  const bool snaps_read = snaps_used > 0, snaps_all_read = snaps_used == nstored;
  const bool res_read = res_used > 0, res_all_read = res_used == sh.nres;
  const bool ys_all_read = count_in(used_out, sh.ncar, sh.ny) == sh.ny;
  used_in.assign(e.inputs.size(), true);
  // (a residual read without the snapshots is not expected: kept whole)
  if ((snaps_all_read && ys_all_read && res_all_read) || (!snaps_read && res_read)) return e;
  if (!snaps_read) {
    std::vector<bool> carry_and_ys(first_snap, true);
    carry_and_ys.resize(first_snap + sh.nres, false);
    const ClosedJaxpr body = dce(*ps.jaxpr, carry_and_ys);
    Eqn plain{Primitive::scan, e.inputs, std::vector<Var>(e.outputs.begin(), e.outputs.begin() + static_cast<std::ptrdiff_t>(first_snap)),
              params::Scan{.jaxpr = std::make_shared<const ClosedJaxpr>(body), .length = ps.length, .reverse = ps.reverse,
                           .unroll = 1, .num_consts = ps.num_consts, .num_carry = ps.num_carry, .snapshots = ps.snapshots},
              e.loc};
    return scan_dce(plain, std::vector<bool>(used_out.begin(), used_out.begin() + static_cast<std::ptrdiff_t>(first_snap)), used_in);
  }
  // K's outputs (carry, ys, res): the carries step the sweep and fill the snapshots (those
  // revolve_lin still reads: it drops the carries its replays no longer need)
  std::vector<bool> keep_out(used_out.begin(), used_out.begin() + static_cast<std::ptrdiff_t>(first_snap));
  std::fill(keep_out.begin(), keep_out.begin() + static_cast<std::ptrdiff_t>(sh.ncar), true);
  keep_out.insert(keep_out.end(), used_out.begin() + static_cast<std::ptrdiff_t>(first_res), used_out.end());
  std::vector<bool> reads;
  ClosedJaxpr body = dce(*ps.jaxpr, keep_out, &reads);
  for (std::size_t i = sh.nc; i < sh.nc + sh.ncar; ++i) reads[i] = true;
  used_in = reads;
  Eqn out{Primitive::revolve_fwd, kept_atoms(e.inputs, reads), {}, {}, e.loc};
  for (std::size_t o = 0; o < e.outputs.size(); ++o)
    if (o < sh.ncar || used_out[o]) out.outputs.push_back(e.outputs[o]);
  params::RevolveFwd p = ps;
  p.stored_carries.clear();
  for (std::size_t j = 0; j < nstored; ++j)
    if (used_out[first_snap + j]) p.stored_carries.push_back(ps.stored_carries[j]);
  p.jaxpr = std::make_shared<const ClosedJaxpr>(prune_invars(body, reads));
  p.num_consts = static_cast<std::int64_t>(count_in(reads, 0, sh.nc));
  p.num_res = static_cast<std::int64_t>(count_in(used_out, first_res, sh.nres));
  out.params = p;
  return out;
}

// revolve_lin (a scan's; a while_loop's is kept whole): the linear ys that are used and the
// linear carries used or read by what is kept (scan_dce's fixpoint on S), then the residuals,
// linear operands, known consts and xs that what is left reads, and the carries (with their
// snapshots) its replays no longer need, and K's ys. With no residual left that a
// replay computes (each a loop invariant or an x as it is) nothing needs replaying: the plain
// scan of S, its invariant residuals as consts and the xs as xs (as partial evaluation emits
// when a body has none; fuzz seeds 400172, 401028 once the staged walk pruned plain scans).
Eqn revolve_lin_dce(const Eqn& e, const std::vector<bool>& used_out, std::vector<bool>& used_in) {
  const auto& ps = e.params.get<params::Revolve>();
  used_in.assign(e.inputs.size(), true);
  if (ps.length < 0) return e;
  const StepShape sh = shape_of(ps);
  const LinLayout l = LinLayout::of(sh, ps);
  const auto nlc = static_cast<std::size_t>(ps.num_linear_consts), nlcar = static_cast<std::size_t>(ps.num_linear_carry);
  const ClosedJaxpr& s = *ps.linear_jaxpr;  // (lin consts, lin carry, res, lin xs) -> (lin carry, lin ys)
  std::vector<bool> used_carry(used_out.begin(), used_out.begin() + static_cast<std::ptrdiff_t>(nlcar));
  std::vector<bool> s_reads;
  const ClosedJaxpr live = loop_body_dce(s, nlc, nlcar, used_out, used_carry, s_reads);
  std::vector<bool> keep_s = s_reads;
  for (std::size_t k = 0; k < nlcar; ++k) keep_s[nlc + k] = used_carry[k];
  const std::vector<bool> keep_res(keep_s.begin() + static_cast<std::ptrdiff_t>(nlc + nlcar),
                                   keep_s.begin() + static_cast<std::ptrdiff_t>(nlc + nlcar + sh.nres));
  std::vector<bool> kept_out;
  for (std::size_t o = 0; o < e.outputs.size(); ++o) kept_out.push_back(o < nlcar ? used_carry[o] : bool(used_out[o]));
  const bool all_kept = std::all_of(keep_s.begin(), keep_s.end(), [](bool b) { return b; }) &&
                        std::all_of(kept_out.begin(), kept_out.end(), [](bool b) { return b; });
  // The carries the replays of what is left need, and their snapshots (revolve_fwd then stores
  // no others). Where no residual left reads a carry (each is computed from its x alone), every
  // carry stays: the replays still step them.
  std::vector<bool> needed = replayed_carries(*ps.jaxpr, sh.nc, sh.ncar, keep_res);
  if (count_in(needed, 0, sh.ncar) == 0) needed.assign(sh.ncar, true);
  const bool carries_kept = count_in(needed, 0, sh.ncar) == sh.ncar;
  if (all_kept && carries_kept && sh.ny == 0) return e;
  // K with the carries needed, no ys, the residual outputs S still reads, and the known consts
  // and xs it then reads
  std::vector<bool> k_keep_out = needed;
  k_keep_out.resize(sh.ncar + sh.ny, false);
  k_keep_out.insert(k_keep_out.end(), keep_res.begin(), keep_res.end());
  std::vector<bool> k_reads;
  const ClosedJaxpr k = dce(*ps.jaxpr, k_keep_out, &k_reads);
  for (std::size_t c = 0; c < sh.ncar; ++c) k_reads[sh.nc + c] = needed[c];
  const std::size_t nres = count_in(keep_res, 0, sh.nres);
  const std::vector<bool> dependent = step_dependent_residuals(*k.jaxpr, sh.nc, nres);
  // the known x each kept residual is, where it is one as it is (-1: none)
  std::vector<std::ptrdiff_t> x_of(nres, -1);
  for (std::size_t r = 0; r < nres; ++r)
    if (const Var* v = std::get_if<Var>(&k.jaxpr->outvars[k.jaxpr->outvars.size() - nres + r]))
      for (std::size_t j = 0; j < sh.nx; ++j)
        if (k.jaxpr->invars[sh.nc + sh.ncar + j].id() == v->id()) x_of[r] = static_cast<std::ptrdiff_t>(j);
  const std::vector<Atom> lin_operands =
      kept_atoms(std::vector<Atom>(e.inputs.begin() + static_cast<std::ptrdiff_t>(l.lin_consts), e.inputs.end()),
                 [&] {
                   std::vector<bool> keep(keep_s.begin(), keep_s.begin() + static_cast<std::ptrdiff_t>(nlc + nlcar));
                   keep.insert(keep.end(), keep_s.begin() + static_cast<std::ptrdiff_t>(nlc + nlcar + sh.nres), keep_s.end());
                   return keep;
                 }());
  const std::vector<Atom> res_operands =
      kept_atoms(std::vector<Atom>(e.inputs.begin() + static_cast<std::ptrdiff_t>(l.res),
                                   e.inputs.begin() + static_cast<std::ptrdiff_t>(l.res + sh.nres)),
                 keep_res);
  const ClosedJaxpr s_kept = prune_invars(live, keep_s);
  const std::size_t klc = count_in(keep_s, 0, nlc), klcar = count_in(keep_s, nlc, nlcar);
  // which of e's inputs stay: known consts / snapshots / known xs (K's), then residuals, then S's own
  for (std::size_t i = 0; i < e.inputs.size(); ++i) {
    if (i < l.res)
      used_in[i] = i < sh.nc ? bool(k_reads[i]) : i < l.xs ? bool(needed[i - l.snaps]) : bool(k_reads[sh.nc + sh.ncar + (i - l.xs)]);
    else if (i < l.lin_consts) used_in[i] = keep_res[i - l.res];
    else if (i < l.per_step) used_in[i] = keep_s[i - l.lin_consts];
    else used_in[i] = keep_s[nlc + nlcar + sh.nres + (i - l.per_step)];
  }
  Eqn out{Primitive::revolve_lin, {}, {}, {}, e.loc};
  for (std::size_t o = 0; o < e.outputs.size(); ++o)
    if (kept_out[o]) out.outputs.push_back(e.outputs[o]);
  bool replays = false;
  for (std::size_t r = 0; r < nres; ++r) replays = replays || (dependent[r] && x_of[r] < 0);
  if (!replays) {
    // S as a scan body: consts (invariant res, lin consts), carry (lin carry), xs (the known xs
    // the other residuals are, lin xs)
    std::vector<std::size_t> order;
    std::vector<Atom> invariant, xs;
    for (std::size_t r = 0; r < nres; ++r)
      if (x_of[r] < 0) order.push_back(klc + klcar + r), invariant.push_back(res_operands[r]);
    for (std::size_t i = 0; i < klc + klcar; ++i) order.push_back(i);
    for (std::size_t r = 0; r < nres; ++r)
      if (x_of[r] >= 0) order.push_back(klc + klcar + r), xs.push_back(e.inputs[l.xs + static_cast<std::size_t>(x_of[r])]);
    for (std::size_t i = klc + klcar + nres; i < s_kept.jaxpr->invars.size(); ++i) order.push_back(i);
    for (std::size_t i = 0; i < l.res; ++i) used_in[i] = false;
    for (std::size_t r = 0; r < nres; ++r)
      if (x_of[r] >= 0) used_in[l.xs + static_cast<std::size_t>(x_of[r])] = true;
    for (std::size_t r = 0, kr = 0; r < sh.nres; ++r)  // a forwarded x is read as the xs operand, not as a residual
      if (keep_res[r] && x_of[kr++] >= 0) used_in[l.res + r] = false;
    out.prim = Primitive::scan;
    out.inputs = invariant;
    out.inputs.insert(out.inputs.end(), lin_operands.begin(), lin_operands.begin() + static_cast<std::ptrdiff_t>(klc + klcar));
    out.inputs.insert(out.inputs.end(), xs.begin(), xs.end());
    out.inputs.insert(out.inputs.end(), lin_operands.begin() + static_cast<std::ptrdiff_t>(klc + klcar), lin_operands.end());
    out.params = params::Scan{.jaxpr = std::make_shared<const ClosedJaxpr>(permute_invars(s_kept, order)), .length = ps.length,
                              .reverse = ps.reverse, .unroll = 1, .num_consts = static_cast<std::int64_t>(invariant.size() + klc),
                              .num_carry = static_cast<std::int64_t>(klcar), .snapshots = ps.snapshots};
    return out;
  }
  for (std::size_t i = 0; i < l.res; ++i)
    if (used_in[i]) out.inputs.push_back(e.inputs[i]);
  out.inputs.insert(out.inputs.end(), res_operands.begin(), res_operands.end());
  out.inputs.insert(out.inputs.end(), lin_operands.begin(), lin_operands.end());
  params::Revolve p = ps;
  p.jaxpr = std::make_shared<const ClosedJaxpr>(prune_invars(k, k_reads));
  p.linear_jaxpr = std::make_shared<const ClosedJaxpr>(s_kept);
  p.num_consts = static_cast<std::int64_t>(count_in(k_reads, 0, sh.nc));
  p.num_carry = static_cast<std::int64_t>(count_in(needed, 0, sh.ncar));
  p.num_res = static_cast<std::int64_t>(nres);
  p.num_linear_consts = static_cast<std::int64_t>(klc);
  p.num_linear_carry = static_cast<std::int64_t>(klcar);
  out.params = p;
  return out;
}

// ---- while_loop: online_fwd and partial evaluation -------------------------------------------

std::optional<PeSplit> online_partial_eval(const Eqn& e, const ClosedJaxpr& cond, const std::vector<bool>& cond_known,
                                           const std::vector<bool>& body_uk, const std::vector<bool>& carry_uk) {
  const auto& ps = e.params.get<params::While>();
  const auto cn = static_cast<std::size_t>(ps.cond_nconsts), bn = static_cast<std::size_t>(ps.body_nconsts);
  const std::size_t ncar = carry_uk.size();
  PartialEval pe = partial_eval(*ps.body_jaxpr, body_uk, carry_uk);
  std::size_t kbn = 0, kncar = 0, nlc = 0, nlcar = 0, kcn = 0;
  for (std::size_t i = 0; i < bn; ++i) (body_uk[i] ? nlc : kbn) += 1;
  for (std::size_t k = 0; k < ncar; ++k) (carry_uk[k] ? nlcar : kncar) += 1;
  for (std::size_t i = 0; i < cn; ++i) kcn += cond_known[i] ? 1 : 0;
  if (kncar == 0 || nlcar == 0 || !pe.known.consts.empty() || !pe.staged.consts.empty() || !cond.consts.empty())
    return std::nullopt;
  const ReadConsts read = without_unread_consts(pe.known, 0, kbn);
  const ReadConsts read_linear = without_unread_consts(pe.staged, pe.residual_vars.size(), nlc);
  const ClosedJaxprPtr& k = read.body;
  // The carries the replays need (as a scan's: a dead carry next to the differentiated one kept
  // capacity() copies of itself; a helper's hunt of the thirty-seventh session); every carry
  // where none is (the replays then step them all, as before).
  const std::size_t nres = pe.residual_vars.size();
  std::vector<bool> needed = replayed_carries(*k, read.count(), kncar, std::vector<bool>(nres, true));
  if (std::find(needed.begin(), needed.end(), true) == needed.end()) needed.assign(kncar, true);
  params::Ints stored;
  for (std::size_t c = 0; c < kncar; ++c)
    if (needed[c]) stored.push_back(static_cast<std::int64_t>(c));
  std::vector<Atom> known_consts;  // the known body consts K reads
  for (std::size_t i = 0, kc = 0; i < bn; ++i)
    if (!body_uk[i] && read.keep[kc++]) known_consts.push_back(e.inputs[cn + i]);

  PeSplit split;
  split.out_unknown = carry_uk;
  Eqn fwd{Primitive::online_fwd, {}, {}, {}, e.loc};
  for (std::size_t i = 0; i < cn; ++i)
    if (cond_known[i]) fwd.inputs.push_back(e.inputs[i]);
  fwd.inputs.insert(fwd.inputs.end(), known_consts.begin(), known_consts.end());
  for (std::size_t c = 0; c < ncar; ++c)
    if (!carry_uk[c]) fwd.inputs.push_back(e.inputs[cn + bn + c]);
  for (std::size_t c = 0; c < ncar; ++c)
    if (!carry_uk[c]) fwd.outputs.push_back(e.outputs[c]);
  const std::int64_t rows = OnlinePlacement(ps.snapshots).capacity();
  std::vector<Var> snaps;
  for (std::size_t c = 0, kc = 0; c < ncar; ++c)
    if (!carry_uk[c] && needed[kc++]) snaps.emplace_back(stacked(e.outputs[c].aval(), rows));
  Var positions(ShapedArray{{rows}, DType::i64}), trips(ShapedArray{{}, DType::i64});
  fwd.outputs.insert(fwd.outputs.end(), snaps.begin(), snaps.end());
  fwd.outputs.push_back(positions);
  fwd.outputs.push_back(trips);
  fwd.params = params::OnlineFwd{.cond_jaxpr = std::make_shared<const ClosedJaxpr>(cond),
                                 .jaxpr = k,
                                 .snapshots = ps.snapshots,
                                 .cond_nconsts = static_cast<std::int64_t>(kcn),
                                 .num_consts = static_cast<std::int64_t>(read.count()),
                                 .num_carry = static_cast<std::int64_t>(kncar),
                                 .stored_carries = stored};
  split.known.push_back(std::move(fwd));

  Eqn lin{Primitive::revolve_lin, known_consts, {}, {}, e.loc};
  lin.inputs.insert(lin.inputs.end(), snaps.begin(), snaps.end());
  lin.inputs.push_back(positions);
  lin.inputs.push_back(trips);
  for (std::size_t i = 0, lc = 0; i < bn; ++i)
    if (body_uk[i] && read_linear.keep[lc++]) lin.inputs.push_back(e.inputs[cn + i]);
  for (std::size_t c = 0; c < ncar; ++c)
    if (carry_uk[c]) lin.inputs.push_back(e.inputs[cn + bn + c]);
  for (std::size_t c = 0; c < ncar; ++c)
    if (carry_uk[c]) lin.outputs.push_back(e.outputs[c]);
  lin.params = linear_params(replay_step(*k, read.count(), kncar, nres, needed).k, *read_linear.body, nres, -1, false,
                             ps.snapshots, read.count(), stored.size(), read_linear.count(), nlcar);
  split.staged.push_back(std::move(lin));
  return split;
}

JvpOut online_fwd_jvp(const JvpArgs& a) {
  online_unsupported("differentiation", a.loc);
}
BatchOut online_fwd_batch(const BatchArgs& a) { online_unsupported("vmap", a.loc); }
std::vector<Tangent> online_fwd_transpose(const TransposeArgs&) {
  throw InternalError("transpose", "online_fwd is not linear: reverse mode transposes revolve_lin instead");
}

}  // namespace xjax::detail

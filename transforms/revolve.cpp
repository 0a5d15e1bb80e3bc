// revolve.cpp: reverse mode of a scan under a binomial checkpoint schedule
// (scan_checkpoints::binomial(s)), as three primitives that partial evaluation and transposition
// of such a scan emit:
//   carry, ys, snapshots..., res... = revolve_fwd[K] consts carry xs
//       the forward sweep: runs the known step K (consts, carry, x) -> (carry, y, res) over the
//       loop, storing the carries the schedule stores before its first backward step, and keeps
//       the residuals of the last step (which the schedule tapes first);
//   lin_carry, lin_ys = revolve_lin[K, S] consts snapshots xs res lin_consts lin_carry lin_xs
//       the linear part of the loop (S: (lin consts, lin carry, res, lin x) -> (lin carry, lin y)),
//       evaluated from the first snapshot; its transpose is
//   ct_state, ct_xs = revolve_bwd[K, B] consts snapshots xs res consts' ct_state per_step...
//       the backward sweep (B: (consts', ct state, res, per-step x) -> (ct state, ct x), S's
//       transpose), which follows the rest of the schedule: restores, advances and reverse steps
//       that rerun K for the residuals of one step at a time.
// The snapshots are one stacked array per carry leaf, [slots, ...] with slots = min(s, length).
// Read in order: shared helpers, partial evaluation, revolve_fwd, revolve_lin, revolve_bwd, and the
// jvp and batching rules, which transform a plain-scan expansion of each primitive (the same
// values with every carry stored: a second derivative or a vmap of a scheduled gradient is
// correct but does not keep the schedule's memory bound).
#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "higher_order.hpp"
#include "pe_rules.hpp"
#include "plan.hpp"
#include "revolve.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

std::vector<Array> part(std::span<const Array> v, std::size_t first, std::size_t n) {
  return std::vector<Array>(v.begin() + static_cast<std::ptrdiff_t>(first), v.begin() + static_cast<std::ptrdiff_t>(first + n));
}

std::vector<Array> cat(std::vector<Array> a, std::span<const Array> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Row i of a stacked array, without a copy.
Array row(const Array& x, std::int64_t i) {
  ShapedArray a = x.aval();
  a.shape.erase(a.shape.begin());
  return buffer_view(x, static_cast<std::size_t>(i) * a.nbytes(), a);
}

void write_row(const Array& dst, std::int64_t i, const Array& src) {
  const std::size_t n = src.aval().nbytes();
  char* to = static_cast<char*>(mutable_data(dst)) + static_cast<std::size_t>(i) * n;
  if (n && to != src.raw_data()) std::memcpy(to, src.raw_data(), n);
}

/// The shape of K = params.jaxpr: (consts, carry, x) -> (carry, y, res).
struct StepShape {
  std::size_t nc, ncar, nx, ny, nres;
  std::int64_t length, slots;
  bool reverse;
  static StepShape of(const ClosedJaxpr& k, std::int64_t nc, std::int64_t ncar, std::int64_t nres, std::int64_t length,
                      std::int64_t snapshots, bool reverse) {
    StepShape s{static_cast<std::size_t>(nc), static_cast<std::size_t>(ncar), 0, 0, static_cast<std::size_t>(nres),
                length, length < 0 ? snapshots : std::min(snapshots, std::max<std::int64_t>(length, 1)), reverse};
    s.nx = k->invars.size() - s.nc - s.ncar;
    s.ny = k->outvars.size() - s.ncar - s.nres;
    return s;
  }
  /// The index into xs of the step visited p-th.
  std::int64_t index(std::int64_t p) const { return reverse ? length - 1 - p : p; }
};

StepShape shape_of(const params::RevolveFwd& ps) {
  return StepShape::of(*ps.jaxpr, ps.num_consts, ps.num_carry, ps.num_res, ps.length, ps.snapshots, ps.reverse);
}
StepShape shape_of(const params::Revolve& ps) {
  return StepShape::of(*ps.jaxpr, ps.num_consts, ps.num_carry, ps.num_res, ps.length, ps.snapshots, ps.reverse);
}

// K keeping only its first `keep` outputs (the carry, or the carry and y): the steps that do not
// need residuals. Built once per K and kept with it (plan side table).
ClosedJaxprPtr known_prefix(const ClosedJaxprPtr& k, std::size_t keep) {
  return derived_jaxpr(k->jaxpr, {-1, static_cast<std::int64_t>(keep)}, [&] {
    std::vector<bool> used(k->jaxpr->outvars.size(), false);
    std::fill(used.begin(), used.begin() + static_cast<std::ptrdiff_t>(keep), true);
    return std::make_shared<const ClosedJaxpr>(dce(*k, used));
  });
}

/// A jaxpr run many times on concrete arrays (its plan looked up once).
struct Runner {
  ClosedJaxprPtr j;
  std::shared_ptr<const EvalPlan> plan;
  explicit Runner(ClosedJaxprPtr jp) : j(std::move(jp)), plan(plan_of(j->jaxpr)) {}
  std::vector<Array> operator()(std::span<const Array> args) const { return run_plan(*plan, *j, args); }
};

// The binomial schedule's first sweep, which revolve_fwd runs: its actions up to its first reverse
// step (the last loop step, which the forward tapes). Leaves `sc` after that reverse step and
// returns the position of the carry each slot holds then (-1: unused).
std::vector<std::int64_t> first_sweep(RevolveSchedule& sc, std::int64_t slots, std::vector<RevolveAction>* actions = nullptr) {
  std::vector<std::int64_t> pos_of(static_cast<std::size_t>(slots), -1);
  std::int64_t pos = 0;
  for (RevolveAction a{}; sc.next(a);) {
    if (a.kind == RevolveAction::Kind::reverse) return pos_of;
    if (a.kind == RevolveAction::Kind::advance) pos += a.n;
    else if (a.kind == RevolveAction::Kind::store) pos_of[static_cast<std::size_t>(a.n)] = pos;
    else throw InternalError("revolve", "the forward sweep of a binomial schedule only advances and stores");
    if (actions) actions->push_back(a);
  }
  throw InternalError("revolve", "a binomial schedule without a reverse step");
}

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
params::Revolve linear_params(const ClosedJaxprPtr& k, const PartialEval& pe, std::int64_t length, bool reverse,
                              std::int64_t snapshots, std::size_t knc, std::size_t kncar, std::size_t nlc, std::size_t nlcar) {
  const std::size_t nres = pe.residual_vars.size(), nstaged = pe.staged->invars.size();
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < nlc + nlcar; ++i) order.push_back(nres + i);
  for (std::size_t i = 0; i < nres; ++i) order.push_back(i);
  for (std::size_t i = nres + nlc + nlcar; i < nstaged; ++i) order.push_back(i);
  return params::Revolve{.jaxpr = k,
                         .linear_jaxpr = std::make_shared<const ClosedJaxpr>(permute_invars(pe.staged, order)),
                         .length = length,
                         .reverse = reverse,
                         .snapshots = snapshots,
                         .num_consts = static_cast<std::int64_t>(knc),
                         .num_carry = static_cast<std::int64_t>(kncar),
                         .num_res = static_cast<std::int64_t>(nres),
                         .num_linear_consts = static_cast<std::int64_t>(nlc),
                         .num_linear_carry = static_cast<std::int64_t>(nlcar)};
}

std::vector<ShapedArray> avals_of(const std::vector<Var>& vs, std::size_t first, std::size_t n) {
  std::vector<ShapedArray> out;
  for (std::size_t i = first; i < first + n; ++i) out.push_back(vs[i].aval());
  return out;
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
  if (ps.length < 1 || kncar == 0 || !any_unknown || !pe.known.consts.empty() || !pe.staged.consts.empty())
    return std::nullopt;
  const std::size_t nres = pe.residual_vars.size();
  const std::int64_t slots = std::min(ps.snapshots, ps.length);
  auto k = std::make_shared<const ClosedJaxpr>(pe.known);
  // A loop-invariant residual (a known const of the body, a weight, or a value computed from
  // known consts alone) is not an output of revolve_fwd: revolve_lin reads it from outside the
  // loop, so it is kept once, as the plain scan keeps it (issue 33).
  if (outside.size() != nres) throw InternalError("partial_eval", "revolve: one outside atom per residual expected");
  // Without a per-step residual the backward sweep never replays a step: the plain scan keeps
  // nothing per step, so storing carries would only cost memory (fuzzer seed 3009108).
  if (std::none_of(outside.begin(), outside.end(), [](const std::optional<Atom>& a) { return !a.has_value(); }))
    return std::nullopt;
  ClosedJaxprPtr k_fwd = k;  // K without the loop-invariant residuals among its outputs
  std::size_t nres_fwd = nres;
  if (std::any_of(outside.begin(), outside.end(), [](const std::optional<Atom>& a) { return a.has_value(); })) {
    auto j = std::make_shared<Jaxpr>(*pe.known.jaxpr);
    const std::size_t first_res = j->outvars.size() - nres;
    for (std::size_t r = nres; r-- > 0;)
      if (outside[r]) {
        j->outvars.erase(j->outvars.begin() + static_cast<std::ptrdiff_t>(first_res + r));
        --nres_fwd;
      }
    k_fwd = std::make_shared<const ClosedJaxpr>(dce(ClosedJaxpr{std::move(j), pe.known.consts},
                                                    std::vector<bool>(first_res + nres_fwd, true)));
  }

  PeSplit split;
  split.out_unknown = pe.out_unknown;
  Eqn fwd{Primitive::revolve_fwd, {}, {}, {}, e.loc};
  for (std::size_t i = 0; i < nin; ++i)
    if (!uk[i]) fwd.inputs.push_back(e.inputs[i]);
  for (std::size_t o = 0; o < nout; ++o)
    if (!pe.out_unknown[o]) fwd.outputs.push_back(e.outputs[o]);
  std::vector<Var> snaps, res;
  for (std::size_t i = nc; i < nc + ncar; ++i)
    if (!uk[i]) snaps.emplace_back(stacked(b.invars[i].aval(), slots));
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
                                  .num_consts = static_cast<std::int64_t>(knc), .num_carry = static_cast<std::int64_t>(kncar),
                                  .num_res = static_cast<std::int64_t>(nres_fwd)};
  split.known.push_back(std::move(fwd));

  Eqn lin{Primitive::revolve_lin, {}, {}, {}, e.loc};
  for (std::size_t i = 0; i < nc; ++i)
    if (!uk[i]) lin.inputs.push_back(e.inputs[i]);
  lin.inputs.insert(lin.inputs.end(), snaps.begin(), snaps.end());
  for (std::size_t i = nc + ncar; i < nin; ++i)
    if (!uk[i]) lin.inputs.push_back(e.inputs[i]);
  lin.inputs.insert(lin.inputs.end(), res_operands.begin(), res_operands.end());
  for (std::size_t i = 0; i < nin; ++i)
    if (uk[i]) lin.inputs.push_back(e.inputs[i]);
  for (std::size_t o = 0; o < nout; ++o)
    if (pe.out_unknown[o]) lin.outputs.push_back(e.outputs[o]);
  lin.params = linear_params(k, pe, ps.length, ps.reverse, ps.snapshots, knc, kncar, nlc, nlcar);
  split.staged.push_back(std::move(lin));
  return split;
}

// ---- revolve_fwd -------------------------------------------------------------------------------

std::vector<ShapedArray> revolve_fwd_abstract_eval(std::span<const ShapedArray> in, const params::RevolveFwd& ps) {
  const StepShape sh = shape_of(ps);
  const Jaxpr& k = *ps.jaxpr->jaxpr;
  if (in.size() != k.invars.size()) throw TypeError("revolve_fwd: operand count differs from the step's inputs");
  std::vector<ShapedArray> out;
  for (std::size_t i = 0; i < sh.ncar; ++i) out.push_back(atom_aval(k.outvars[i]));
  for (std::size_t i = 0; i < sh.ny; ++i) out.push_back(stacked(atom_aval(k.outvars[sh.ncar + i]), sh.length));
  for (std::size_t i = 0; i < sh.ncar; ++i) out.push_back(stacked(k.invars[sh.nc + i].aval(), sh.slots));
  for (std::size_t i = 0; i < sh.nres; ++i) out.push_back(atom_aval(k.outvars[sh.ncar + sh.ny + i]));
  return out;
}

// The first sweep: advance and store as the schedule says up to its first reverse step, which is
// the last loop step: run it with K, keeping its residuals.
std::vector<Array> revolve_fwd_impl(std::span<const Array> in, const params::RevolveFwd& ps) {
  const StepShape sh = shape_of(ps);
  const std::vector<Array> consts = part(in, 0, sh.nc), xs = part(in, sh.nc + sh.ncar, sh.nx);
  std::vector<Array> carry = part(in, sh.nc, sh.ncar);
  std::vector<ShapedArray> avals;
  for (const auto& x : in) avals.push_back(x.aval());
  const auto out_avals = revolve_fwd_abstract_eval(avals, ps);
  std::vector<Array> ys, snaps;
  for (std::size_t i = 0; i < sh.ny; ++i) ys.push_back(alloc_array(out_avals[sh.ncar + i]));
  for (std::size_t i = 0; i < sh.ncar; ++i) snaps.push_back(alloc_array(out_avals[sh.ncar + sh.ny + i]));
  const Runner step(ps.jaxpr), advance(known_prefix(ps.jaxpr, sh.ncar + sh.ny));
  RevolveSchedule sc = RevolveSchedule::binomial(sh.length, sh.slots);
  std::vector<RevolveAction> sweep;  // at most 2 s actions
  (void)first_sweep(sc, sh.slots, &sweep);
  std::int64_t pos = 0;
  auto run = [&](const Runner& r) {
    std::vector<Array> args = cat(consts, carry);
    for (const auto& x : xs) args.push_back(row(x, sh.index(pos)));
    std::vector<Array> outs = r(args);
    carry.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar));
    for (std::size_t i = 0; i < sh.ny; ++i) write_row(ys[i], sh.index(pos), outs[sh.ncar + i]);
    ++pos;
    return outs;
  };
  for (const auto& a : sweep) {
    if (a.kind == RevolveAction::Kind::store)
      for (std::size_t c = 0; c < sh.ncar; ++c) write_row(snaps[c], a.n, carry[c]);
    else
      for (std::int64_t n = 0; n < a.n; ++n) run(advance);
  }
  std::vector<Array> last = run(step);
  std::vector<Array> out = carry;
  // A carry that views xs (the body passed a slice through) is copied, so it does not keep xs.
  for (auto& c : out)
    for (const auto& x : xs)
      if (c.impl()->buffer == x.impl()->buffer) c = array_from_bytes(c.raw_data(), c.aval());
  out.insert(out.end(), ys.begin(), ys.end());
  out.insert(out.end(), snaps.begin(), snaps.end());
  out.insert(out.end(), last.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny), last.end());
  return out;
}

namespace {
// revolve_fwd as a plain scan that stacks every carry, then picks the stored ones.
FlatFn fwd_expansion(const params::RevolveFwd& ps, std::source_location loc) {
  return [ps, loc](std::span<const Array> in) {
    const StepShape sh = shape_of(ps);
    const std::vector<Array> consts = part(in, 0, sh.nc);
    const Jaxpr& k = *ps.jaxpr->jaxpr;
    // (carry, x) -> (carry', y, carry, res)
    ClosedJaxpr body = trace_flat([&](std::span<const Array> args) {
      std::vector<Array> outs = eval_jaxpr(*ps.jaxpr, cat(consts, args));
      std::vector<Array> r(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny));
      r.insert(r.end(), args.begin(), args.begin() + static_cast<std::ptrdiff_t>(sh.ncar));
      r.insert(r.end(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny), outs.end());
      return r;
    }, avals_of(k.invars, sh.nc, sh.ncar + sh.nx));
    auto outs = scan_flat(body, part(in, sh.nc, sh.ncar), part(in, sh.nc + sh.ncar, sh.nx), sh.length, sh.reverse, 1, loc);
    std::vector<Array> r(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny));
    RevolveSchedule sc = RevolveSchedule::binomial(sh.length, sh.slots);
    const auto pos_of = first_sweep(sc, sh.slots);
    for (std::size_t c = 0; c < sh.ncar; ++c) {
      const Array& carries = outs[sh.ncar + sh.ny + c];
      std::vector<Array> rows;
      for (auto p : pos_of) rows.push_back(p < 0 ? zeros_like(carries[0]) : carries[sh.index(p)]);
      r.push_back(stack(rows));
    }
    for (std::size_t i = 0; i < sh.nres; ++i) r.push_back(outs[2 * sh.ncar + sh.ny + i][sh.index(sh.length - 1)]);
    return r;
  };
}
}  // namespace

JvpOut revolve_fwd_jvp(const JvpArgs& a) { return jvp_by_expansion(a, fwd_expansion(a.params.get<params::RevolveFwd>(), a.loc)); }
BatchOut revolve_fwd_batch(const BatchArgs& a) {
  return batch_by_expansion(a, fwd_expansion(a.params.get<params::RevolveFwd>(), a.loc));
}
std::vector<Tangent> revolve_fwd_transpose(const TransposeArgs&) {
  throw InternalError("transpose", "revolve_fwd is not linear: reverse mode transposes revolve_lin instead");
}

// ---- revolve_lin -------------------------------------------------------------------------------

namespace {
/// Operand positions of revolve_lin and revolve_bwd: consts, snapshots, xs, res, then the
/// linear part's consts, carry, and per-step operands.
/// A while_loop's (length < 0) has no xs and no last-step residuals, and after the snapshots the
/// slots' positions (i64[s]) and the trip count (i64[]).
struct LinLayout {
  std::size_t snaps, positions, xs, res, lin_consts, lin_carry, per_step;
  static LinLayout of(const StepShape& sh, const params::Revolve& ps) {
    const bool dynamic = ps.length < 0;
    LinLayout l{};
    l.snaps = sh.nc;
    l.positions = l.snaps + sh.ncar;
    l.xs = l.positions + (dynamic ? 2 : 0);
    l.res = l.xs + sh.nx;
    l.lin_consts = l.res + (dynamic ? 0 : sh.nres);
    l.lin_carry = l.lin_consts + static_cast<std::size_t>(ps.num_linear_consts);
    l.per_step = l.lin_carry + static_cast<std::size_t>(ps.num_linear_carry);
    return l;
  }
};

// The outputs of revolve_lin and revolve_bwd: the linear jaxpr's carry, then its per-step
// outputs stacked.
std::vector<ShapedArray> linear_outputs(const params::Revolve& ps) {
  if (ps.length < 0 && ps.linear_jaxpr->jaxpr->outvars.size() != static_cast<std::size_t>(ps.num_linear_carry))
    throw TypeError("revolve: a loop of unknown length has no per-step outputs");
  std::vector<ShapedArray> out = ps.linear_jaxpr->out_avals();
  for (std::size_t i = static_cast<std::size_t>(ps.num_linear_carry); i < out.size(); ++i) out[i] = stacked(out[i], ps.length);
  return out;
}

void check_operands(const char* what, std::span<const ShapedArray> in, const params::Revolve& ps, std::size_t per_step_in) {
  const StepShape sh = shape_of(ps);
  const LinLayout l = LinLayout::of(sh, ps);
  if (in.size() != l.per_step + per_step_in)
    throw TypeError(std::string(what) + ": " + std::to_string(in.size()) + " operands, expected " +
                    std::to_string(l.per_step + per_step_in));
}
}  // namespace

std::vector<ShapedArray> revolve_lin_abstract_eval(std::span<const ShapedArray> in, const params::Revolve& ps) {
  const std::size_t lin_in = ps.linear_jaxpr->jaxpr->invars.size();
  check_operands("revolve_lin", in, ps, lin_in - static_cast<std::size_t>(ps.num_linear_consts + ps.num_linear_carry + ps.num_res));
  return linear_outputs(ps);
}

namespace {
// revolve_lin as one plain scan of K followed by S, from the first snapshot.
FlatFn lin_expansion(const params::Revolve& ps, std::source_location loc) {
  return [ps, loc](std::span<const Array> in) {
    StepShape sh = shape_of(ps);
    if (ps.length < 0) sh.length = in[LinLayout::of(sh, ps).positions + 1].item<std::int64_t>();  // concrete operands only
    const LinLayout l = LinLayout::of(sh, ps);
    const auto nlc = static_cast<std::size_t>(ps.num_linear_consts), nlcar = static_cast<std::size_t>(ps.num_linear_carry);
    const std::size_t nlx = in.size() - l.per_step;
    const std::vector<Array> consts = part(in, 0, sh.nc), lin_consts = part(in, l.lin_consts, nlc);
    std::vector<ShapedArray> avals = avals_of(ps.jaxpr->jaxpr->invars, sh.nc, sh.ncar);
    for (std::size_t i = 0; i < nlcar; ++i) avals.push_back(in[l.lin_carry + i].aval());
    for (const auto& a : avals_of(ps.jaxpr->jaxpr->invars, sh.nc + sh.ncar, sh.nx)) avals.push_back(a);
    for (std::size_t i = 0; i < nlx; ++i) avals.push_back(unstacked(in[l.per_step + i].aval()));
    // (carry, lin carry, x, lin x) -> (carry', lin carry', lin y)
    ClosedJaxpr body = trace_flat([&](std::span<const Array> args) {
      std::vector<Array> kin = consts;
      for (std::size_t i = 0; i < sh.ncar; ++i) kin.push_back(args[i]);
      for (std::size_t i = 0; i < sh.nx; ++i) kin.push_back(args[sh.ncar + nlcar + i]);
      std::vector<Array> kout = eval_jaxpr(*ps.jaxpr, kin);
      std::vector<Array> sin = lin_consts;
      for (std::size_t i = 0; i < nlcar; ++i) sin.push_back(args[sh.ncar + i]);
      sin.insert(sin.end(), kout.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny), kout.end());
      for (std::size_t i = 0; i < nlx; ++i) sin.push_back(args[sh.ncar + nlcar + sh.nx + i]);
      std::vector<Array> sout = eval_jaxpr(*ps.linear_jaxpr, sin);
      std::vector<Array> r(kout.begin(), kout.begin() + static_cast<std::ptrdiff_t>(sh.ncar));
      r.insert(r.end(), sout.begin(), sout.end());
      return r;
    }, avals);
    std::vector<Array> init, xs = part(in, l.xs, sh.nx);
    for (std::size_t c = 0; c < sh.ncar; ++c) init.push_back(in[l.snaps + c][0]);
    for (std::size_t i = 0; i < nlcar; ++i) init.push_back(in[l.lin_carry + i]);
    for (std::size_t i = 0; i < nlx; ++i) xs.push_back(in[l.per_step + i]);
    auto outs = scan_flat(body, init, xs, sh.length, sh.reverse, 1, loc);
    return std::vector<Array>(outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar), outs.end());
  };
}
}  // namespace

// Forward evaluation of the linear part (linearize's tangent map): its expansion, run once.
std::vector<Array> revolve_lin_impl(std::span<const Array> in, const params::Revolve& ps) {
  return lin_expansion(ps, std::source_location::current())(in);
}

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

std::vector<ShapedArray> revolve_bwd_abstract_eval(std::span<const ShapedArray> in, const params::Revolve& ps) {
  const std::size_t lin_in = ps.linear_jaxpr->jaxpr->invars.size();
  check_operands("revolve_bwd", in, ps, lin_in - static_cast<std::size_t>(ps.num_linear_consts + ps.num_linear_carry + ps.num_res));
  return linear_outputs(ps);
}

namespace {
// The snapshots as arrays the backward sweep may overwrite: the operand itself when nothing else
// holds it (an execution plan hands over a value at its last use), else a copy.
Array writable(Array& x) {
  const auto& im = *x.impl();
  if (x.impl().use_count() == 1 && im.buffer.use_count() == 1 && !im.buffer->external && im.offset == 0) return std::move(x);
  return array_from_bytes(x.raw_data(), x.aval());
}
}  // namespace

namespace {
// The rest of the schedule after the forward sweep: reverse the last step with the residuals the
// forward kept, then restore, advance, store and reverse as the actions say. A reverse step runs
// K on the working carry for that step's residuals, then B. The operands are taken over: the
// snapshots are overwritten in place when nothing else holds them, and the last step's residuals
// and the initial ct state are freed once read.
std::vector<Array> revolve_bwd_run(std::vector<Array>&& in, const params::Revolve& ps) {
  const StepShape sh = shape_of(ps);
  const LinLayout l = LinLayout::of(sh, ps);
  const auto nlc = static_cast<std::size_t>(ps.num_linear_consts), ncs = static_cast<std::size_t>(ps.num_linear_carry);
  const std::vector<Array> consts = part(in, 0, sh.nc), xs = part(in, l.xs, sh.nx), lin_consts = part(in, l.lin_consts, nlc);
  const std::vector<Array> per_step = part(in, l.per_step, in.size() - l.per_step);
  std::vector<Array> snaps, state, carry, res;
  // Slots past the snapshot rows (a while_loop's forward stores in fewer slots than the backward
  // may use) are arrays of their own, allocated when first stored.
  std::vector<std::vector<Array>> extra;
  for (std::size_t i = 0; i < ncs; ++i) state.push_back(std::move(in[l.lin_carry + i]));
  if (ps.length >= 0)  // a scan's forward kept its last step's residuals
    for (std::size_t i = 0; i < sh.nres; ++i) res.push_back(std::move(in[l.res + i]));
  for (std::size_t c = 0; c < sh.ncar; ++c) {
    Array s = std::move(in[l.snaps + c]);
    snaps.push_back(writable(s));
  }
  const auto out_avals = linear_outputs(ps);
  std::vector<Array> ct_xs;
  for (std::size_t i = ncs; i < out_avals.size(); ++i) ct_xs.push_back(alloc_array(out_avals[i]));
  const Runner tape(ps.jaxpr), advance(known_prefix(ps.jaxpr, sh.ncar)), backward(ps.linear_jaxpr);

  auto step_back = [&](std::int64_t p, std::span<const Array> res) {
    std::vector<Array> args = cat(lin_consts, state);
    args.insert(args.end(), res.begin(), res.end());
    for (const auto& x : per_step) args.push_back(row(x, sh.index(p)));
    std::vector<Array> outs = backward(args);
    state.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(ncs));
    for (std::size_t i = 0; i < ct_xs.size(); ++i) write_row(ct_xs[i], sh.index(p), outs[ncs + i]);
  };
  auto step_args = [&](std::int64_t p) {
    std::vector<Array> args = cat(consts, carry);
    for (const auto& x : xs) args.push_back(row(x, sh.index(p)));
    return args;
  };

  // The actions after the forward sweep: for a scan, the binomial schedule after its first
  // reverse step, which is run here with the forward's residuals; for a while_loop, the reversal
  // of the segments between the carries its forward stored.
  const std::int64_t rows = sh.ncar ? snaps[0].shape()[0] : 0;
  std::vector<std::int64_t> pos_of;
  std::optional<RevolveSchedule> sc;
  if (ps.length >= 0) {
    sc = RevolveSchedule::binomial(sh.length, sh.slots);
    pos_of = first_sweep(*sc, sh.slots);
    step_back(sh.length - 1, res);
    res.clear();
  } else {
    pos_of = in[l.positions].to_vector<std::int64_t>();
    pos_of.resize(static_cast<std::size_t>(sh.slots), -1);
    const auto trips = in[l.positions + 1].item<std::int64_t>();
    std::vector<std::pair<std::int64_t, std::int64_t>> stored;
    for (std::size_t k = 0; k < pos_of.size(); ++k)
      if (pos_of[k] >= 0) stored.emplace_back(pos_of[k], static_cast<std::int64_t>(k));
    std::sort(stored.begin(), stored.end());
    sc = RevolveSchedule::segments(trips, sh.slots, stored);
  }
  std::int64_t pos = -1;
  for (RevolveAction a{}; sc->next(a);) {
    const auto slot = static_cast<std::size_t>(a.n);
    switch (a.kind) {
      case RevolveAction::Kind::store:
        if (a.n < rows) {
          for (std::size_t c = 0; c < sh.ncar; ++c) write_row(snaps[c], a.n, carry[c]);
        } else {
          if (extra.size() <= static_cast<std::size_t>(a.n - rows)) extra.resize(static_cast<std::size_t>(a.n - rows) + 1);
          auto& held = extra[static_cast<std::size_t>(a.n - rows)];
          if (held.empty())
            for (std::size_t c = 0; c < sh.ncar; ++c) held.push_back(alloc_array(carry[c].aval()));
          for (std::size_t c = 0; c < sh.ncar; ++c) write_row(held[c], 0, carry[c]);
        }
        pos_of[slot] = pos;
        break;
      case RevolveAction::Kind::restore:
        carry.clear();
        for (std::size_t c = 0; c < sh.ncar; ++c)
          carry.push_back(a.n < rows ? row(snaps[c], a.n) : extra[static_cast<std::size_t>(a.n - rows)][c]);
        pos = pos_of[slot];
        break;
      case RevolveAction::Kind::release: break;
      case RevolveAction::Kind::advance:
        for (std::int64_t n = 0; n < a.n; ++n, ++pos) {
          std::vector<Array> outs = advance(step_args(pos));
          carry.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar));
        }
        break;
      case RevolveAction::Kind::reverse: {
        if (pos != a.n) throw InternalError("revolve_bwd", "the schedule reverses a step it is not at");
        std::vector<Array> outs = tape(step_args(pos));
        step_back(pos, std::span<const Array>(outs).subspan(sh.ncar + sh.ny));
        break;
      }
    }
  }
  std::vector<Array> out = state;
  out.insert(out.end(), ct_xs.begin(), ct_xs.end());
  return out;
}
}  // namespace

std::vector<Array> revolve_bwd_impl(std::span<const Array> in, const params::Revolve& ps) {
  return revolve_bwd_run(std::vector<Array>(in.begin(), in.end()), ps);
}

OwningImplRule owning_impl_rule(Primitive p) {
  if (p != Primitive::revolve_bwd) return nullptr;
  return [](std::vector<Array>&& in, const Params& ps) { return revolve_bwd_run(std::move(in), ps.get<params::Revolve>()); };
}

namespace {
// revolve_bwd as a plain scan that stacks every carry from the first snapshot, then a scan the
// other way that reruns K for each step's residuals and then B.
FlatFn bwd_expansion(const params::Revolve& ps, std::source_location loc) {
  return [ps, loc](std::span<const Array> in) {
    const StepShape sh = shape_of(ps);
    const LinLayout l = LinLayout::of(sh, ps);
    const auto nlc = static_cast<std::size_t>(ps.num_linear_consts), ncs = static_cast<std::size_t>(ps.num_linear_carry);
    const std::size_t nps = in.size() - l.per_step;
    const std::vector<Array> consts = part(in, 0, sh.nc), lin_consts = part(in, l.lin_consts, nlc);
    const Jaxpr& k = *ps.jaxpr->jaxpr;
    // (carry, x) -> (carry', carry)
    ClosedJaxpr fwd = trace_flat([&](std::span<const Array> args) {
      std::vector<Array> outs = eval_jaxpr(*ps.jaxpr, cat(consts, args));
      std::vector<Array> r(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar));
      r.insert(r.end(), args.begin(), args.begin() + static_cast<std::ptrdiff_t>(sh.ncar));
      return r;
    }, avals_of(k.invars, sh.nc, sh.ncar + sh.nx));
    std::vector<Array> init;
    for (std::size_t c = 0; c < sh.ncar; ++c) init.push_back(in[l.snaps + c][0]);
    auto f = scan_flat(fwd, init, part(in, l.xs, sh.nx), sh.length, sh.reverse, 1, loc);
    // (ct state; carry, x, per-step) -> (ct state'; ct x)
    std::vector<ShapedArray> avals;
    for (std::size_t i = 0; i < ncs; ++i) avals.push_back(in[l.lin_carry + i].aval());
    for (const auto& a : avals_of(k.invars, sh.nc, sh.ncar + sh.nx)) avals.push_back(a);
    for (std::size_t i = 0; i < nps; ++i) avals.push_back(unstacked(in[l.per_step + i].aval()));
    ClosedJaxpr bwd = trace_flat([&](std::span<const Array> args) {
      std::vector<Array> kin = consts;
      kin.insert(kin.end(), args.begin() + static_cast<std::ptrdiff_t>(ncs), args.begin() + static_cast<std::ptrdiff_t>(ncs + sh.ncar + sh.nx));
      std::vector<Array> kout = eval_jaxpr(*ps.jaxpr, kin);
      std::vector<Array> bin = lin_consts;
      bin.insert(bin.end(), args.begin(), args.begin() + static_cast<std::ptrdiff_t>(ncs));
      bin.insert(bin.end(), kout.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny), kout.end());
      bin.insert(bin.end(), args.begin() + static_cast<std::ptrdiff_t>(ncs + sh.ncar + sh.nx), args.end());
      return eval_jaxpr(*ps.linear_jaxpr, bin);
    }, avals);
    std::vector<Array> xs(f.begin() + static_cast<std::ptrdiff_t>(sh.ncar), f.end());
    for (std::size_t i = 0; i < sh.nx; ++i) xs.push_back(in[l.xs + i]);
    for (std::size_t i = 0; i < nps; ++i) xs.push_back(in[l.per_step + i]);
    return scan_flat(bwd, part(in, l.lin_carry, ncs), xs, sh.length, !sh.reverse, 1, loc);
  };
}
}  // namespace

JvpOut revolve_bwd_jvp(const JvpArgs& a) { return jvp_by_expansion(a, bwd_expansion(expandable(a, "differentiation"), a.loc)); }
BatchOut revolve_bwd_batch(const BatchArgs& a) { return batch_by_expansion(a, bwd_expansion(expandable(a, "vmap"), a.loc)); }
std::vector<Tangent> revolve_bwd_transpose(const TransposeArgs&) {
  throw InternalError("transpose", "revolve_bwd is transposed only through its jvp's expansion");
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
  auto k = std::make_shared<const ClosedJaxpr>(pe.known);

  PeSplit split;
  split.out_unknown = carry_uk;
  Eqn fwd{Primitive::online_fwd, {}, {}, {}, e.loc};
  for (std::size_t i = 0; i < cn; ++i)
    if (cond_known[i]) fwd.inputs.push_back(e.inputs[i]);
  for (std::size_t i = 0; i < bn; ++i)
    if (!body_uk[i]) fwd.inputs.push_back(e.inputs[cn + i]);
  for (std::size_t c = 0; c < ncar; ++c)
    if (!carry_uk[c]) fwd.inputs.push_back(e.inputs[cn + bn + c]);
  for (std::size_t c = 0; c < ncar; ++c)
    if (!carry_uk[c]) fwd.outputs.push_back(e.outputs[c]);
  const std::int64_t rows = OnlinePlacement(ps.snapshots).capacity();
  std::vector<Var> snaps;
  for (std::size_t c = 0; c < ncar; ++c)
    if (!carry_uk[c]) snaps.emplace_back(stacked(e.outputs[c].aval(), rows));
  Var positions(ShapedArray{{rows}, DType::i64}), trips(ShapedArray{{}, DType::i64});
  fwd.outputs.insert(fwd.outputs.end(), snaps.begin(), snaps.end());
  fwd.outputs.push_back(positions);
  fwd.outputs.push_back(trips);
  fwd.params = params::OnlineFwd{.cond_jaxpr = std::make_shared<const ClosedJaxpr>(cond),
                                 .jaxpr = k,
                                 .snapshots = ps.snapshots,
                                 .cond_nconsts = static_cast<std::int64_t>(kcn),
                                 .num_consts = static_cast<std::int64_t>(kbn),
                                 .num_carry = static_cast<std::int64_t>(kncar)};
  split.known.push_back(std::move(fwd));

  Eqn lin{Primitive::revolve_lin, {}, {}, {}, e.loc};
  for (std::size_t i = 0; i < bn; ++i)
    if (!body_uk[i]) lin.inputs.push_back(e.inputs[cn + i]);
  lin.inputs.insert(lin.inputs.end(), snaps.begin(), snaps.end());
  lin.inputs.push_back(positions);
  lin.inputs.push_back(trips);
  for (std::size_t i = 0; i < bn; ++i)
    if (body_uk[i]) lin.inputs.push_back(e.inputs[cn + i]);
  for (std::size_t c = 0; c < ncar; ++c)
    if (carry_uk[c]) lin.inputs.push_back(e.inputs[cn + bn + c]);
  for (std::size_t c = 0; c < ncar; ++c)
    if (carry_uk[c]) lin.outputs.push_back(e.outputs[c]);
  lin.params = linear_params(k, pe, -1, false, ps.snapshots, kbn, kncar, nlc, nlcar);
  split.staged.push_back(std::move(lin));
  return split;
}

std::vector<ShapedArray> online_fwd_abstract_eval(std::span<const ShapedArray> in, const params::OnlineFwd& ps) {
  const Jaxpr& k = *ps.jaxpr->jaxpr;
  const auto cn = static_cast<std::size_t>(ps.cond_nconsts), nc = static_cast<std::size_t>(ps.num_consts),
             ncar = static_cast<std::size_t>(ps.num_carry);
  if (in.size() != cn + nc + ncar || k.invars.size() != nc + ncar)
    throw TypeError("online_fwd: operand count differs from the cond's and step's inputs");
  const std::int64_t rows = OnlinePlacement(ps.snapshots).capacity();
  std::vector<ShapedArray> out;
  for (std::size_t c = 0; c < ncar; ++c) out.push_back(in[cn + nc + c]);
  for (std::size_t c = 0; c < ncar; ++c) out.push_back(stacked(in[cn + nc + c], rows));
  out.push_back(ShapedArray{{rows}, DType::i64});
  out.push_back(ShapedArray{{}, DType::i64});
  return out;
}

// while cond(carry): store the carry where the online placement says, carry = K(carry).
std::vector<Array> online_fwd_impl(std::span<const Array> in, const params::OnlineFwd& ps) {
  const auto cn = static_cast<std::size_t>(ps.cond_nconsts), nc = static_cast<std::size_t>(ps.num_consts),
             ncar = static_cast<std::size_t>(ps.num_carry);
  const std::vector<Array> cconsts = part(in, 0, cn), consts = part(in, cn, nc);
  OnlinePlacement place(ps.snapshots);
  std::vector<Array> carry = part(in, cn + nc, ncar), snaps;
  for (std::size_t c = 0; c < ncar; ++c) snaps.push_back(alloc_array(stacked(carry[c].aval(), place.capacity())));
  std::vector<std::int64_t> positions(static_cast<std::size_t>(place.capacity()), -1);
  const Runner cond(ps.cond_jaxpr), advance(known_prefix(ps.jaxpr, ncar));
  std::int64_t pos = 0;
  for (;; ++pos) {
    if (!cond(cat(cconsts, carry))[0].item<bool>()) break;
    std::int64_t slot = place.visit(pos);
    for (auto r : place.released()) positions[static_cast<std::size_t>(r)] = -1;
    if (slot >= 0) {
      for (std::size_t c = 0; c < ncar; ++c) write_row(snaps[c], slot, carry[c]);
      positions[static_cast<std::size_t>(slot)] = pos;
    }
    std::vector<Array> outs = advance(cat(consts, carry));
    carry.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(ncar));
  }
  std::vector<Array> out = carry;
  out.insert(out.end(), snaps.begin(), snaps.end());
  out.push_back(array<std::int64_t>(positions, {place.capacity()}));
  out.push_back(scalar(static_cast<double>(pos), DType::i64));
  return out;
}

JvpOut online_fwd_jvp(const JvpArgs& a) {
  online_unsupported("differentiation", a.loc);
}
BatchOut online_fwd_batch(const BatchArgs& a) { online_unsupported("vmap", a.loc); }
std::vector<Tangent> online_fwd_transpose(const TransposeArgs&) {
  throw InternalError("transpose", "online_fwd is not linear: reverse mode transposes revolve_lin instead");
}

}  // namespace xjax::detail

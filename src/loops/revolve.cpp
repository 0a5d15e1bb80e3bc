// loops/revolve.cpp: the evaluation of the schedule's loop primitives (loops/revolve.hpp; how
// partial evaluation and transposition emit them is in transforms/revolve.cpp):
//   carry, ys, snapshots..., res... = revolve_fwd[K] consts carry xs
//       the forward sweep: runs the known step K (consts, carry, x) -> (carry, y, res) over the
//       loop, storing the carries the schedule stores before its first backward step (of the
//       carries a replay needs, stored_carries), and keeps the residuals of the last step (which
//       the schedule tapes first); revolve_lin's K steps those carries alone;
//   lin_carry, lin_ys = revolve_lin[K, S] consts snapshots xs res lin_consts lin_carry lin_xs
//       the linear part of the loop (S: (lin consts, lin carry, res, lin x) -> (lin carry, lin y)),
//       evaluated from the first snapshot; its transpose is
//   ct_state, ct_xs = revolve_bwd[K, B] consts snapshots xs res consts' ct_state per_step...
//       the backward sweep (B: (consts', ct state, res, per-step x) -> (ct state, ct x), S's
//       transpose), which follows the rest of the schedule: restores, advances and reverse steps
//       that rerun K for the residuals of one step at a time;
//   carry, snapshots..., positions, trips = online_fwd[K] cconsts consts carry
//       a while_loop's forward sweep, storing carries (stored_carries) where OnlinePlacement says.
// The snapshots are one stacked array per stored carry leaf, [slots, ...] with slots = min(s, length).
// Read in order: shared helpers, then each primitive's shape rule, evaluation and expansion.
#include <algorithm>
#include <cstring>
#include <optional>

#include "passes.hpp"
#include "loops/revolve.hpp"
#include "plan.hpp"
#include "xjax/control_flow.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {

StepShape shape_of(const params::RevolveFwd& ps) {
  return StepShape::of(*ps.jaxpr, ps.num_consts, ps.num_carry, ps.num_res, ps.length, ps.snapshots, ps.reverse);
}
StepShape shape_of(const params::Revolve& ps) {
  return StepShape::of(*ps.jaxpr, ps.num_consts, ps.num_carry, ps.num_res, ps.length, ps.snapshots, ps.reverse);
}

std::vector<ShapedArray> var_avals(const std::vector<Var>& vs, std::size_t first, std::size_t n) {
  std::vector<ShapedArray> out;
  for (std::size_t i = first; i < first + n; ++i) out.push_back(vs[i].aval());
  return out;
}

namespace {

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

// K keeping only its first `keep` outputs (the carry, or the carry and y): the steps that do not
// need residuals. Built once per K and kept with it (plan side table).
ClosedJaxprPtr known_prefix(const ClosedJaxprPtr& k, std::size_t keep) {
  if (keep == k->jaxpr->outvars.size()) return k;  // no residuals: K itself
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

// The outputs of revolve_lin and revolve_bwd: the linear jaxpr's carry, then its per-step
// outputs stacked.
std::vector<ShapedArray> linear_outputs(const params::Revolve& ps) {
  if (ps.length < 0 && ps.linear_jaxpr->jaxpr->outvars.size() != static_cast<std::size_t>(ps.num_linear_carry))
    throw TypeError("revolve: a loop of unknown length has no per-step outputs");
  std::vector<ShapedArray> out = ps.linear_jaxpr->out_avals();
  for (std::size_t i = static_cast<std::size_t>(ps.num_linear_carry); i < out.size(); ++i) out[i] = stacked(out[i], ps.length);
  return out;
}

void check_stored_carries(const char* what, const params::Ints& stored, std::size_t ncar) {
  for (std::size_t j = 0; j < stored.size(); ++j)
    if (stored[j] < (j ? stored[j - 1] + 1 : 0) || stored[j] >= static_cast<std::int64_t>(ncar))
      throw TypeError(std::string(what) + ": stored_carries must be increasing indices of the step's " + std::to_string(ncar) +
                      " carries");
}

void check_operands(const char* what, std::span<const ShapedArray> in, const params::Revolve& ps, std::size_t per_step_in) {
  const StepShape sh = shape_of(ps);
  const LinLayout l = LinLayout::of(sh, ps);
  if (in.size() != l.per_step + per_step_in)
    throw TypeError(std::string(what) + ": " + std::to_string(in.size()) + " operands, expected " +
                    std::to_string(l.per_step + per_step_in));
}

}  // namespace

// ---- revolve_fwd -------------------------------------------------------------------------------

std::vector<ShapedArray> revolve_fwd_abstract_eval(std::span<const ShapedArray> in, const params::RevolveFwd& ps) {
  const StepShape sh = shape_of(ps);
  const Jaxpr& k = *ps.jaxpr->jaxpr;
  if (in.size() != k.invars.size()) throw TypeError("revolve_fwd: operand count differs from the step's inputs");
  check_stored_carries("revolve_fwd", ps.stored_carries, sh.ncar);
  std::vector<ShapedArray> out;
  for (std::size_t i = 0; i < sh.ncar; ++i) out.push_back(atom_aval(k.outvars[i]));
  for (std::size_t i = 0; i < sh.ny; ++i) out.push_back(stacked(atom_aval(k.outvars[sh.ncar + i]), sh.length));
  for (auto c : ps.stored_carries) out.push_back(stacked(k.invars[sh.nc + static_cast<std::size_t>(c)].aval(), sh.slots));
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
  const std::size_t nstored = ps.stored_carries.size();
  for (std::size_t i = 0; i < nstored; ++i) snaps.push_back(alloc_array(out_avals[sh.ncar + sh.ny + i]));
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
      for (std::size_t j = 0; j < nstored; ++j) write_row(snaps[j], a.n, carry[static_cast<std::size_t>(ps.stored_carries[j])]);
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

// revolve_fwd as a plain scan that stacks every stored carry, then picks the rows the schedule stores.
FlatFn fwd_expansion(const params::RevolveFwd& ps, std::source_location loc) {
  return [ps, loc](std::span<const Array> in) {
    const StepShape sh = shape_of(ps);
    const std::vector<Array> consts = part(in, 0, sh.nc);
    const Jaxpr& k = *ps.jaxpr->jaxpr;
    const std::size_t nstored = ps.stored_carries.size();
    // (carry, x) -> (carry', y, stored carries, res)
    ClosedJaxpr body = trace_flat([&](std::span<const Array> args) {
      std::vector<Array> outs = eval_jaxpr(*ps.jaxpr, cat(consts, args));
      std::vector<Array> r(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny));
      for (auto c : ps.stored_carries) r.push_back(args[static_cast<std::size_t>(c)]);
      r.insert(r.end(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny), outs.end());
      return r;
    }, var_avals(k.invars, sh.nc, sh.ncar + sh.nx));
    auto outs = scan_flat(body, part(in, sh.nc, sh.ncar), part(in, sh.nc + sh.ncar, sh.nx), sh.length, sh.reverse, 1, loc);
    std::vector<Array> r(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(sh.ncar + sh.ny));
    RevolveSchedule sc = RevolveSchedule::binomial(sh.length, sh.slots);
    const auto pos_of = first_sweep(sc, sh.slots);
    for (std::size_t j = 0; j < nstored; ++j) {
      const Array& carries = outs[sh.ncar + sh.ny + j];
      std::vector<Array> rows;
      for (auto p : pos_of) rows.push_back(p < 0 ? zeros_like(carries[0]) : carries[sh.index(p)]);
      r.push_back(stack(rows));
    }
    for (std::size_t i = 0; i < sh.nres; ++i) r.push_back(outs[sh.ncar + sh.ny + nstored + i][sh.index(sh.length - 1)]);
    return r;
  };
}


// ---- revolve_lin -------------------------------------------------------------------------------

std::vector<ShapedArray> revolve_lin_abstract_eval(std::span<const ShapedArray> in, const params::Revolve& ps) {
  const std::size_t lin_in = ps.linear_jaxpr->jaxpr->invars.size();
  check_operands("revolve_lin", in, ps, lin_in - static_cast<std::size_t>(ps.num_linear_consts + ps.num_linear_carry + ps.num_res));
  return linear_outputs(ps);
}

// revolve_lin as one plain scan of K followed by S, from the first snapshot.
FlatFn lin_expansion(const params::Revolve& ps, std::source_location loc) {
  return [ps, loc](std::span<const Array> in) {
    StepShape sh = shape_of(ps);
    if (ps.length < 0) sh.length = in[LinLayout::of(sh, ps).positions + 1].item<std::int64_t>();  // concrete operands only
    const LinLayout l = LinLayout::of(sh, ps);
    const auto nlc = static_cast<std::size_t>(ps.num_linear_consts), nlcar = static_cast<std::size_t>(ps.num_linear_carry);
    const std::size_t nlx = in.size() - l.per_step;
    const std::vector<Array> consts = part(in, 0, sh.nc), lin_consts = part(in, l.lin_consts, nlc);
    std::vector<ShapedArray> avals = var_avals(ps.jaxpr->jaxpr->invars, sh.nc, sh.ncar);
    for (std::size_t i = 0; i < nlcar; ++i) avals.push_back(in[l.lin_carry + i].aval());
    for (const auto& a : var_avals(ps.jaxpr->jaxpr->invars, sh.nc + sh.ncar, sh.nx)) avals.push_back(a);
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

// Forward evaluation of the linear part (linearize's tangent map): its expansion, run once.
std::vector<Array> revolve_lin_impl(std::span<const Array> in, const params::Revolve& ps) {
  return lin_expansion(ps, std::source_location::current())(in);
}

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
    }, var_avals(k.invars, sh.nc, sh.ncar + sh.nx));
    std::vector<Array> init;
    for (std::size_t c = 0; c < sh.ncar; ++c) init.push_back(in[l.snaps + c][0]);
    auto f = scan_flat(fwd, init, part(in, l.xs, sh.nx), sh.length, sh.reverse, 1, loc);
    // (ct state; carry, x, per-step) -> (ct state'; ct x)
    std::vector<ShapedArray> avals;
    for (std::size_t i = 0; i < ncs; ++i) avals.push_back(in[l.lin_carry + i].aval());
    for (const auto& a : var_avals(k.invars, sh.nc, sh.ncar + sh.nx)) avals.push_back(a);
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

// ---- online_fwd --------------------------------------------------------------------------------

std::vector<ShapedArray> online_fwd_abstract_eval(std::span<const ShapedArray> in, const params::OnlineFwd& ps) {
  const Jaxpr& k = *ps.jaxpr->jaxpr;
  const auto cn = static_cast<std::size_t>(ps.cond_nconsts), nc = static_cast<std::size_t>(ps.num_consts),
             ncar = static_cast<std::size_t>(ps.num_carry);
  if (in.size() != cn + nc + ncar || k.invars.size() != nc + ncar)
    throw TypeError("online_fwd: operand count differs from the cond's and step's inputs");
  check_stored_carries("online_fwd", ps.stored_carries, ncar);
  const std::int64_t rows = OnlinePlacement(ps.snapshots).capacity();
  std::vector<ShapedArray> out;
  for (std::size_t c = 0; c < ncar; ++c) out.push_back(in[cn + nc + c]);
  for (auto c : ps.stored_carries) out.push_back(stacked(in[cn + nc + static_cast<std::size_t>(c)], rows));
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
  for (auto c : ps.stored_carries) snaps.push_back(alloc_array(stacked(carry[static_cast<std::size_t>(c)].aval(), place.capacity())));
  std::vector<std::int64_t> positions(static_cast<std::size_t>(place.capacity()), -1);
  const Runner cond(ps.cond_jaxpr), advance(known_prefix(ps.jaxpr, ncar));
  std::int64_t pos = 0;
  for (;; ++pos) {
    if (!cond(cat(cconsts, carry))[0].item<bool>()) break;
    std::int64_t slot = place.visit(pos);
    for (auto r : place.released()) positions[static_cast<std::size_t>(r)] = -1;
    if (slot >= 0) {
      for (std::size_t j = 0; j < snaps.size(); ++j) write_row(snaps[j], slot, carry[static_cast<std::size_t>(ps.stored_carries[j])]);
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

}  // namespace xjax::detail

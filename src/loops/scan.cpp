// loops/scan.cpp: what scan means (its rules are in transforms/scan.cpp).
//   carry..., ys... = scan[jaxpr, length, reverse, unroll, num_consts, num_carry] consts... init... xs...
// with jaxpr : (consts..., carry..., x slices...) -> (carry..., y slices...); ys stack the y
// slices along a new leading axis of size length. Read in order: params, shape rule, the
// unrolled body, evaluation (on raw plans when the body has one), and the flat entry the API
// (xj::scan in control_flow.hpp) calls.
#include <algorithm>
#include <cstring>

#include "loops/loops.hpp"
#include "plan.hpp"
#include "xjax/control_flow.hpp"

namespace xjax::detail {

ScanParams ScanParams::read(const params::Scan& p) {
  return {p.jaxpr, p.length, p.reverse, p.unroll, static_cast<std::size_t>(p.num_consts), static_cast<std::size_t>(p.num_carry),
          p.snapshots};
}

params::Scan ScanParams::with(ClosedJaxpr b, std::size_t nc, std::size_t ncar, bool rev) const {
  return {.jaxpr = std::make_shared<const ClosedJaxpr>(std::move(b)),
          .length = length,
          .reverse = rev,
          .unroll = unroll,
          .num_consts = static_cast<std::int64_t>(nc),
          .num_carry = static_cast<std::int64_t>(ncar),
          .snapshots = snapshots};
}

ShapedArray stacked(const ShapedArray& a, std::int64_t length) {
  ShapedArray s = a;
  s.shape.insert(s.shape.begin(), length);
  return s;
}

ShapedArray unstacked(const ShapedArray& a) {
  ShapedArray s = a;
  s.shape.erase(s.shape.begin());
  return s;
}

void unview_carry(std::vector<Array>& carry, std::span<const Array> xs) {
  for (auto& c : carry)
    for (const auto& x : xs)
      if (c.impl()->buffer == x.impl()->buffer) c = array_from_bytes(c.raw_data(), c.aval());
}

// ---- shape rule --------------------------------------------------------------------------------

std::vector<ShapedArray> scan_abstract_eval(std::span<const ShapedArray> in, const params::Scan& ps) {
  ScanParams sp = ScanParams::read(ps);
  const Jaxpr& b = *sp.body->jaxpr;
  if (in.size() != b.invars.size()) throw TypeError("scan: operand count differs from the body's inputs");
  for (std::size_t i = 0; i < in.size(); ++i) {
    ShapedArray expect = i < sp.nconsts + sp.ncarry ? b.invars[i].aval() : stacked(b.invars[i].aval(), sp.length);
    if (in[i] != expect)
      throw TypeError("scan: operand " + std::to_string(i) + " is " + in[i].str() + ", expected " + expect.str());
  }
  auto outs = b.out_avals();
  for (std::size_t k = sp.ncarry; k < outs.size(); ++k) outs[k] = stacked(outs[k], sp.length);
  return outs;
}

// ---- evaluation --------------------------------------------------------------------------------

namespace {
// The body applied u times in a row: (consts, carry, x slices of u steps in visiting order) ->
// (carry, y slices of u steps). scan_impl runs it once per u iterations (the `unroll` param).
ClosedJaxpr unrolled_body(const ScanParams& sp, std::int64_t u) {
  const Jaxpr& b = *sp.body->jaxpr;
  std::vector<ShapedArray> avals;
  for (std::size_t i = 0; i < sp.nconsts + sp.ncarry; ++i) avals.push_back(b.invars[i].aval());
  for (std::int64_t k = 0; k < u; ++k)
    for (std::size_t i = sp.nconsts + sp.ncarry; i < b.invars.size(); ++i) avals.push_back(b.invars[i].aval());
  auto f = [&](std::span<const Array> args) {
    std::vector<Array> consts = part(args, 0, sp.nconsts), carry = part(args, sp.nconsts, sp.ncarry), ys;
    for (std::int64_t k = 0; k < u; ++k) {
      std::vector<Array> in = cat(consts, carry);
      auto xs = part(args, sp.nconsts + sp.ncarry + static_cast<std::size_t>(k) * sp.nxs(), sp.nxs());
      in.insert(in.end(), xs.begin(), xs.end());
      auto outs = eval_jaxpr(*sp.body, in);
      carry.assign(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(sp.ncarry));
      ys.insert(ys.end(), outs.begin() + static_cast<std::ptrdiff_t>(sp.ncarry), outs.end());
    }
    return cat(carry, ys);
  };
  return trace_flat(f, avals);
}

// unrolled_body, built once per (body jaxpr, u, split) and kept with the body's jaxpr in the plan
// side table, so the unrolled body is traced and planned once, not on every evaluation of the
// scan. (Bodies carry no consts after consts_as_inputs; one that does is unrolled afresh each time.)
ClosedJaxprPtr cached_unrolled_body(const ScanParams& sp, std::int64_t u) {
  auto build = [&] { return std::make_shared<const ClosedJaxpr>(unrolled_body(sp, u)); };
  if (!sp.body->consts.empty()) return build();
  return derived_jaxpr(sp.body->jaxpr, {u, static_cast<std::int64_t>(sp.nconsts), static_cast<std::int64_t>(sp.ncarry)}, build);
}

/// The loop of scan_impl on the bodies' raw plans (raw_plan.hpp): each iteration's y outputs go
/// straight into their slices of the stacked ys; no Array is made per iteration. unrolled_raw
/// runs u iterations at a time; body_raw, the plain body's, the remainder (null when there is none).
std::vector<Array> scan_on_raw_plans(const ScanParams& sp, std::int64_t u, const ClosedJaxpr& unrolled, const RawPlan& unrolled_raw,
                                     const RawPlan* body_raw, std::span<const Array> consts, std::span<const Array> init,
                                     std::span<const Array> xs, std::vector<Array> ys) {
  std::size_t workspace_bytes = unrolled_raw.workspace_bytes;
  if (body_raw) workspace_bytes = std::max(workspace_bytes, body_raw->workspace_bytes);
  RawLoop loop(init, workspace_bytes);
  std::vector<std::size_t> slice_bytes, y_bytes;
  for (const auto& x : xs) slice_bytes.push_back(unstacked(x.aval()).nbytes());
  for (const auto& y : ys) y_bytes.push_back(unstacked(y.aval()).nbytes());
  for (std::int64_t step = 0; step < sp.length;) {
    const std::int64_t k_steps = sp.length - step >= u ? u : 1;
    const bool whole = k_steps == u;
    loop.start(whole ? unrolled : *sp.body, consts);
    loop.next_carry();
    for (std::int64_t k = 0; k < k_steps; ++k) {
      const auto i = static_cast<std::size_t>(sp.reverse ? sp.length - 1 - (step + k) : step + k);
      for (std::size_t x = 0; x < xs.size(); ++x) loop.inputs().push_back(static_cast<const char*>(xs[x].raw_data()) + i * slice_bytes[x]);
      for (std::size_t y = 0; y < ys.size(); ++y) loop.outputs().push_back(static_cast<char*>(mutable_data(ys[y])) + i * y_bytes[y]);
    }
    loop.run(whole ? unrolled_raw : *body_raw);
    loop.advance();
    step += k_steps;
  }
  return cat(loop.carry(), ys);
}

}  // namespace

// carry = init; for i: carry, y[i] = body(consts, carry, x[i]); `unroll` iterations per step
std::vector<Array> scan_impl(std::span<const Array> in, const params::Scan& ps) {
  ScanParams sp = ScanParams::read(ps);
  std::vector<Array> consts = part(in, 0, sp.nconsts);
  std::vector<Array> carry = part(in, sp.nconsts, sp.ncarry);
  std::vector<Array> xs = part(in, sp.nconsts + sp.ncarry, sp.nxs());
  auto out_avals = scan_abstract_eval([&] { std::vector<ShapedArray> a; for (auto& x : in) a.push_back(x.aval()); return a; }(), ps);
  std::vector<Array> ys;
  for (std::size_t k = sp.ncarry; k < out_avals.size(); ++k) ys.push_back(alloc_array(out_avals[k]));
  std::int64_t u = std::max<std::int64_t>(1, std::min(sp.unroll, sp.length));
  ClosedJaxprPtr unrolled = u > 1 ? cached_unrolled_body(sp, u) : sp.body;
  // The plans are looked up once (each lookup hashes the jaxpr), then run every iteration.
  std::shared_ptr<const EvalPlan> body_plan = plan_of(sp.body->jaxpr), unrolled_plan = plan_of(unrolled->jaxpr);
  const bool remainder = sp.length % u != 0;
  if (raw_plans_enabled() && unrolled_plan->raw && (!remainder || body_plan->raw))
    return scan_on_raw_plans(sp, u, *unrolled, *unrolled_plan->raw, remainder ? body_plan->raw.get() : nullptr, consts, carry, xs,
                             std::move(ys));
  // Per iteration only the slices and the carry change: the vectors and slice avals are made once.
  std::vector<ShapedArray> slice_avals;
  for (const auto& x : xs) slice_avals.push_back(unstacked(x.aval()));
  std::vector<Array> args, outs;
  std::vector<std::int64_t> idx;
  for (std::int64_t step = 0; step < sp.length;) {
    std::int64_t k_steps = sp.length - step >= u ? u : 1;  // the remainder runs the plain body
    const ClosedJaxpr& body = k_steps == u ? *unrolled : *sp.body;
    args.clear();
    args.insert(args.end(), consts.begin(), consts.end());
    for (auto& c : carry) args.push_back(std::move(c));
    idx.clear();
    for (std::int64_t k = 0; k < k_steps; ++k) {
      idx.push_back(sp.reverse ? sp.length - 1 - (step + k) : step + k);
      for (std::size_t x = 0; x < xs.size(); ++x)
        args.push_back(buffer_view(xs[x], static_cast<std::size_t>(idx.back()) * slice_avals[x].nbytes(), slice_avals[x]));
    }
    run_plan_into(k_steps == u ? *unrolled_plan : *body_plan, body, args, outs);
    args.clear();
    for (std::size_t c = 0; c < sp.ncarry; ++c) carry[c] = std::move(outs[c]);
    for (std::int64_t k = 0; k < k_steps; ++k)
      for (std::size_t y = 0; y < ys.size(); ++y) {
        const Array& out = outs[sp.ncarry + static_cast<std::size_t>(k) * ys.size() + y];
        std::size_t n = out.aval().nbytes();
        if (n) std::memcpy(static_cast<char*>(mutable_data(ys[y])) + static_cast<std::size_t>(idx[static_cast<std::size_t>(k)]) * n, out.raw_data(), n);
      }
    outs.clear();
    step += k_steps;
  }
  unview_carry(carry, xs);
  return cat(carry, ys);
}

// ---- the flat entry ----------------------------------------------------------------------------

std::vector<Array> scan_flat(const ClosedJaxpr& body, std::span<const Array> init, std::span<const Array> xs,
                             std::int64_t length, bool reverse, std::int64_t unroll, std::source_location loc,
                             std::int64_t snapshots) {
  ClosedJaxpr closed = consts_as_inputs(body);
  std::vector<Array> operands = body.consts;
  operands.insert(operands.end(), init.begin(), init.end());
  operands.insert(operands.end(), xs.begin(), xs.end());
  ScanParams sp;
  sp.length = length;
  sp.unroll = unroll;
  sp.snapshots = snapshots;
  return bind(Primitive::scan, operands, sp.with(closed, body.consts.size(), init.size(), reverse), loc);
}

}  // namespace xjax::detail

// loops/while.cpp: what while_loop means (its rules are in transforms/while.cpp).
//   carry... = while[cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts] cconsts... bconsts... init...
// with cond_jaxpr : (cconsts..., carry...) -> bool[] and body_jaxpr : (bconsts..., carry...) ->
// carry.... Both are const-free (closed-over values are the leading operands). Read in order:
// params, shape rule, evaluation (on raw plans when the cond and body have them).
#include <algorithm>

#include "loops/loops.hpp"
#include "plan.hpp"

namespace xjax::detail {

WhileParams WhileParams::read(const params::While& p) {
  return {p.cond_jaxpr, p.body_jaxpr, static_cast<std::size_t>(p.cond_nconsts), static_cast<std::size_t>(p.body_nconsts),
          p.snapshots};
}

params::While while_params(ClosedJaxpr cond, ClosedJaxpr body, std::size_t cn, std::size_t bn, std::int64_t snapshots) {
  return {.cond_jaxpr = std::make_shared<const ClosedJaxpr>(std::move(cond)),
          .body_jaxpr = std::make_shared<const ClosedJaxpr>(std::move(body)),
          .cond_nconsts = static_cast<std::int64_t>(cn),
          .body_nconsts = static_cast<std::int64_t>(bn),
          .snapshots = snapshots};
}

// ---- shape rule --------------------------------------------------------------------------------

std::vector<ShapedArray> while_loop_abstract_eval(std::span<const ShapedArray> in, const params::While& ps) {
  WhileParams w = WhileParams::read(ps);
  if (in.size() < w.cn + w.bn) throw TypeError("while: fewer operands than cond and body consts");
  std::vector<ShapedArray> carry(in.begin() + static_cast<std::ptrdiff_t>(w.cn + w.bn), in.end());
  auto check_in = [&](const Jaxpr& j, std::size_t first, std::size_t n, const char* what) {
    if (j.invars.size() != n + carry.size())
      throw TypeError(std::string("while: the ") + what + " takes " + std::to_string(j.invars.size()) +
                      " inputs, the equation passes " + std::to_string(n + carry.size()));
    for (std::size_t i = 0; i < j.invars.size(); ++i) {
      const ShapedArray& got = i < n ? in[first + i] : carry[i - n];
      if (j.invars[i].aval() != got)
        throw TypeError(std::string("while: input ") + std::to_string(i) + " of the " + what + " is " +
                        j.invars[i].aval().str() + " but the operand is " + got.str());
    }
  };
  check_in(*w.cond->jaxpr, 0, w.cn, "cond");
  check_in(*w.body->jaxpr, w.cn, w.bn, "body");
  auto c = w.cond->out_avals();
  if (c.size() != 1 || c[0] != ShapedArray{{}, bool_})
    throw TypeError("while: the cond must return one bool[] value");
  auto b = w.body->out_avals();
  if (b != carry) throw TypeError("while: the body's outputs differ from the carry's types");
  return carry;
}

// ---- evaluation --------------------------------------------------------------------------------

namespace {

/// while_loop_impl on the cond's and body's raw plans (raw_plan.hpp): the predicate is written
/// into one byte; no Array per iteration.
std::vector<Array> while_on_raw_plans(const WhileParams& w, const RawPlan& cond, const RawPlan& body,
                                      std::span<const Array> cconsts, std::span<const Array> bconsts,
                                      std::span<const Array> init) {
  RawLoop loop(init, std::max(cond.workspace_bytes, body.workspace_bytes));
  const Array predicate = alloc_array(ShapedArray{{}, DType::bool_});
  while (true) {
    loop.start(*w.cond, cconsts);
    loop.outputs().push_back(mutable_data(predicate));
    loop.run(cond);
    if (!(*static_cast<const std::uint8_t*>(predicate.raw_data()) & 1)) break;
    loop.start(*w.body, bconsts);
    loop.next_carry();
    loop.run(body);
    loop.advance();
  }
  return loop.carry();
}

}  // namespace

// carry = init; while cond(cconsts, carry): carry = body(bconsts, carry)
std::vector<Array> while_loop_impl(std::span<const Array> in, const params::While& ps) {
  WhileParams w = WhileParams::read(ps);
  std::vector<Array> cargs = part(in, 0, w.cn), bargs = part(in, w.cn, w.bn);
  std::vector<Array> carry = part(in, w.cn + w.bn, in.size() - w.cn - w.bn);
  // The plans are looked up once (each lookup hashes the jaxpr).
  const auto cond_plan = plan_of(w.cond->jaxpr), body_plan = plan_of(w.body->jaxpr);
  if (raw_plans_enabled() && cond_plan->raw && body_plan->raw)
    return while_on_raw_plans(w, *cond_plan->raw, *body_plan->raw, cargs, bargs, carry);
  while (true) {
    cargs.resize(w.cn);
    cargs.insert(cargs.end(), carry.begin(), carry.end());
    if (!eval_jaxpr(*w.cond, cargs)[0].item<bool>()) break;
    bargs.resize(w.bn);
    bargs.insert(bargs.end(), carry.begin(), carry.end());
    carry = eval_jaxpr(*w.body, bargs);
  }
  return carry;
}

}  // namespace xjax::detail

// loops/calls.cpp: what the higher-order primitives that call their jaxprs once mean (their rules
// are in transforms/cond.cpp, checkpoint.cpp and custom_derivatives.cpp): shape rules and
// evaluation of cond, checkpoint, custom_jvp_call, custom_vjp_call, custom_lin and
// custom_linear_solve.
#include <algorithm>

#include "loops/custom_objects.hpp"
#include "loops/loops.hpp"

namespace xjax::detail {

std::vector<ShapedArray> avals_of(std::span<const Array> xs) {
  std::vector<ShapedArray> r;
  for (const auto& x : xs) r.push_back(x.aval());
  return r;
}

ClosedJaxpr consts_as_inputs(const ClosedJaxpr& j) {
  auto out = std::make_shared<Jaxpr>(*j.jaxpr);
  out->invars = j->constvars;
  out->invars.insert(out->invars.end(), j->invars.begin(), j->invars.end());
  out->constvars.clear();
  return ClosedJaxpr{out, {}};
}

// ---- cond ------------------------------------------------------------------------------------
//   outs... = cond[branches] index ops...

std::vector<ShapedArray> cond_abstract_eval(std::span<const ShapedArray> in, const params::Cond& ps) {
  const auto& bs = ps.branches;
  if (bs.empty()) throw TypeError("cond: no branches");
  if (in.empty() || in[0] != ShapedArray{{}, i32})
    throw TypeError("cond: the index must be an i32 scalar, got " + (in.empty() ? std::string("nothing") : in[0].str()));
  auto outs = bs[0]->out_avals();
  for (std::size_t k = 0; k < bs.size(); ++k) {
    const Jaxpr& b = *bs[k]->jaxpr;
    if (b.invars.size() != in.size() - 1)
      throw TypeError("cond: branch " + std::to_string(k) + " takes " + std::to_string(b.invars.size()) +
                      " operands, the equation passes " + std::to_string(in.size() - 1));
    for (std::size_t i = 0; i < b.invars.size(); ++i)
      if (b.invars[i].aval() != in[i + 1])
        throw TypeError("cond: operand " + std::to_string(i) + " is " + in[i + 1].str() + " but branch " +
                        std::to_string(k) + " expects " + b.invars[i].aval().str());
    auto o = b.out_avals();
    if (o.size() != outs.size())
      throw TypeError("cond: branch " + std::to_string(k) + " returns " + std::to_string(o.size()) +
                      " values but branch 0 returns " + std::to_string(outs.size()));
    for (std::size_t i = 0; i < o.size(); ++i)
      if (o[i] != outs[i])
        throw TypeError("cond: branch " + std::to_string(k) + " returns " + o[i].str() + " as output " +
                        std::to_string(i) + " but branch 0 returns " + outs[i].str());
  }
  return outs;
}

// outs = branches[clamp(index)](ops)
std::vector<Array> cond_impl(std::span<const Array> in, const params::Cond& ps) {
  const auto& bs = ps.branches;
  const auto i = std::clamp<std::int64_t>(in[0].item<std::int64_t>(), 0, static_cast<std::int64_t>(bs.size()) - 1);
  return eval_jaxpr(*bs[static_cast<std::size_t>(i)], in.subspan(1));
}

// ---- checkpoint, custom_jvp_call, custom_vjp_call -------------------------------------------------
//   outs... = checkpoint[jaxpr, policy, prevent_cse, differentiated] args...
//   outs... = custom_jvp_call[call_jaxpr, jvp, num_consts] consts... args...   f with a user jvp rule
//   outs... = custom_vjp_call[call_jaxpr, fwd_jaxpr, bwd, num_consts] consts... args...
// Each means the jaxpr it calls: checkpoint(f)(x) = f(x), and the custom rules only change
// differentiation. So the shape rule is the jaxpr's output avals, the evaluation the jaxpr's.

#define XJAX_CALL_MEANING(stem, S, field)                                                          \
  std::vector<ShapedArray> stem##_abstract_eval(std::span<const ShapedArray>, const params::S& ps) { \
    return ps.field->out_avals();                                                                  \
  }                                                                                                \
  std::vector<Array> stem##_impl(std::span<const Array> in, const params::S& ps) { return eval_jaxpr(*ps.field, in); }
XJAX_CALL_MEANING(checkpoint, Checkpoint, jaxpr)
XJAX_CALL_MEANING(custom_jvp_call, CustomJvpCall, call_jaxpr)
XJAX_CALL_MEANING(custom_vjp_call, CustomVjpCall, call_jaxpr)
#undef XJAX_CALL_MEANING

// ---- custom_lin --------------------------------------------------------------------------------
//   custom_lin[bwd] res... tangents...    the linear map whose transpose is the user's bwd

// (No source location: a custom_vjp_call equation records the line of custom_vjp_call_flat, not
// the user's.)
void custom_vjp_no_forward_mode() {
  throw TransformError("forward-mode differentiation (jvp, linearize, jacfwd) of a custom_vjp function is not "
                       "supported; use grad / vjp / jacrev, or define the function with custom_jvp");
}

std::vector<ShapedArray> custom_lin_abstract_eval(std::span<const ShapedArray>, const params::CustomLin& ps) {
  return object<BwdObject>(ps.bwd).out_avals;
}

namespace {
bool all_zero(const Array& t) {
  for (double v : t.to_vector<double>())
    if (v != 0.0) return false;
  return true;
}
}  // namespace

// custom_lin(res, 0) = 0, whatever the map: that is all it may evaluate. Its tangents are known
// (concrete) only when they do not depend on the differentiated inputs (a custom_jvp rule that
// returned zeros_like), as partial evaluation keeps a higher-order equation with only known
// inputs whole on the known side; other tangents would be forward mode of the custom_vjp function.
std::vector<Array> custom_lin_impl(std::span<const Array> in, const params::CustomLin& ps) {
  const auto& obj = object<BwdObject>(ps.bwd);
  for (std::size_t i = obj.num_res; i < in.size(); ++i)
    if (is_floating(in[i].dtype()) && !all_zero(in[i])) custom_vjp_no_forward_mode();  // integers carry no tangent
  std::vector<Array> out;
  for (const auto& a : obj.out_avals) out.push_back(zeros(a.shape, a.dtype));
  return out;
}

// ---- custom_linear_solve --------------------------------------------------------------------
//   xs... = custom_linear_solve[matvec, solve, transpose_solve, symmetric]
//             matvec consts... solve consts... transpose_solve consts... bs...
// x = solve(b), where solve inverts the linear map matvec; the rules (transforms/linear_solve.cpp)
// differentiate it implicitly, calling the solves again, never through their iterations.

LinearSolveParts LinearSolveParts::read(const params::CustomLinearSolve& p) {
  LinearSolveParts r;
  r.nb = p.matvec->jaxpr->outvars.size();
  auto consts = [&](const ClosedJaxprPtr& j) { return j->jaxpr->invars.size() - r.nb; };
  r.matvec = consts(p.matvec);
  r.solve = consts(p.solve);
  r.transpose_solve = p.transpose_solve.empty() ? 0 : consts(p.transpose_solve.front());
  return r;
}

std::vector<ShapedArray> custom_linear_solve_abstract_eval(std::span<const ShapedArray> in, const params::CustomLinearSolve& ps) {
  // matvec and the solves map b's leaves to x's and back: both have b's avals (a square system).
  const auto check = [&](const char* what, const ClosedJaxprPtr& j) {
    if (j->jaxpr->invars.size() < j->jaxpr->outvars.size())
      throw TypeError(std::string("custom_linear_solve: ") + what + " takes fewer operands than it returns");
  };
  check("matvec", ps.matvec);
  check("solve", ps.solve);
  for (const auto& t : ps.transpose_solve) check("transpose_solve", t);
  if (ps.transpose_solve.size() > 1) throw TypeError("custom_linear_solve: at most one transpose_solve");
  const LinearSolveParts parts = LinearSolveParts::read(ps);
  if (in.size() != parts.total())
    throw TypeError("custom_linear_solve: " + std::to_string(in.size()) + " operands, the jaxprs take " +
                    std::to_string(parts.total()));
  const auto expect_consts = [&](const char* what, const ClosedJaxprPtr& j, std::size_t first) {
    for (std::size_t i = 0; i + parts.nb < j->jaxpr->invars.size(); ++i)
      if (in[first + i] != j->jaxpr->invars[i].aval())
        throw TypeError(std::string("custom_linear_solve: operand ") + std::to_string(first + i) + " is " + in[first + i].str() +
                        " but " + what + " takes " + j->jaxpr->invars[i].aval().str() + " there");
  };
  expect_consts("matvec", ps.matvec, 0);
  expect_consts("solve", ps.solve, parts.solve_begin());
  for (const auto& t : ps.transpose_solve) expect_consts("transpose_solve", t, parts.transpose_solve_begin());
  const std::span<const ShapedArray> b = in.subspan(parts.b_begin());
  const auto expect_b_avals = [&](const char* what, std::span<const ShapedArray> got) {
    for (std::size_t i = 0; i < b.size(); ++i)
      if (got[i] != b[i])
        throw TypeError(std::string("custom_linear_solve: ") + what + " " + std::to_string(i) + " is " + got[i].str() +
                        " but b's leaf " + std::to_string(i) + " is " + b[i].str() + " (the system must be square)");
  };
  const auto tail_invars = [&](const ClosedJaxprPtr& j) {
    std::vector<ShapedArray> r;
    for (std::size_t i = j->jaxpr->invars.size() - parts.nb; i < j->jaxpr->invars.size(); ++i) r.push_back(j->jaxpr->invars[i].aval());
    return r;
  };
  expect_b_avals("matvec's input", tail_invars(ps.matvec));
  expect_b_avals("matvec's output", ps.matvec->out_avals());
  expect_b_avals("solve's input", tail_invars(ps.solve));
  expect_b_avals("solve's output", ps.solve->out_avals());
  for (const auto& t : ps.transpose_solve) {
    expect_b_avals("transpose_solve's input", tail_invars(t));
    expect_b_avals("transpose_solve's output", t->out_avals());
  }
  return std::vector<ShapedArray>(b.begin(), b.end());
}

// x = solve(solve consts, b)
std::vector<Array> custom_linear_solve_impl(std::span<const Array> in, const params::CustomLinearSolve& ps) {
  const LinearSolveParts parts = LinearSolveParts::read(ps);
  std::vector<Array> args = part(in, parts.solve_begin(), parts.solve);
  for (std::size_t i = parts.b_begin(); i < in.size(); ++i) args.push_back(in[i]);
  return eval_jaxpr(*ps.solve, args);
}

}  // namespace xjax::detail

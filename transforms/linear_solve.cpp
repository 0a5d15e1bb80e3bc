// linear_solve.cpp: every rule of custom_linear_solve, and the flat entries of
// xj::custom_linear_solve and xj::custom_root (custom_derivatives.hpp).
//   xs... = custom_linear_solve[matvec, solve, transpose_solve, symmetric]
//             matvec consts... solve consts... transpose_solve consts... bs...
// x = solve(b) for the linear map A = matvec. Implicit differentiation, as JAX's
// lax.custom_linear_solve: the derivative never runs through the solver's iterations but calls the
// solves again, so an iterative solver (cg under while_loop, which has no reverse mode) can be
// differentiated, and a direct one (an LU factorization) is not differentiated through its
// factorization. Only matvec's consts and b carry derivatives; the solves' consts are treated as
// constants (what a solver closes over, such as a factorization, only approximates A^-1).
// custom_root is a custom_jvp call whose rule applies the implicit function theorem.
#include "higher_order.hpp"
#include "loops/custom_objects.hpp"
#include "xjax/custom_derivatives.hpp"
#include "xjax/ops.hpp"

namespace xjax::detail {
namespace {

const params::CustomLinearSolve& solve_params(const Params& ps) { return ps.get<params::CustomLinearSolve>(); }

std::vector<bool> linear_in_tail(std::size_t nonlinear, std::size_t linear) {
  std::vector<bool> r(nonlinear, false);
  r.resize(nonlinear + linear, true);
  return r;
}

/// matvec^T (vecmat): (matvec consts, ct b) -> ct x, the transpose of matvec in x.
ClosedJaxpr vecmat_of(const ClosedJaxpr& matvec, const LinearSolveParts& parts) {
  try {
    return transpose_jaxpr(matvec, linear_in_tail(parts.matvec, parts.nb));
  } catch (const TransformError& e) {
    throw TransformError(std::string("custom_linear_solve: matvec is not transposable, so the transposed system "
                                     "cannot be formed: ") + e.what());
  }
}

}  // namespace

// ---- jvp -------------------------------------------------------------------------------------

// x = A^-1 b with A = matvec(m):  dx = A^-1 (db - (d_m matvec)(x))
JvpOut custom_linear_solve_jvp(const JvpArgs& a) {
  const auto& ps = solve_params(a.params);
  const LinearSolveParts parts = LinearSolveParts::read(ps);
  std::vector<Array> x = bind(Primitive::custom_linear_solve, a.x, a.params, a.loc);
  JvpOut r{x, {}};
  // (d_m matvec)(x): matvec's tangent in its consts alone, x held fixed.
  bool matvec_moves = false;
  for (std::size_t i = 0; i < parts.matvec; ++i) matvec_moves = matvec_moves || !a.t[i].is_zero();
  std::vector<Tangent> moved;
  if (matvec_moves) {
    std::vector<Array> primals = part(a.x, 0, parts.matvec);
    std::vector<Tangent> tangents(a.t.begin(), a.t.begin() + static_cast<std::ptrdiff_t>(parts.matvec));
    for (const auto& xi : x) {
      primals.push_back(xi);
      tangents.push_back(Tangent::zero(xi.aval()));
    }
    moved = jvp_eval(*ps.matvec, primals, tangents).tangents;
  }
  std::vector<Array> rhs;
  bool any = false;
  for (std::size_t i = 0; i < parts.nb; ++i) {
    const Tangent& db = a.t[parts.b_begin() + i];
    const bool has_move = matvec_moves && !moved[i].is_zero();
    any = any || has_move || !db.is_zero();
    if (db.is_zero() && !has_move) rhs.push_back(zeros_like(x[i]));
    else if (!has_move) rhs.push_back(db.value());
    else if (db.is_zero()) rhs.push_back(neg(moved[i].value(), a.loc));
    else rhs.push_back(sub(db.value(), moved[i].value(), a.loc));
  }
  if (!any) {
    for (const auto& xi : x) r.tangents.push_back(Tangent::zero(xi.aval()));
    return r;
  }
  std::vector<Array> operands = part(a.x, 0, parts.b_begin());
  operands.insert(operands.end(), rhs.begin(), rhs.end());
  for (auto& t : bind(Primitive::custom_linear_solve, operands, a.params, a.loc)) r.tangents.emplace_back(std::move(t));
  return r;
}

// ---- transpose -------------------------------------------------------------------------------

// x = A^-1 b is linear in b:  ct_b = A^-T ct_x, the same primitive on the transposed system
// (matvec^T, transpose_solve, solve), or on the same system when A is symmetric.
std::vector<Tangent> custom_linear_solve_transpose(const TransposeArgs& a) {
  const auto& ps = solve_params(a.params);
  const LinearSolveParts parts = LinearSolveParts::read(ps);
  for (std::size_t i = 0; i < parts.b_begin(); ++i)
    if (a.in[i].is_linear())
      throw TransformError("transpose: custom_linear_solve is linear in b only, not in the values its matvec or solves "
                           "close over (at " + format_location(a.loc) + ")");
  if (!ps.symmetric && ps.transpose_solve.empty())
    throw TransformError("custom_linear_solve: reverse mode (grad, vjp, transpose) needs transpose_solve, or "
                         "symmetric = true when matvec is its own transpose (at " + format_location(a.loc) + ")");
  std::vector<Array> operands;
  for (std::size_t i = 0; i < parts.b_begin(); ++i) operands.push_back(a.in[i].value);
  params::CustomLinearSolve tps = ps;
  if (!ps.symmetric) {
    // Operands (matvec consts, transpose_solve consts, solve consts): the solves swap places.
    tps.matvec = share(vecmat_of(*ps.matvec, parts));
    tps.solve = ps.transpose_solve.front();
    tps.transpose_solve = {ps.solve};
    operands = part(operands, 0, parts.matvec);
    for (std::size_t i = 0; i < parts.transpose_solve; ++i) operands.push_back(a.in[parts.transpose_solve_begin() + i].value);
    for (std::size_t i = 0; i < parts.solve; ++i) operands.push_back(a.in[parts.solve_begin() + i].value);
  }
  for (std::size_t i = 0; i < parts.nb; ++i) operands.push_back(a.ct[i].instantiate());
  std::vector<Array> ct_b = bind(Primitive::custom_linear_solve, operands, tps, a.loc);
  std::vector<Tangent> res;
  for (const auto& in : a.in) res.push_back(Tangent::zero(in.aval));
  for (std::size_t i = 0; i < parts.nb; ++i) res[parts.b_begin() + i] = ct_b[i];
  return res;
}

// ---- batching --------------------------------------------------------------------------------

// custom_linear_solve(m, s, t, b)[batch] = custom_linear_solve over the batched jaxprs: the
// solution depends on every operand, so b and x are batched (an unbatched b is broadcast) and
// each jaxpr is batched in its consts as they are.
BatchOut custom_linear_solve_batch(const BatchArgs& a) {
  const auto& ps = solve_params(a.params);
  const LinearSolveParts parts = LinearSolveParts::read(ps);
  std::vector<Array> ops;
  std::vector<bool> batched;
  for (std::size_t i = 0; i < a.x.size(); ++i) {
    const bool vector = i >= parts.b_begin();
    batched.push_back(vector || a.dims[i] != not_batched);
    ops.push_back(batched.back() ? move_batch_dim(a.x[i], a.dims[i], 0, a.size) : a.x[i]);
  }
  const auto batched_jaxpr = [&](const ClosedJaxprPtr& j, std::size_t first_const, std::size_t nconsts) {
    std::vector<bool> in_b(batched.begin() + static_cast<std::ptrdiff_t>(first_const),
                           batched.begin() + static_cast<std::ptrdiff_t>(first_const + nconsts));
    in_b.resize(nconsts + parts.nb, true);
    return share(batch_jaxpr_leading(*j, in_b, a.size, std::vector<bool>(parts.nb, true), nullptr));
  };
  params::CustomLinearSolve bps = ps;
  bps.matvec = batched_jaxpr(ps.matvec, 0, parts.matvec);
  bps.solve = batched_jaxpr(ps.solve, parts.solve_begin(), parts.solve);
  if (!ps.transpose_solve.empty())
    bps.transpose_solve = {batched_jaxpr(ps.transpose_solve.front(), parts.transpose_solve_begin(), parts.transpose_solve)};
  auto outs = bind(a.prim, ops, bps, a.loc);
  return {outs, BatchDims(outs.size(), 0)};
}

// ---- the flat entries ------------------------------------------------------------------------

std::vector<Array> custom_linear_solve_flat(const FlatFn& matvec, std::span<const Array> b, const LinearSolveFn& solve,
                                            const LinearSolveFn* transpose_solve, bool symmetric, std::source_location loc) {
  std::vector<ShapedArray> avals;
  for (const auto& leaf : b) {
    if (!is_floating(leaf.dtype()))
      throw TypeError("custom_linear_solve: b's leaves must be floating-point arrays, got " + leaf.aval().str() + " (at " +
                      format_location(loc) + ")");
    avals.push_back(leaf.aval());
  }
  const auto expect_like_b = [&](const char* what, const ClosedJaxpr& j) {
    auto outs = j.out_avals();
    if (outs.size() != avals.size())
      throw TypeError(std::string("custom_linear_solve: ") + what + " returns " + std::to_string(outs.size()) +
                      " leaves, b has " + std::to_string(avals.size()) + " (at " + format_location(loc) + ")");
    for (std::size_t i = 0; i < outs.size(); ++i)
      if (outs[i] != avals[i])
        throw TypeError(std::string("custom_linear_solve: ") + what + " returns " + outs[i].str() + " as leaf " +
                        std::to_string(i) + " where b has " + avals[i].str() + " (the system must be square; at " +
                        format_location(loc) + ")");
  };
  const ClosedJaxpr mv = trace_flat(matvec, avals, loc);
  expect_like_b("matvec", mv);
  const FlatFn mv_fn = [&mv](std::span<const Array> x) { return eval_jaxpr(mv, x); };
  const ClosedJaxpr sv = trace_flat([&](std::span<const Array> bb) { return solve(mv_fn, bb); }, avals, loc);
  expect_like_b("solve", sv);
  params::CustomLinearSolve ps{.matvec = share(consts_as_inputs(mv)), .solve = share(consts_as_inputs(sv)),
                               .transpose_solve = {}, .symmetric = symmetric};
  std::vector<Array> operands = mv.consts;
  operands.insert(operands.end(), sv.consts.begin(), sv.consts.end());
  if (transpose_solve && !symmetric) {
    const ClosedJaxpr vm = vecmat_of(*ps.matvec, LinearSolveParts{.nb = b.size(), .matvec = mv.consts.size()});
    const FlatFn vm_fn = [&](std::span<const Array> ct) {
      std::vector<Array> in = mv.consts;
      in.insert(in.end(), ct.begin(), ct.end());
      return eval_jaxpr(vm, in);
    };
    const ClosedJaxpr ts = trace_flat([&](std::span<const Array> bb) { return (*transpose_solve)(vm_fn, bb); }, avals, loc);
    expect_like_b("transpose_solve", ts);
    ps.transpose_solve = {share(consts_as_inputs(ts))};
    operands.insert(operands.end(), ts.consts.begin(), ts.consts.end());
  }
  operands.insert(operands.end(), b.begin(), b.end());
  return bind(Primitive::custom_linear_solve, operands, std::move(ps), loc);
}

namespace {

/// What custom_root's jvp rule needs, as const-free jaxprs (the rule runs after the user's trace
/// has ended, so it may hold no tracer of it: what the user's functions close over travels as
/// leading operands of the custom_jvp_call, the solve's (sc) and the tangent solve's (lc)).
struct RootProblem {
  ClosedJaxpr f;             // (theta..., x...) -> f(x; theta)
  ClosedJaxpr call;          // (sc..., lc..., theta..., x0...) -> the root
  ClosedJaxpr linear_solve;  // (lc..., theta..., x..., y...) -> v with (d_x f)(v) = y at x
  std::size_t nsc = 0, nlc = 0, ntheta = 0;
};

/// The tangent of f (theta, x) -> f in x alone, along v.
std::vector<Array> tangent_in_x(const ClosedJaxpr& f, std::span<const Array> theta_and_x, std::size_t ntheta,
                                std::span<const Array> v) {
  std::vector<Tangent> t;
  for (std::size_t i = 0; i < ntheta; ++i) t.push_back(Tangent::zero(theta_and_x[i].aval()));
  for (const auto& vi : v) t.emplace_back(vi);
  std::vector<Array> out;
  for (const auto& o : jvp_eval(f, theta_and_x, t).tangents) out.push_back(o.instantiate());
  return out;
}

// f(x*(theta); theta) = 0, so  dx* = -(d_x f)^-1 (d_theta f)(dtheta), both at x*: the tangent
// solve inverts d_x f, and the primal root is this same call again (its iterations stay inside
// the call, out of the derivative).
JvpFlatRule root_rule(std::shared_ptr<const RootProblem> p) {
  return [p](std::span<const Array> primals, std::span<const Array> tangents) {
    std::vector<Array> root = custom_jvp_call_flat(p->call, root_rule(p), primals);
    const std::size_t first_theta = p->nsc + p->nlc;
    std::vector<Array> at_root = part(primals, first_theta, p->ntheta);
    at_root.insert(at_root.end(), root.begin(), root.end());
    std::vector<Tangent> dtheta;
    for (std::size_t i = 0; i < p->ntheta; ++i) dtheta.emplace_back(tangents[first_theta + i]);
    for (const auto& x : root) dtheta.push_back(Tangent::zero(x.aval()));
    std::vector<Array> in = part(primals, p->nsc, p->nlc);
    in.insert(in.end(), at_root.begin(), at_root.end());
    for (const auto& r : jvp_eval(p->f, at_root, dtheta).tangents) in.push_back(r.instantiate());
    std::vector<Array> dx = eval_jaxpr(p->linear_solve, in);
    for (auto& d : dx) d = neg(d);
    return std::pair{std::move(root), std::move(dx)};
  };
}

}  // namespace

std::vector<Array> custom_root_flat(const FlatFn& f, std::span<const Array> initial_guess, const LinearSolveFn& solve,
                                    LinearSolveFn tangent_solve, std::source_location loc) {
  for (const auto& leaf : initial_guess)
    if (!is_floating(leaf.dtype()))
      throw TypeError("custom_root: the initial guess's leaves must be floating-point arrays, got " + leaf.aval().str() +
                      " (at " + format_location(loc) + ")");
  const std::vector<ShapedArray> avals = avals_of(initial_guess);
  const std::size_t nx = avals.size();
  const auto expect_like_x = [&](const char* what, std::span<const Array> got) {
    for (std::size_t i = 0; i < got.size() || i < nx; ++i)
      if (i >= got.size() || i >= nx || got[i].aval() != avals[i])
        throw TypeError(std::string("custom_root: ") + what + " returns " +
                        (i < got.size() ? got[i].aval().str() : std::string("nothing")) + " as leaf " + std::to_string(i) +
                        " where the initial guess has " + (i < nx ? avals[i].str() : std::string("nothing")) +
                        " (f(x) = 0 is a square system; at " + format_location(loc) + ")");
  };
  auto p = std::make_shared<RootProblem>();
  const ClosedJaxpr traced = trace_flat(
      [&](std::span<const Array> x) {
        std::vector<Array> out = f(x);
        expect_like_x("f", out);
        return out;
      },
      avals, loc);
  p->f = consts_as_inputs(traced);
  p->ntheta = traced.consts.size();
  const std::vector<ShapedArray> theta_avals = avals_of(traced.consts);
  const std::size_t ntheta = p->ntheta;
  // solve: (theta, x0) -> root, its own consts sc.
  const ClosedJaxpr solved = trace_flat(
      [&](std::span<const Array> args) {
        const std::vector<Array> theta = part(args, 0, ntheta);
        const FlatFn f_at = [&](std::span<const Array> x) { return eval_jaxpr(p->f, cat(theta, x)); };
        std::vector<Array> root = solve(f_at, args.subspan(ntheta));
        expect_like_x("solve", root);
        return root;
      },
      cat(theta_avals, avals), loc);
  // tangent_solve on d_x f: (theta, x, y) -> v, its own consts lc.
  const ClosedJaxpr linear = trace_flat(
      [&](std::span<const Array> args) {
        const std::vector<Array> theta_and_x = part(args, 0, ntheta + nx);
        const FlatFn dfdx = [&](std::span<const Array> v) { return tangent_in_x(p->f, theta_and_x, ntheta, v); };
        std::vector<Array> v = call_user([&] { return tangent_solve(dfdx, args.subspan(ntheta + nx)); });
        expect_like_x("tangent_solve", v);
        return v;
      },
      cat(cat(theta_avals, avals), avals), loc);
  p->nsc = solved.consts.size();
  p->nlc = linear.consts.size();
  p->linear_solve = consts_as_inputs(linear);
  const ClosedJaxpr solved_in = consts_as_inputs(solved);
  const std::vector<ShapedArray> call_avals = cat(cat(cat(avals_of(solved.consts), avals_of(linear.consts)), theta_avals), avals);
  p->call = trace_flat(
      [&](std::span<const Array> args) {
        std::vector<Array> in = part(args, 0, p->nsc);
        for (std::size_t i = p->nsc + p->nlc; i < args.size(); ++i) in.push_back(args[i]);
        return eval_jaxpr(solved_in, in);
      },
      call_avals, loc);
  std::vector<Array> args = cat(cat(cat(solved.consts, linear.consts), traced.consts), std::vector<Array>(initial_guess.begin(), initial_guess.end()));
  return custom_jvp_call_flat(p->call, root_rule(p), args);
}

}  // namespace xjax::detail

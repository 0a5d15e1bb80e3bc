// test_implicit.cpp: implicit differentiation. custom_linear_solve, custom_root and
// sparse::cg against independent computations: solutions against Gaussian elimination in double,
// derivatives against finite differences and against differentiating the unrolled solver (to
// solver tolerance), the gradient's jaxpr free of the solver's iterations, every transform
// (jit, vmap, jvp, grad, grad of grad), and the errors.
#include <algorithm>
#include <cmath>

#include "test_util.hpp"

namespace xj = xjax;
using test_util::contains;
using test_util::str;
using test_util::vec;

namespace {

constexpr std::int64_t n = 4;

/// A symmetric, diagonally dominant (so positive definite) matrix from any m: m + m^T + 8 I.
xj::Array spd_of(const xj::Array& m) { return m + xj::matrix_transpose(m) + 8.0 * xj::eye(n, xj::f64); }

std::vector<double> m0() {
  std::vector<double> v(n * n);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.3 * std::sin(1.7 * static_cast<double>(i) + 0.4);
  return v;
}
std::vector<double> b0() { return {1.0, -0.5, 0.25, 2.0}; }

/// x with a x = b, by Gaussian elimination with partial pivoting in double (the independent
/// reference; a is row-major n x n).
std::vector<double> gauss(std::vector<double> a, std::vector<double> b) {
  const std::size_t m = b.size();
  for (std::size_t c = 0; c < m; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < m; ++r)
      if (std::abs(a[r * m + c]) > std::abs(a[p * m + c])) p = r;
    for (std::size_t k = 0; k < m; ++k) std::swap(a[c * m + k], a[p * m + k]);
    std::swap(b[c], b[p]);
    for (std::size_t r = c + 1; r < m; ++r) {
      const double f = a[r * m + c] / a[c * m + c];
      for (std::size_t k = c; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
      b[r] -= f * b[c];
    }
  }
  std::vector<double> x(m);
  for (std::size_t i = m; i-- > 0;) {
    double s = b[i];
    for (std::size_t k = i + 1; k < m; ++k) s -= a[i * m + k] * x[k];
    x[i] = s / a[i * m + i];
  }
  return x;
}

std::vector<double> spd_values(const std::vector<double>& m) {
  std::vector<double> a(n * n);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) a[i * n + j] = m[i * n + j] + m[j * n + i] + (i == j ? 8.0 : 0.0);
  return a;
}

/// Jacobi iteration x <- x + (b - A x) / diag(A), `steps` times from 0, unrolled into the trace:
/// an iterative solver written as plain operations (for A diagonally dominant it converges).
xj::Array jacobi(const std::function<xj::Array(const xj::Array&)>& matvec, const xj::Array& diag, const xj::Array& b,
                 int steps) {
  xj::Array x = xj::zeros_like(b);
  for (int k = 0; k < steps; ++k) x = x + (b - matvec(x)) / diag;
  return x;
}

/// loss(m, b) = sum(w * x) with A(m) x = b solved by custom_linear_solve over Jacobi steps (or by
/// differentiating those steps directly when `unrolled`).
double weight(std::int64_t i) { return 1.0 + 0.5 * static_cast<double>(i); }

xj::Array loss(const xj::Array& m, const xj::Array& b, int steps, bool unrolled) {
  const xj::Array a = spd_of(m);
  const auto matvec = [a](const xj::Array& x) { return xj::matmul(a, x); };
  const xj::Array diag = xj::diagonal(a);
  xj::Array x;
  if (unrolled) {
    x = jacobi(matvec, diag, b, steps);
  } else {
    const auto solve = [&](const std::function<xj::Array(const xj::Array&)>& op, const xj::Array& r) {
      return jacobi(op, xj::stop_gradient(diag), r, steps);
    };
    x = xj::custom_linear_solve(matvec, b, solve, xj::LinearSolveOptions{.symmetric = true});
  }
  return xj::sum(x * xj::array<double>({weight(0), weight(1), weight(2), weight(3)}, {n}));
}

double loss_in_double(const std::vector<double>& m, const std::vector<double>& b) {
  const auto x = gauss(spd_values(m), b);
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += weight(i) * x[static_cast<std::size_t>(i)];
  return s;
}

std::size_t count_eqns(const xj::ClosedJaxpr& j) { return j->eqns.size(); }

}  // namespace

TEST_CASE("custom_linear_solve: the solution, its gradient equal to the unrolled solver's and to finite differences") {
  const xj::Array m = test_util::f64v(m0(), {n, n}), b = test_util::f64v(b0());
  const auto want = gauss(spd_values(m0()), b0());
  const xj::Array a = spd_of(m);
  const xj::Array x = xj::custom_linear_solve([&](const xj::Array& v) { return xj::matmul(a, v); }, b,
                                              [&](const std::function<xj::Array(const xj::Array&)>& op, const xj::Array& r) {
                                                return jacobi(op, xj::diagonal(a), r, 80);
                                              });
  test_util::check_values(x, want, 1e-12);

  auto implicit = xj::grad([](const xj::Array& mm, const xj::Array& bb) { return loss(mm, bb, 80, false); }, xj::argnums<0, 1>);
  auto unrolled = xj::grad([](const xj::Array& mm, const xj::Array& bb) { return loss(mm, bb, 80, true); }, xj::argnums<0, 1>);
  auto [gm, gb] = implicit(m, b);
  auto [um, ub] = unrolled(m, b);
  test_util::check_close(gm, um, 1e-10);
  test_util::check_close(gb, ub, 1e-10);
  const auto fd_m = test_util::fd_grad([&](const std::vector<double>& v) { return loss_in_double(v, b0()); }, m0());
  const auto fd_b = test_util::fd_grad([&](const std::vector<double>& v) { return loss_in_double(m0(), v); }, b0());
  test_util::check_values(gm, fd_m, 1e-8);
  test_util::check_values(gb, fd_b, 1e-8);

  // Forward mode: the directional derivative along (dm, db) against the gradient's inner product.
  const xj::Array dm = test_util::randn({n, n}, 3), db = test_util::randn({n}, 4);
  auto [value, tangent] = xj::jvp([](const xj::Array& mm, const xj::Array& bb) { return loss(mm, bb, 80, false); },
                                  std::tuple{m, b}, std::tuple{dm, db});
  CHECK(value.item<double>() == doctest::Approx(loss_in_double(m0(), b0())).epsilon(1e-12));
  CHECK(tangent.item<double>() == doctest::Approx(xj::sum(gm * dm).item<double>() + xj::sum(gb * db).item<double>()).epsilon(1e-10));
}

TEST_CASE("custom_linear_solve: the gradient's jaxpr holds no iteration of the solver") {
  const xj::Array m = test_util::f64v(m0(), {n, n}), b = test_util::f64v(b0());
  auto jaxpr_of = [&](int steps, bool unrolled) {
    return xj::make_jaxpr(xj::grad([steps, unrolled](const xj::Array& mm, const xj::Array& bb) { return loss(mm, bb, steps, unrolled); }))(m, b);
  };
  const auto implicit10 = jaxpr_of(10, false), implicit60 = jaxpr_of(60, false);
  CHECK(count_eqns(implicit10) == count_eqns(implicit60));
  CHECK(contains(str(implicit60), "custom_linear_solve"));
  // Differentiating the iterations themselves grows with them (the comparison is meaningful).
  CHECK(count_eqns(jaxpr_of(60, true)) > count_eqns(jaxpr_of(10, true)) + 100);
}

TEST_CASE("custom_linear_solve: a pytree b, a transpose_solve for a non-symmetric map, jit and vmap") {
  // A block-diagonal system on a pair: (2 u + v, 3 v) = (p, q), not symmetric.
  using Pair = std::pair<xj::Array, xj::Array>;
  const auto matvec = [](const Pair& x) { return Pair{2.0 * x.first + x.second, 3.0 * x.second}; };
  const auto solve = [](const std::function<Pair(const Pair&)>&, const Pair& r) {
    xj::Array v = r.second / 3.0;
    return Pair{(r.first - v) / 2.0, v};
  };
  // A^T = [[2, 0], [1, 3]]: (2 u, u + 3 v) = (p, q).
  const auto transpose_solve = [](const std::function<Pair(const Pair&)>&, const Pair& r) {
    xj::Array u = r.first / 2.0;
    return Pair{u, (r.second - u) / 3.0};
  };
  const auto f = [&](const xj::Array& p, const xj::Array& q) {
    Pair x = xj::custom_linear_solve(matvec, Pair{p, q}, solve, transpose_solve);
    return xj::sum(xj::sin(x.first) + x.second * x.second);
  };
  const xj::Array p = test_util::f64v({0.3, -0.7, 1.1}), q = test_util::f64v({0.5, 0.2, -0.4});
  const auto plain = [](const std::vector<double>& pv, const std::vector<double>& qv) {
    double s = 0;
    for (std::size_t i = 0; i < pv.size(); ++i) {
      const double v = qv[i] / 3.0, u = (pv[i] - v) / 2.0;
      s += std::sin(u) + v * v;
    }
    return s;
  };
  CHECK(f(p, q).item<double>() == doctest::Approx(plain(vec(p), vec(q))).epsilon(1e-14));
  auto [gp, gq] = xj::grad(f, xj::argnums<0, 1>)(p, q);
  test_util::check_values(gp, test_util::fd_grad([&](const std::vector<double>& v) { return plain(v, vec(q)); }, vec(p)), 1e-8);
  test_util::check_values(gq, test_util::fd_grad([&](const std::vector<double>& v) { return plain(vec(p), v); }, vec(q)), 1e-8);
  auto jitted = xj::jit(xj::grad(f, xj::argnums<0, 1>));
  auto [jp, jq] = jitted(p, q);
  test_util::check_close(jp, gp, 1e-14);
  test_util::check_close(jq, gq, 1e-14);
  // vmap over a batch of p (q shared): each member as computed alone.
  const xj::Array ps = test_util::randn({5, 3}, 9);
  const xj::Array batched = xj::vmap([&](const xj::Array& pi) { return f(pi, q); }, {0})(ps);
  for (std::int64_t k = 0; k < 5; ++k)
    CHECK(batched.to_vector<double>()[static_cast<std::size_t>(k)] ==
          doctest::Approx(plain(vec(xj::take(ps, xj::scalar(static_cast<double>(k), xj::i32), 0)), vec(q))).epsilon(1e-13));
}

TEST_CASE("custom_linear_solve: errors") {
  const xj::Array b = test_util::f64v(b0());
  const auto identity_solve = [](const std::function<xj::Array(const xj::Array&)>&, const xj::Array& r) { return r; };
  // Reverse mode without transpose_solve on a map not declared symmetric.
  const auto f = [&](const xj::Array& bb) {
    return xj::sum(xj::custom_linear_solve([](const xj::Array& v) { return v; }, bb, identity_solve));
  };
  CHECK(f(b).item<double>() == doctest::Approx(2.75));
  auto msg = test_util::message_of<xj::TransformError>([&] { (void)xj::grad(f)(b); });
  CHECK(contains(msg, "transpose_solve"));
  // Forward mode needs no transposition.
  auto [v, t] = xj::jvp(f, std::tuple{b}, std::tuple{xj::ones_like(b)});
  CHECK(t.item<double>() == doctest::Approx(4.0));
  // A matvec that changes the shape: not a square system.
  msg = test_util::message_of<xj::TypeError>([&] {
    (void)xj::custom_linear_solve([](const xj::Array& v) { return xj::concatenate({v, v}, 0); }, b, identity_solve);
  });
  CHECK(contains(msg, "matvec"));
  CHECK(contains(msg, "square"));
  msg = test_util::message_of<xj::TypeError>([&] {
    (void)xj::custom_linear_solve([](const xj::Array& v) { return v; }, xj::astype(b, xj::i32), identity_solve);
  });
  CHECK(contains(msg, "floating"));
}

TEST_CASE("sparse::cg: the solution, jit, vmap, and gradients by solving again (not through the while_loop)") {
  const xj::Array m = test_util::f64v(m0(), {n, n}), b = test_util::f64v(b0());
  const auto want = gauss(spd_values(m0()), b0());
  const auto solve_cg = [](const xj::Array& mm, const xj::Array& bb) {
    const xj::Array a = spd_of(mm);
    return xj::sparse::cg([a](const xj::Array& v) { return xj::matmul(a, v); }, bb, {.tol = 1e-13});
  };
  test_util::check_values(solve_cg(m, b), want, 1e-11);
  test_util::check_close(xj::jit(solve_cg)(m, b), solve_cg(m, b), 1e-13);
  // A preconditioner (Jacobi) changes the path, not the answer.
  const xj::Array a = spd_of(m);
  const xj::Array d = xj::diagonal(a);
  test_util::check_values(xj::sparse::cg([a](const xj::Array& v) { return xj::matmul(a, v); }, b,
                                         {.tol = 1e-13, .M = [d](const xj::Array& r) { return r / d; }}),
                          want, 1e-11);
  // maxiter bounds the iterations: one step of CG from 0 is the steepest-descent step.
  const xj::Array one = xj::sparse::cg([a](const xj::Array& v) { return xj::matmul(a, v); }, b, {.maxiter = 1});
  const double alpha = xj::sum(b * b).item<double>() / xj::sum(b * xj::matmul(a, b)).item<double>();
  test_util::check_close(one, alpha * b, 1e-13);
  // vmap over right-hand sides: a batched while_loop.
  const xj::Array bs = test_util::randn({3, n}, 11);
  const xj::Array xs = xj::vmap([&](const xj::Array& bi) { return solve_cg(m, bi); }, {0})(bs);
  for (std::int64_t k = 0; k < 3; ++k) {
    const auto bk = vec(xj::take(bs, xj::scalar(static_cast<double>(k), xj::i32), 0));
    test_util::check_values(xj::take(xs, xj::scalar(static_cast<double>(k), xj::i32), 0), gauss(spd_values(m0()), bk), 1e-10);
  }
  // Gradients through cg (a while_loop has no reverse mode of its own) against finite differences.
  const auto f = [&](const xj::Array& mm, const xj::Array& bb) {
    return xj::sum(solve_cg(mm, bb) * xj::array<double>({weight(0), weight(1), weight(2), weight(3)}, {n}));
  };
  auto [gm, gb] = xj::grad(f, xj::argnums<0, 1>)(m, b);
  test_util::check_values(gm, test_util::fd_grad([&](const std::vector<double>& v) { return loss_in_double(v, b0()); }, m0()), 1e-8);
  test_util::check_values(gb, test_util::fd_grad([&](const std::vector<double>& v) { return loss_in_double(m0(), v); }, b0()), 1e-8);
  // The gradient calls cg again inside custom_linear_solve: no while_loop of its own.
  const xj::ClosedJaxpr gj = xj::make_jaxpr(xj::grad(f))(m, b);
  CHECK(std::none_of(gj->eqns.begin(), gj->eqns.end(), [](const xj::Eqn& e) { return e.prim == xj::Primitive::while_; }));
  CHECK(std::any_of(gj->eqns.begin(), gj->eqns.end(), [](const xj::Eqn& e) { return e.prim == xj::Primitive::custom_linear_solve; }));
}

TEST_CASE("custom_root: Newton's square root, its derivatives by the implicit function theorem, first and second order") {
  // x^2 = a: a root of f(x) = x^2 - a found by unrolled Newton steps; tangent_solve divides by
  // f'(x) (g(1)).
  const auto root = [](const xj::Array& a, int steps) {
    const auto f = [a](const xj::Array& x) { return x * x - a; };
    const auto newton = [steps](const std::function<xj::Array(const xj::Array&)>& fn, const xj::Array& x0) {
      xj::Array x = x0;
      for (int k = 0; k < steps; ++k) x = x - fn(x) / (2.0 * x);
      return x;
    };
    const auto tangent_solve = [](const std::function<xj::Array(const xj::Array&)>& g, const xj::Array& y) {
      return y / g(xj::ones_like(y));
    };
    return xj::custom_root(f, xj::ones_like(a), newton, tangent_solve);
  };
  const xj::Array a = test_util::f64v({2.0, 9.0, 0.25});
  test_util::check_values(root(a, 30), {std::sqrt(2.0), 3.0, 0.5}, 1e-14);
  const auto sum_root = [&](const xj::Array& x) { return xj::sum(root(x, 30)); };
  test_util::check_values(xj::grad(sum_root)(a), {0.5 / std::sqrt(2.0), 0.5 / 3.0, 0.5 / 0.5}, 1e-12);
  // d^2 sqrt(a) / da^2 = -a^(-3/2) / 4, by reverse over reverse.
  const auto second = xj::grad([&](const xj::Array& x) { return xj::sum(xj::grad(sum_root)(x)); })(a);
  test_util::check_values(second, {-0.25 * std::pow(2.0, -1.5), -0.25 / 27.0, -0.25 / 0.125}, 1e-10);
  auto [v, t] = xj::jvp([&](const xj::Array& x) { return root(x, 30); }, std::tuple{a}, std::tuple{xj::ones_like(a)});
  test_util::check_values(t, {0.5 / std::sqrt(2.0), 0.5 / 3.0, 1.0}, 1e-12);
  // Equal (to solver tolerance) to differentiating the Newton iterations themselves.
  const auto unrolled = [](const xj::Array& x) {
    xj::Array r = xj::ones_like(x);
    for (int k = 0; k < 30; ++k) r = r - (r * r - x) / (2.0 * r);
    return xj::sum(r);
  };
  test_util::check_close(xj::grad(sum_root)(a), xj::grad(unrolled)(a), 1e-13);
  // The iterations live in the call, not in the derivative: the same jaxpr size for 5 and 40 steps.
  const auto grad_jaxpr = [&](int steps) {
    return xj::make_jaxpr(xj::grad([&, steps](const xj::Array& x) { return xj::sum(root(x, steps)); }))(a);
  };
  CHECK(count_eqns(grad_jaxpr(5)) == count_eqns(grad_jaxpr(40)));
  test_util::check_close(xj::jit(xj::grad(sum_root))(a), xj::grad(sum_root)(a), 1e-14);
}

TEST_CASE("custom_root: a nonlinear system A x + tanh(x) / 10 = b(theta), tangent_solve by cg; gradient vs finite differences") {
  const xj::Array m = test_util::f64v(m0(), {n, n});
  const auto solution = [&](const xj::Array& theta) {
    const xj::Array a = spd_of(m);
    const xj::Array rhs = theta * theta + 1.0;
    const auto f = [a, rhs](const xj::Array& x) { return xj::matmul(a, x) + 0.1 * xj::tanh(x) - rhs; };
    // Newton with a dense solve per step (its own derivatives are never taken).
    const auto newton = [a](const std::function<xj::Array(const xj::Array&)>& fn, const xj::Array& x0) {
      xj::Array x = x0;
      for (int k = 0; k < 12; ++k) {
        const xj::Array sech2 = 1.0 - xj::tanh(x) * xj::tanh(x);
        x = x - xj::linalg::solve(a + 0.1 * xj::eye(n, xj::f64) * sech2, fn(x));  // J = A + diag(sech^2) / 10
      }
      return x;
    };
    const auto tangent_solve = [](const std::function<xj::Array(const xj::Array&)>& g, const xj::Array& y) {
      return xj::sparse::cg(g, y, {.tol = 1e-14});
    };
    return xj::custom_root(f, xj::zeros_like(theta), newton, tangent_solve);
  };
  const xj::Array theta = test_util::f64v({0.4, -1.2, 0.7, 0.1});
  const xj::Array x = solution(theta);
  const xj::Array residual = xj::matmul(spd_of(m), x) + 0.1 * xj::tanh(x) - (theta * theta + 1.0);
  CHECK(xj::max(xj::abs(residual)).item<double>() < 1e-13);
  const auto f = [&](const xj::Array& t) { return xj::sum(xj::sin(solution(t))); };
  const auto fd = test_util::fd_grad([&](const std::vector<double>& t) { return f(test_util::f64v(t)).item<double>(); }, vec(theta), 1e-6);
  test_util::check_values(xj::grad(f)(theta), fd, 1e-8);
}

TEST_CASE("linalg::solve: the gradient through custom_linear_solve (not the factorization); assume_a = pos") {
  const xj::Array m = test_util::f64v(m0(), {n, n}), b = test_util::f64v(b0());
  const auto want = gauss(spd_values(m0()), b0());
  test_util::check_values(xj::linalg::solve(spd_of(m), b, "pos"), want, 1e-13);
  test_util::check_values(xj::linalg::solve(spd_of(m), b, "gen"), want, 1e-13);
  for (const char* assume : {"gen", "pos"}) {
    const auto f = [assume](const xj::Array& mm, const xj::Array& bb) {
      return xj::sum(xj::linalg::solve(spd_of(mm), bb, assume) * xj::array<double>({weight(0), weight(1), weight(2), weight(3)}, {n}));
    };
    auto [gm, gb] = xj::grad(f, xj::argnums<0, 1>)(m, b);
    test_util::check_values(gm, test_util::fd_grad([&](const std::vector<double>& v) { return loss_in_double(v, b0()); }, m0()), 1e-8);
    test_util::check_values(gb, test_util::fd_grad([&](const std::vector<double>& v) { return loss_in_double(m0(), v); }, b0()), 1e-8);
    const std::string j = str(xj::make_jaxpr(xj::grad(f))(m, b));
    CHECK(contains(j, "custom_linear_solve"));
  }
  // "sym" solves as "gen" (JAX's); an unknown kind is an Error naming assume_a
  test_util::check_values(xj::linalg::solve(spd_of(m), b, "sym"), want, 1e-13);
  auto msg = test_util::message_of<xj::Error>([&] { (void)xj::linalg::solve(spd_of(m), b, "diagonal"); });
  CHECK(contains(msg, "assume_a"));
}

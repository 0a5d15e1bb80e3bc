// gradcheck_table.cpp: the rows of the numeric gradient-check suite (see gradcheck_table.hpp).
// Generators keep inputs inside each op's domain and away from its kinks: log/sqrt/rsqrt/pow get
// positive inputs, tan stays within |x| <= 1, max/min/reduce_max/argmax get values spaced apart
// (no ties), relu/abs/sign stay away from 0 (softplus, smooth, is checked at 0), float->int
// conversions away from integers.
// Linear shape ops are followed by a square, so that their second derivatives are not zero and
// the order-2 checks run the op's rules inside a nonlinear function.
#include "gradcheck_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

#include "../../transforms/ad.hpp"  // detail::linearize_jaxpr, to find custom_lin
#include "internal.hpp"  // detail::bind1, for primitives without a user op (pad, copy, scatter_add)

// Rows for the custom-derivative primitives, once the library has them.
#if defined(XJAX_FOR_EACH_HIGHER_ORDER_PRIMITIVE) && __has_include("xjax/custom_derivatives.hpp")
#include "xjax/custom_derivatives.hpp"
#define XJAX_GRADCHECK_CUSTOM 1
#endif

namespace xjax::gradcheck {
namespace {

using P = Primitive;
using Ints = std::vector<std::int64_t>;
using Rng = std::mt19937;
using Arrays = std::vector<Array>;

// ---- input generators ------------------------------------------------------------------------

Array make(const std::vector<double>& v, const Shape& s, DType d) {
  if (d == f32) return array<float>(std::vector<float>(v.begin(), v.end()), s);
  return array<double>(v, s);
}

std::vector<double> uniform_values(std::int64_t n, double lo, double hi, Rng& rng) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& e : v) e = u(rng);
  return v;
}

Array uniform(const Shape& s, DType d, Rng& rng, double lo, double hi) {
  return make(uniform_values(shape_size(s), lo, hi, rng), s, d);
}

// |x| in [lo, hi] with a random sign: away from the kink at 0.
Array away_from_zero(const Shape& s, DType d, Rng& rng, double lo = 0.3, double hi = 2.0) {
  auto v = uniform_values(shape_size(s), lo, hi, rng);
  std::bernoulli_distribution coin;
  for (auto& e : v) e = coin(rng) ? e : -e;
  return make(v, s, d);
}

// n values spaced at least 0.15 apart, shuffled: no ties, so max/min/argmax are smooth there.
std::vector<double> spread_values(std::int64_t n, Rng& rng) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::uniform_real_distribution<double> jitter(0.0, 0.1);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * (static_cast<double>(i) - static_cast<double>(n) / 2) + jitter(rng);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

Array spread(const Shape& s, DType d, Rng& rng) { return make(spread_values(shape_size(s), rng), s, d); }

// Two arrays whose values are all distinct from each other (max/min operands, also broadcast).
Arrays spread_pair(const Shape& a, const Shape& b, DType d, Rng& rng) {
  auto v = spread_values(shape_size(a) + shape_size(b), rng);
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(shape_size(a));
  return {make(std::vector<double>(v.begin(), mid), a, d), make(std::vector<double>(mid, v.end()), b, d)};
}

// Values at k + [0.2, 0.8]: away from the jumps of float -> int conversion.
Array off_integer(const Shape& s, DType d, Rng& rng) {
  auto v = uniform_values(shape_size(s), 0.2, 0.8, rng);
  std::uniform_int_distribution<int> k(-3, 3);
  for (auto& e : v) e += k(rng);
  return make(v, s, d);
}

Array i32s(const std::vector<std::int32_t>& v, const Shape& s) { return array<std::int32_t>(v, s); }
Array i32scalar(std::int32_t v) { return i32s({v}, Shape{}); }

Gen uniform_gen(const Shape& s, double lo, double hi) {
  return [s, lo, hi](DType d, Rng& r) { return Arrays{uniform(s, d, r, lo, hi)}; };
}
Gen uniform2_gen(const Shape& a, const Shape& b, double lo, double hi) {
  return [a, b, lo, hi](DType d, Rng& r) { return Arrays{uniform(a, d, r, lo, hi), uniform(b, d, r, lo, hi)}; };
}
Gen away_gen(const Shape& s, double lo = 0.3, double hi = 2.0) {
  return [s, lo, hi](DType d, Rng& r) { return Arrays{away_from_zero(s, d, r, lo, hi)}; };
}
// Like away_gen, with exact zeros at the given flat positions (reduce_prod's derivative there).
Gen zeros_at_gen(const Shape& s, std::vector<std::size_t> zero_at) {
  return [s, zero_at](DType d, Rng& r) {
    auto v = uniform_values(shape_size(s), 0.5, 1.5, r);
    std::bernoulli_distribution coin;
    for (auto& e : v) e = coin(r) ? e : -e;
    for (auto i : zero_at) v[i] = 0.0;
    return Arrays{make(v, s, d)};
  };
}
Gen spread_gen(const Shape& s) {
  return [s](DType d, Rng& r) { return Arrays{spread(s, d, r)}; };
}
Gen spread_pair_gen(const Shape& a, const Shape& b) {
  return [a, b](DType d, Rng& r) { return spread_pair(a, b, d, r); };
}

// ---- row builders ----------------------------------------------------------------------------

Row row(std::string name, std::vector<P> covers, Fn fn, Gen gen, Kind kind = Kind::differentiable) {
  Row r;
  r.name = std::move(name);
  r.covers = std::move(covers);
  r.fn = std::move(fn);
  r.gen = std::move(gen);
  r.kind = kind;
  return r;
}

Fn unary(Array (*op)(const Array&, std::source_location)) {
  return [op](const Arrays& x) { return op(x[0], std::source_location::current()); };
}
Fn binary(Array (*op)(const Array&, const Array&, std::source_location)) {
  return [op](const Arrays& x) { return op(x[0], x[1], std::source_location::current()); };
}
// op(x)^2: a linear op inside a nonlinear function.
Fn squared(std::function<Array(const Arrays&)> op) {
  return [op](const Arrays& x) {
    Array y = op(x);
    return y * y;
  };
}

std::vector<Row> build() {
  std::vector<Row> t;
  const Shape s{3, 4};

  // ---- elementwise unary ---------------------------------------------------------------------
  t.push_back(row("neg", {P::neg}, unary(neg), uniform_gen(s, -2, 2)));
  t.push_back(row("exp", {P::exp}, unary(exp), uniform_gen(s, -2, 2)));
  t.push_back(row("log", {P::log}, unary(log), uniform_gen(s, 0.5, 3)));
  t.push_back(row("log1p", {P::log1p}, unary(log1p), uniform_gen(s, -0.5, 2)));
  t.push_back(row("expm1", {P::expm1}, unary(expm1), uniform_gen(s, -2, 2)));
  t.push_back(row("sin", {P::sin}, unary(sin), uniform_gen(s, -3, 3)));
  t.push_back(row("cos", {P::cos}, unary(cos), uniform_gen(s, -3, 3)));
  t.push_back(row("tan", {P::tan}, unary(tan), uniform_gen(s, -1, 1)));
  t.push_back(row("tanh", {P::tanh}, unary(tanh), uniform_gen(s, -2, 2)));
  t.push_back(row("logistic", {P::logistic}, unary(logistic), uniform_gen(s, -3, 3)));
  t.push_back(row("sqrt", {P::sqrt}, unary(sqrt), uniform_gen(s, 0.5, 3)));
  t.push_back(row("rsqrt", {P::rsqrt}, unary(rsqrt), uniform_gen(s, 0.5, 3)));
  t.push_back(row("asin", {P::asin}, unary(asin), uniform_gen(s, -0.8, 0.8)));
  t.push_back(row("acos", {P::acos}, unary(acos), uniform_gen(s, -0.8, 0.8)));
  t.push_back(row("atan", {P::atan}, unary(atan), uniform_gen(s, -3, 3)));
  t.push_back(row("sinh", {P::sinh}, unary(sinh), uniform_gen(s, -2, 2)));
  t.push_back(row("cosh", {P::cosh}, unary(cosh), uniform_gen(s, -2, 2)));
  t.push_back(row("asinh", {P::asinh}, unary(asinh), uniform_gen(s, -3, 3)));
  t.push_back(row("acosh", {P::acosh}, unary(acosh), uniform_gen(s, 1.2, 3)));
  t.push_back(row("atanh", {P::atanh}, unary(atanh), uniform_gen(s, -0.8, 0.8)));
  t.push_back(row("erf", {P::erf}, unary(erf), uniform_gen(s, -2, 2)));
  t.push_back(row("erfc", {P::erfc}, unary(erfc), uniform_gen(s, -2, 2)));
  t.push_back(row("lgamma", {P::lgamma}, unary(lgamma), uniform_gen(s, 0.3, 4)));
  t.push_back(row("lgamma_negative", {P::lgamma}, unary(lgamma), uniform_gen(s, -2.8, -2.2)));
  t.push_back(row("digamma", {P::digamma}, unary(digamma), uniform_gen(s, 0.3, 12)));
  t.push_back(row("digamma_negative", {P::digamma}, unary(digamma), uniform_gen(s, -1.8, -1.2)));
  t.push_back(row("erf_inv", {P::erf_inv}, unary(erf_inv), uniform_gen(s, -0.9, 0.9)));
  t.push_back(row("cbrt", {P::cbrt}, unary(cbrt), away_gen(s)));
  t.push_back(row("exp2", {P::exp2}, unary(exp2), uniform_gen(s, -2, 2)));
  t.push_back(row("log2", {P::log2}, unary(log2), uniform_gen(s, 0.5, 3)));
  // floor and ceil: zero derivative, away from the integers where they jump.
  t.push_back(row("floor", {P::floor}, unary(floor), uniform_gen(s, 0.1, 0.9), Kind::zero_gradient));
  t.push_back(row("ceil", {P::ceil}, unary(ceil), uniform_gen(s, 1.1, 1.9), Kind::zero_gradient));
  t.push_back(row("abs", {P::abs}, unary(abs), away_gen(s)));
  t.push_back(row("sign", {P::sign}, unary(sign), away_gen(s), Kind::zero_gradient));
  for (std::int64_t n : {0, 1, 2, 3, -1, -2})
    t.push_back(row("integer_pow_" + std::to_string(n), {P::integer_pow},
                    [n](const Arrays& x) { return integer_pow(x[0], n); }, away_gen(s, 0.5, 1.5)));
  // user ops built from unary primitives
  t.push_back(row("square", {P::integer_pow}, unary(square), uniform_gen(s, -2, 2)));
  t.push_back(row("reciprocal", {P::integer_pow}, unary(reciprocal), away_gen(s, 0.5, 2)));
  t.push_back(row("sigmoid", {P::logistic}, unary(sigmoid), uniform_gen(s, -3, 3)));
  t.push_back(row("relu", {P::select_n, P::gt}, unary(relu), away_gen(s)));
  t.push_back(row("gelu", {P::tanh, P::integer_pow, P::mul, P::add}, unary(gelu), uniform_gen(s, -3, 3)));
  t.push_back(row("gelu_exact", {P::erfc, P::mul}, [](const Arrays& x) { return gelu(x[0], false); }, uniform_gen(s, -3, 3)));
  // smooth (its derivative is a rule: logistic), so checked at exact zeros too
  t.push_back(row("softplus", {P::max, P::abs, P::exp, P::log1p, P::logistic}, unary(softplus), zeros_at_gen(s, {0, 3})));

  // ---- elementwise binary, same shapes and broadcasting --------------------------------------
  t.push_back(row("add", {P::add}, binary(add), uniform2_gen(s, s, -2, 2)));
  t.push_back(row("sub", {P::sub}, binary(sub), uniform2_gen(s, s, -2, 2)));
  t.push_back(row("mul", {P::mul}, binary(mul), uniform2_gen(s, s, -2, 2)));
  t.push_back(row("div", {P::div}, binary(div), [s](DType d, Rng& r) {
                    return Arrays{uniform(s, d, r, -2, 2), away_from_zero(s, d, r, 0.5, 2)};
                  }));
  t.push_back(row("max", {P::max}, binary(maximum), spread_pair_gen(s, s)));
  t.push_back(row("min", {P::min}, binary(minimum), spread_pair_gen(s, s)));
  t.push_back(row("pow", {P::pow}, binary(pow), [s](DType d, Rng& r) {
                    return Arrays{uniform(s, d, r, 0.5, 2), uniform(s, d, r, -1.5, 1.5)};
                  }));
  // atan2 on both half-planes (y > 0: x < 0 stays away from the cut at y = 0).
  t.push_back(row("atan2", {P::atan2}, [](const Arrays& x) { return atan2(x[0], x[1]); }, [s](DType d, Rng& r) {
                    return Arrays{uniform(s, d, r, 0.5, 2), uniform(s, d, r, -2, 2)};
                  }));
  t.push_back(row("nextafter", {P::nextafter}, binary(nextafter), uniform2_gen(s, s, -2, 2)));
  // clamp with scalar bounds and with array bounds; the operand kept 0.1 or more from either bound.
  t.push_back(row("clamp", {P::clamp}, [](const Arrays& x) { return clamp(-0.75, x[0], 0.75); }, [s](DType d, Rng& r) {
                    auto v = uniform_values(shape_size(s), -2, 2, r);
                    for (auto& e : v)
                      if (std::abs(std::abs(e) - 0.75) < 0.1) e += 0.2;
                    return Arrays{make(v, s, d)};
                  }));
  t.push_back(row("clamp_array_bounds", {P::clamp}, [](const Arrays& x) { return clamp(x[0], x[1], x[2]); }, [s](DType d, Rng& r) {
                    auto x = uniform_values(shape_size(s), -1, 1, r);
                    for (std::size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? 0.3 * x[i] : (x[i] < 0 ? x[i] - 1.5 : x[i] + 1.5);
                    return Arrays{uniform(s, d, r, -1.2, -0.8), make(x, s, d), uniform(s, d, r, 0.8, 1.2)};
                  }));
  // rem with x / y in (2.1, 2.8) and (-2.8, -2.1): trunc(x / y) = +-2, away from the jumps.
  t.push_back(row("rem", {P::rem}, [](const Arrays& x) { return rem(x[0], x[1]); }, [s](DType d, Rng& r) {
                    return Arrays{uniform(s, d, r, 2.2, 2.8), uniform(s, d, r, 1.0, 1.04)};
                  }));
  t.push_back(row("rem_negative", {P::rem}, [](const Arrays& x) { return rem(-x[0], x[1]); }, [s](DType d, Rng& r) {
                    return Arrays{uniform(s, d, r, 2.2, 2.8), uniform(s, d, r, 1.0, 1.04)};
                  }));
  t.push_back(row("add_bcast_3x1_4", {P::add, P::broadcast_in_dim}, binary(add), uniform2_gen({3, 1}, {4}, -2, 2)));
  t.push_back(row("sub_bcast_scalar_array", {P::sub, P::broadcast_in_dim}, binary(sub), uniform2_gen({}, s, -2, 2)));
  t.push_back(row("mul_bcast_3x1_4", {P::mul, P::broadcast_in_dim}, binary(mul), uniform2_gen({3, 1}, {4}, -2, 2)));
  t.push_back(row("mul_bcast_array_scalar", {P::mul, P::broadcast_in_dim}, binary(mul), uniform2_gen(s, {}, -2, 2)));
  t.push_back(row("div_bcast_4_3x1", {P::div, P::broadcast_in_dim}, binary(div), [](DType d, Rng& r) {
                    return Arrays{uniform({4}, d, r, -2, 2), away_from_zero({3, 1}, d, r, 0.5, 2)};
                  }));
  t.push_back(row("max_bcast_3x1_4", {P::max, P::broadcast_in_dim}, binary(maximum), spread_pair_gen({3, 1}, {4})));
  t.push_back(row("min_bcast_scalar_array", {P::min, P::broadcast_in_dim}, binary(minimum), spread_pair_gen({}, s)));
  t.push_back(row("pow_bcast_array_scalar", {P::pow, P::broadcast_in_dim}, binary(pow), [s](DType d, Rng& r) {
                    return Arrays{uniform(s, d, r, 0.5, 2), uniform({}, d, r, -1.5, 1.5)};
                  }));
  t.push_back(row("pow_double_exponent", {P::pow}, [](const Arrays& x) { return pow(x[0], 1.7); }, uniform_gen(s, 0.5, 2)));
  t.push_back(row("operators_with_scalars", {P::mul, P::add, P::sub, P::div, P::neg},
                  [](const Arrays& x) { return (-(x[0] * 2.0 + 1.0)) / (x[1] - 3.0) + 0.5 / (x[1] + 3.0); },
                  uniform2_gen(s, s, -1, 1)));

  // ---- comparisons: piecewise constant, zero gradient ----------------------------------------
  auto cmp = [&](const char* name, P p, Array (*op)(const Array&, const Array&, std::source_location)) {
    t.push_back(row(name, {p, P::convert_element_type},
                    [op](const Arrays& x) { return astype(op(x[0], x[1], std::source_location::current()), x[0].dtype()); },
                    spread_pair_gen(s, s), Kind::zero_gradient));
  };
  cmp("eq", P::eq, eq);
  cmp("ne", P::ne, ne);
  cmp("lt", P::lt, lt);
  cmp("le", P::le, le);
  cmp("gt", P::gt, gt);
  cmp("ge", P::ge, ge);

  // ---- select_n, conversion, copy, stop_gradient, iota ---------------------------------------
  t.push_back(row("where", {P::select_n, P::gt},
                  [](const Arrays& x) { return where(x[0] > x[1], sin(x[0]), x[1] * x[1]); }, spread_pair_gen(s, s)));
  t.push_back(row("where_bcast", {P::select_n, P::broadcast_in_dim},
                  [](const Arrays& x) { return where(x[0] > 0.0, x[1] * x[1], 2.5); }, [](DType d, Rng& r) {
                    return Arrays{away_from_zero({3, 1}, d, r), uniform({4}, d, r, -2, 2)};
                  }));
  t.push_back(row("select_n_i32_3cases", {P::select_n},
                  [](const Arrays& x) {
                    Array which = i32s({0, 1, 2, 2, 1, 0, 0, 2, 1, 1, 0, 2}, {3, 4});
                    return detail::bind1(P::select_n, {which, x[0] * x[1], sin(x[0]), x[1]});
                  },
                  uniform2_gen(s, s, -2, 2)));
  t.push_back(row("convert_element_type", {P::convert_element_type},
                  [](const Arrays& x) {
                    // f32 -> f64 -> f32 (exact); for f64 inputs an f64 -> f64 conversion bound directly
                    // (the user op elides it), since an f64 -> f32 round trip is not f64-accurate.
                    if (x[0].dtype() == f32) return astype(sin(astype(x[0], f64)) * astype(x[0], f64), f32);
                    Array y = detail::bind1(P::convert_element_type, {x[0]}, params::ConvertElementType{.new_dtype = f64, .weak_type = false});
                    return sin(y) * y;
                  },
                  uniform_gen(s, -2, 2)));
  t.push_back(row("convert_to_int", {P::convert_element_type},
                  [](const Arrays& x) { return astype(astype(x[0], i32), x[0].dtype()); },
                  [s](DType d, Rng& r) { return Arrays{off_integer(s, d, r)}; }, Kind::zero_gradient));
  t.push_back(row("copy", {P::copy}, [](const Arrays& x) { return sin(detail::bind1(P::copy, {x[0]})) * x[0]; },
                  uniform_gen(s, -2, 2)));
  t.push_back(row("stop_gradient", {P::stop_gradient}, [](const Arrays& x) { return sin(stop_gradient(x[0])); },
                  uniform_gen(s, -2, 2), Kind::blocked));
  t.push_back(row("iota", {P::iota, P::convert_element_type},
                  [](const Arrays& x) { return astype(iota(i32, x[0].shape(), 1), x[0].dtype()) + 0.0 * x[0]; },
                  uniform_gen(s, -2, 2), Kind::zero_gradient));
  t.push_back(row("mul_by_iota", {P::iota, P::mul},
                  [](const Arrays& x) { return x[0] * x[0] * astype(iota(i32, x[0].shape(), 0), x[0].dtype()); },
                  uniform_gen(s, -2, 2)));

  // ---- dot_general, matmul, einsum -----------------------------------------------------------
  t.push_back(row("dot_general", {P::dot_general},
                  [](const Arrays& x) { return dot_general(x[0], x[1], {1}, {0}); }, uniform2_gen({3, 4}, {4, 5}, -1, 1)));
  t.push_back(row("dot_general_batch", {P::dot_general},
                  [](const Arrays& x) { return dot_general(x[0], x[1], {2}, {1}, {0}, {0}); },
                  uniform2_gen({2, 3, 4}, {2, 4, 5}, -1, 1)));
  t.push_back(row("dot_general_batch_middle", {P::dot_general},
                  [](const Arrays& x) { return dot_general(x[0], x[1], {2}, {0}, {1}, {1}); },
                  uniform2_gen({3, 2, 4}, {4, 2, 5}, -1, 1)));
  t.push_back(row("dot_general_two_contracting", {P::dot_general},
                  [](const Arrays& x) { return dot_general(x[0], x[1], {0, 2}, {1, 0}); },
                  uniform2_gen({2, 3, 4}, {4, 2}, -1, 1)));
  t.push_back(row("matmul", {P::dot_general}, binary(matmul), uniform2_gen({3, 4}, {4, 2}, -1, 1)));
  t.push_back(row("matmul_bcast_batch", {P::dot_general, P::broadcast_in_dim}, binary(matmul),
                  uniform2_gen({1, 3, 4}, {2, 4, 5}, -1, 1)));
  t.push_back(row("matmul_stack_by_matrix", {P::dot_general}, binary(matmul), uniform2_gen({2, 3, 4}, {4, 5}, -1, 1)));
  t.push_back(row("matmul_matrix_by_stack", {P::dot_general, P::transpose}, binary(matmul),
                  uniform2_gen({3, 4}, {2, 4, 5}, -1, 1)));
  t.push_back(row("matmul_vec_mat", {P::dot_general}, binary(matmul), uniform2_gen({4}, {4, 3}, -1, 1)));
  t.push_back(row("matmul_mat_vec", {P::dot_general}, binary(matmul), uniform2_gen({3, 4}, {4}, -1, 1)));
  t.push_back(row("dot", {P::dot_general}, binary(dot), uniform2_gen({3, 4}, {4}, -1, 1)));
  t.push_back(row("einsum_bij_bjk", {P::dot_general},
                  [](const Arrays& x) { return einsum("bij,bjk->bik", x[0], x[1]); },
                  uniform2_gen({2, 3, 4}, {2, 4, 5}, -1, 1)));
  t.push_back(row("einsum_ij_kj_ik", {P::dot_general},
                  [](const Arrays& x) { return einsum("ij,kj->ik", x[0], x[1]); }, uniform2_gen({3, 4}, {5, 4}, -1, 1)));
  t.push_back(row("einsum_ij_jk_ki", {P::dot_general, P::transpose},
                  [](const Arrays& x) { return einsum("ij,jk->ki", x[0], x[1]); }, uniform2_gen({3, 4}, {4, 5}, -1, 1)));
  t.push_back(row("einsum_ijk_ki", {P::reduce_sum, P::transpose},
                  [](const Arrays& x) { return einsum("ijk->ki", x[0]); }, uniform_gen({2, 3, 4}, -1, 1)));
  t.push_back(row("mlp_layer", {P::dot_general, P::add, P::broadcast_in_dim, P::tanh},
                  [](const Arrays& x) { return tanh(matmul(x[0], x[1]) + x[2]); },
                  [](DType d, Rng& r) {
                    return Arrays{uniform({3, 4}, d, r, -1, 1), uniform({4, 5}, d, r, -1, 1), uniform({5}, d, r, -1, 1)};
                  }));

  // ---- reductions ----------------------------------------------------------------------------
  t.push_back(row("reduce_sum", {P::reduce_sum}, [](const Arrays& x) { return sum(x[0], {1}); }, uniform_gen(s, -2, 2)));
  t.push_back(row("reduce_sum_all", {P::reduce_sum}, [](const Arrays& x) { return sum(x[0]); }, uniform_gen({2, 3, 4}, -2, 2)));
  t.push_back(row("sum_keepdims", {P::reduce_sum, P::reshape}, [](const Arrays& x) { return sum(x[0], {0}, true); },
                  uniform_gen(s, -2, 2)));
  t.push_back(row("mean", {P::reduce_sum, P::div}, [](const Arrays& x) { return mean(x[0], {-1}); }, uniform_gen(s, -2, 2)));
  t.push_back(row("reduce_max", {P::reduce_max}, [](const Arrays& x) { return max(x[0], {1}); }, spread_gen(s)));
  t.push_back(row("reduce_max_all", {P::reduce_max}, [](const Arrays& x) { return max(x[0]); }, spread_gen({2, 3, 4})));
  t.push_back(row("reduce_min", {P::reduce_min}, [](const Arrays& x) { return min(x[0], {0}); }, spread_gen(s)));
  t.push_back(row("reduce_min_all_keepdims", {P::reduce_min}, [](const Arrays& x) { return min(x[0], {}, true); },
                  spread_gen(s)));
  t.push_back(row("reduce_prod", {P::reduce_prod}, [](const Arrays& x) { return prod(x[0], {1}); }, away_gen(s, 0.5, 1.5)));
  t.push_back(row("reduce_prod_all", {P::reduce_prod}, [](const Arrays& x) { return prod(x[0]); }, away_gen({2, 3}, 0.5, 1.5)));
  // Exact zeros: one zero in a reduced row, two zeros in one row, and zeros in a full reduction.
  t.push_back(row("reduce_prod_one_zero", {P::reduce_prod}, [](const Arrays& x) { return prod(x[0], {1}); },
                  zeros_at_gen({3, 5}, {2, 6})));
  t.push_back(row("reduce_prod_two_zeros", {P::reduce_prod}, [](const Arrays& x) { return prod(x[0], {1}); },
                  zeros_at_gen({3, 5}, {0, 4, 7})));
  t.push_back(row("reduce_prod_all_zeros", {P::reduce_prod}, [](const Arrays& x) { return prod(x[0], {0, 2}); },
                  zeros_at_gen({3, 2, 4}, {5, 17})));
  // The bitwise ops (integers in, integers out): piecewise constant in a float input read as
  // integers at the centres of [k / 8, (k + 1) / 8), away from the jumps.
  auto eighths = [s](DType d, Rng& r) { return Arrays{(floor(uniform(s, d, r, -4, 4) * 8.0) + 0.5) / 8.0}; };
  t.push_back(row("bitwise", {P::bitwise_and, P::bitwise_or, P::bitwise_xor, P::bitwise_not, P::population_count},
                  [](const Arrays& x) {
                    const Array i = astype(floor(x[0] * 8.0), i32);
                    return astype(population_count((i & scalar(13.0, i32)) | (~i ^ scalar(6.0, i32))), x[0].dtype()) * x[0];
                  }, eighths));
  t.push_back(row("round", {P::round}, [](const Arrays& x) {
    return round(x[0], RoundingMethod::away_from_zero) * x[0] + round(x[0] * 3.0, RoundingMethod::to_nearest_even);
  }, eighths));
  t.push_back(row("shifts", {P::shift_left, P::shift_right_logical, P::shift_right_arithmetic},
                  [](const Arrays& x) {
                    const Array i = astype(floor(x[0] * 8.0), i32), by = astype(floor(abs(x[0]) * 2.0), i32);
                    const Array sum = shift_left(i, by) + shift_right_logical(i, by) + shift_right_arithmetic(i, by);
                    return astype(sum, x[0].dtype()) * x[0];
                  }, eighths));
  // sort moves values (distinct ones: away from the ties where it has a kink); argsort is
  // piecewise constant; top_k and two-key sorts carry a second operand along.
  t.push_back(row("sort", {P::sort}, [](const Arrays& x) { return sort(x[0], 1); }, spread_gen(s)));
  t.push_back(row("sort_axis0_carry", {P::sort}, [](const Arrays& x) { return sort(std::vector<Array>{x[0], x[1]}, 0, 1)[1]; },
                  [s](DType d, Rng& r) { return Arrays{spread(s, d, r), uniform(s, d, r, -2, 2)}; }));
  t.push_back(row("argsort", {P::sort}, [](const Arrays& x) { return astype(argsort(x[0]), x[0].dtype()) * x[0]; }, spread_gen(s)));
  t.push_back(row("top_k", {P::top_k}, [](const Arrays& x) { return top_k(x[0], 2).first; }, spread_gen(s)));
  t.push_back(row("argmax", {P::argmax, P::convert_element_type},
                  [](const Arrays& x) { return astype(argmax(x[0], 1), x[0].dtype()); }, spread_gen(s), Kind::zero_gradient));
  t.push_back(row("argmin", {P::argmin, P::convert_element_type},
                  [](const Arrays& x) { return astype(argmin(x[0], 0), x[0].dtype()); }, spread_gen(s), Kind::zero_gradient));
  // all / any / is_finite: bool results (piecewise constant; the operand kept away from 0).
  t.push_back(row("all_any", {P::reduce_and, P::reduce_or},
                  [](const Arrays& x) {
                    return astype(all(x[0] > 0.0, {1}), x[0].dtype()) + astype(any(x[0] > 0.0, {1}), x[0].dtype());
                  },
                  away_gen(s), Kind::zero_gradient));
  t.push_back(row("is_finite", {P::is_finite}, [](const Arrays& x) { return astype(is_finite(x[0] / x[1]), x[0].dtype()); },
                  [s](DType d, Rng& r) {
                    auto y = uniform_values(shape_size(s), 0.5, 2, r);
                    y[0] = 0.0;  // x / 0: an infinity
                    return Arrays{uniform(s, d, r, 0.5, 2), make(y, s, d)};
                  },
                  Kind::zero_gradient));
  // Cumulative: cumsum is linear (squared, see the top); the others' derivatives are those of
  // associative_scan (cummax/cummin on distinct values, away from ties; cumprod through zeros).
  t.push_back(row("cumsum", {P::cumsum}, squared([](const Arrays& x) { return cumsum(x[0], 1); }), uniform_gen(s, -2, 2)));
  t.push_back(row("cumsum_reverse_axis0", {P::cumsum}, squared([](const Arrays& x) { return cumsum(x[0], 0, true); }),
                  uniform_gen(s, -2, 2)));
  t.push_back(row("cumprod", {P::cumprod}, [](const Arrays& x) { return cumprod(x[0], 1); }, uniform_gen(s, -1.5, 1.5)));
  t.push_back(row("cumprod_zeros_reverse", {P::cumprod}, [](const Arrays& x) { return cumprod(x[0], 1, true); },
                  zeros_at_gen({3, 5}, {2, 6, 8})));
  t.push_back(row("cummax", {P::cummax}, [](const Arrays& x) { return cummax(x[0], 1); }, spread_gen(s)));
  t.push_back(row("cummin_reverse_axis0", {P::cummin}, [](const Arrays& x) { return cummin(x[0], 0, true); }, spread_gen(s)));
  t.push_back(row("cumlogsumexp", {P::cumlogsumexp}, [](const Arrays& x) { return cumlogsumexp(x[0], 1); }, uniform_gen(s, -2, 2)));
  t.push_back(row("cumlogsumexp_reverse", {P::cumlogsumexp}, [](const Arrays& x) { return cumlogsumexp(x[0], 0, true); },
                  uniform_gen({5, 2}, -3, 3)));
  // Convolutions: bilinear (second derivatives are the cross terms); layouts, strides, both
  // dilations, feature and batch groups, and the transposed convolution (lhs dilation).
  using Pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;
  t.push_back(row("conv_nchw_same", {P::conv_general_dilated},
                  [](const Arrays& x) { return conv(x[0], x[1], {1, 1}, "SAME"); }, uniform2_gen({2, 3, 4, 5}, {2, 3, 3, 2}, -1, 1)));
  t.push_back(row("conv_nhwc_strided_dilated_groups", {P::conv_general_dilated},
                  [](const Arrays& x) {
                    return conv_general_dilated(x[0], x[1], {2, 1}, Pairs{{1, 0}, {1, 1}}, {}, {1, 2}, {"NHWC", "HWIO", "NHWC"}, 2);
                  },
                  uniform2_gen({2, 5, 5, 4}, {2, 2, 2, 4}, -1, 1)));
  t.push_back(row("conv_batch_groups", {P::conv_general_dilated},
                  [](const Arrays& x) { return conv_general_dilated(x[0], x[1], {1}, "VALID", {}, {}, {"NCH", "OIH", "NCH"}, 1, 2); },
                  uniform2_gen({4, 2, 5}, {4, 2, 3}, -1, 1)));
  t.push_back(row("conv_transpose", {P::conv_general_dilated},
                  [](const Arrays& x) { return conv_transpose(x[0], x[1], {2}, "SAME"); }, uniform2_gen({2, 3, 2}, {3, 2, 3}, -1, 1)));
  // Window reductions: the sum is linear (squared); max and min on distinct values (no ties: the
  // selected element is locally constant); pools on top of them.
  t.push_back(row("reduce_window_sum", {P::reduce_window_sum},
                  squared([](const Arrays& x) { return reduce_window(x[0], 0.0, WindowOp::add, {2, 2}, {1, 2}, Pairs{{0, 1}, {1, 0}}, {}, {1, 2}); }),
                  uniform_gen({3, 5}, -2, 2)));
  t.push_back(row("reduce_window_sum_base_dilation", {P::reduce_window_sum},
                  squared([](const Arrays& x) { return reduce_window(x[0], 0.0, WindowOp::add, {2, 3}, {2, 1}, Pairs{{1, 0}, {0, 1}}, {2, 1}); }),
                  uniform_gen({3, 4}, -2, 2)));
  t.push_back(row("reduce_window_max", {P::reduce_window_max},
                  [](const Arrays& x) { return reduce_window(x[0], -INFINITY, WindowOp::max, {2, 2}, {1, 2}, Pairs{{1, 0}, {0, 1}}); },
                  spread_gen({4, 5})));
  t.push_back(row("reduce_window_min", {P::reduce_window_min},
                  [](const Arrays& x) { return reduce_window(x[0], INFINITY, WindowOp::min, {3, 1}, {2, 1}, "SAME"); }, spread_gen({5, 3})));
  t.push_back(row("max_pool", {P::reduce_window_max}, [](const Arrays& x) { return max_pool(x[0], {2, 2}, {2, 1}, "SAME"); },
                  spread_gen({1, 4, 3, 2})));
  t.push_back(row("avg_pool", {P::reduce_window_sum, P::div}, [](const Arrays& x) { return avg_pool(x[0], {2, 2}); },
                  uniform_gen({1, 3, 4, 2}, -2, 2)));
  // The select pair (max_pool's tangent and cotangent), bound directly: linear in the first
  // operand (squared), constant in x (distinct values).
  const params::SelectWindow sel{{2, 2}, {1, 2}, {0, 1}, {1, 0}, {1, 1}, {1, 1}, true};
  t.push_back(row("select_and_gather_add", {P::select_and_gather_add},
                  squared([sel](const Arrays& x) { return detail::bind1(P::select_and_gather_add, {x[0], x[1]}, sel); }),
                  [](DType d, Rng& r) { return Arrays{uniform({3, 4}, d, r, -2, 2), spread({3, 4}, d, r)}; }));
  t.push_back(row("select_and_scatter_add", {P::select_and_scatter_add},
                  squared([sel](const Arrays& x) { return detail::bind1(P::select_and_scatter_add, {x[0], x[1]}, sel); }),
                  [](DType d, Rng& r) { return Arrays{uniform({3, 2}, d, r, -2, 2), spread({3, 4}, d, r)}; }));
  t.push_back(row("logsumexp", {P::reduce_max, P::stop_gradient, P::exp, P::reduce_sum, P::log},
                  [](const Arrays& x) { return logsumexp(x[0], {1}); }, uniform_gen(s, -2, 2)));
  t.push_back(row("logsumexp_all", {P::reduce_max, P::exp, P::log}, [](const Arrays& x) { return logsumexp(x[0]); },
                  uniform_gen(s, -2, 2)));
  t.push_back(row("softmax", {P::exp, P::reduce_sum, P::div}, [](const Arrays& x) { return softmax(x[0]); },
                  uniform_gen(s, -2, 2)));
  t.push_back(row("softmax_axis0", {P::exp, P::reduce_sum}, [](const Arrays& x) { return softmax(x[0], 0); },
                  uniform_gen(s, -2, 2)));
  t.push_back(row("log_softmax", {P::exp, P::reduce_sum, P::log}, [](const Arrays& x) { return log_softmax(x[0]); },
                  uniform_gen(s, -2, 2)));

  // ---- shape ops (squared afterwards, see the top) -------------------------------------------
  t.push_back(row("broadcast_in_dim", {P::broadcast_in_dim},
                  squared([](const Arrays& x) { return broadcast_in_dim(x[0], {2, 3, 4}, {1}); }), uniform_gen({3}, -2, 2)));
  t.push_back(row("broadcast_to", {P::broadcast_in_dim},
                  squared([](const Arrays& x) { return broadcast_to(x[0], {2, 3, 4}); }), uniform_gen({3, 1}, -2, 2)));
  t.push_back(row("reshape", {P::reshape}, squared([](const Arrays& x) { return reshape(x[0], {2, 6}); }),
                  uniform_gen(s, -2, 2)));
  t.push_back(row("reshape_infer", {P::reshape}, squared([](const Arrays& x) { return reshape(x[0], {4, -1}); }),
                  uniform_gen({2, 3, 4}, -2, 2)));
  t.push_back(row("flip", {P::rev}, squared([](const Arrays& x) { return flip(x[0], Axes{0, 2}); }), uniform_gen({2, 3, 4}, -2, 2)));
  t.push_back(row("transpose", {P::transpose}, squared([](const Arrays& x) { return transpose(x[0], {2, 0, 1}); }),
                  uniform_gen({2, 3, 4}, -2, 2)));
  t.push_back(row("transpose_reverse", {P::transpose}, squared([](const Arrays& x) { return transpose(x[0]); }),
                  uniform_gen(s, -2, 2)));
  t.push_back(row("squeeze", {P::squeeze}, squared([](const Arrays& x) { return squeeze(x[0], {1}); }),
                  uniform_gen({3, 1, 4, 1}, -2, 2)));
  t.push_back(row("squeeze_all", {P::squeeze}, squared([](const Arrays& x) { return squeeze(x[0]); }),
                  uniform_gen({3, 1, 4, 1}, -2, 2)));
  t.push_back(row("expand_dims", {P::expand_dims}, squared([](const Arrays& x) { return expand_dims(x[0], 1); }),
                  uniform_gen(s, -2, 2)));
  t.push_back(row("expand_dims_last", {P::expand_dims}, squared([](const Arrays& x) { return expand_dims(x[0], -1); }),
                  uniform_gen(s, -2, 2)));
  t.push_back(row("slice", {P::slice}, squared([](const Arrays& x) { return slice(x[0], {0, 1}, {3, 4}); }),
                  uniform_gen({4, 5}, -2, 2)));
  t.push_back(row("slice_strided", {P::slice}, squared([](const Arrays& x) { return slice(x[0], {1, 0}, {6, 5}, {2, 2}); }),
                  uniform_gen({6, 5}, -2, 2)));
  t.push_back(row("slice_in_dim", {P::slice}, squared([](const Arrays& x) { return slice_in_dim(x[0], 1, 3, 1, 1); }),
                  uniform_gen(s, -2, 2)));
  t.push_back(row("pad", {P::pad},
                  squared([](const Arrays& x) {
                    return detail::bind1(P::pad, {x[0], x[1]}, params::Pad{.lo = Ints{1, 0}, .hi = Ints{2, 1}, .interior = Ints{1, 0}});
                  }),
                  uniform2_gen(s, {}, -2, 2)));
  t.push_back(row("pad_negative", {P::pad},
                  squared([](const Arrays& x) {
                    return detail::bind1(P::pad, {x[0], x[1]}, params::Pad{.lo = Ints{-1, 2}, .hi = Ints{0, -2}, .interior = Ints{0, 2}});
                  }),
                  uniform2_gen(s, {}, -2, 2)));
  t.push_back(row("dynamic_slice", {P::dynamic_slice},
                  squared([](const Arrays& x) { return dynamic_slice(x[0], {x[1], x[2]}, {2, 3}); }),
                  [](DType d, Rng& r) { return Arrays{uniform({5, 6}, d, r, -2, 2), i32scalar(2), i32scalar(1)}; }));
  t.push_back(row("dynamic_slice_clamped", {P::dynamic_slice},
                  squared([](const Arrays& x) { return dynamic_slice(x[0], {i32scalar(4), i32scalar(-2)}, {2, 3}); }),
                  uniform_gen({5, 6}, -2, 2)));
  t.push_back(row("dynamic_update_slice", {P::dynamic_update_slice},
                  squared([](const Arrays& x) { return dynamic_update_slice(x[0], x[1], {x[2], x[3]}); }),
                  [](DType d, Rng& r) {
                    return Arrays{uniform({5, 6}, d, r, -2, 2), uniform({2, 3}, d, r, -2, 2), i32scalar(1), i32scalar(5)};
                  }));
  t.push_back(row("concatenate", {P::concatenate},
                  squared([](const Arrays& x) { return concatenate({x[0], x[1], x[2]}, 1); }),
                  [](DType d, Rng& r) {
                    return Arrays{uniform({3, 2}, d, r, -2, 2), uniform({3, 4}, d, r, -2, 2), uniform({3, 1}, d, r, -2, 2)};
                  }));
  t.push_back(row("stack", {P::concatenate, P::expand_dims}, squared([](const Arrays& x) { return stack({x[0], x[1]}, 1); }),
                  uniform2_gen(s, s, -2, 2)));
  t.push_back(row("gather_take", {P::gather},
                  squared([](const Arrays& x) { return take(x[0], i32s({3, -1, 0, 3}, {4}), 0); }),
                  uniform_gen({5, 3}, -2, 2)));
  t.push_back(row("gather_take_2d_indices", {P::gather}, squared([](const Arrays& x) { return take(x[0], x[1], 1); }),
                  [](DType d, Rng& r) { return Arrays{uniform({3, 5}, d, r, -2, 2), i32s({4, 0, 4, 7}, {2, 2})}; }));
  t.push_back(row("take_along_axis", {P::gather},
                  squared([](const Arrays& x) { return take_along_axis(x[0], i32s({4, 0, -1, 2, 2, 1}, {3, 2}), 1); }),
                  uniform_gen({3, 5}, -2, 2)));
  t.push_back(row("take_along_axis_broadcast", {P::gather},
                  squared([](const Arrays& x) { return take_along_axis(x[0], i32s({1, 0, 2, 1}, {1, 4}), 0); }),
                  uniform_gen({3, 4}, -2, 2)));
  // Losses (optax's): compositions; labels are inputs where they are floats.
  t.push_back(row("softmax_cross_entropy", {P::exp, P::log, P::reduce_sum},
                  [](const Arrays& x) { return optim::softmax_cross_entropy(x[0], softmax(x[1])); }, uniform2_gen({3, 4}, {3, 4}, -2, 2)));
  t.push_back(row("softmax_cross_entropy_with_integer_labels", {P::gather, P::exp, P::log},
                  [](const Arrays& x) { return optim::softmax_cross_entropy_with_integer_labels(x[0], i32s({3, 0, 1}, {3})); },
                  uniform_gen({3, 4}, -2, 2)));
  t.push_back(row("sigmoid_binary_cross_entropy", {P::exp, P::log1p},
                  [](const Arrays& x) { return optim::sigmoid_binary_cross_entropy(x[0], logistic(x[1])); },
                  uniform2_gen({2, 3}, {2, 3}, -2, 2)));
  // Normalization layers (nn.hpp): compositions over one axis.
  t.push_back(row("layer_norm", {P::rsqrt, P::reduce_sum},
                  [](const Arrays& x) { return layer_norm(x[0], x[1], x[1] * 0.5, -1, 1e-3); },
                  uniform2_gen({3, 4}, {4}, -2, 2)));
  t.push_back(row("layer_norm_axis0", {P::rsqrt, P::reduce_sum},
                  [](const Arrays& x) { return layer_norm(x[0], x[1], std::nullopt, 0, 1e-3); },
                  uniform2_gen({3, 4}, {3}, -2, 2)));
  t.push_back(row("rms_norm", {P::rsqrt, P::reduce_sum}, [](const Arrays& x) { return rms_norm(x[0], x[1], -1, 1e-3); },
                  uniform2_gen({2, 5}, {5}, -2, 2)));
  t.push_back(row("l2_loss", {P::sub}, [](const Arrays& x) { return optim::l2_loss(x[0], x[1]); }, uniform2_gen({2, 3}, {2, 3}, -2, 2)));
  // Errors away from +-delta (the kink): |e| in [0.1, 0.8] or [1.2, 2] with delta 1.
  t.push_back(row("huber_loss", {P::abs, P::min},
                  [](const Arrays& x) { return optim::huber_loss(x[0], std::nullopt, 1.0); },
                  [](DType d, Rng& r) {
                    auto v = uniform_values(6, 0.1, 0.8, r);
                    for (std::size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? v[i] + 1.1 : v[i]) * (i % 3 ? 1 : -1);
                    return Arrays{make(v, {2, 3}, d)};
                  }));
  t.push_back(row("scatter_add", {P::scatter_add},
                  squared([](const Arrays& x) {
                    return detail::bind1(P::scatter_add, {x[0], i32s({1, 4, 1, 0}, {4}), x[1]}, params::Scatter{.axis = std::int64_t{0}, .fill_or_drop = false});
                  }),
                  uniform2_gen({5, 3}, {4, 3}, -2, 2)));
  t.push_back(row("scatter_add_axis1", {P::scatter_add},
                  squared([](const Arrays& x) {
                    return detail::bind1(P::scatter_add, {x[0], i32s({2, 0, 2}, {3}), x[1]}, params::Scatter{.axis = std::int64_t{1}, .fill_or_drop = false});
                  }),
                  uniform2_gen({2, 4}, {2, 3}, -2, 2)));
  // The scatter family through xj::at (issue 28): repeated rows (1 twice), one outside the axis
  // (-7: dropped, or clamped onto row 0 under clip), two index arrays; gather in fill mode.
  const auto rows5 = [] { return i32s({1, 4, 1, -7, 0}, {5}); };
  t.push_back(row("at_set", {P::scatter}, squared([rows5](const Arrays& x) { return at(x[0], rows5()).set(x[1]); }),
                  uniform2_gen({5, 3}, {5, 3}, -2, 2)));
  t.push_back(row("at_set_clip", {P::scatter},
                  squared([rows5](const Arrays& x) { return at(x[0], rows5()).set(x[1], IndexMode::clip); }),
                  uniform2_gen({5, 3}, {5, 3}, -2, 2)));
  t.push_back(row("at_add_clip", {P::scatter_add},
                  squared([rows5](const Arrays& x) { return at(x[0], rows5()).add(x[1], IndexMode::clip); }),
                  uniform2_gen({5, 3}, {5, 3}, -2, 2)));
  t.push_back(row("at_mul", {P::scatter_mul}, [rows5](const Arrays& x) { return at(x[0], rows5()).mul(x[1]); },
                  uniform2_gen({5, 3}, {5, 3}, -2, 2)));
  // Zero factors among the updates of one row (the product of the others is not a quotient).
  t.push_back(row("at_mul_zero_factors", {P::scatter_mul}, [](const Arrays& x) { return at(x[0], i32s({0, 0, 0, 2}, {4})).mul(x[1]); },
                  [](DType d, Rng& r) {
                    auto u = uniform_values(8, 0.5, 1.5, r);
                    u[0] = u[3] = 0.0;  // row 0, column 0: one zero among three; column 1: one more
                    return Arrays{uniform({3, 2}, d, r, -2, 2), make(u, {4, 2}, d)};
                  }));
  t.push_back(row("at_min", {P::scatter_min}, [rows5](const Arrays& x) { return at(x[0], rows5()).min(x[1]); },
                  spread_pair_gen({5, 3}, {5, 3})));
  t.push_back(row("at_max_clip", {P::scatter_max}, [rows5](const Arrays& x) { return at(x[0], rows5()).max(x[1], IndexMode::clip); },
                  spread_pair_gen({5, 3}, {5, 3})));
  t.push_back(row("at_get_two_axes", {P::gather},
                  squared([](const Arrays& x) { return at(x[0], {i32s({0, 3, -1, 5}, {4}), i32s({2, 0, 1, 1}, {4})}).get(); }),
                  uniform_gen({4, 3, 2}, -2, 2)));
  t.push_back(row("at_add_two_axes", {P::scatter_add},
                  squared([](const Arrays& x) { return at(x[0], {i32s({0, 3, -1, 5}, {4}), i32s({2, 0, 2, 1}, {4})}).add(x[1]); }),
                  uniform2_gen({4, 3, 2}, {4, 2}, -2, 2)));
  t.push_back(row("gather_fill", {P::gather},
                  squared([](const Arrays& x) {
                    return detail::bind1(P::gather, {x[0], i32s({2, 7, -1, -9}, {4})}, params::Gather{.axis = 0, .fill_or_drop = true});
                  }),
                  uniform_gen({5, 3}, -2, 2)));

#ifdef XJAX_GRADCHECK_CUSTOM
  // ---- custom derivatives (correct user rules, so finite differences must agree) --------------
  {
    auto f = custom_jvp([](const Array& x) { return sin(x) * x; },
                        [](const std::tuple<Array>& p, const std::tuple<Array>& dt) {
                          const Array& x = std::get<0>(p);
                          return std::pair{sin(x) * x, std::get<0>(dt) * (cos(x) * x + sin(x))};
                        });
    t.push_back(row("custom_jvp", {P::custom_jvp_call}, [f](const Arrays& x) { return f(x[0]); }, uniform_gen(s, -2, 2)));
  }
  {
    auto f = custom_jvp([](const Array& x, const Array& y) { return x * exp(y); },
                        [](const std::tuple<Array, Array>& p, const std::tuple<Array, Array>& dt) {
                          auto [x, y] = p;
                          auto [dx, dy] = dt;
                          Array out = x * exp(y);
                          return std::pair{out, dx * exp(y) + dy * out};
                        });
    t.push_back(row("custom_jvp_two_args_bcast", {P::custom_jvp_call}, [f](const Arrays& x) { return f(x[0], x[1]); },
                    uniform2_gen({3, 4}, {4}, -1, 1)));
  }
  {
    // Reverse mode only: JAX (and xjax) reject forward mode of a custom_vjp function.
    auto f = custom_vjp([](const Array& x) { return sin(x) * x; },
                        [](const Array& x) { return std::pair{sin(x) * x, x}; },
                        [](const Array& x, const Array& ct) { return std::tuple{ct * (cos(x) * x + sin(x))}; });
    Row r = row("custom_vjp", {P::custom_vjp_call, P::custom_lin}, [f](const Arrays& x) { return f(x[0]); },
                uniform_gen(s, -2, 2));
    r.modes = {rev};
    t.push_back(std::move(r));
  }
#endif
  // name (checkpoint_name) is the identity; its derivative is checked through a product.
  t.push_back(row("checkpoint_name", {P::name}, [](const Arrays& x) { return checkpoint_name(sin(x[0]), "h") * x[0]; },
                  uniform_gen(s, -2, 2)));
  // threefry2x32 (random bits) has no derivative; a dropout mask drawn with it scales x.
  t.push_back(row("dropout_mask", {P::threefry2x32}, [](const Arrays& x) {
    Array keep = random::bernoulli(random::key(3), 0.7, x[0].shape());
    return where(keep, x[0] * x[0], 0.0);
  }, uniform_gen(s, -2, 2)));
  // Linear algebra. Matrices well away from singular: a = x x^T + 3 I (symmetric positive
  // definite, eigenvalues >= 3) for cholesky, 2.5 I + x (diagonal in [1.5, 3.5], off-diagonal in
  // [-1, 1]) for the triangles triangular_solve reads.
  auto identity = [](const Array& like) {
    const Shape s{like.dim(-1), like.dim(-1)};
    return astype(eq(iota(i32, s, 0), iota(i32, s, 1)), like.dtype());
  };
  auto spd = [identity](const Array& x) { return matmul(x, matrix_transpose(x)) + identity(x) * 3.0; };
  t.push_back(row("cholesky", {P::cholesky, P::dot_general}, [spd](const Arrays& x) { return linalg::cholesky(spd(x[0])); },
                  uniform_gen({3, 3}, -1, 1)));
  t.push_back(row("cholesky_batched", {P::cholesky}, [spd](const Arrays& x) { return linalg::cholesky(spd(x[0])); },
                  uniform_gen({2, 4, 4}, -1, 1)));
  t.push_back(row("cholesky_lower_only", {P::cholesky}, [spd](const Arrays& x) { return linalg::cholesky(spd(x[0]), false); },
                  uniform_gen({3, 3}, -1, 1)));
  // Entries above the diagonal that the factorization does not read: their derivative is zero.
  t.push_back(row("cholesky_lower_only_unread_upper", {P::cholesky}, [spd](const Arrays& x) {
    return linalg::cholesky(spd(x[0]) + triu(x[1], 1), false);
  }, uniform2_gen({3, 3}, {3, 3}, -1, 1)));
  struct Solve {
    const char* name;
    linalg::TriangularSolveOptions o;
    Shape a, b;
  };
  for (const Solve& c : {Solve{"triangular_solve_left_lower", {.left_side = true, .lower = true}, {3, 3}, {3, 2}},
                         Solve{"triangular_solve_left_upper_transposed", {.left_side = true, .transpose_a = true}, {3, 3}, {3, 2}},
                         Solve{"triangular_solve_right_lower_unit", {.lower = true, .unit_diagonal = true}, {3, 3}, {2, 3}},
                         Solve{"triangular_solve_right_upper_batched", {.transpose_a = true}, {2, 3, 3}, {2, 4, 3}}}) {
    const linalg::TriangularSolveOptions o = c.o;
    t.push_back(row(c.name, {P::triangular_solve}, [identity, o](const Arrays& x) {
      return linalg::triangular_solve(x[0] + identity(x[0]) * 2.5, x[1], o);
    }, uniform2_gen(c.a, c.b, -1, 1)));
  }
  t.push_back(row("cho_solve", {P::cholesky, P::triangular_solve}, [spd](const Arrays& x) {
    return linalg::cho_solve(linalg::cholesky(spd(x[0])), x[1]);
  }, uniform2_gen({3, 3}, {3}, -1, 1)));
  t.push_back(row("cho_solve_upper_batched", {P::triangular_solve}, [spd](const Arrays& x) {
    return linalg::cho_solve(matrix_transpose(linalg::cholesky(spd(x[0]))), x[1], false);
  }, uniform2_gen({2, 3, 3}, {1, 3, 2}, -1, 1)));
  // LU: 2.5 I + x (diagonal dominant, for rectangular matrices on the first min(m, n) rows), with
  // its rows reversed so that partial pivoting exchanges rows (the dominant entry of each column
  // is unambiguous, away from pivot ties where lu's derivative jumps).
  auto dominant = [](const Array& x) {
    const Shape s{x.dim(-2), x.dim(-1)};
    return x + astype(eq(iota(i32, s, 0), iota(i32, s, 1)), x.dtype()) * 2.5;
  };
  auto reversed_rows = [](const Array& a) {
    const Shape s{a.dim(-2), a.dim(-2)};
    return matmul(astype(iota(i32, s, 0) + iota(i32, s, 1) == a.dim(-2) - 1, a.dtype()), a);
  };
  auto pivoted = [dominant, reversed_rows](const Array& x) { return reversed_rows(dominant(x)); };
  for (const Shape& shape : {Shape{3, 3}, Shape{4, 2}, Shape{2, 4}, Shape{2, 3, 3}}) {
    std::string name = "lu_" + std::to_string(shape[shape.size() - 2]) + "x" + std::to_string(shape.back());
    if (shape.size() == 3) name += "_batched";
    t.push_back(row(name, {P::lu}, [pivoted](const Arrays& x) { return std::get<0>(linalg::lu(pivoted(x[0]))); },
                    uniform_gen(shape, -1, 1)));
  }
  t.push_back(row("solve_vector", {P::lu, P::custom_linear_solve}, [pivoted](const Arrays& x) {
    return linalg::solve(pivoted(x[0]), x[1]);
  }, uniform2_gen({3, 3}, {3}, -1, 1)));
  t.push_back(row("solve_broadcast_batch", {P::lu}, [pivoted](const Arrays& x) {
    return linalg::solve(pivoted(x[0]), x[1]);
  }, uniform2_gen({2, 3, 3}, {3, 2}, -1, 1)));
  for (int trans : {0, 1})
    t.push_back(row(trans == 0 ? "lu_solve" : "lu_solve_transposed", {P::lu, P::lu_pivots_to_permutation}, [pivoted, trans](const Arrays& x) {
      auto [lu, pivots] = linalg::lu_factor(pivoted(x[0]));
      return linalg::lu_solve(lu, pivots, x[1], trans);
    }, uniform2_gen({3, 3}, {3, 2}, -1, 1)));
  // custom_linear_solve: symmetric (cho_solve on the factor of stop_gradient(a)) and iterative
  // (conjugate gradients under while_loop, differentiated by solving again).
  t.push_back(row("solve_pos", {P::custom_linear_solve, P::cholesky}, [spd](const Arrays& x) {
    return linalg::solve(spd(x[0]), x[1], "pos");
  }, uniform2_gen({2, 3, 3}, {2, 3, 2}, -1, 1)));
  t.push_back(row("cg", {P::custom_linear_solve}, [spd](const Arrays& x) {
    const Array a = spd(x[0]);
    return sparse::cg([a](const Array& v) { return matmul(a, v); }, x[1], {.tol = 1e-12});
  }, uniform2_gen({3, 3}, {3}, -1, 1)));
  t.push_back(row("inv", {P::lu}, [pivoted](const Arrays& x) { return linalg::inv(pivoted(x[0])); }, uniform_gen({3, 3}, -1, 1)));
  t.push_back(row("det_batched", {P::lu}, [pivoted](const Arrays& x) { return linalg::det(pivoted(x[0])); },
                  uniform_gen({2, 3, 3}, -1, 1)));
  t.push_back(row("slogdet", {P::lu}, [pivoted](const Arrays& x) {
    auto [sign, logabsdet] = linalg::slogdet(pivoted(x[0]) * x[1]);
    return sign * logabsdet;
  }, uniform2_gen({3, 3}, {3, 3}, 0.5, 1)));
  // qr, eigh, svd: every output in one vector. Eigenvectors and singular vectors are taken with
  // the sign that makes their first entry positive (LAPACK's choice is arbitrary; sign() has a zero
  // derivative), on matrices with well-separated eigen- and singular values (2, 4, 6 ... on the
  // diagonal plus 0.3 x).
  // The arrays (each with `batch` leading batch axes) as one vector per batch member.
  auto joined = [](std::int64_t batch, std::initializer_list<Array> xs) {
    std::vector<Array> parts;
    for (const Array& x : xs) {
      Shape s(x.shape().begin(), x.shape().begin() + batch);
      std::int64_t members = 1;
      for (std::int64_t d : s) members *= d;
      s.push_back(x.size() / members);
      parts.push_back(reshape(x, s));
    }
    return concatenate(parts, -1);
  };
  auto first_row_sign = [](const Array& v) { return sign(slice_in_dim(v, 0, 1, 1, -2)); };
  auto separated = [](const Array& x) {
    const Shape s{x.dim(-2), x.dim(-1)};
    const Array i = iota(i32, s, 0);
    return x * 0.3 + astype(i == iota(i32, s, 1), x.dtype()) * astype(i + 1, x.dtype()) * 2.0;
  };
  for (const Shape& shape : {Shape{4, 3}, Shape{3, 3}, Shape{2, 4, 2}})
    t.push_back(row("qr_" + std::to_string(shape[shape.size() - 2]) + "x" + std::to_string(shape.back()) + (shape.size() == 3 ? "_batched" : ""),
                    {P::qr}, [joined, dominant](const Arrays& x) {
                      auto [q, r] = linalg::qr(dominant(x[0]));
                      return joined(x[0].ndim() - 2, {q, r});
                    }, uniform_gen(shape, -1, 1)));
  t.push_back(row("qr_complete_square", {P::qr}, [joined, dominant](const Arrays& x) {
    auto [q, r] = linalg::qr(dominant(x[0]), "complete");
    return joined(0, {q, r});
  }, uniform_gen({3, 3}, -1, 1)));
  for (const Shape& shape : {Shape{3, 3}, Shape{2, 4, 4}})
    t.push_back(row(shape.size() == 3 ? "eigh_batched" : "eigh", {P::eigh}, [joined, first_row_sign, separated](const Arrays& x) {
      auto [w, v] = linalg::eigh(separated(x[0]));
      return joined(x[0].ndim() - 2, {w, v * first_row_sign(v)});
    }, uniform_gen(shape, -1, 1)));
  t.push_back(row("eigh_upper_unsymmetrized", {P::eigh}, [joined, first_row_sign, separated](const Arrays& x) {
    auto [w, v] = linalg::eigh(separated(x[0]), false, false);
    return joined(0, {w, v * first_row_sign(v)});
  }, uniform_gen({3, 3}, -1, 1)));
  for (const Shape& shape : {Shape{4, 3}, Shape{3, 4}, Shape{2, 3, 3}})
    t.push_back(row("svd_" + std::to_string(shape[shape.size() - 2]) + "x" + std::to_string(shape.back()) + (shape.size() == 3 ? "_batched" : ""),
                    {P::svd}, [joined, first_row_sign, separated](const Arrays& x) {
                      auto [u, s, vh] = linalg::svd(separated(x[0]));
                      const Array signs = first_row_sign(u);  // u's column j and vh's row j flip together
                      return joined(x[0].ndim() - 2, {u * signs, s, vh * matrix_transpose(signs)});
                    }, uniform_gen(shape, -1, 1)));
  t.push_back(row("svdvals", {P::svd}, [separated](const Arrays& x) { return linalg::svdvals(separated(x[0])); },
                  uniform_gen({3, 4}, -1, 1)));
  t.push_back(row("norms", {P::svd, P::reduce_max}, [separated](const Arrays& x) {
    const Array m = separated(x[0]);
    return stack({linalg::norm(m), linalg::norm(m, 2), linalg::norm(m, "nuc"), linalg::norm(m, 1), linalg::norm(x[1], 3)});
  }, uniform2_gen({3, 4}, {5}, 0.2, 1)));
  t.push_back(row("matrix_power", {P::dot_general, P::lu}, [pivoted](const Arrays& x) {
    return linalg::matrix_power(x[0], 3) + linalg::matrix_power(pivoted(x[0]), -2);
  }, uniform_gen({3, 3}, -1, 1)));
  t.push_back(row("trace_diagonal_outer", {P::slice, P::reduce_sum}, [](const Arrays& x) {
    return trace(x[0], 1) * diagonal(x[0], -1, 1, 0) + sum(outer(x[1], x[1]));
  }, uniform2_gen({3, 3}, {2}, -1, 1)));
  // The collectives, in a single-process run (xj::distributed::initialize without mpirun), where
  // each reduces to the identity or to a new axis of size 1; their multi-process values and
  // derivatives are tested under mpirun (tests/test_distributed.cpp).
  distributed::initialize();
  t.push_back(row("psum", {P::psum}, [](const Arrays& x) { return psum(sin(x[0])) * x[0]; }, uniform_gen(s, -2, 2)));
  t.push_back(row("pmean_pmax", {P::pmax, P::psum}, [](const Arrays& x) { return pmax(x[0] * x[0]) + pmean(x[0]) * x[0]; },
                  uniform_gen(s, -2, 2)));
  t.push_back(row("all_gather", {P::all_gather}, [](const Arrays& x) { Array g = all_gather(x[0], 1); return g * g; },
                  uniform_gen(s, -2, 2)));
  t.push_back(row("psum_scatter", {P::psum_scatter}, [](const Arrays& x) {
    Array r = psum_scatter(x[0], 1);
    return r * r;
  }, uniform_gen({3, 1, 4}, -2, 2)));
  t.push_back(row("ppermute", {P::ppermute}, [](const Arrays& x) { Array y = ppermute(x[0], {{0, 0}}); return y * sin(y); },
                  uniform_gen(s, -2, 2)));
  // scan: a carried nonlinear recurrence over the rows of x, with stacked outputs.
  t.push_back(row("scan", {P::scan}, [](const Arrays& x) {
    auto body = [](const Array& c, const Array& r) { Array n = sin(c * r) + r; return std::pair{n, n * c}; };
    auto [c, ys] = scan(body, x[1], x[0]);
    return sum(ys, {0}) + c;
  }, uniform2_gen({3, 4}, {4}, -1, 1)));
  // checkpoint: every policy family recomputes or saves; the derivative is the same.
  t.push_back(row("checkpoint", {P::checkpoint}, [](const Arrays& x) {
    auto f = checkpoint([](const Array& a) { return sin(checkpoint_name(sin(a), "s")) * a; });
    return f(x[0]);
  }, uniform_gen(s, -2, 2)));
  t.push_back(row("checkpoint_dots_saveable", {P::checkpoint, P::dot_general}, [](const Arrays& x) {
    auto f = checkpoint([](const Array& a, const Array& w) { return tanh(matmul(a, w)) * a; },
                        {.policy = checkpoint_policies::dots_saveable});
    return f(x[0], x[1]);
  }, uniform2_gen({3, 4}, {4, 4}, -1, 1)));
  // cond: both branches differentiable; the predicate depends on the input (values avoid the switch).
  t.push_back(row("cond", {P::cond}, [](const Arrays& x) {
    Array pred = sum(x[0]) > 0.0;
    return cond(pred, [](const Array& a) { return sin(a) * a; }, [](const Array& a) { return cos(a) + a * a; }, x[0]);
  }, uniform_gen(s, -2, 2)));
  // scan with the binomial checkpoint schedule: reverse mode runs revolve_fwd, revolve_lin's
  // transpose revolve_bwd; second order differentiates their expansions.
  t.push_back(row("scan_binomial", {P::scan, P::revolve_fwd, P::revolve_lin, P::revolve_bwd}, [](const Arrays& x) {
    auto body = [](const Array& c, const Array& w) { return std::pair{sin(c * w) + 0.5 * c, cos(c)}; };
    auto [c, ys] = scan(body, x[1], x[0], {.checkpoints = scan_checkpoints::binomial(2)});
    return c * c + sum(ys, {0});
  }, uniform2_gen({5, 3}, {3}, -1, 1)));
  // while_loop with the online schedule: reverse mode (first order) runs online_fwd, revolve_lin
  // and revolve_bwd with the trip count known at run time.
  {
    Row r = row("while_loop_online", {P::while_, P::online_fwd, P::revolve_lin, P::revolve_bwd}, [](const Arrays& x) {
      auto [i, y] = while_loop([](const std::pair<Array, Array>& c) { return c.first < 4.0; },
                               [](const std::pair<Array, Array>& c) { return std::pair{c.first + 1.0, sin(c.second) * c.second}; },
                               std::pair{zeros({}, x[0].dtype()), x[0]}, {.checkpoints = scan_checkpoints::online(2)});
      (void)i;
      return y;
    }, uniform_gen(s, -2, 2));
    r.max_order = 1;
    r.batch_grad = false;
    t.push_back(std::move(r));
  }
  // while_loop: forward mode only (reverse mode of while_loop is an error, as in JAX).
  {
    Row r = row("while_loop", {P::while_}, [](const Arrays& x) {
      auto [i, y] = while_loop([](const std::pair<Array, Array>& c) { return c.first < 3.0; },
                               [](const std::pair<Array, Array>& c) { return std::pair{c.first + 1.0, sin(c.second) * c.second}; },
                               std::pair{zeros({}, x[0].dtype()), x[0]});
      (void)i;
      return y;
    }, uniform_gen(s, -2, 2));
    r.modes = {fwd};
    t.push_back(std::move(r));
  }
  return t;
}

std::uint32_t fnv1a(const std::string& s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h;
}

}  // namespace

std::vector<Array> Row::inputs(DType dtype) const {
  std::mt19937 rng(fnv1a(name));
  return gen(dtype, rng);
}

const std::vector<Row>& table() {
  static const std::vector<Row> rows = build();
  return rows;
}

CheckGradsOptions options(DType dtype, int order, std::vector<Mode> modes) {
  CheckGradsOptions o;
  o.order = order;
  o.modes = std::move(modes);
  o.per_element = true;  // stricter than JAX's tolerances scaled by the array's size
  if (dtype == f32) {
    o.eps = 2e-3;
    o.atol = 1e-2;
    o.rtol = 1e-2;
  }
  return o;
}

detail::FlatFn flat(const Row& row) {
  Fn fn = row.fn;
  return [fn](std::span<const Array> xs) { return std::vector<Array>{fn(std::vector<Array>(xs.begin(), xs.end()))}; };
}

double max_abs_derivative(const Row& row, DType dtype) {
  std::vector<Array> x = row.inputs(dtype);
  std::mt19937 rng(fnv1a(row.name) + 1);
  std::normal_distribution<double> normal;
  auto random_like = [&](const Array& a) {
    if (!is_floating(a.dtype())) return zeros(a.shape(), a.dtype());
    std::vector<double> v(static_cast<std::size_t>(a.size()));
    for (auto& e : v) e = normal(rng);
    return make(v, a.shape(), a.dtype());
  };
  auto largest = [](const std::vector<Array>& as) {
    double m = 0;
    for (const auto& a : as)
      if (is_floating(a.dtype()))
        for (double e : a.to_vector<double>()) m = std::max(m, std::abs(e));
    return m;
  };
  Fn fn = row.fn;
  std::vector<Array> v;
  for (const auto& a : x) v.push_back(random_like(a));
  auto [out, tout] = jvp([fn](const std::vector<Array>& xs) { return fn(xs); }, std::tuple{x}, std::tuple{v});
  auto [out2, f_vjp] = vjp([fn](const std::vector<Array>& xs) { return fn(xs); }, x);
  auto [ct] = f_vjp(random_like(out2));
  return std::max(largest({tout}), largest(ct));
}

std::vector<Primitive> traced_primitives(const Row& row) {
  std::vector<Array> x = row.inputs(f32);
  std::vector<ShapedArray> avals;
  for (const auto& a : x) avals.push_back(a.aval());
  std::vector<Primitive> ps;
  ClosedJaxpr j = detail::trace_flat(flat(row), avals);
  for (const auto& e : j->eqns) ps.push_back(e.prim);
  bool all = std::all_of(row.covers.begin(), row.covers.end(),
                         [&](Primitive p) { return std::find(ps.begin(), ps.end(), p) != ps.end(); });
  if (all) return ps;
  // Primitives that AD emits (custom_lin) or that sit inside a checkpoint appear in the
  // linearization: its known and linear parts, as reverse mode builds them (forward mode the user
  // asks for, such as linearize, rejects custom_vjp functions).
  detail::AdModeScope reverse(detail::AdMode::reverse);
  detail::Linearized lin = detail::linearize_jaxpr(j, std::vector<bool>(j->invars.size(), true));
  for (const auto* part : {&lin.pe.known, &lin.pe.staged})
    for (const auto& e : (*part)->eqns) ps.push_back(e.prim);
  // Primitives that transposition emits (revolve_bwd).
  std::vector<bool> linear_in(lin.pe.num_res, false);
  linear_in.resize(lin.pe.staged->invars.size(), true);
  ClosedJaxpr transposed = detail::transpose_jaxpr(lin.pe.staged, linear_in);
  for (const auto& e : transposed->eqns) ps.push_back(e.prim);
  return ps;
}

namespace {
double max_error(const Array& got, const Array& want) {
  if (got.shape() != want.shape()) return std::numeric_limits<double>::infinity();
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double e = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    e = std::max(e, std::abs(g[i] - w[i]) / (1.0 + std::abs(w[i])));
    if (std::isnan(g[i]) != std::isnan(w[i])) e = std::numeric_limits<double>::infinity();
  }
  return e;
}
}  // namespace

double batching_tolerance(DType dtype) { return dtype == f32 ? 1e-5 : 1e-12; }

BatchingCheck batching_check(const Row& row, DType dtype, unsigned seed, std::int64_t batch_size) {
  std::mt19937 pick(fnv1a(row.name) ^ (seed * 2654435761u));
  std::vector<std::vector<Array>> members;
  for (std::int64_t b = 0; b < batch_size; ++b) {
    std::mt19937 rng(fnv1a(row.name) + static_cast<std::uint32_t>(7919 * b) + seed);
    members.push_back(row.gen(dtype, rng));
  }
  const std::size_t n = members[0].size();
  std::vector<std::optional<std::int64_t>> axes(n);
  bool any = false;
  for (std::size_t k = 0; k < n; ++k)
    if (std::uniform_real_distribution<double>(0, 1)(pick) < 0.7) {
      axes[k] = std::uniform_int_distribution<std::int64_t>(0, members[0][k].ndim())(pick);
      any = true;
    }
  if (!any) axes[pick() % n] = 0;
  BatchingCheck out;
  out.in_axes = "(";
  for (std::size_t k = 0; k < n; ++k)
    out.in_axes += (k ? ", " : "") + (axes[k] ? std::to_string(*axes[k]) : std::string("None"));
  out.in_axes += n == 1 ? ",)" : ")";
  std::vector<Array> stacked;
  for (std::size_t k = 0; k < n; ++k) {
    if (!axes[k]) {
      for (auto& m : members) m[k] = members[0][k];  // one value shared by every member
      stacked.push_back(members[0][k]);
      continue;
    }
    std::vector<Array> parts;
    for (const auto& m : members) parts.push_back(m[k]);
    stacked.push_back(stack(parts, *axes[k]));
  }
  Fn fn = row.fn;
  auto f = [fn](const std::vector<Array>& xs) { return fn(xs); };
  std::tuple<std::vector<std::optional<std::int64_t>>> in_axes{axes};
  std::vector<Array> want;
  for (const auto& m : members) want.push_back(fn(m));
  out.value_error = max_error(vmap(f, in_axes)(stacked), stack(want));
  bool reverse = std::find(row.modes.begin(), row.modes.end(), rev) != row.modes.end();
  if (row.kind == Kind::differentiable && reverse && row.batch_grad) {
    out.grad_checked = true;
    auto g = grad([fn](const std::vector<Array>& xs) { return sum(fn(xs)); }, {.allow_int = true});
    std::vector<Array> got = vmap(g, in_axes)(stacked);
    std::vector<std::vector<Array>> per_member;
    for (const auto& m : members) per_member.push_back(g(m));
    for (std::size_t k = 0; k < n; ++k) {
      if (!is_floating(stacked[k].dtype())) continue;
      std::vector<Array> parts;
      for (const auto& pm : per_member) parts.push_back(pm[k]);
      out.grad_error = std::max(out.grad_error, max_error(got[k], stack(parts)));
    }
  }
  return out;
}

}  // namespace xjax::gradcheck

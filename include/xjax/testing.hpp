// testing.hpp: check_grads, with jax.test_util.check_grads' semantics.
#pragma once
#include <optional>
#include <vector>

#include "xjax/transforms.hpp"

namespace xjax {

enum class Mode { fwd, rev };
inline constexpr Mode fwd = Mode::fwd;
inline constexpr Mode rev = Mode::rev;

struct CheckGradsOptions {
  int order = 2;
  std::vector<Mode> modes = {fwd, rev};
  /// Tolerances as JAX's check_close applies them: unset, JAX's default_gradient_tolerance for
  /// the dtypes of the two arrays compared (the larger of the two: f64 1e-5, f32 2e-3, f16 1e-2,
  /// bf16 1e-1); either way multiplied by the compared array's size (JAX's
  /// _assert_numpy_close), so |got - expected| <= n atol + n rtol |expected| per element.
  std::optional<double> atol{};
  std::optional<double> rtol{};
  /// Finite-difference step (JAX's EPS = 1e-4 when unset).
  std::optional<double> eps{};
  /// xjax's extension: true compares each element against atol + rtol |expected| without the
  /// scaling by size (a stricter check; xjax's own gradcheck table uses it).
  bool per_element = false;
};

namespace detail {
void check_grads_flat(const FlatFn& f, std::vector<Array> args, const CheckGradsOptions& opts);
}

/// Checks f's derivatives at args against central finite differences along random directions:
/// fwd compares jvp with the difference quotient, rev compares <vjp(u), v> with <u, jvp(v)>,
/// recursing to `order`. Throws xj::GradCheckError stating order, mode, and the element furthest
/// past its tolerance (the largest discrepancy) with its expected and got values.
template <class F, class... Args>
void check_grads(F f, const std::tuple<Args...>& args, CheckGradsOptions opts = {}) {
  detail::FlatArgs fa = std::apply([](const auto&... a) { return detail::flatten_args(a...); }, args);
  auto flat = detail::flat_fn<F, Args...>(f, fa.defs, nullptr);
  detail::check_grads_flat(flat, fa.leaves, opts);
}

}  // namespace xjax

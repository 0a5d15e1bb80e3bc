// gradcheck_table.hpp: the numeric gradient-check suite's table. One row per differentiable
// primitive and user op (and per non-differentiable primitive, marked so): how to build the op
// from xj::Array inputs, and a deterministic generator of inputs inside the op's domain. The
// doctest suite (test_gradcheck.cpp) and the installed `xjax-gradcheck` program both run it.
// docs/gradcheck.md explains the tolerances and how to add a row.
#pragma once
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "xjax/xjax.hpp"

namespace xjax::gradcheck {

/// What a row checks.
enum class Kind {
  /// check_grads at orders 1 and 2, fwd and rev, against central finite differences.
  differentiable,
  /// The op is piecewise constant (comparisons, sign, argmax, float->int, iota): its jvp tangent
  /// and vjp cotangent must be exactly zero, and check_grads must agree (finite differences are 0
  /// away from the jumps, which the generator avoids).
  zero_gradient,
  /// stop_gradient: AD must give exactly zero although finite differences see the identity, so
  /// only the exact-zero check runs.
  blocked,
};

using Fn = std::function<Array(const std::vector<Array>&)>;
/// Inputs of the given float dtype (integer operands such as indices keep their own dtype).
using Gen = std::function<std::vector<Array>(DType, std::mt19937&)>;

struct Row {
  std::string name;
  std::vector<Primitive> covers;  // the primitives this row exercises (checked against its jaxpr)
  Fn fn;
  Gen gen;
  Kind kind = Kind::differentiable;
  /// The modes this row is checked in (custom_vjp functions have no forward mode, as in JAX).
  std::vector<Mode> modes = {fwd, rev};
  /// The highest order checked (a while_loop's online reverse mode differentiates once).
  int max_order = 2;
  /// Whether the batching oracle also checks vmap(grad) (not for a while_loop's online reverse
  /// mode, whose vmap is a TransformError).
  bool batch_grad = true;

  /// The row's inputs for `dtype`, from an RNG seeded by the row's name (deterministic).
  std::vector<Array> inputs(DType dtype) const;
};

/// Every row, in a fixed order.
const std::vector<Row>& table();

/// The dtypes and orders every row is checked at.
inline const std::vector<DType> dtypes = {f32, f64};
inline const std::vector<int> orders = {1, 2};

/// check_grads options for a dtype (docs/gradcheck.md, "Tolerances").
/// f64: check_grads' defaults (eps 1e-4, atol = rtol = 1e-5, JAX's).
/// f32: eps 2e-3, atol = rtol = 1e-2. With eps 1e-4 the f32 rounding of f(x +- eps v) alone puts
/// ~ulp(f)/eps ~ 1e-3 relative error on the difference quotient (this table's worst: 5.2e-3,
/// over the 2e-3 default); the truncation error grows as eps^2 instead. The table's worst f32
/// error measured at eps 1e-4 / 3e-4 / 1e-3 / 2e-3 / 1e-2 was 5.2e-3 / 1.8e-3 / 9.4e-4 / 3.8e-4 /
/// 9.5e-3, so eps = 2e-3; 1e-2 tolerances are what JAX's own float32 gradient tests use.
CheckGradsOptions options(DType dtype, int order, std::vector<Mode> modes);

/// The row's function as a function of the flat list of its inputs.
detail::FlatFn flat(const Row& row);

/// For zero_gradient / blocked rows: the largest |tangent| of jvp along random directions and
/// |cotangent| of vjp of random cotangents (0 when the rule is right).
double max_abs_derivative(const Row& row, DType dtype);

/// The primitives in the row's jaxpr (traced at its f32 inputs), for the coverage test.
std::vector<Primitive> traced_primitives(const Row& row);

/// The batching oracle: vmap of the row's function over `batch_size` members, each input batched
/// along a random axis or not at all (at least one batched; drawn from `seed`), against the
/// function applied to each member and stacked; and, for rows differentiable in reverse mode,
/// vmap(grad(sum of f)) against each member's gradient. Errors are max |got - want| / (1 + |want|).
struct BatchingCheck {
  std::string in_axes;  // e.g. "(0, None, 2)"
  double value_error = 0;
  double grad_error = 0;  // 0 when not checked
  bool grad_checked = false;
};
BatchingCheck batching_check(const Row& row, DType dtype, unsigned seed, std::int64_t batch_size = 3);
/// The largest error batching_check may report for a dtype (rounding of batched kernels only).
double batching_tolerance(DType dtype);

}  // namespace xjax::gradcheck

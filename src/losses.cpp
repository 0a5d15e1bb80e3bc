// losses.cpp: the losses of losses.hpp as compositions of ops (optax's formulas, read from
// optax/losses/_classification.py and _regression.py and written here from the math).
#include "xjax/losses.hpp"

#include <limits>
#include <string>

#include "xjax/nn.hpp"
#include "xjax/ops.hpp"

namespace xjax::optim {
namespace {

void same_shape(const char* fn, const Array& a, const Array& b, const std::source_location& loc) {
  if (a.shape() != b.shape())
    throw ShapeError(std::string(fn) + "(" + a.aval().str() + ", " + b.aval().str() + "): the operands' shapes differ (at " +
                     format_location(loc) + ")");
}

// optax broadcasts the labels of the cross entropies and huber_loss's targets (its l2_loss /
// squared_error asserts equal shapes).
void broadcastable(const char* fn, const Array& a, const Array& b, const std::source_location& loc) {
  try {
    (void)broadcast_shapes(a.shape(), b.shape());
  } catch (const ShapeError&) {
    throw ShapeError(std::string(fn) + "(" + a.aval().str() + ", " + b.aval().str() + "): the operands' shapes do not broadcast (at " +
                     format_location(loc) + ")");
  }
}

// optax asserts float predictions and logits (chex.assert_type): an integer error made 0.5 e^2 an
// integer 0, integer logits reached logsumexp's integer path.
void require_floats(const char* fn, const char* what, const Array& x, const std::source_location& loc) {
  if (!is_floating(x.dtype()))
    throw TypeError(std::string(fn) + ": " + what + " must be floats (as optax's), got " + x.aval().str() + " (at " +
                    format_location(loc) + ")");
}

Array error_of(const Array& predictions, const std::optional<Array>& targets, const char* fn, bool broadcasts,
               const std::source_location& loc) {
  require_floats(fn, "predictions", predictions, loc);
  if (!targets) return predictions;
  if (broadcasts)
    broadcastable(fn, predictions, *targets, loc);
  else
    same_shape(fn, predictions, *targets, loc);
  return sub(predictions, *targets, loc);
}

}  // namespace

Array softmax_cross_entropy(const Array& logits, const Array& labels, std::source_location loc) {
  broadcastable("softmax_cross_entropy", logits, labels, loc);
  return neg(sum(mul(labels, log_softmax(logits, -1, loc), loc), {-1}, false, loc), loc);
}

Array softmax_cross_entropy_with_integer_labels(const Array& logits, const Array& labels, std::source_location loc) {
  Shape rows = logits.shape();
  if (!rows.empty()) rows.pop_back();
  if (logits.ndim() == 0 || labels.shape() != rows)
    throw ShapeError("softmax_cross_entropy_with_integer_labels(" + logits.aval().str() + ", " + labels.aval().str() +
                     "): labels must have the logits' shape without its last (class) axis (at " + format_location(loc) + ")");
  require_floats("softmax_cross_entropy_with_integer_labels", "logits", logits, loc);
  // logsumexp - the label's logit, both of the logits shifted by their row max (a constant: the
  // difference does not depend on it), so that large logits lose no precision to cancellation.
  const Array shifted = sub(logits, stop_gradient(max(logits, {-1}, true, loc), loc), loc);
  Array picked = take_along_axis(shifted, expand_dims(labels, -1, loc), -1, loc);
  const Array loss = sub(logsumexp(shifted, {-1}, false, loc), squeeze(picked, {-1}, loc), loc);
  // A label outside [-classes, classes) gives NaN, as optax's (jnp's take_along_axis counts a
  // negative index from the end and fills what it reads out of bounds with NaN; take_along_axis
  // here clamps, which gave the last class's loss).
  const Array label = astype(labels, i64, loc);
  const std::int64_t classes = logits.dim(-1);
  const Array in_range = logical_and(ge(label, scalar(-classes, i64), loc), lt(label, scalar(classes, i64), loc), loc);
  return where(in_range, loss, std::numeric_limits<double>::quiet_NaN(), loc);
}

// optax's: -l log sigmoid(x) - (1 - l) log sigmoid(-x), float logits, the labels converted to
// their dtype (a bf16 loss stays bf16, f32 logits with f64 labels f32; promoting them widened the
// loss and its gradient). softplus(x) - l x, the same value in exact arithmetic, cancelled for a
// confident correct positive (label 1, logit 20: 0 in f32, optax's 2.1e-9, and a zero gradient).
Array sigmoid_binary_cross_entropy(const Array& logits, const Array& labels, std::source_location loc) {
  broadcastable("sigmoid_binary_cross_entropy", logits, labels, loc);
  require_floats("sigmoid_binary_cross_entropy", "logits", logits, loc);
  const Array l = astype(labels, logits.dtype(), loc);
  const Array log_p = log_sigmoid(logits, loc), log_not_p = log_sigmoid(neg(logits, loc), loc);
  // -(l log_p + (1 - l) log_not_p): the same bits as -l log_p - (1 - l) log_not_p, one op fewer
  return neg(add(mul(l, log_p, loc), mul(sub(scalar_like(1.0, l), l, loc), log_not_p, loc), loc), loc);
}

Array l2_loss(const Array& predictions, const std::optional<Array>& targets, std::source_location loc) {
  const Array e = error_of(predictions, targets, "l2_loss", false, loc);
  return mul(square(e, loc), scalar_like(0.5, e), loc);
}

Array huber_loss(const Array& predictions, const std::optional<Array>& targets, double delta, std::source_location loc) {
  const Array e = error_of(predictions, targets, "huber_loss", true, loc);
  const Array size = abs(e, loc);
  const Array quadratic = minimum(size, scalar_like(delta, e), loc);
  const Array linear = sub(size, quadratic, loc);  // |e| - delta beyond delta, else 0
  return add(mul(square(quadratic, loc), scalar_like(0.5, e), loc), mul(linear, scalar_like(delta, e), loc), loc);
}

}  // namespace xjax::optim

// losses.hpp: the losses of a training loop, with optax's names and semantics (optax/losses), in
// `xj::optim`. Each is a short composition of ops written in its numerically stable form, so
// logits of any finite magnitude give finite values and gradients. Reductions are the caller's:
// like optax, each returns one loss per example (the last axis reduced where there is a class
// axis), to be averaged or summed as the training loop wants.
#pragma once
#include <optional>
#include <source_location>

#include "xjax/array.hpp"

namespace xjax::optim {

/// -sum(labels * log_softmax(logits), axis=-1): labels a probability distribution per row
/// (broadcast against the logits, as optax's).
Array softmax_cross_entropy(const Array& logits, const Array& labels,
                            std::source_location loc = std::source_location::current());
/// logsumexp(logits, -1) - logits[..., label]: labels integer class indices, one per row
/// (logits' shape without its last axis). Its gradient is softmax(logits) - one_hot(labels),
/// and the residual reverse mode keeps is the softmax-sized exp, not a one-hot matrix. A negative
/// label counts from the end; one outside [-classes, classes) gives NaN, as optax's.
Array softmax_cross_entropy_with_integer_labels(const Array& logits, const Array& labels,
                                                std::source_location loc = std::source_location::current());
/// -labels log(sigmoid(logits)) - (1 - labels) log(1 - sigmoid(logits)) elementwise, computed as
/// softplus(logits) - labels * logits (finite for any finite logits); float logits, the labels
/// converted to their dtype and broadcast (optax's).
Array sigmoid_binary_cross_entropy(const Array& logits, const Array& labels,
                                   std::source_location loc = std::source_location::current());
/// 0.5 (predictions - targets)^2 elementwise (targets default to zeros; shapes equal, as optax's
/// squared_error asserts).
Array l2_loss(const Array& predictions, const std::optional<Array>& targets = std::nullopt,
              std::source_location loc = std::source_location::current());
/// Huber loss elementwise, optax's: 0.5 e^2 where |e| <= delta, else delta (|e| - 0.5 delta), with
/// e = predictions - targets (targets default to zeros, or broadcast against the predictions).
Array huber_loss(const Array& predictions, const std::optional<Array>& targets = std::nullopt, double delta = 1.0,
                 std::source_location loc = std::source_location::current());

}  // namespace xjax::optim

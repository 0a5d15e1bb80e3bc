// optim.hpp: optimizers with optax's model and names, in `xj::optim`. A GradientTransformation is
// a pair of pure functions, init(params) -> state and update(updates, state, params) ->
// {updates, state}; states are pytrees (a flat std::vector of arrays), so a whole training step
// can be jitted (and its parameters and state donated). Transformations compose with chain();
// apply_updates adds the final updates to the parameters. Each rule is written from optax's
// documentation and the papers (Adam: Kingma & Ba 2015; AdamW: Loshchilov & Hutter 2019; Lion:
// Chen et al. 2023), on the leaves of the parameter tree.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "xjax/detail/function.hpp"
#include "xjax/pytree.hpp"

namespace xjax::optim {

/// A schedule: the step count (an i32 rank-0 array, traced under jit) to a value (an f64 rank-0
/// array; the rules convert it to each leaf's dtype).
using Schedule = std::function<Array(const Array& count)>;

/// `value` at every step.
Schedule constant_schedule(double value);
/// From init_value to end_value linearly over transition_steps steps, starting at
/// transition_begin (init_value before, end_value after; a negative transition_begin is 0, as
/// optax's).
Schedule linear_schedule(double init_value, double end_value, std::int64_t transition_steps,
                         std::int64_t transition_begin = 0);
/// init_value * ((1 - alpha) * (0.5 (1 + cos(pi min(t, decay_steps) / decay_steps)))^exponent + alpha).
Schedule cosine_decay_schedule(double init_value, std::int64_t decay_steps, double alpha = 0.0, double exponent = 1.0);
/// Linear warmup from init_value to peak_value over warmup_steps, then cosine decay to end_value
/// at decay_steps (decay_steps counts the warmup, as optax's).
Schedule warmup_cosine_decay_schedule(double init_value, double peak_value, std::int64_t warmup_steps,
                                      std::int64_t decay_steps, double end_value = 0.0, double exponent = 1.0);

/// A learning rate (or other hyperparameter): a number or a schedule.
using ScalarOrSchedule = std::variant<double, Schedule>;

/// An optimizer's state: a flat list of arrays (step counts, moments per leaf). A pytree. Step
/// counts are i32 and stay at 2^31 - 1 once there (optax's safe_int32_increment).
using OptState = std::vector<Array>;
using Leaves = std::vector<Array>;

/// Which leaves weight decay applies to, by key path (dotted_path: "layers[0].W"); unset: all.
using Mask = std::function<bool(const std::string& path)>;

/// The leaves' view of a transformation (what chain composes). update gets the key path of each
/// leaf (for masks) and the parameters (empty when the caller gave none).
struct LeafRule {
  /// How many arrays the state holds for parameters of `num_leaves` leaves.
  std::function<std::size_t(std::size_t num_leaves)> state_size;
  std::function<OptState(const Leaves& params)> init;
  std::function<std::pair<Leaves, OptState>(const Leaves& updates, const OptState& state, const Leaves& params,
                                            const std::vector<std::string>& paths)>
      update;
};

namespace detail {
/// The dotted key path of every leaf of a structure (in flatten order).
std::vector<std::string> leaf_paths(const TreeDef& def);
[[noreturn]] void tree_mismatch_in(const char* fn, const std::string& difference);
}  // namespace detail

/// optax.GradientTransformation on pytrees of arrays.
class GradientTransformation {
 public:
  explicit GradientTransformation(LeafRule rule) : rule_(std::move(rule)) {}
  /// The initial state for parameters `params`.
  template <class P> OptState init(const P& params) const {
    std::vector<Array> leaves;
    TreeDef def;
    PyTree<P>::flatten(params, leaves, def);
    return rule_.init(leaves);
  }
  /// The transformed updates (same structure as `updates`) and the new state. `params` is needed
  /// by weight decay (adamw, lion, add_decayed_weights).
  template <class P> std::pair<P, OptState> update(const P& updates, const OptState& state, const P& params) const {
    return update_impl(updates, state, &params);
  }
  template <class P> std::pair<P, OptState> update(const P& updates, const OptState& state) const {
    return update_impl(updates, state, static_cast<const P*>(nullptr));
  }
  const LeafRule& rule() const { return rule_; }

 private:
  template <class P> std::pair<P, OptState> update_impl(const P& updates, const OptState& state, const P* params) const {
    std::vector<Array> u, p;
    TreeDef def, pdef;
    PyTree<P>::flatten(updates, u, def);
    if (params) {
      PyTree<P>::flatten(*params, p, pdef);
      if (pdef != def) detail::tree_mismatch_in("update", xjax::detail::tree_difference(pdef, def));
    }
    auto [out, new_state] = rule_.update(u, state, p, detail::leaf_paths(def));
    return {tree_unflatten<P>(def, out), std::move(new_state)};
  }
  LeafRule rule_;
};

/// Transformations applied in order, each to the updates of the one before; the state is theirs
/// concatenated.
GradientTransformation chain(std::vector<GradientTransformation> transforms);

// Building blocks (optax's names).
// Positional parameters in optax's order (a port's positional call means what it meant there);
// optax's keyword-only parameters (nesterov of adam) and rmsprop's bias_correction are not offered.
/// Adam's update direction: bias-corrected first moment over (sqrt(second moment + eps_root) + eps).
/// `mu_dtype`: the dtype the first moment is kept in (the update reads it before it is rounded).
GradientTransformation scale_by_adam(double b1 = 0.9, double b2 = 0.999, double eps = 1e-8, double eps_root = 0.0,
                                     std::optional<DType> mu_dtype = std::nullopt);
/// RMSProp's: g / sqrt(nu + eps), nu the decaying mean of g^2 (eps_in_sqrt false: g / (sqrt(nu) + eps)).
GradientTransformation scale_by_rms(double decay = 0.9, double eps = 1e-8, double initial_scale = 0.0, bool eps_in_sqrt = true);
/// Centered RMSProp's: g / sqrt(nu - mu^2 + eps), mu the decaying mean of g (eps_in_sqrt false:
/// g / (sqrt(nu - mu^2) + eps)).
GradientTransformation scale_by_stddev(double decay = 0.9, double eps = 1e-8, double initial_scale = 0.0,
                                       bool eps_in_sqrt = true);
/// Lion's: sign((1 - b1) g + b1 mu), then mu <- b2 mu + (1 - b2) g (kept in `mu_dtype` when given).
GradientTransformation scale_by_lion(double b1 = 0.9, double b2 = 0.99, std::optional<DType> mu_dtype = std::nullopt);
/// Momentum: t <- g + decay t; the update is t (nesterov: g + decay t).
GradientTransformation trace(double decay, bool nesterov = false);
/// updates + weight_decay * params on the leaves the mask selects.
GradientTransformation add_decayed_weights(double weight_decay, Mask mask = {});
/// updates * step_size_fn(count), count the number of updates so far.
GradientTransformation scale_by_schedule(Schedule step_size_fn);
/// updates * -learning_rate (a number, or a schedule of the step count).
GradientTransformation scale_by_learning_rate(ScalarOrSchedule learning_rate);
/// updates * factor.
GradientTransformation scale(double factor);
/// Scales all updates by max_norm / global_norm when the global norm exceeds max_norm (computed
/// in the norm's dtype, f32 or wider, and rounded to each leaf's).
GradientTransformation clip_by_global_norm(double max_norm);

// Optimizers.
GradientTransformation sgd(ScalarOrSchedule learning_rate, double momentum = 0.0, bool nesterov = false);
GradientTransformation adam(ScalarOrSchedule learning_rate, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8,
                            double eps_root = 0.0, std::optional<DType> mu_dtype = std::nullopt);
/// Adam with decoupled weight decay (applied to the leaves `mask` selects, all when unset).
GradientTransformation adamw(ScalarOrSchedule learning_rate, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8,
                             double eps_root = 0.0, std::optional<DType> mu_dtype = std::nullopt, double weight_decay = 1e-4,
                             Mask mask = {});
/// momentum 0: none (optax's None).
GradientTransformation rmsprop(ScalarOrSchedule learning_rate, double decay = 0.9, double eps = 1e-8,
                               double initial_scale = 0.0, bool eps_in_sqrt = true, bool centered = false,
                               double momentum = 0.0, bool nesterov = false);
GradientTransformation lion(ScalarOrSchedule learning_rate, double b1 = 0.9, double b2 = 0.99,
                            std::optional<DType> mu_dtype = std::nullopt, double weight_decay = 1e-3, Mask mask = {});

/// sqrt of the sum of squares of every element of every leaf (f32 or wider: the leaves' promoted dtype).
Array global_norm_of(const Leaves& leaves);
template <class P> Array global_norm(const P& tree) {
  std::vector<Array> leaves;
  TreeDef def;
  PyTree<P>::flatten(tree, leaves, def);
  return global_norm_of(leaves);
}

/// params + updates, leaf by leaf: added in the dtype both promote to, then rounded once to the
/// parameter's dtype (optax's `(p + u).astype(p.dtype)`).
Leaves apply_updates_to(const Leaves& params, const Leaves& updates);
template <class P> P apply_updates(const P& params, const P& updates) {
  std::vector<Array> p, u;
  TreeDef pdef, udef;
  PyTree<P>::flatten(params, p, pdef);
  PyTree<P>::flatten(updates, u, udef);
  if (pdef != udef) detail::tree_mismatch_in("apply_updates", xjax::detail::tree_difference(pdef, udef));
  return tree_unflatten<P>(pdef, apply_updates_to(p, u));
}

}  // namespace xjax::optim

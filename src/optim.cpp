// optim.cpp: the transformations and schedules of optim.hpp, on leaves. Written from optax's
// documentation and the papers' update rules; every rule is checked against a plain loop in
// tests/test_optim.cpp.
#include "xjax/optim.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "xjax/ops.hpp"

namespace xjax::optim {
namespace detail {

std::vector<std::string> leaf_paths(const TreeDef& def) {
  std::vector<std::string> out;
  for (const auto& path : leaf_key_paths(def)) out.push_back(dotted_path(path));
  return out;
}

void tree_mismatch_in(const char* fn, const std::string& difference) {
  throw Error(std::string("xj::optim::") + fn + ": the parameters and the updates have different structures " +
              difference);
}

}  // namespace detail

namespace {

Array count_f64(const Array& count) { return astype(count, f64); }
Array f64_scalar(double v) { return scalar(v, f64); }
// count + 1, staying at the largest i32 once there (optax's safe_int32_increment: a count that
// wrapped would turn Adam's bias correction to -inf and restart the schedules).
Array increment(const Array& count) {
  const Array below_max = lt(count, scalar(static_cast<double>(std::numeric_limits<std::int32_t>::max()), i32));
  return add(count, astype(below_max, i32));
}
Array zero_count() { return scalar(0, i32); }

// v (a rank-0 array) in x's dtype, to scale x without promoting it.
Array as_dtype_of(const Array& v, const Array& x) { return astype(v, x.dtype()); }

void check_state(const char* fn, const OptState& state, std::size_t expected) {
  if (state.size() != expected)
    throw Error(std::string("xj::optim::") + fn + ": the state has " + std::to_string(state.size()) + " arrays, " +
                "expected " + std::to_string(expected) + " (was it made by this transformation's init, for these parameters?)");
}

// Each of the `per_leaf` blocks of state (from `first`) shaped like the updates' leaves, else an
// Error naming the transformation and the leaf (a state made for other parameters had failed in an
// add naming optim.cpp; a port of the thirty-sixth session).
void check_leaf_states(const char* fn, const OptState& state, std::size_t first, std::size_t per_leaf, const Leaves& u,
                       const std::vector<std::string>& paths) {
  for (std::size_t k = 0; k < per_leaf; ++k)
    for (std::size_t i = 0; i < u.size(); ++i) {
      const Array& s = state[first + k * u.size() + i];
      if (s.shape() != u[i].shape())
        throw ShapeError(std::string("xj::optim::") + fn + ": the state holds " + s.aval().str() + " for the leaf '" +
                         (i < paths.size() ? paths[i] : std::to_string(i)) + "', whose updates are " + u[i].aval().str() +
                         " (was the state made by init for these parameters?)");
    }
}

// Leaves [offset, offset + n) of a state.
Leaves part(const OptState& state, std::size_t offset, std::size_t n) {
  return Leaves(state.begin() + static_cast<std::ptrdiff_t>(offset), state.begin() + static_cast<std::ptrdiff_t>(offset + n));
}

Leaves zeros_like_all(const Leaves& xs, double fill = 0.0) {
  Leaves out;
  for (const auto& x : xs) out.push_back(full(x.shape(), fill, x.dtype()));
  return out;
}

Array clip_steps(const Array& t, std::int64_t begin, std::int64_t steps) {
  return minimum(maximum(sub(t, f64_scalar(static_cast<double>(begin))), f64_scalar(0.0)),
                 f64_scalar(static_cast<double>(steps)));
}

// d^t for a float d and an integer step count t (as f64).
Array power_of(double d, const Array& t) { return exp(mul(count_f64(t), f64_scalar(std::log(d)))); }

}  // namespace

// ---- schedules -------------------------------------------------------------------------------

Schedule constant_schedule(double value) {
  return [value](const Array&) { return f64_scalar(value); };
}

Schedule linear_schedule(double init_value, double end_value, std::int64_t transition_steps, std::int64_t transition_begin) {
  if (transition_steps <= 0) return constant_schedule(init_value);
  transition_begin = std::max<std::int64_t>(transition_begin, 0);  // optax: a negative begin is 0
  return [=](const Array& count) {
    // frac = 1 - clip(t - begin, 0, steps) / steps; value = (init - end) frac + end.
    const Array t = clip_steps(count_f64(count), transition_begin, transition_steps);
    const Array frac = sub(f64_scalar(1.0), div(t, f64_scalar(static_cast<double>(transition_steps))));
    return add(mul(f64_scalar(init_value - end_value), frac), f64_scalar(end_value));
  };
}

Schedule cosine_decay_schedule(double init_value, std::int64_t decay_steps, double alpha, double exponent) {
  if (decay_steps <= 0)
    throw Error("xj::optim::cosine_decay_schedule: decay_steps must be positive, got " + std::to_string(decay_steps));
  return [=](const Array& count) {
    // init ((1 - alpha) (0.5 (1 + cos(pi min(t, T) / T)))^exponent + alpha).
    const auto steps = static_cast<double>(decay_steps);
    const Array t = minimum(count_f64(count), f64_scalar(steps));
    const Array cosine = mul(f64_scalar(0.5), add(f64_scalar(1.0), cos(mul(t, f64_scalar(std::numbers::pi / steps)))));
    const Array decayed = add(mul(f64_scalar(1.0 - alpha), pow(cosine, exponent)), f64_scalar(alpha));
    return mul(f64_scalar(init_value), decayed);
  };
}

Schedule warmup_cosine_decay_schedule(double init_value, double peak_value, std::int64_t warmup_steps,
                                      std::int64_t decay_steps, double end_value, double exponent) {
  if (decay_steps <= warmup_steps)
    throw Error("xj::optim::warmup_cosine_decay_schedule: decay_steps (" + std::to_string(decay_steps) +
                ") must exceed warmup_steps (" + std::to_string(warmup_steps) + ")");
  Schedule warmup = linear_schedule(init_value, peak_value, warmup_steps);
  // alpha = end / peak, 0 for a zero peak (optax's: the decay is then 0 throughout)
  const double alpha = peak_value == 0.0 ? 0.0 : end_value / peak_value;
  Schedule decay = cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent);
  return [=](const Array& count) {
    // The warmup before the boundary, the decay (counting from the boundary) from it on.
    const Array after = sub(count, scalar(static_cast<double>(warmup_steps), count.dtype()));
    return where(lt(count, scalar(static_cast<double>(warmup_steps), count.dtype())), warmup(count), decay(after));
  };
}

// ---- transformations ---------------------------------------------------------------------------

GradientTransformation chain(std::vector<GradientTransformation> transforms) {
  LeafRule rule;
  rule.state_size = [transforms](std::size_t n) {
    std::size_t total = 0;
    for (const auto& t : transforms) total += t.rule().state_size(n);
    return total;
  };
  rule.init = [transforms](const Leaves& params) {
    OptState all;
    for (const auto& t : transforms) {
      OptState s = t.rule().init(params);
      all.insert(all.end(), s.begin(), s.end());
    }
    return all;
  };
  rule.update = [transforms, size = rule.state_size](const Leaves& updates, const OptState& state, const Leaves& params,
                                                      const std::vector<std::string>& paths) {
    check_state("chain", state, size(updates.size()));
    Leaves u = updates;
    OptState all;
    std::size_t offset = 0;
    for (const auto& t : transforms) {
      const std::size_t n = t.rule().state_size(updates.size());
      auto [next, s] = t.rule().update(u, part(state, offset, n), params, paths);
      u = std::move(next);
      all.insert(all.end(), s.begin(), s.end());
      offset += n;
    }
    return std::pair{u, all};
  };
  return GradientTransformation(std::move(rule));
}

namespace {

// A transformation whose state is `per_leaf` arrays per leaf (shaped like it, filled with
// `fill`; the first of them, a first moment, in `mu_dtype` when given), after `counts` step
// counts (i32 scalars, starting at 0).
using Update = std::function<std::pair<Leaves, OptState>(const Leaves&, const OptState&, const Leaves&,
                                                           const std::vector<std::string>&)>;
GradientTransformation stateful(const char* name, std::size_t counts, std::size_t per_leaf, double fill, Update update,
                                std::optional<DType> mu_dtype = std::nullopt) {
  LeafRule rule;
  rule.state_size = [=](std::size_t n) { return counts + per_leaf * n; };
  rule.init = [=](const Leaves& params) {
    OptState s;
    for (std::size_t c = 0; c < counts; ++c) s.push_back(zero_count());
    for (std::size_t k = 0; k < per_leaf; ++k)
      for (const auto& p : params) s.push_back(full(p.shape(), fill, k == 0 && mu_dtype ? *mu_dtype : p.dtype()));
    return s;
  };
  rule.update = [=](const Leaves& u, const OptState& state, const Leaves& params, const std::vector<std::string>& paths) {
    check_state(name, state, counts + per_leaf * u.size());
    check_leaf_states(name, state, counts, per_leaf, u, paths);
    return update(u, state, params, paths);
  };
  return GradientTransformation(std::move(rule));
}

// A transformation without state.
GradientTransformation stateless(const char* name, std::function<Leaves(const Leaves&, const Leaves&, const std::vector<std::string>&)> f) {
  return stateful(name, 0, 0, 0.0, [f](const Leaves& u, const OptState&, const Leaves& params, const std::vector<std::string>& paths) {
    return std::pair{f(u, params, paths), OptState{}};
  });
}

// decay old + (1 - decay) g: each product in its operand's dtype (optax's weak scalars), added in
// the dtype both promote to (a moment kept in its own mu_dtype; converted explicitly, so strict
// promotion allows it).
Array decay_mean(double decay, const Array& old, const Array& g) {
  const Array a = mul(old, scalar(decay, old.dtype())), b = mul(g, scalar(1.0 - decay, g.dtype()));
  const DType t = promote_types(a.dtype(), b.dtype());
  return add(a.dtype() == t ? a : astype(a, t), b.dtype() == t ? b : astype(b, t));
}

// A moment rounded to the dtype it is kept in.
Array kept_in(const Array& moment, std::optional<DType> dtype) {
  return dtype && moment.dtype() != *dtype ? astype(moment, *dtype) : moment;
}

// g / sqrt(v + eps), or with eps outside the root g / (sqrt(v) + eps).
Array rms_scaled(const Array& g, const Array& v, double eps, bool eps_in_sqrt) {
  return eps_in_sqrt ? mul(g, rsqrt(add(v, scalar(eps, v.dtype())))) : div(g, add(sqrt(v), scalar(eps, v.dtype())));
}

}  // namespace

GradientTransformation scale_by_adam(double b1, double b2, double eps, double eps_root, std::optional<DType> mu_dtype) {
  return stateful("scale_by_adam", 1, 2, 0.0, [=](const Leaves& g, const OptState& s, const Leaves&, const std::vector<std::string>&) {
    // mu <- b1 mu + (1 - b1) g; nu <- b2 nu + (1 - b2) g^2; t <- t + 1;
    // update = (mu / (1 - b1^t)) / (sqrt(nu / (1 - b2^t) + eps_root) + eps).
    const std::size_t n = g.size();
    const Array t = increment(s[0]);
    const Array c1 = sub(f64_scalar(1.0), power_of(b1, t)), c2 = sub(f64_scalar(1.0), power_of(b2, t));
    Leaves out;
    OptState next{t};
    Leaves nus;
    for (std::size_t i = 0; i < n; ++i) {
      const Array mu = decay_mean(b1, s[1 + i], g[i]);
      const Array nu = decay_mean(b2, s[1 + n + i], square(g[i]));
      const Array mu_hat = div(mu, as_dtype_of(c1, mu)), nu_hat = div(nu, as_dtype_of(c2, nu));
      out.push_back(div(mu_hat, add(sqrt(add(nu_hat, scalar(eps_root, nu.dtype()))), scalar(eps, nu.dtype()))));
      next.push_back(kept_in(mu, mu_dtype));
      nus.push_back(nu);
    }
    next.insert(next.end(), nus.begin(), nus.end());
    return std::pair{out, next};
  }, mu_dtype);
}

GradientTransformation scale_by_rms(double decay, double eps, double initial_scale, bool eps_in_sqrt) {
  return stateful("scale_by_rms", 0, 1, initial_scale, [=](const Leaves& g, const OptState& s, const Leaves&, const std::vector<std::string>&) {
    // nu <- decay nu + (1 - decay) g^2; update = g / sqrt(nu + eps).
    Leaves out;
    OptState next;
    for (std::size_t i = 0; i < g.size(); ++i) {
      next.push_back(decay_mean(decay, s[i], square(g[i])));
      out.push_back(rms_scaled(g[i], next.back(), eps, eps_in_sqrt));
    }
    return std::pair{out, next};
  });
}

GradientTransformation scale_by_stddev(double decay, double eps, double initial_scale, bool eps_in_sqrt) {
  // mu <- decay mu + (1 - decay) g; nu as scale_by_rms's; update = g / sqrt(nu - mu^2 + eps).
  // The state is (mu, nu); mu starts at 0, nu at initial_scale.
  LeafRule rule;
  rule.state_size = [](std::size_t n) { return 2 * n; };
  rule.init = [=](const Leaves& params) {
    OptState s = zeros_like_all(params, 0.0);
    Leaves nu = zeros_like_all(params, initial_scale);
    s.insert(s.end(), nu.begin(), nu.end());
    return s;
  };
  rule.update = [=](const Leaves& g, const OptState& s, const Leaves&, const std::vector<std::string>& paths) {
    check_state("scale_by_stddev", s, 2 * g.size());
    check_leaf_states("scale_by_stddev", s, 0, 2, g, paths);
    const std::size_t n = g.size();
    Leaves out, mus, nus;
    for (std::size_t i = 0; i < n; ++i) {
      mus.push_back(decay_mean(decay, s[i], g[i]));
      nus.push_back(decay_mean(decay, s[n + i], square(g[i])));
      out.push_back(rms_scaled(g[i], sub(nus.back(), square(mus.back())), eps, eps_in_sqrt));
    }
    mus.insert(mus.end(), nus.begin(), nus.end());
    return std::pair{out, mus};
  };
  return GradientTransformation(std::move(rule));
}

GradientTransformation scale_by_lion(double b1, double b2, std::optional<DType> mu_dtype) {
  return stateful("scale_by_lion", 0, 1, 0.0, [=](const Leaves& g, const OptState& s, const Leaves&, const std::vector<std::string>&) {
    // update = sign((1 - b1) g + b1 mu); mu <- b2 mu + (1 - b2) g.
    Leaves out;
    OptState next;
    for (std::size_t i = 0; i < g.size(); ++i) {
      out.push_back(sign(decay_mean(b1, s[i], g[i])));
      next.push_back(kept_in(decay_mean(b2, s[i], g[i]), mu_dtype));
    }
    return std::pair{out, next};
  }, mu_dtype);
}

GradientTransformation trace(double decay, bool nesterov) {
  return stateful("trace", 0, 1, 0.0, [=](const Leaves& g, const OptState& s, const Leaves&, const std::vector<std::string>&) {
    // t <- g + decay t; update = t, or g + decay t (nesterov).
    Leaves out;
    OptState next;
    for (std::size_t i = 0; i < g.size(); ++i) {
      const Array d = scalar(decay, g[i].dtype());
      next.push_back(add(g[i], mul(d, s[i])));
      out.push_back(nesterov ? add(g[i], mul(d, next.back())) : next.back());
    }
    return std::pair{out, next};
  });
}

GradientTransformation add_decayed_weights(double weight_decay, Mask mask) {
  return stateless("add_decayed_weights", [=](const Leaves& u, const Leaves& params, const std::vector<std::string>& paths) {
    if (params.size() != u.size())
      throw Error("xj::optim::add_decayed_weights (weight decay): needs the parameters: call update(updates, state, params)");
    // update + weight_decay * param, where the mask selects the leaf.
    Leaves out;
    for (std::size_t i = 0; i < u.size(); ++i)
      out.push_back(!mask || mask(paths.at(i)) ? add(u[i], mul(params[i], scalar(weight_decay, params[i].dtype()))) : u[i]);
    return out;
  });
}

GradientTransformation scale_by_schedule(Schedule step_size_fn) {
  return stateful("scale_by_schedule", 1, 0, 0.0, [=](const Leaves& u, const OptState& s, const Leaves&, const std::vector<std::string>&) {
    // update * schedule(t); t <- t + 1 (the schedule sees the count before this update).
    const Array factor = step_size_fn(s[0]);
    Leaves out;
    for (const auto& x : u) out.push_back(mul(x, as_dtype_of(factor, x)));
    return std::pair{out, OptState{increment(s[0])}};
  });
}

GradientTransformation scale(double factor) {
  return stateless("scale", [=](const Leaves& u, const Leaves&, const std::vector<std::string>&) {
    Leaves out;
    for (const auto& x : u) out.push_back(mul(x, scalar(factor, x.dtype())));
    return out;
  });
}

GradientTransformation scale_by_learning_rate(ScalarOrSchedule learning_rate) {
  if (const auto* lr = std::get_if<double>(&learning_rate)) return scale(-*lr);
  Schedule s = std::get<Schedule>(learning_rate);
  return scale_by_schedule([s](const Array& count) { return neg(s(count)); });
}

GradientTransformation clip_by_global_norm(double max_norm) {
  return stateless("clip_by_global_norm", [=](const Leaves& u, const Leaves&, const std::vector<std::string>&) {
    // Unchanged when ||u|| < max_norm, else u * max_norm / ||u||.
    // Scaled in the norm's dtype (f32 or wider), then rounded to the leaf's: an f16 leaf would
    // otherwise be divided by a norm past f16's range (inf) and come back as zeros.
    const Array norm = global_norm_of(u);
    const Array within = lt(norm, scalar(max_norm, norm.dtype()));
    Leaves out;
    for (const auto& x : u) {
      const Array clipped = mul(div(astype(x, norm.dtype()), norm), scalar(max_norm, norm.dtype()));
      out.push_back(where(within, x, astype(clipped, x.dtype())));
    }
    return out;
  });
}

// ---- optimizers ----------------------------------------------------------------------------------

GradientTransformation sgd(ScalarOrSchedule learning_rate, double momentum, bool nesterov) {
  if (momentum == 0.0) return scale_by_learning_rate(std::move(learning_rate));
  return chain({trace(momentum, nesterov), scale_by_learning_rate(std::move(learning_rate))});
}

GradientTransformation adam(ScalarOrSchedule learning_rate, double b1, double b2, double eps, double eps_root,
                            std::optional<DType> mu_dtype) {
  return chain({scale_by_adam(b1, b2, eps, eps_root, mu_dtype), scale_by_learning_rate(std::move(learning_rate))});
}

GradientTransformation adamw(ScalarOrSchedule learning_rate, double b1, double b2, double eps, double eps_root,
                             std::optional<DType> mu_dtype, double weight_decay, Mask mask) {
  return chain({scale_by_adam(b1, b2, eps, eps_root, mu_dtype), add_decayed_weights(weight_decay, std::move(mask)),
                scale_by_learning_rate(std::move(learning_rate))});
}

GradientTransformation rmsprop(ScalarOrSchedule learning_rate, double decay, double eps, double initial_scale,
                               bool eps_in_sqrt, bool centered, double momentum, bool nesterov) {
  std::vector<GradientTransformation> parts{centered ? scale_by_stddev(decay, eps, initial_scale, eps_in_sqrt)
                                                     : scale_by_rms(decay, eps, initial_scale, eps_in_sqrt),
                                            scale_by_learning_rate(std::move(learning_rate))};
  if (momentum != 0.0) parts.push_back(trace(momentum, nesterov));
  return chain(std::move(parts));
}

GradientTransformation lion(ScalarOrSchedule learning_rate, double b1, double b2, std::optional<DType> mu_dtype,
                            double weight_decay, Mask mask) {
  return chain({scale_by_lion(b1, b2, mu_dtype), add_decayed_weights(weight_decay, std::move(mask)),
                scale_by_learning_rate(std::move(learning_rate))});
}

Array global_norm_of(const Leaves& leaves) {
  // Squares summed in f32 or wider (the leaves' dtypes promoted with f32): a bf16 / f16 leaf's
  // squares would round or overflow (an f16 gradient of 300 squares to inf).
  DType wide = f32;
  for (const auto& x : leaves) wide = promote_types(wide, x.dtype());
  Array total = scalar(0.0, wide);
  for (const auto& x : leaves) total = add(total, sum(square(astype(x, wide))));
  return sqrt(total);
}

Leaves apply_updates_to(const Leaves& params, const Leaves& updates) {
  Leaves out;
  // (p + u) in the dtype both promote to, then p's dtype (optax's rule): one rounding, where
  // rounding u to a bf16 p's dtype first would round twice.
  for (std::size_t i = 0; i < params.size(); ++i) {
    const DType sum_dtype = promote_types(params[i].dtype(), updates[i].dtype());
    out.push_back(astype(add(astype(params[i], sum_dtype), astype(updates[i], sum_dtype)), params[i].dtype()));
  }
  return out;
}

}  // namespace xjax::optim

// test_optim.cpp: xj::optim's rules against plain loops in double written from the papers'
// formulas (several steps each), the schedules against their closed forms, jit(update) against
// eager, and the errors.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numbers>

#include "test_util.hpp"

namespace xj = xjax;
namespace optim = xjax::optim;

namespace {

using Params = std::map<std::string, xj::Array>;

// Parameters {"b": f64[2], "w": f64[2, 3]}: leaves in key order, so flat index 0-1 is b, 2-7 is w.
Params params0() {
  return {{"b", test_util::f64v({0.5, -0.25}, {2})}, {"w", test_util::f64v({1.0, -2.0, 0.3, 0.0, 0.7, -1.1}, {2, 3})}};
}
Params grads_at(int step) {
  std::vector<double> b(2), w(6);
  for (std::size_t i = 0; i < 2; ++i) b[i] = std::sin(1.3 * static_cast<double>(i) + 0.7 * step) * 0.8;
  for (std::size_t i = 0; i < 6; ++i) w[i] = std::cos(0.9 * static_cast<double>(i) - 0.4 * step) * (1.0 + 0.5 * static_cast<double>(i % 2));
  return {{"b", test_util::f64v(b, {2})}, {"w", test_util::f64v(w, {2, 3})}};
}
std::vector<double> flat(const Params& p) {
  std::vector<double> out;
  for (const auto& [k, v] : p)
    for (double x : v.to_vector<double>()) out.push_back(x);
  return out;
}

// One reference step: the flat parameters and flat gradients of step t (1-based), updated in place.
using RefStep = std::function<void(std::vector<double>& p, const std::vector<double>& g, int t)>;

void check_against(const optim::GradientTransformation& opt, RefStep ref, int steps = 6, double tol = 1e-12) {
  Params p = params0();
  optim::OptState s = opt.init(p);
  std::vector<double> expected = flat(p);
  for (int t = 1; t <= steps; ++t) {
    const Params g = grads_at(t);
    auto [u, s2] = opt.update(g, s, p);
    p = optim::apply_updates(p, u);
    s = s2;
    ref(expected, flat(g), t);
    const auto got = flat(p);
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(tol));
  }
}

double sgn(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }

}  // namespace

TEST_CASE("optim: sgd, with momentum and nesterov, against the update rule") {
  check_against(optim::sgd(0.1), [](std::vector<double>& p, const std::vector<double>& g, int) {
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.1 * g[i];
  });
  for (bool nesterov : {false, true}) {
    std::vector<double> trace(8, 0.0);
    check_against(optim::sgd(0.05, 0.9, nesterov), [&](std::vector<double>& p, const std::vector<double>& g, int) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        trace[i] = g[i] + 0.9 * trace[i];
        p[i] -= 0.05 * (nesterov ? g[i] + 0.9 * trace[i] : trace[i]);
      }
    });
  }
}

TEST_CASE("optim: adam and adamw (decoupled decay, masked) against Kingma & Ba's and Loshchilov & Hutter's rules") {
  auto adam_ref = [](double lr, double b1, double b2, double eps, double wd, std::vector<bool> decayed) {
    auto m = std::make_shared<std::vector<double>>(8, 0.0), v = std::make_shared<std::vector<double>>(8, 0.0);
    return [=](std::vector<double>& p, const std::vector<double>& g, int t) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        (*m)[i] = b1 * (*m)[i] + (1 - b1) * g[i];
        (*v)[i] = b2 * (*v)[i] + (1 - b2) * g[i] * g[i];
        const double mhat = (*m)[i] / (1 - std::pow(b1, t)), vhat = (*v)[i] / (1 - std::pow(b2, t));
        p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + (decayed[i] ? wd * p[i] : 0.0));
      }
    };
  };
  check_against(optim::adam(0.01), adam_ref(0.01, 0.9, 0.999, 1e-8, 0.0, std::vector<bool>(8, false)));
  check_against(optim::adam(0.02, 0.8, 0.99, 1e-6), adam_ref(0.02, 0.8, 0.99, 1e-6, 0.0, std::vector<bool>(8, false)));
  check_against(optim::adamw(0.01, 0.9, 0.999, 1e-8, 0.0, std::nullopt, 0.1), adam_ref(0.01, 0.9, 0.999, 1e-8, 0.1, std::vector<bool>(8, true)));
  // The mask by key path: decay the weights, not the biases.
  std::vector<bool> only_w(8, true);
  only_w[0] = only_w[1] = false;
  check_against(optim::adamw(0.01, 0.9, 0.999, 1e-8, 0.0, std::nullopt, 0.1, [](const std::string& path) { return path != "b"; }),
                adam_ref(0.01, 0.9, 0.999, 1e-8, 0.1, only_w));
}

TEST_CASE("optim: rmsprop (plain, centered, with momentum) and lion against their rules") {
  for (bool centered : {false, true}) {
    auto nu = std::make_shared<std::vector<double>>(8, 0.1), mu = std::make_shared<std::vector<double>>(8, 0.0);
    check_against(optim::rmsprop(0.01, 0.9, 1e-8, 0.1, true, centered), [=](std::vector<double>& p, const std::vector<double>& g, int) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        (*nu)[i] = 0.9 * (*nu)[i] + 0.1 * g[i] * g[i];
        (*mu)[i] = 0.9 * (*mu)[i] + 0.1 * g[i];
        p[i] -= 0.01 * g[i] / std::sqrt((*nu)[i] - (centered ? (*mu)[i] * (*mu)[i] : 0.0) + 1e-8);
      }
    });
  }
  {
    std::vector<double> nu(8, 0.0), trace(8, 0.0);
    check_against(optim::rmsprop(0.01, 0.9, 1e-8, 0.0, true, false, 0.5), [&](std::vector<double>& p, const std::vector<double>& g, int) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        nu[i] = 0.9 * nu[i] + 0.1 * g[i] * g[i];
        trace[i] = -0.01 * g[i] / std::sqrt(nu[i] + 1e-8) + 0.5 * trace[i];
        p[i] += trace[i];
      }
    });
  }
  std::vector<double> mu(8, 0.0);
  check_against(optim::lion(0.001, 0.9, 0.99, std::nullopt, 0.01), [&](std::vector<double>& p, const std::vector<double>& g, int) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double c = sgn(0.1 * g[i] + 0.9 * mu[i]);
      mu[i] = 0.99 * mu[i] + 0.01 * g[i];
      p[i] -= 0.001 * (c + 0.01 * p[i]);
    }
  });
}

TEST_CASE("optim: clip_by_global_norm in a chain, and global_norm") {
  const Params g = grads_at(1);
  double sq = 0;
  for (double x : flat(g)) sq += x * x;
  CHECK(optim::global_norm(g).item<double>() == doctest::Approx(std::sqrt(sq)).epsilon(1e-14));
  const double max_norm = 0.5 * std::sqrt(sq);  // the grads of every step here are above it
  check_against(optim::chain({optim::clip_by_global_norm(max_norm), optim::sgd(0.1)}),
                [&](std::vector<double>& p, const std::vector<double>& gv, int) {
                  double n2 = 0;
                  for (double x : gv) n2 += x * x;
                  const double f = std::sqrt(n2) < max_norm ? 1.0 : max_norm / std::sqrt(n2);
                  for (std::size_t i = 0; i < p.size(); ++i) p[i] -= 0.1 * gv[i] * f;
                });
  // Below the threshold: unchanged.
  auto [u, s] = optim::clip_by_global_norm(10 * std::sqrt(sq)).update(g, optim::OptState{});
  CHECK(flat(u) == flat(g));
}

TEST_CASE("optim: schedules against their closed forms") {
  auto at = [](const optim::Schedule& s, int t) { return s(xj::scalar(t, xj::i32)).item<double>(); };
  const auto lin = optim::linear_schedule(1.0, 0.1, 10, 5);
  CHECK(at(lin, 0) == doctest::Approx(1.0));
  CHECK(at(lin, 5) == doctest::Approx(1.0));
  CHECK(at(lin, 10) == doctest::Approx(1.0 - 0.9 * 0.5));
  CHECK(at(lin, 15) == doctest::Approx(0.1));
  CHECK(at(lin, 100) == doctest::Approx(0.1));
  const auto cosd = optim::cosine_decay_schedule(2.0, 20, 0.1, 2.0);
  for (int t : {0, 3, 10, 19, 20, 40}) {
    const double c = 0.5 * (1 + std::cos(std::numbers::pi * std::min(t, 20) / 20.0));
    CHECK(at(cosd, t) == doctest::Approx(2.0 * ((1 - 0.1) * c * c + 0.1)).epsilon(1e-13));
  }
  const auto warm = optim::warmup_cosine_decay_schedule(0.0, 1.0, 4, 24, 0.05);
  for (int t : {0, 1, 3, 4, 5, 14, 24, 30}) {
    double want;
    if (t < 4) want = t / 4.0;
    else {
      const double c = 0.5 * (1 + std::cos(std::numbers::pi * std::min(t - 4, 20) / 20.0));
      want = (1 - 0.05) * c + 0.05;
    }
    CHECK(at(warm, t) == doctest::Approx(want).epsilon(1e-13));
  }
  CHECK(at(optim::constant_schedule(0.3), 7) == 0.3);
  // adam with a scheduled learning rate: the schedule sees the count before each update.
  auto m = std::make_shared<std::vector<double>>(8, 0.0), v = std::make_shared<std::vector<double>>(8, 0.0);
  check_against(optim::adam(lin), [=](std::vector<double>& p, const std::vector<double>& g, int t) {
    const double lr = 1.0 - 0.9 * std::clamp(t - 1 - 5, 0, 10) / 10.0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      (*m)[i] = 0.9 * (*m)[i] + 0.1 * g[i];
      (*v)[i] = 0.999 * (*v)[i] + 0.001 * g[i] * g[i];
      p[i] -= lr * ((*m)[i] / (1 - std::pow(0.9, t))) / (std::sqrt((*v)[i] / (1 - std::pow(0.999, t))) + 1e-8);
    }
  });
}

TEST_CASE("optim: a jitted training step equals the eager one; f32 parameters stay f32") {
  const auto opt = optim::chain({optim::clip_by_global_norm(1.0), optim::adamw(optim::warmup_cosine_decay_schedule(0.0, 0.01, 2, 10))});
  auto step = [&](const Params& p, const optim::OptState& s, const Params& g) {
    auto [u, s2] = opt.update(g, s, p);
    return std::pair{optim::apply_updates(p, u), s2};
  };
  auto jitted = xj::jit(step, {.donate_argnums = {0, 1}});
  Params pe = params0(), pj = params0();
  optim::OptState se = opt.init(pe), sj = opt.init(pj);
  for (int t = 1; t <= 5; ++t) {
    std::tie(pe, se) = step(pe, se, grads_at(t));
    std::tie(pj, sj) = jitted(pj, sj, grads_at(t));
    const auto a = flat(pe), b = flat(pj);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-13));
  }
  Params p32;
  for (const auto& [k, v] : params0()) p32[k] = xj::astype(v, xj::f32);
  auto [u, s] = optim::adam(0.1).update(p32, optim::adam(0.1).init(p32), p32);
  CHECK(u.at("w").dtype() == xj::f32);
  CHECK(optim::apply_updates(p32, u).at("b").dtype() == xj::f32);
}

TEST_CASE("optim: errors for a foreign state, missing parameters, mismatched trees and bad schedules") {
  const Params p = params0();
  const auto opt = optim::adam(0.1);
  CHECK_THROWS_WITH_AS((void)opt.update(p, optim::OptState{}, p), doctest::Contains("the state has 0 arrays, expected 5"), xj::Error);
  const auto w = optim::adamw(0.1);
  CHECK_THROWS_WITH_AS((void)w.update(p, w.init(p)), doctest::Contains("needs the parameters"), xj::Error);
  Params other = p;
  other.erase("b");
  CHECK_THROWS_AS((void)optim::apply_updates(p, other), xj::Error);
  CHECK_THROWS_AS((void)optim::cosine_decay_schedule(1.0, 0), xj::Error);
  CHECK_THROWS_AS((void)optim::warmup_cosine_decay_schedule(0.0, 1.0, 10, 5), xj::Error);
}

TEST_CASE("optim: warmup_cosine_decay_schedule with a zero peak decays to 0 (optax's alpha = 0; it raised)") {
  const auto s = optim::warmup_cosine_decay_schedule(0.1, 0.0, 2, 5, 0.0);
  // warmup 0.1 -> 0 over 2 steps, then peak * cosine = 0
  const std::vector<double> want{0.1, 0.05, 0.0, 0.0, 0.0, 0.0};
  for (int k = 0; k < 6; ++k) CHECK(s(xj::scalar(k, xj::i32)).item<double>() == doctest::Approx(want[static_cast<std::size_t>(k)]).epsilon(1e-15));
}

TEST_CASE("optim regressions from review: saturating counts, negative transition_begin, narrow leaves' norm, one rounding in apply_updates") {
  // The count stays at 2^31 - 1: it wrapped to -2^31, which made Adam's bias correction -inf
  // (every update 0) and restarted the schedules at their initial value.
  const Params p{{"w", test_util::f64v({1.0}, {1})}}, g{{"w", test_util::f64v({0.5}, {1})}};
  const auto adam = optim::adam(0.1);
  optim::OptState s = adam.init(p);
  s[0] = xj::scalar(2147483647.0, xj::i32);
  auto [u, s2] = adam.update(g, s, p);
  CHECK(s2[0].item<std::int32_t>() == 2147483647);
  // the first moments from zero: mu = 0.1 g, nu = 0.001 g^2; bias corrections are 1 at t = 2^31 - 1
  CHECK(u.at("w").item<double>() == doctest::Approx(-0.1 * (0.1 * 0.5) / (std::sqrt(0.001 * 0.25) + 1e-8)).epsilon(1e-12));
  const auto sched = optim::scale_by_schedule(optim::linear_schedule(1.0, 0.0, 100));
  optim::OptState ss = sched.init(p);
  ss[0] = xj::scalar(2147483647.0, xj::i32);
  auto [u1, ss1] = sched.update(g, ss, p);
  auto [u2, ss2] = sched.update(g, ss1, p);
  CHECK(u2.at("w").item<double>() == 0.0);  // stays at the end value
  // A negative transition_begin is 0 (optax), not a shift of the schedule.
  const auto lin = optim::linear_schedule(1.0, 0.0, 10, -5);
  for (int t : {0, 5, 10, 20})
    CHECK(lin(xj::scalar(t, xj::i32)).item<double>() == doctest::Approx(1.0 - std::min(t, 10) / 10.0));
  // The norm of f16 / bf16 leaves is summed in f32: 300^2 overflowed f16 (inf), and clipping then
  // returned zeros.
  const std::map<std::string, xj::Array> narrow{{"w", xj::full({2}, 300.0, xj::f16)}};
  const xj::Array n = optim::global_norm(narrow);
  CHECK(n.dtype() == xj::f32);
  CHECK(n.item<float>() == doctest::Approx(300.0 * std::sqrt(2.0)).epsilon(1e-6));
  auto [clipped, cs] = optim::clip_by_global_norm(1.0).update(narrow, optim::OptState{});
  CHECK(clipped.at("w").dtype() == xj::f16);
  for (double x : xj::astype(clipped.at("w"), xj::f64).to_vector<double>()) CHECK(x == doctest::Approx(std::sqrt(0.5)).epsilon(1e-3));
  const std::map<std::string, xj::Array> many{{"w", xj::astype(xj::full({1000}, 1.0), xj::bf16)}};
  CHECK(optim::global_norm(many).item<float>() == doctest::Approx(std::sqrt(1000.0)).epsilon(1e-6));
  // apply_updates rounds p + u once to p's dtype: bf16 1 + f32 (2^-8 + 2^-20) is 1 + 2^-7 (the
  // nearest bf16 above the midpoint), where rounding u to bf16 first (2^-8) made a tie that went
  // to even (1).
  const std::map<std::string, xj::Array> pb{{"w", xj::astype(xj::ones({1}), xj::bf16)}};
  const std::map<std::string, xj::Array> ub{{"w", xj::full({1}, 0.00390625 + std::ldexp(1.0, -20), xj::f32)}};
  const auto applied = optim::apply_updates(pb, ub);
  CHECK(applied.at("w").dtype() == xj::bf16);
  CHECK(xj::astype(applied.at("w"), xj::f64).item<double>() == 1.0078125);
  // Under strict promotion too (the optimizer's own arithmetic promotes explicitly).
  const xj::DtypePromotion strict;
  CHECK(xj::astype(optim::apply_updates(pb, ub).at("w"), xj::f64).item<double>() == 1.0078125);
  CHECK(optim::global_norm(narrow).item<float>() == doctest::Approx(300.0 * std::sqrt(2.0)).epsilon(1e-6));
}

// optax's positional parameters (a port's positional call keeps its meaning; a port of the
// thirty-sixth session): adamw(lr, b1, b2, eps, eps_root, mu_dtype, weight_decay, mask), lion(lr,
// b1, b2, mu_dtype, weight_decay, mask), rmsprop(lr, decay, eps, initial_scale, eps_in_sqrt,
// centered, momentum, nesterov). xjax's adamw had weight_decay fifth, so adamw(lr, .9, .999, 1e-8,
// 0.0) turned the decay off; rmsprop took centered fifth.
TEST_CASE("optim: optax's positional order: eps_root, mu_dtype, eps_in_sqrt") {
  // adamw with eps_root 1e-3 and a first moment kept in f32 (the update reads it before rounding)
  {
    auto m = std::make_shared<std::vector<double>>(8, 0.0), v = std::make_shared<std::vector<double>>(8, 0.0);
    check_against(optim::adamw(0.01, 0.9, 0.999, 1e-8, 1e-3, xj::f32, 0.1), [=](std::vector<double>& p, const std::vector<double>& g, int t) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        // optax's b1 * mu in mu's dtype (a weak scalar), (1 - b1) * g in g's, added in f64
        const double mu = static_cast<double>(0.9f * static_cast<float>((*m)[i])) + (1 - 0.9) * g[i];
        (*v)[i] = 0.999 * (*v)[i] + 0.001 * g[i] * g[i];
        const double mhat = mu / (1 - std::pow(0.9, t)), vhat = (*v)[i] / (1 - std::pow(0.999, t));
        p[i] -= 0.01 * (mhat / (std::sqrt(vhat + 1e-3) + 1e-8) + 0.1 * p[i]);
        (*m)[i] = static_cast<float>(mu);
      }
    });
    const Params p = params0();
    const optim::OptState s = optim::adamw(0.01, 0.9, 0.999, 1e-8, 0.0, xj::bf16).init(p);
    CHECK(s[1].dtype() == xj::bf16);  // (count, mu of b and w, nu of b and w)
    CHECK(s[2].dtype() == xj::bf16);
    CHECK(s[3].dtype() == xj::f64);
  }
  // eps outside the root: g / (sqrt(nu) + eps), plain and centered
  for (bool centered : {false, true}) {
    auto nu = std::make_shared<std::vector<double>>(8, 0.0), mu = std::make_shared<std::vector<double>>(8, 0.0);
    check_against(optim::rmsprop(0.01, 0.9, 0.1, 0.0, false, centered), [=](std::vector<double>& p, const std::vector<double>& g, int) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        (*nu)[i] = 0.9 * (*nu)[i] + 0.1 * g[i] * g[i];
        (*mu)[i] = 0.9 * (*mu)[i] + 0.1 * g[i];
        p[i] -= 0.01 * g[i] / (std::sqrt((*nu)[i] - (centered ? (*mu)[i] * (*mu)[i] : 0.0)) + 0.1);
      }
    });
  }
  // lion with its moment kept in f32
  std::vector<double> mu(8, 0.0);
  check_against(optim::lion(0.001, 0.9, 0.99, xj::f32, 0.01), [&](std::vector<double>& p, const std::vector<double>& g, int) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      const auto in_f32 = [&](double decay) { return static_cast<double>(static_cast<float>(decay) * static_cast<float>(mu[i])); };
      const double c = sgn(in_f32(0.9) + (1 - 0.9) * g[i]);
      mu[i] = static_cast<float>(in_f32(0.99) + (1 - 0.99) * g[i]);
      p[i] -= 0.001 * (c + 0.01 * p[i]);
    }
  });
}

// A state made for other parameters named the optimizer and the leaf, not an add in optim.cpp.
TEST_CASE("optim: a state for other parameters is an error naming the transformation and the leaf") {
  const Params p = params0();
  Params other = p;
  other["w"] = xj::zeros({3, 2}, xj::f64);
  const auto opt = optim::chain({optim::clip_by_global_norm(1.0), optim::adamw(0.01)});
  const optim::OptState s = opt.init(other);
  const std::string msg = test_util::message_of<xj::ShapeError>([&] { (void)opt.update(grads_at(1), s, p); });
  for (const char* part : {"scale_by_adam", "'w'", "f64[3,2]", "f64[2,3]", "init"}) CHECK(test_util::contains(msg, part));
  const auto rms = optim::rmsprop(0.01, 0.9, 1e-8, 0.0, true, true);
  const std::string centered = test_util::message_of<xj::ShapeError>([&] { (void)rms.update(grads_at(1), rms.init(other), p); });
  CHECK(test_util::contains(centered, "scale_by_stddev"));
  CHECK(test_util::contains(centered, "'w'"));
}

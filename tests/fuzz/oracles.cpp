// oracles.cpp: the checks run on each random program. Every reference is computed by a different
// code path than the value it checks (finite differences of the Plain program, the Plain program
// itself, eager evaluation, the other mode of differentiation, the f64 run), so one shared bug
// cannot make both sides agree. See docs/testing.md for the oracles and their tolerances.
#include "oracles.hpp"

#include <cxxabi.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <tuple>
#include <typeinfo>
#include <variant>

#include "program.hpp"
#include "raw_plan.hpp"

namespace fuzz {

namespace {

char g_activity[256] = "starting";

struct Tol {
  double rtol, atol;
};
// Same computation by two code paths: only rounding differs.
constexpr Tol kSameF64{1e-8, 1e-11};
constexpr Tol kSameF32{2e-4, 2e-6};
// A derivative against central differences (plus twice the differences' own error estimate).
constexpr Tol kFiniteDiff{1e-5, 1e-6};
// The f32 run against the f64 run of the same program.
constexpr Tol kF32VsF64{3e-3, 3e-4};
// An f32 gradient whose checkpoints saved residuals in bf16 against the wide one: bf16's
// rounding (2^-9 relative) of each residual, amplified by the program (magnitudes up to 16).
constexpr Tol kNarrowedBf16{5e-2, 5e-3};
constexpr double kStep = 1e-5;          // finite-difference step (f64)
constexpr double kFdMargin = 1e-3;      // a kink / branch point closer than this: no finite differences
constexpr double kSameMarginF64 = 1e-9; // ... closer than this: rounding may switch sides
constexpr double kSameMarginF32 = 1e-3;

/// What the residual oracle lets one entry of the schedule's residuals stand for: any of `shapes`,
/// or with `broadcasts_to`, a shape that broadcasts to it (a mask's operand).
struct Grant {
  std::vector<Shape> shapes;
  std::optional<Shape> broadcasts_to;
  bool covers(const Shape& s) const {
    if (std::find(shapes.begin(), shapes.end(), s) != shapes.end()) return true;
    if (!broadcasts_to || s.size() > broadcasts_to->size()) return false;
    const std::size_t lead = broadcasts_to->size() - s.size();
    for (std::size_t d = 0; d < s.size(); ++d)
      if (s[d] != 1 && s[d] != (*broadcasts_to)[lead + d]) return false;
    return true;
  }
};

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> s(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && s ? s.get() : name;
}

std::string num(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

std::string show(const Arrays& xs) {
  std::ostringstream os;
  os.precision(10);
  for (const auto& x : xs) os << "    " << x << "\n";
  return os.str();
}

/// The rounding of narrow float arrays (bf16 gradients of bf16 inputs): each element of such an
/// array is within one of its format's ulps, eps |x|, of the value rounded, so two results whose
/// wide values agree can differ by eps |x| more, norm-wise (the sum over xs's narrow arrays).
double narrow_rounding(const Arrays& xs) {
  double bound = 0;
  for (const auto& x : xs) {
    if (!xj::is_floating(x.dtype()) || xj::finfo(x.dtype()).bits > 16) continue;
    double s = 0;
    for (double v : x.to_vector<double>()) s += v * v;
    bound += xj::finfo(x.dtype()).eps * std::sqrt(s);
  }
  return bound;
}

/// "" when got and want agree (norm-wise: |got - want| <= atol sqrt(n) + rtol max(|got|, |want|)
/// + extra + the rounding of narrow arrays), else what differs.
std::string compare(const Arrays& got, const Arrays& want, Tol tol, double extra = 0) {
  if (got.size() != want.size()) return "different number of arrays: " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  extra += std::max(narrow_rounding(got), narrow_rounding(want));
  double err2 = 0, g2 = 0, w2 = 0;
  std::size_t n = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(got[i].aval() == want[i].aval()))
      return "array " + std::to_string(i) + " is " + got[i].aval().str() + ", expected " + want[i].aval().str();
    auto g = got[i].to_vector<double>(), w = want[i].to_vector<double>();
    for (std::size_t k = 0; k < g.size(); ++k) {
      if (!std::isfinite(g[k]) || !std::isfinite(w[k])) return "not finite:\n  got\n" + show(got) + "  want\n" + show(want);
      err2 += (g[k] - w[k]) * (g[k] - w[k]);
      g2 += g[k] * g[k];
      w2 += w[k] * w[k];
    }
    n += g.size();
  }
  double err = std::sqrt(err2), bound = tol.atol * std::sqrt(static_cast<double>(std::max<std::size_t>(n, 1))) +
                                        tol.rtol * std::max(std::sqrt(g2), std::sqrt(w2)) + extra;
  if (err <= bound) return "";
  return "|got - want| = " + num(err) + " > " + num(bound) + "\n  got\n" + show(got) + "  want\n" + show(want);
}

double dot(const Arrays& a, const Arrays& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    for (std::size_t k = 0; k < x.size(); ++k) s += x[k] * y[k];
  }
  return s;
}

double norm_diff(const Arrays& a, const Arrays& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    for (std::size_t k = 0; k < x.size(); ++k) s += (x[k] - y[k]) * (x[k] - y[k]);
  }
  return std::sqrt(s);
}

/// Which of a program's inputs are bf16 in its f32 run (issue 27: mixed-dtype programs): about
/// one in four, chosen by the seed alone so that the f64 run knows them too.
std::vector<bool> bf16_inputs(const Program& p) {
  std::mt19937_64 pick(p.seed ^ 0xBF16BF16ull);
  std::vector<bool> narrow;
  for (std::size_t k = 0; k < p.main.in.size(); ++k) narrow.push_back(pick() % 4 == 0);
  return narrow;
}

/// d rounded to bf16.
double bf16_rounded(double d) { return xj::astype(xj::array<double>({d}, {1}), xj::bf16).to_vector<double>()[0]; }

/// Random inputs in dt; those marked `bf16` hold bf16 values (rounded), as bf16 arrays in an f32
/// run (the program promotes them, Runner::operator()) and as f64 arrays in the f64 run, so that
/// both runs compute with the same inputs.
/// bf16 keeps 8 significant bits, so two rounded draws in [-1.5, 1.5] tie about once in 600
/// pairs: an exact tie of two independent inputs is a kink (top_k of a tied pair, seed 11649)
/// that the monitor cannot tell from a harmless one (note() in interpret.cpp skips exact ties), so
/// every bf16 element is redrawn until it differs from the others drawn so far.
Arrays random_arrays(std::mt19937_64& rng, const std::vector<Shape>& shapes, double lo, double hi, xj::DType dt,
                     const std::vector<bool>& bf16 = {}) {
  Arrays out;
  std::uniform_real_distribution<double> u(lo, hi);
  std::set<double> narrow_drawn;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    const bool narrow = k < bf16.size() && bf16[k];
    std::vector<double> v(static_cast<std::size_t>(size_of(shapes[k])));
    for (auto& e : v) {
      e = u(rng);
      if (!narrow) continue;
      e = bf16_rounded(e);
      for (int tries = 0; !narrow_drawn.insert(e).second && tries < 100; ++tries) e = bf16_rounded(u(rng));
    }
    const Array x = xj::array<double>(v, shapes[k]);
    out.push_back(xj::astype(x, narrow && dt == xj::f32 ? xj::bf16 : dt));
  }
  return out;
}

enum class Expect { Success, MayRaiseTransformError };

/// The oracles on one program in one dtype.
class Checker {
 public:
  Checker(const Program& p, xj::DType dt, Stats& st, std::ostream& out, bool& header_printed)
      : p_(p), dt_(dt), st_(st), out_(out), header_printed_(header_printed) {
    full_ = Runner{Mode::Full, dt, nullptr, nullptr};
    plain_ = Runner{Mode::Plain, dt, &tape_, nullptr};
    std::mt19937_64 rng(p.seed * 0x9E3779B97F4A7C15ull + 17);
    bf16_ = bf16_inputs(p);
    xs_ = random_arrays(rng, p.main.in, -1.5, 1.5, dt, bf16_);
    ts_ = random_arrays(rng, p.main.in, -1, 1, dt, bf16_);
    if (dt == xj::f32 && std::find(bf16_.begin(), bf16_.end(), true) != bf16_.end()) ++st.coverage["bf16 inputs (f32 runs)"];
    rng_ = rng;
  }

  std::optional<Array> value;
  std::optional<Arrays> gradient;
  double margin = std::numeric_limits<double>::infinity();
  bool ok = true;

  void run() {
    bool f64 = dt_ == xj::f64;
    const Features& ft = p_.features;
    Expect rev = ft.has_while ? Expect::MayRaiseTransformError : Expect::Success;
    Expect fwd = ft.has_custom_vjp ? Expect::MayRaiseTransformError : Expect::Success;
    Expect both = ft.has_while || ft.has_custom_vjp ? Expect::MayRaiseTransformError : Expect::Success;
    Tol same = same_tol();
    auto F = [this](const Arrays& x) { return full_(p_, x); };
    auto P = [this](const Arrays& x) { return plain_(p_, x); };

    // Values: the program runs, and Plain (recording its decisions) agrees with it.
    check("value", Expect::Success, [&] {
      value = F(xs_);
      return std::string();
    });
    if (!value) return;
    c_ = random_arrays(rng_, {value->shape()}, -1, 1, dt_)[0];
    std::optional<Array> plain_value;
    check("plain value", Expect::Success, [&] {
      Monitor mon;
      tape_.recording = true;
      plain_.monitor = &mon;
      plain_value = plain_(p_, xs_);
      tape_.recording = false;
      plain_.monitor = nullptr;
      margin = mon.margin;
      return std::string();
    });
    if (!plain_value) return;
    bool comparable = margin >= (f64 ? kSameMarginF64 : kSameMarginF32);
    bool fd = f64 && margin >= kFdMargin && !kinked_along_tangent([&](const Arrays& x) { return Arrays{P(x)}; });
    if (!fd && f64) ++st_.fd_skipped;
    if (comparable) {
      check("wrappers vs plain: value", Expect::Success, [&] { return compare({*value}, {*plain_value}, same); });
      check("plain replay", Expect::Success, [&] { return compare({P(xs_)}, {*plain_value}, same); });
      check("jit vs eager", Expect::Success, [&] {
        auto jf = xj::jit(F);
        std::string d = compare({jf(xs_)}, {*value}, same);
        return d.empty() ? compare({jf(xs_)}, {*value}, same) : d;  // the second call reuses the plan
      });
      check("eval_jaxpr(make_jaxpr(f)) vs f", Expect::Success, [&] {
        xj::ClosedJaxpr j = xj::make_jaxpr(F)(xs_);
        xj::typecheck(*j.jaxpr);
        std::ostringstream printed;
        printed << j;
        std::vector<Array> leaves = xs_;
        return compare({xj::eval_jaxpr(j, leaves).at(0)}, {*value}, same);
      });
    }

    // First order.
    Array c = c_;
    auto LF = [F, c](const Arrays& x) { return xj::sum(F(x) * c); };
    auto LP = [P, c](const Arrays& x) { return xj::sum(P(x) * c); };
    // Known bug (kNestedWhileLinearizeBugFixed): reverse mode of a while nested in a while throws
    // std::out_of_range instead of the TransformError; skipped until fixed.
    bool nested_while_bug = !kNestedWhileLinearizeBugFixed && ft.has_nested_while;
    if (!nested_while_bug)
      check("grad", rev, [&] {
        gradient = xj::grad(LF)(xs_);
        return std::string();
      });
    std::optional<Arrays> plain_grad;
    check("grad of plain", Expect::Success, [&] {
      plain_grad = xj::grad(LP)(xs_);
      return std::string();
    });
    if (gradient && plain_grad && comparable)
      check("wrappers vs plain: grad", Expect::Success, [&] { return compare(*gradient, *plain_grad, same); });
    if (gradient && comparable) {
      bool vjp_bug = !kVjpCustomJvpIntoCustomVjpBugFixed && ft.has_custom_vjp && ft.counts.count("CustomJvp");
      check("vjp vs grad", vjp_bug ? Expect::MayRaiseTransformError : rev, [&] {
        auto [y, pull] = xj::vjp(F, xs_);
        std::string d = compare({y}, {*value}, same);
        return d.empty() ? compare(std::get<0>(pull(c)), *gradient, same) : d;
      });
      check("jit(grad) vs grad", Expect::Success, [&] { return compare(xj::jit(xj::grad(LF))(xs_), *gradient, same); });
      check("Array executor vs raw plans", Expect::Success, [&] {
        xj::detail::RawPlansOff off;  // the same kernels through the other executor
        std::string d = compare({F(xs_)}, {*value}, same);
        if (d.empty()) d = compare({xj::jit(F)(xs_)}, {*value}, same);
        if (d.empty()) d = compare(xj::grad(LF)(xs_), *gradient, same);
        return d.empty() ? compare(xj::jit(xj::grad(LF))(xs_), *gradient, same) : d;
      });
      check("value_and_grad, has_aux vs grad", Expect::Success, [&] {
        auto [v, g] = xj::value_and_grad(LF)(xs_);
        auto [g2, aux] = xj::grad([F, c](const Arrays& x) {
          Array y = F(x);
          return std::pair<Array, Array>{xj::sum(y * c), y};
        }, {.has_aux = true})(xs_);
        std::string d = compare({v}, {xj::sum(*value * c)}, same);
        if (d.empty()) d = compare(g, *gradient, same);
        if (d.empty()) d = compare(g2, *gradient, same);
        return d.empty() ? compare({aux}, {*value}, same) : d;
      });
      check("saved_residuals", Expect::Success, [&] {
        // Introspection must work wherever grad does; each residual has a type and a description.
        for (const auto& r : xj::saved_residuals(F, xs_))
          if (r.description.empty()) return std::string("a residual without a description: ") + r.aval.str();
        return std::string();
      });
      if (const Node* scan = lone_scheduled_scan())
        check("saved_residuals: binomial(s) keeps no more than the plain scan", Expect::Success,
              [&] { return schedule_residuals(*scan); });
      check("typecheck(make_jaxpr(grad))", Expect::Success, [&] {
        xj::ClosedJaxpr j = xj::make_jaxpr(xj::grad(LF))(xs_);
        xj::typecheck(*j.jaxpr);
        return compare(xj::eval_jaxpr(j, xs_), *gradient, same);
      });
    }
    // Policy::as(bf16): the gradient differs from the wide one by the rounding of what the
    // backward pass reads, never by a choice the rounding moved (a comparison's mask, max_pool's
    // element, an argmax: narrowing.cpp saves those), which would change an entry by O(1).
    if (!f64 && gradient && comparable && ft.has_narrowed_residuals)
      check("residuals .as(bf16) vs wide", Expect::Success, [&] {
        ++st_.coverage["residuals .as(bf16) oracle (f32 runs)"];
        Runner narrow = full_;
        narrow.residuals_as = xj::bf16;
        auto LN = [this, narrow, c](const Arrays& x) { return xj::sum(narrow(p_, x) * c); };
        return compare(xj::grad(LN)(xs_), *gradient, kNarrowedBf16);
      });
    if (fd && plain_grad)
      check("grad vs finite differences", Expect::Success, [&] {
        auto L = [&](const Arrays& x) { return Arrays{LP(x)}; };
        auto [d1, err] = finite_diff(L);
        return compare({xj::scalar(dot(*plain_grad, ts_), xj::f64)}, d1, kFiniteDiff, err);
      });
    std::optional<Array> tangent;
    check("jvp", fwd, [&] {
      auto [y, t] = xj::jvp(F, std::tuple{xs_}, std::tuple{ts_});
      tangent = t;
      return comparable ? compare({y}, {*value}, same) : std::string();
    });
    if (tangent && fd)
      check("jvp vs finite differences", Expect::Success, [&] {
        auto [d1, err] = finite_diff([&](const Arrays& x) { return Arrays{P(x)}; });
        return compare({*tangent}, d1, kFiniteDiff, err);
      });
    if (tangent && gradient && comparable)
      check("<J t, c> == <t, J^T c>", Expect::Success, [&] {
        double lhs = dot({*tangent}, {c}), rhs = dot(*gradient, ts_);
        // a bf16 gradient's rounding: at most eps |g_k| |t_k| in each term
        double rounding = 0;
        for (std::size_t k = 0; k < gradient->size(); ++k)
          if ((*gradient)[k].dtype() == xj::bf16) rounding += xj::finfo(xj::bf16).eps * dot({xj::abs((*gradient)[k])}, {xj::abs(ts_[k])});
        return compare({xj::scalar(lhs, xj::f64)}, {xj::scalar(rhs, xj::f64)}, f64 && !ft.has_narrowed_residuals ? Tol{1e-8, 1e-10} : Tol{1e-3, 1e-4}, rounding);
      });
    bool lin_ok = !nested_while_bug &&
                  (kCustomVjpLinearizeBugFixed || !p_.features.has_custom_vjp);
    if (lin_ok && comparable)
      check("linearize vs jvp", both, [&] {
        auto [y, lin] = xj::linearize(F, xs_);
        std::string d = compare({y}, {*value}, same);
        if (!d.empty() || !tangent) return d;
        return compare({lin(ts_)}, {*tangent}, same);
      });

    // Transform caches: a jit / grad called first at x, then at a nearby point, gives what a fresh
    // one gives there (only where no kink is near, so that x and the new point agree on branches).
    if (fd && gradient)
      check("jit and grad reused at a new point", Expect::Success, [&] {
        Arrays x2 = shifted(1e-4);
        auto jf = xj::jit(F);
        auto gf = xj::grad(LF);
        (void)jf(xs_);
        (void)gf(xs_);
        std::string d = compare({jf(x2)}, {F(x2)}, same);
        return d.empty() ? compare(gf(x2), xj::grad(LF)(x2), same) : d;
      });
    // The same for an array the function captures (a const of its trace) whose value changes
    // between calls: the reused grad sees the new value, as a fresh one does.
    if (gradient && comparable)
      check("grad reused after a captured array changes", Expect::Success, [&] {
        auto cell = std::make_shared<Array>(c);
        auto gf = xj::grad([F, cell](const Arrays& x) { return xj::sum(F(x) * *cell); });
        (void)gf(xs_);
        Array c2 = c * 2.0 - 0.5;
        *cell = c2;
        auto fresh = xj::grad([F, c2](const Arrays& x) { return xj::sum(F(x) * c2); });
        return compare(gf(xs_), fresh(xs_), same);
      });
    if (fd && gradient && xs_.size() == 1 && xs_[0].size() <= 32 && !nested_while_bug)
      check("jacfwd and jacrev reused at a new point", both, [&] {
        auto F1 = [F](const Array& x) { return F(Arrays{x}); };
        Array x2 = shifted(1e-4)[0];
        auto jf = xj::jacfwd(F1);
        auto jr = xj::jacrev(F1);
        (void)jf(xs_[0]);
        (void)jr(xs_[0]);
        std::string d = compare({jf(x2)}, {xj::jacfwd(F1)(x2)}, same);
        return d.empty() ? compare({jr(x2)}, {xj::jacrev(F1)(x2)}, same) : d;
      });

    // Batching: vmap over three members (xs_ and two nearby points, so that every member takes
    // the branches xs_ takes), each input batched along a random axis or shared, against the
    // program applied to each member and stacked; and vmap(grad) against each member's grad.
    if (fd)
      check("vmap vs loop", Expect::Success, [&] { return vmap_vs_loop(F, {xs_, shifted(1e-4), shifted(-2e-4)}); });
    if (fd && gradient)
      check("vmap(grad) vs loop of grad", rev, [&] { return vmap_vs_loop_of_grads(xj::grad(LF), {xs_, shifted(1e-4), shifted(-2e-4)}); });

    // Batching at distant points: two more members drawn independently of xs_ (each kept only if
    // its own Plain run finds no kink or integer jump near it), so that indices, random keys and
    // branch decisions computed from data differ between members.
    if (comparable) {
      double need = f64 ? kSameMarginF64 : kSameMarginF32;
      std::vector<Arrays> members{xs_};
      check("vmap vs loop at distant points", Expect::Success, [&] {
        for (int k = 0; k < 2; ++k) {
          Arrays x = random_arrays(rng_, p_.main.in, -1.5, 1.5, dt_, bf16_);
          if (margin_at(x) >= need) members.push_back(x);
        }
        return members.size() == 1 ? std::string() : vmap_vs_loop(F, members);
      });
      if (gradient && members.size() > 1)
        check("vmap(grad) vs loop of grad at distant points", rev, [&] { return vmap_vs_loop_of_grads(xj::grad(LF), members); });
    }

    // Jacobians of one-input programs: forward against reverse mode.
    if (xs_.size() == 1 && xs_[0].size() <= 32 && comparable && !nested_while_bug)
      check("jacfwd vs jacrev", both, [&] {
        auto F1 = [F](const Array& x) { return F(Arrays{x}); };
        // A bf16 input: jacfwd's Jacobian has the output's dtype (f32), jacrev's the input's (bf16),
        // as in JAX; compared in f64 with the bf16 one's rounding.
        const Array fwd = xj::jacfwd(F1)(xs_[0]), rev = xj::jacrev(F1)(xs_[0]);
        if (fwd.dtype() == rev.dtype()) return compare({fwd}, {rev}, same);
        return compare({xj::astype(fwd, xj::f64)}, {xj::astype(rev, xj::f64)}, same, narrow_rounding({fwd, rev}));
      });

    // Second order: jvp of grad against finite differences of grad (every other program), and
    // for one-input programs the Hessian (jacfwd of jacrev) applied to t against the same.
    if (fd && gradient && p_.seed % 2 == 0) {
      std::optional<Arrays> hvp;
      check("jvp(grad) vs finite differences of grad", both, [&] {
        auto [g, h] = xj::jvp(xj::grad(LF), std::tuple{xs_}, std::tuple{ts_});
        hvp = h;
        auto [d2, err] = finite_diff([&](const Arrays& x) { return xj::grad(LP)(x); });
        return compare(h, d2, kFiniteDiff, err);
      });
      if (hvp && xs_.size() == 1 && xs_[0].size() <= 32)
        check("hessian . t vs jvp(grad)", both, [&] {
          auto L1 = [LF](const Array& x) { return LF(Arrays{x}); };
          Array h = xj::hessian(L1)(xs_[0]);  // shape x.shape + x.shape
          auto n = xs_[0].size();
          Array ht = xj::reshape(xj::matmul(xj::reshape(h, {n, n}), xj::reshape(ts_[0], {n})), xs_[0].shape());
          return compare({ht}, *hvp, same);
        });
    }
  }

  /// Pairs the f32 run with the f64 run of the same program.
  void compare_with_f64(const Checker& f64) {
    if (p_.features.counts.count("RandNormal")) return;  // draws differ between dtypes
    if (margin < kSameMarginF32 || f64.margin < kSameMarginF32) return;
    if (value && f64.value)
      check("f32 vs f64: value", Expect::Success, [&] { return compare({xj::astype(*value, xj::f64)}, {*f64.value}, kF32VsF64); });
    if (gradient && f64.gradient)
      check("f32 vs f64: grad", Expect::Success, [&] {
        Arrays g;
        for (const auto& x : *gradient) g.push_back(xj::astype(x, xj::f64));
        return compare(g, *f64.gradient, kF32VsF64, narrow_rounding(*gradient));
      });
  }

 private:
  const Program& p_;
  xj::DType dt_;
  Stats& st_;
  std::ostream& out_;
  bool& header_printed_;
  Tape tape_;
  Runner full_, plain_;
  std::vector<bool> bf16_;  // the inputs that are bf16 in the f32 run
  Arrays xs_, ts_;
  Array c_;
  std::mt19937_64 rng_;

  using Axes = std::vector<std::optional<std::int64_t>>;

  /// A random batch axis for each input (None: shared, from member 0), at least one batched.
  Axes random_axes(const Arrays& m0) {
    Axes axes(m0.size());
    bool any = false;
    for (std::size_t k = 0; k < m0.size(); ++k)
      if (std::uniform_int_distribution<int>(0, 3)(rng_) > 0) {
        axes[k] = std::uniform_int_distribution<std::int64_t>(0, m0[k].ndim())(rng_);
        any = true;
      }
    if (!any) axes[0] = 0;
    return axes;
  }

  /// Members' inputs stacked along their axes (a shared input: every member then uses member 0's
  /// value).
  Arrays stack_members(std::vector<Arrays>& members, const Axes& axes) {
    Arrays stacked;
    for (std::size_t k = 0; k < axes.size(); ++k) {
      if (!axes[k]) {
        for (auto& m : members) m[k] = members[0][k];
        stacked.push_back(members[0][k]);
        continue;
      }
      Arrays parts;
      for (const auto& m : members) parts.push_back(m[k]);
      stacked.push_back(xj::stack(parts, *axes[k]));
    }
    return stacked;
  }

  /// The inputs as one dict-shaped argument {group: {key: input}} (keys sorted against the
  /// inputs' order, so a positional match would pair the wrong leaves) with its in_axes: a map
  /// spec per group, or one axis / None covering a whole group (a tree prefix). `axes` is made to
  /// agree where a group is covered whole.
  struct DictLayout {
    std::vector<std::string> group, key;                       // per input
    std::map<std::string, std::optional<std::optional<std::int64_t>>> whole;  // group -> its one spec
  };
  DictLayout dict_layout(Axes& axes, const Arrays& m0) {
    DictLayout l;
    for (std::size_t k = 0; k < axes.size(); ++k) {
      l.group.push_back(std::uniform_int_distribution<int>(0, 1)(rng_) ? "p" : "q");
      l.key.push_back(std::string(1, static_cast<char>('z' - static_cast<int>(k))));
    }
    for (const char* g : {"p", "q"}) {
      if (std::uniform_int_distribution<int>(0, 1)(rng_)) continue;
      // The whole group batched along axis 0 (valid for every rank) or shared.
      std::optional<std::int64_t> one;
      if (std::uniform_int_distribution<int>(0, 1)(rng_)) one = 0;
      l.whole[g] = one;
      for (std::size_t k = 0; k < axes.size(); ++k)
        if (l.group[k] == g) axes[k] = one;
    }
    if (std::none_of(axes.begin(), axes.end(), [](const auto& a) { return a.has_value(); })) {
      axes[0] = 0;
      l.whole.erase(l.group[0]);
    }
    (void)m0;
    return l;
  }

  /// vmap(f) over the stacked inputs, given either as a list with a positional in_axes or as a
  /// dict-shaped argument with a map in_axes (then f reads its inputs back by key).
  template <class Out>
  Out vmapped(const std::function<Out(const Arrays&)>& f, const Arrays& stacked, const Axes& axes,
              const std::optional<DictLayout>& dict, bool jitted) {
    if (!dict) {
      std::tuple<Axes> in_axes{axes};
      return jitted ? xj::jit(xj::vmap(f, in_axes))(stacked) : xj::vmap(f, in_axes)(stacked);
    }
    using Group = std::map<std::string, Array>;
    using Tree = std::map<std::string, Group>;
    using Entry = std::variant<std::optional<std::int64_t>, std::map<std::string, std::optional<std::int64_t>>>;
    Tree arg;
    std::map<std::string, Entry> spec;
    for (std::size_t k = 0; k < stacked.size(); ++k) {
      arg[dict->group[k]][dict->key[k]] = stacked[k];
      auto whole = dict->whole.find(dict->group[k]);
      if (whole != dict->whole.end()) {
        spec[dict->group[k]] = *whole->second;
      } else {
        auto [it, fresh] = spec.try_emplace(dict->group[k], std::map<std::string, std::optional<std::int64_t>>{});
        std::get<1>(it->second)[dict->key[k]] = axes[k];
      }
    }
    auto by_key = [f, l = *dict](const Tree& t) {
      Arrays x;
      for (std::size_t k = 0; k < l.key.size(); ++k) x.push_back(t.at(l.group[k]).at(l.key[k]));
      return f(x);
    };
    auto in_axes = std::make_tuple(spec);
    return jitted ? xj::jit(xj::vmap(by_key, in_axes))(arg) : xj::vmap(by_key, in_axes)(arg);
  }

  /// vmap(f) and jit(vmap(f)) over the members (each input batched along a random axis or
  /// shared; in half the programs as a dict-shaped argument) against f applied to each member and
  /// stacked.
  std::string vmap_vs_loop(const std::function<Array(const Arrays&)>& f, std::vector<Arrays> members) {
    Axes axes = random_axes(members[0]);
    std::optional<DictLayout> dict;
    if (std::uniform_int_distribution<int>(0, 1)(rng_)) dict = dict_layout(axes, members[0]);
    Arrays stacked = stack_members(members, axes);
    Arrays per;
    for (const auto& m : members) per.push_back(f(m));
    Tol same = same_tol();
    std::string d = compare({vmapped(f, stacked, axes, dict, false)}, {xj::stack(per)}, same);
    return d.empty() ? compare({vmapped(f, stacked, axes, dict, true)}, {xj::stack(per)}, same) : d;
  }

  /// vmap(g) over the members against g applied to each member, each gradient stacked.
  std::string vmap_vs_loop_of_grads(const std::function<Arrays(const Arrays&)>& g, std::vector<Arrays> members) {
    Axes axes = random_axes(members[0]);
    std::optional<DictLayout> dict;
    if (std::uniform_int_distribution<int>(0, 1)(rng_)) dict = dict_layout(axes, members[0]);
    Arrays stacked = stack_members(members, axes);
    Arrays got = vmapped(g, stacked, axes, dict, false);
    std::vector<Arrays> per;
    for (const auto& m : members) per.push_back(g(m));
    Arrays want;
    for (std::size_t k = 0; k < got.size(); ++k) {
      Arrays parts;
      for (const auto& p : per) parts.push_back(p[k]);
      want.push_back(xj::stack(parts));
    }
    return compare(got, want, same_tol());
  }

  /// Two code paths' agreement: f64's, or f32's where the program's derivatives read residuals a
  /// checkpoint saved rounded to f32 (Policy::as; two paths may round a residual differently).
  Tol same_tol() const { return dt_ == xj::f64 && !p_.features.has_narrowed_residuals ? kSameF64 : kSameF32; }

  /// The program's one binomial(s) scan of length >= 1 when there is one and it is in the main
  /// block (so it runs once per program run; other scans are the same in both runs), else nullptr.
  const Node* lone_scheduled_scan() const {
    int scans = 0;
    std::function<void(const Block&)> count = [&](const Block& b) {
      for (const Node& n : b.nodes) {
        scans += n.op == Op::Scan && n.ints[4] > 0 && n.ints[2] >= 1;
        for (const Block& s : n.subs) count(s);
      }
    };
    count(p_.main);
    if (scans != 1) return nullptr;
    for (const Node& n : p_.main.nodes)
      if (n.op == Op::Scan && n.ints[4] > 0 && n.ints[2] >= 1) return &n;
    return nullptr;
  }

  /// saved_residuals under binomial(s) against the same program with the plain scan. Entries
  /// equal in both (type and description) are the same values. Each of the schedule's other
  /// "output of revolve_fwd" entries must be accounted for by one thing the plain scan keeps
  /// instead or the schedule needs: a snapshot ([slots, carry...], one per carry leaf), a final
  /// carry or ys array that later code reads (the plain scan's "output of scan" of that type), one
  /// step of a stacked residual ("output of scan" [length, r...]: the last step's r), a hoisted
  /// invariant ("output of" anything else), or one slice of an xs. A loop-invariant operand
  /// copied into the residuals (issue 33) is accounted for by none of these. (A bipartite
  /// matching: a stacked [length, ...] array may stand for ys or for a stacked residual.)
  /// XJAX_FUZZ_DEBUG_RESIDUALS=1 prints both lists.
  std::string schedule_residuals(const Node& scan) {
    const auto ncar = static_cast<std::size_t>(scan.ints[0]);
    const std::int64_t length = scan.ints[2], slots = std::min(scan.ints[4], length);
    std::vector<Shape> env = p_.main.in;  // the main block's environment (it has no captures)
    for (const Node& n : p_.main.nodes) env.insert(env.end(), n.outs.begin(), n.outs.end());
    std::vector<Grant> grants;  // each covers one entry of the schedule
    // The schedule stores the carries of the scan it runs, which may have more than the user's
    // (an inner jvp adds tangent carries: seed 6019216): one snapshot grant per stored carry of
    // each revolve_fwd in the gradient's jaxpr, and a final-carry grant for each of its carries below.
    Array c = c_;
    auto LF = [this, c](const Arrays& x) { return xj::sum(full_(p_, x) * c); };
    std::vector<Shape> known_carries;
    std::function<void(const xj::Jaxpr&)> walk = [&](const xj::Jaxpr& j) {
      for (const auto& e : j.eqns) {
        if (e.prim == xj::Primitive::revolve_fwd) {
          const auto& ps = e.params.get<xj::params::RevolveFwd>();
          const auto n = static_cast<std::size_t>(ps.num_carry);
          const std::size_t ny = ps.jaxpr->jaxpr->outvars.size() - n - static_cast<std::size_t>(ps.num_res);
          for (std::size_t j = 0; j < ps.stored_carries.size(); ++j) grants.push_back(Grant{{e.outputs[n + ny + j].aval().shape}});
          for (std::size_t k = 0; k < n; ++k) known_carries.push_back(e.outputs[k].aval().shape);
        }
        for (const auto& sub : xj::sub_jaxprs(e.params)) walk(*sub->jaxpr);
      }
    };
    walk(*xj::make_jaxpr(xj::grad(LF))(xs_).jaxpr);
    // Where the gradient's jaxpr does not show the revolve_fwd (it runs inside a rule the jaxpr
    // holds as a function, e.g. a custom_vjp's bwd), the user's carries stand for the known ones.
    if (known_carries.empty())
      for (std::size_t k = 0; k < ncar; ++k) {
        Shape snap = scan.outs[k];
        snap.insert(snap.begin(), slots);
        grants.push_back(Grant{{snap}});
        known_carries.push_back(scan.outs[k]);
      }
    for (std::size_t k = ncar; k < scan.args.size(); ++k) {
      Shape x = env[static_cast<std::size_t>(scan.args[k])];
      grants.push_back(Grant{{Shape(x.begin() + 1, x.end())}});
    }
    Runner plain_full{Mode::Full, dt_, nullptr, nullptr, true};
    auto sched = xj::saved_residuals([this](const Arrays& x) { return full_(p_, x); }, xs_);
    auto plain = xj::saved_residuals([&](const Arrays& x) { return plain_full(p_, x); }, xs_);
    if (std::getenv("XJAX_FUZZ_DEBUG_RESIDUALS")) {
      for (const auto& r : sched) std::cerr << "sched " << r.aval.str() << " " << r.description << "\n";
      for (const auto& r : plain) std::cerr << "plain " << r.aval.str() << " " << r.description << "\n";

    }
    std::multiset<std::pair<std::string, std::string>> sched_keys;
    for (const auto& r : sched) sched_keys.insert({r.aval.str(), r.description});
    std::vector<xj::Residual> plain_left;
    for (const auto& r : plain) {
      auto it = sched_keys.find({r.aval.str(), r.description});
      if (it != sched_keys.end()) sched_keys.erase(it);
      else plain_left.push_back(r);
    }
    // A final carry read later is "output of scan" in the plain run and "output of revolve_fwd"
    // in the scheduled one; matching by description may pair the plain one with another scan's
    // output that only the schedule keeps (an xs revolve_lin reads, from the same source line):
    // a carry-shaped "output of scan" of the plain run stands for one final carry too.
    for (const Shape& carry : known_carries)
      for (const auto& r : plain)
        if (r.description.rfind("output of scan", 0) == 0 && r.aval.shape == carry) {
          grants.push_back(Grant{{carry}});
          break;
        }
    for (const auto& r : plain_left) {
      const Shape& sh = r.aval.shape;
      if (r.description.rfind("output of scan", 0) == 0 && !sh.empty() && sh[0] == length)
        grants.push_back(Grant{{sh, Shape(sh.begin() + 1, sh.end())}});
      else if (r.aval.dtype == xj::bool_)
        // A mask the plain run keeps may be rebuilt by the schedule's staged side from operands
        // it keeps anyway (partial_eval's mask pass): where one operand reaches the comparison
        // through a broadcast, the schedule keeps that smaller operand instead (seed 3937: the
        // scan's [1,1,1] output, compared with an argument the schedule keeps for its replay).
        grants.push_back(Grant{{}, sh});  // covers sh itself and what broadcasts to it
      else
        grants.push_back(Grant{{sh}});
    }
    std::vector<Shape> need;
    std::string listed;
    for (const auto& [aval, what] : sched_keys) {
      listed += "\n    " + aval + " " + what;
      if (what.rfind("output of revolve_fwd", 0) != 0) continue;  // a scan operand revolve_lin reads
      for (const auto& r : sched)
        if (r.aval.str() == aval) {
          need.push_back(r.aval.shape);
          break;
        }
    }
    // Kuhn's augmenting paths: entry i takes grant g if g covers its shape.
    std::vector<int> owner(grants.size(), -1);
    std::function<bool(std::size_t, std::vector<bool>&)> place = [&](std::size_t i, std::vector<bool>& seen) {
      for (std::size_t g = 0; g < grants.size(); ++g) {
        if (seen[g] || !grants[g].covers(need[i])) continue;
        seen[g] = true;
        if (owner[g] < 0 || place(static_cast<std::size_t>(owner[g]), seen)) {
          owner[g] = static_cast<int>(i);
          return true;
        }
      }
      return false;
    };
    for (std::size_t i = 0; i < need.size(); ++i) {
      std::vector<bool> seen(grants.size(), false);
      if (!place(i, seen))
        return "a residual of the schedule (" + xj::ShapedArray{need[i], dt_}.str() +
               ", output of revolve_fwd) that the plain scan does not keep in any form; only the schedule keeps:" + listed;
    }
    return std::string();
  }

  /// The smallest distance to a kink or jump that a Plain run at x sees (its own tape).
  double margin_at(const Arrays& x) const {
    Tape tape;
    tape.recording = true;
    Monitor mon;
    Runner{Mode::Plain, dt_, &tape, &mon}(p_, x);
    return mon.margin;
  }

  Arrays shifted(double h) const {
    Arrays out;
    for (std::size_t i = 0; i < xs_.size(); ++i) out.push_back(xs_[i] + ts_[i] * h);
    return out;
  }

  /// Whether g has a kink at xs_ along ts_ that the monitor does not see (seed 25003544: a bf16
  /// draw rounded to exactly 1.0 met max(x, 1), and a tie of two paths whose slopes differ there):
  /// the one-sided differences then differ by the slope's jump whatever the step, where a smooth
  /// g's differ by about h g'' (twice as much at 2h). Central differences cannot see it.
  bool kinked_along_tangent(const std::function<Arrays(const Arrays&)>& g) const {
    const Arrays at = g(xs_);
    auto gap = [&](double h) {
      const Arrays plus = g(shifted(h)), minus = g(shifted(-h));
      Arrays forward, backward;
      for (std::size_t i = 0; i < at.size(); ++i) {
        forward.push_back((plus[i] - at[i]) / h);
        backward.push_back((at[i] - minus[i]) / h);
      }
      double scale = 1;
      for (const auto& a : at) scale = std::max(scale, xj::max(xj::abs(xj::astype(a, xj::f64))).item<double>());
      for (const auto& d : forward) scale = std::max(scale, xj::max(xj::abs(xj::astype(d, xj::f64))).item<double>());
      return std::pair{norm_diff(forward, backward), scale};
    };
    const auto [g1, scale] = gap(kStep);
    const double g2 = gap(2 * kStep).first;
    // (1e-6 scale: below it rounding noise, which shrinks as h grows, looked like a kink; a kink's
    // gap stays put: within a quarter from h to 2h.)
    return g1 > 1e-6 * scale && std::abs(g2 - g1) < 0.25 * g1;
  }

  /// The central difference of g along ts_ at xs_ with step kStep, and an estimate of its error
  /// (twice its distance to the difference with step 2 kStep).
  std::pair<Arrays, double> finite_diff(const std::function<Arrays(const Arrays&)>& g) const {
    auto central = [&](double h) {
      Arrays plus = g(shifted(h)), minus = g(shifted(-h)), d;
      for (std::size_t i = 0; i < plus.size(); ++i) d.push_back((plus[i] - minus[i]) / (2 * h));
      return d;
    };
    Arrays d1 = central(kStep), d2 = central(2 * kStep);
    return {d1, 2 * norm_diff(d1, d2)};
  }

  void check(const char* oracle, Expect expect, const std::function<std::string()>& fn) {
    std::snprintf(g_activity, sizeof g_activity, "seed %llu (%s), oracle '%s'",
                  static_cast<unsigned long long>(p_.seed), dt_ == xj::f64 ? "f64" : "f32", oracle);
    ++st_.checks;
    ++st_.oracles[oracle];
    try {
      std::string d = fn();
      if (!d.empty()) fail(oracle, d);
    } catch (const xj::TransformError& e) {
      if (expect == Expect::MayRaiseTransformError) ++st_.expected_errors;
      else fail(oracle, "unexpected xj::TransformError: " + std::string(e.what()));
    } catch (const std::exception& e) {
      fail(oracle, "unexpected " + demangle(typeid(e).name()) + ": " + e.what());
    }
  }

  void fail(const char* oracle, const std::string& what) {
    ok = false;
    ++st_.failures;
    if (!header_printed_) {
      header_printed_ = true;
      out_ << "==== FAILURE: seed " << p_.seed << " (reproduce: xjax-fuzz --seed " << p_.seed << ")\n" << print(p_);
      out_ << "inputs (" << (dt_ == xj::f64 ? "f64" : "f32") << "):\n" << show(xs_) << "tangents:\n" << show(ts_);
      try {
        Runner full{Mode::Full, dt_, nullptr, nullptr};
        out_ << "jaxpr:\n" << xj::make_jaxpr([&](const Arrays& x) { return full(p_, x); })(xs_) << "\n";
      } catch (const std::exception& e) {
        out_ << "jaxpr: make_jaxpr raised " << demangle(typeid(e).name()) << ": " << e.what() << "\n";
      }
    }
    out_ << "FAIL seed " << p_.seed << " " << (dt_ == xj::f64 ? "f64" : "f32") << " [" << oracle << "]: " << what << "\n";
  }
};

}  // namespace

const char* current_activity() { return g_activity; }

namespace {
// Adds the primitives of j and of the jaxprs in its parameters to `seen`.
void collect_primitives(const xj::Jaxpr& j, std::set<std::string>& seen) {
  for (const auto& e : j.eqns) {
    seen.insert(std::string(xj::primitive_name(e.prim)));
    for (const auto& sub : xj::sub_jaxprs(e.params))
      if (sub) collect_primitives(*sub->jaxpr, seen);
  }
}

// The primitives a program's jaxprs hold: f's, grad's and linearize's (where they exist).
void record_primitives(const Program& p, Stats& stats) {
  std::set<std::string> seen;
  Runner full{Mode::Full, xj::f64, nullptr, nullptr};
  auto F = [&](const Arrays& x) { return full(p, x); };
  auto L = [&](const Arrays& x) { return xj::sum(F(x)); };
  Arrays x;
  for (const auto& s : p.main.in) x.push_back(xj::zeros(s, xj::f64) + 0.25);
  auto attempt = [&](const std::function<xj::ClosedJaxpr()>& make) {
    try {
      collect_primitives(*make().jaxpr, seen);
    } catch (const std::exception&) {  // e.g. the documented TransformErrors: nothing to record
    }
  };
  attempt([&] { return xj::make_jaxpr(F)(x); });
  attempt([&] { return xj::make_jaxpr([&](const Arrays& y) { return xj::grad(L)(y); })(x); });
  attempt([&] {
    return xj::make_jaxpr([&](const Arrays& y) {
      auto [out, lin] = xj::linearize(F, y);
      return lin(y);
    })(x);
  });
  for (const auto& name : seen) ++stats.primitives[name];
}
}  // namespace

const std::map<std::string, std::string>& primitives_not_fuzzed() {
  static const std::map<std::string, std::string> reasons = {
      {"psum", "a collective: tests/test_distributed.cpp under mpirun"},
      {"pmax", "a collective: tests/test_distributed.cpp under mpirun"},
      {"all_gather", "a collective: tests/test_distributed.cpp under mpirun"},
      {"psum_scatter", "a collective: tests/test_distributed.cpp under mpirun"},
      {"ppermute", "a collective: tests/test_distributed.cpp under mpirun"},
      {"copy", "no user op emits it (JAX's copy_p); its rules are checked by tests/gradcheck through detail::bind"},
      {"custom_lin", "exists only inside reverse mode's linearization of a custom_vjp call, transposed into the user's "
                     "bwd before any jaxpr is returned; the grad, vjp and saved_residuals oracles run it on every "
                     "custom_vjp program"},
  };
  return reasons;
}

int report_unfuzzed_primitives(const Stats& stats, std::ostream& out) {
  int missing = 0;
#define XJAX_FUZZ_REACHED(name)                                                                  \
  {                                                                                             \
    const std::string n(xj::primitive_name(xj::Primitive::name));                               \
    if (!stats.primitives.count(n) && !primitives_not_fuzzed().count(n)) {                      \
      out << "primitive " << n << " is in no generated program (add a fuzzer op, tests/fuzz)\n"; \
      ++missing;                                                                                \
    }                                                                                           \
  }
  XJAX_FOR_EACH_PRIMITIVE(XJAX_FUZZ_REACHED)
#undef XJAX_FUZZ_REACHED
  return missing;
}

bool check_program(std::uint64_t seed, Stats& stats, const Options& opts, std::ostream& out) {
  Program p = generate(seed);
  ++stats.programs;
  for (const auto& [what, n] : p.features.counts) stats.coverage[what] += n > 0;
  if (opts.primitives) record_primitives(p, stats);
  if (opts.verbose) out << print(p);
  bool header = false;
  Checker f64(p, xj::f64, stats, out, header);
  f64.run();
  Checker f32(p, xj::f32, stats, out, header);
  f32.run();
  f32.compare_with_f64(f64);
  return f64.ok && f32.ok;
}

}  // namespace fuzz

// generate.cpp: random programs from a seed, and their printer.
//
// Every value has a shape and a bound on its magnitude; ops that would let a value grow past
// kMaxMag are not chosen, so values stay well-conditioned and finite differences meaningful.
// Every op is well defined on all reals (log(1 + x^2) rather than log x, a / (1.5 + tanh b)
// rather than a / b), so no program needs a domain check.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>

#include "program.hpp"

namespace fuzz {

namespace {

constexpr double kMaxMag = 16;
constexpr double kCarryMag = 3;  // loop carries are squashed into [-3, 3] each iteration
// Every 8th seed makes a big program: more nodes and wrappers, deeper nesting, longer loops, and
// sometimes a dimension of 8-24 (elementwise chains longer than one fusion block).

struct Val {
  Shape shape;
  double mag;
};


}  // namespace

std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

namespace {

/// Restrictions a sub-block inherits (patterns that would make a transform raise by design).
struct Restrict {
  bool no_while = false;       // inside a custom_vjp whose bwd runs vjp of the block
  bool no_custom_vjp = false;  // inside a custom_jvp whose rule runs jvp of the block
  bool pure = false;           // inside an inner grad: no decisions (cond, while, kinks, stop_gradient)
};

struct Scope {
  std::vector<Val> env;
  int depth = 0;
  bool in_while = false;
  bool in_checkpoint = false;
  Restrict r;
};

class Gen {
 public:
  explicit Gen(std::uint64_t seed) : rng_(seed), side_(seed ^ 0x5bd1e995u), big_(seed % 8 == 0) {
    max_depth_ = big_ ? 4 : 3;
    max_wrappers_ = big_ ? 10 : 6;
  }

  Program program(std::uint64_t seed) {
    Program p;
    p.seed = seed;
    feat_ = &p.features;
    int nin = uniform(1, 3);
    std::vector<Shape> in;
    std::vector<double> mags;
    for (int i = 0; i < nin; ++i) {
      in.push_back(random_shape(coin(0.1) ? 3 : 2));
      mags.push_back(1.5);
    }
    Scope s;
    p.main = block(in, mags, s, {}, {}, 0, {}, big_ ? uniform(8, 16) : uniform(3, 9), false, false);
    return p;
  }

 private:
  std::mt19937_64 rng_;
  /// Draws added after the regression seeds were recorded (tests/fuzz/meson.build): taken from
  /// their own stream, so that rng_'s stream, and the program of every seed they leave as it
  /// was, stays the same.
  std::mt19937_64 side_;
  bool big_;
  int max_depth_, max_wrappers_;
  Features* feat_ = nullptr;
  int wrappers_ = 0;

  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  /// A constant in [-lo, hi]: a multiple of 1/8 while CSE merges close literals (known bug).
  double constant(double lo, double hi) {
    double v = std::uniform_real_distribution<double>(lo, hi)(rng_);
    return kCseLiteralBugFixed ? v : std::round(v * 8) / 8;
  }
  Shape random_shape(int max_rank) {
    Shape s(static_cast<std::size_t>(uniform(0, max_rank)));
    for (auto& d : s) d = big_ && coin(0.1) ? uniform(8, 24) : uniform(1, 3);
    return s;
  }
  void count(const std::string& what) { ++feat_->counts[what]; }

  /// An env index, biased towards recent values; -1 when no value satisfies `ok`.
  template <class P> int pick(const Scope& s, P ok) {
    std::vector<int> c;
    for (int i = 0; i < static_cast<int>(s.env.size()); ++i)
      if (ok(s.env[static_cast<std::size_t>(i)])) c.push_back(i);
    if (c.empty()) return -1;
    if (c.size() > 3 && coin(0.5)) return c[c.size() - 1 - static_cast<std::size_t>(uniform(0, 2))];
    return c[static_cast<std::size_t>(uniform(0, static_cast<int>(c.size()) - 1))];
  }
  int pick_any(const Scope& s) {
    return pick(s, [](const Val&) { return true; });
  }
  const Val& at(const Scope& s, int i) { return s.env[static_cast<std::size_t>(i)]; }

  /// Sometimes (not inside an inner grad: a decision) the node's integer indices or random key
  /// come from data: variant 1, with one more argument, the value they are computed from
  /// (interpret.cpp: data_index). Under vmap they are batched whenever that value is.
  void maybe_data_indices(Scope& s, Node& n) {
    if (s.r.pure || !coin(0.35)) return;
    n.variant = 1;
    n.args.push_back(pick_any(s));
    count(std::string(op_name(n.op)) + "_data");
  }

  void push(Scope& s, Block& b, Node n, std::vector<double> mags) {
    count(op_name(n.op));
    for (std::size_t i = 0; i < n.outs.size(); ++i) s.env.push_back({n.outs[i], mags[i]});
    b.nodes.push_back(std::move(n));
  }

  /// A block over inputs `in` inside scope `outer`, whose outputs are fitted to `outs` (empty:
  /// one output of the last value's shape) and squashed below `out_mag`.
  Block block(const std::vector<Shape>& in, const std::vector<double>& in_mag, const Scope& outer,
              std::vector<Shape> outs, std::vector<double> out_mag, int depth, Restrict r, int nodes,
              bool may_capture, bool in_while, bool in_checkpoint = false, int min_captures = 0) {
    Block b;
    b.in = in;
    Scope s;
    s.depth = depth;
    s.r = r;
    s.in_while = in_while;
    s.in_checkpoint = in_checkpoint || outer.in_checkpoint;  // names reach nested bodies too
    for (std::size_t i = 0; i < in.size(); ++i) s.env.push_back({in[i], in_mag[i]});
    if (may_capture && !outer.env.empty()) {
      int nc = uniform(min_captures, 2);
      for (int k = 0; k < nc; ++k) {
        int i = pick_any(outer);
        b.captures.push_back(i);
        s.env.push_back(at(outer, i));
        count("capture");
      }
    }
    for (int k = 0; k < nodes; ++k) add_node(s, b);
    if (outs.empty()) {
      // The program's output: the last value, plus sometimes another one fitted to its shape.
      int last = static_cast<int>(s.env.size()) - 1;
      outs.push_back(size_of(at(s, last).shape) == 0 ? random_shape(2) : at(s, last).shape);
      out_mag.push_back(kMaxMag);
    }
    for (std::size_t k = 0; k < outs.size(); ++k) b.outs.push_back(output(s, b, outs[k], out_mag[k]));
    return b;
  }

  /// An env value fitted to `shape` (plus another one, sometimes), squashed below `mag`.
  int output(Scope& s, Block& b, const Shape& shape, double mag) {
    auto fitted = [&](int i) {
      if (at(s, i).shape == shape) return i;
      Node n{.op = Op::Fit, .args = {i}, .outs = {shape}};
      push(s, b, n, {at(s, i).mag});
      return static_cast<int>(s.env.size()) - 1;
    };
    int v = fitted(coin(0.6) ? static_cast<int>(s.env.size()) - 1 : pick_any(s));
    if (coin(0.4)) {
      int w = fitted(pick_any(s));
      if (at(s, v).mag + at(s, w).mag <= kMaxMag) {
        Node n{.op = Op::Add, .args = {v, w}, .outs = {shape}};
        push(s, b, n, {at(s, v).mag + at(s, w).mag});
        v = static_cast<int>(s.env.size()) - 1;
      }
    }
    if (at(s, v).mag > mag) {
      Node n{.op = Op::Squash, .args = {v}, .outs = {shape}, .c = mag};
      push(s, b, n, {mag});
      v = static_cast<int>(s.env.size()) - 1;
    }
    return v;
  }

  void add_node(Scope& s, Block& b) {
    for (int attempt = 0; attempt < 20; ++attempt) {
      int cat = uniform(0, 99);
      bool ok = false;
      if (cat < 25) ok = unary(s, b);
      else if (cat < 44) ok = binary(s, b);
      else if (cat < 50) ok = reduction(s, b);
      else if (cat < 53) ok = training(s, b);
      else if (cat < 59) ok = linalg(s, b);
      else if (cat < 68) ok = shape_op(s, b);
      else if (cat < 70) ok = at_op(s, b);
      else if (cat < 73) ok = leaf(s, b);
      else if (cat < 77 && s.in_checkpoint) ok = name(s, b);
      else ok = wrapper(s, b);
      if (ok) return;
    }
    Node n{.op = Op::Sin, .args = {pick_any(s)}};
    n.outs = {at(s, n.args[0]).shape};
    push(s, b, n, {1});
  }

  bool name(Scope& s, Block& b) {
    int i = pick_any(s);
    Node n{.op = Op::Name, .args = {i}, .outs = {at(s, i).shape}, .text = "n" + std::to_string(uniform(0, 3))};
    push(s, b, n, {at(s, i).mag});
    return true;
  }

  bool leaf(Scope& s, Block& b) {
    Node n;
    n.op = std::array{Op::Const, Op::Iota, Op::RandNormal}[static_cast<std::size_t>(uniform(0, 2))];
    Shape shape = random_shape(2);
    n.outs = {shape};
    double mag = 1;
    if (n.op == Op::Const) {
      n.c = constant(-2, 2);
      mag = std::abs(n.c);
    } else if (n.op == Op::Iota) {
      if (shape.empty()) return false;
      n.ints = {uniform(0, static_cast<int>(shape.size()) - 1)};
      mag = static_cast<double>(shape[static_cast<std::size_t>(n.ints[0])]);
    } else {
      // Known bug (kCseLiteralBugFixed): normal draws use the literals 2^-23 / 2^-52, which CSE
      // merges with a 0 literal (e.g. under jvp); no random draws until it is fixed.
      if (!kCseLiteralBugFixed) return false;
      n.ints = {uniform(0, 1000)};
      mag = 5;
      if (!s.env.empty()) maybe_data_indices(s, n);
    }
    push(s, b, n, {mag});
    return true;
  }

  bool unary(Scope& s, Block& b) {
    int i = pick_any(s);
    const Val& v = at(s, i);
    double m = v.mag;
    static constexpr Op ops[] = {Op::Neg, Op::Sin, Op::Cos, Op::Tanh, Op::Logistic, Op::Softplus, Op::Gelu,
                                 Op::Exp, Op::Expm1, Op::Log1pSq, Op::LogOnePlusSq, Op::Rational,
                                 Op::SqrtOnePlusSq, Op::RsqrtOnePlusSq, Op::RecipOnePlusSq, Op::Square,
                                 Op::IntPow, Op::TanBounded, Op::Elementary, Op::PowScalar, Op::Squash, Op::ScaleShift,
                                 Op::CastRoundTrip, Op::StopGradient, Op::Abs, Op::Relu, Op::Sign,
                                 Op::Silu, Op::LogSigmoid, Op::Elu, Op::LeakyRelu, Op::Bitwise, Op::Logic,
                                 Op::Elementary, Op::Elementary};  // three entries: it has 20 variants
    Node n{.op = ops[static_cast<std::size_t>(uniform(0, std::size(ops) - 1))], .args = {i}, .outs = {v.shape}};
    if (s.r.pure && (n.op == Op::Abs || n.op == Op::Relu || n.op == Op::Sign || n.op == Op::StopGradient ||
                     n.op == Op::Elu || n.op == Op::LeakyRelu || n.op == Op::Bitwise))
      return false;
    double out = m;
    switch (n.op) {
      case Op::Sin: case Op::Cos: case Op::Tanh: case Op::Logistic: case Op::RsqrtOnePlusSq:
      case Op::RecipOnePlusSq: case Op::Sign: out = 1; break;
      case Op::Softplus: case Op::LogSigmoid: out = m + 0.7; break;
      case Op::Elu: case Op::LeakyRelu:  // elu's alpha, leaky_relu's slope: 1/2 or 1/8
        n.c = coin(0.5) ? 0.5 : 0.125;
        break;
      case Op::Exp: case Op::Expm1:
        if (m > 2.5) return false;
        out = std::exp(m);
        break;
      case Op::Log1pSq: case Op::LogOnePlusSq: out = std::log1p(m * m); break;
      case Op::Rational: out = 0.5; break;
      case Op::SqrtOnePlusSq: out = std::sqrt(1 + m * m); break;
      case Op::Square: out = m * m; break;
      case Op::IntPow:
        n.ints = {uniform(2, 3)};
        out = std::pow(m, static_cast<double>(n.ints[0]));
        break;
      case Op::TanBounded: out = 1.6; break;
      case Op::Logic:  // interpret.cpp: 0 is_finite, 1 all, 2 any, 3-4 clamp, 5 argmin (1-5 have kinks)
        n.variant = s.r.pure ? 0 : uniform(0, 5);
        if (n.variant == 5 && (v.shape.empty() || v.shape.back() == 0)) n.variant = 0;  // argmin of an empty axis: an error
        out = n.variant == 3 ? 0.5 : n.variant == 4 ? 0.8 : (n.variant == 2 || n.variant == 5) ? 2 * m : m;
        break;
      case Op::Bitwise:  // interpret.cpp: an integer op on floor(4 x), scaled by 1/8
        n.variant = uniform(0, 7);
        out = 4 * m / 8 + 4.2;
        break;
      case Op::Elementary:  // interpret.cpp: asin ... ceil, lgamma, digamma, erf_inv, each on a domain where it is smooth
        n.variant = uniform(0, 19);  // 15-17: lgamma, digamma, erf_inv; 18, 19: round
        if (s.r.pure && (n.variant == 13 || n.variant == 14 || n.variant >= 18)) return false;  // piecewise constant
        out = n.variant == 5 ? std::asinh(m) : (n.variant == 13 || n.variant == 14 || n.variant >= 18) ? m + 1 : 2.7;
        break;
      case Op::PowScalar:
        n.c = std::array{0.5, 1.5, -0.5, 2.0}[static_cast<std::size_t>(uniform(0, 3))];
        out = std::pow(1 + m * m, std::max(n.c, 0.0));
        break;
      case Op::Squash:
        n.c = uniform(1, 4);
        out = std::min(m, n.c);
        break;
      case Op::ScaleShift:
        n.variant = uniform(0, 3);  // spelling: x*a+b, a*x-b, add(mul(x, a), b), b - x/a
        n.c = constant(-2, 2);
        n.ints = {uniform(1, 4) * (coin(0.5) ? -1 : 1)};  // the factor, in halves
        out = m * static_cast<double>(std::abs(n.ints[0])) / 2 + std::abs(n.c);
        break;
      default: break;
    }
    if (out > kMaxMag) return false;
    push(s, b, n, {out});
    return true;
  }

  bool binary(Scope& s, Block& b) {
    int i = pick_any(s);
    const Val a = at(s, i);
    static constexpr Op ops[] = {Op::Add,     Op::Sub,     Op::Mul,      Op::DivSafe, Op::PowSafe,
                                 Op::Maximum, Op::Minimum, Op::SelectGt, Op::Atan2,   Op::RemSafe,
                                 Op::NextAfter, Op::LogAddExp};
    Op op = ops[static_cast<std::size_t>(uniform(0, std::size(ops) - 1))];
    bool kink = op == Op::Maximum || op == Op::Minimum || op == Op::SelectGt || op == Op::RemSafe;
    if (kink && s.r.pure) return false;
    // A kink of an operand against itself is an exact tie: no finite differences for the program.
    int j = pick(s, [&](const Val& v) { return broadcast(a.shape, v.shape).has_value() && (!kink || &v != &at(s, i)); });
    if (j < 0) return false;
    const Val c = at(s, j);
    Node n{.op = op, .args = {i, j}};
    n.outs = {*broadcast(a.shape, c.shape)};
    n.variant = uniform(0, 1);  // operator or named function
    if (op == Op::SelectGt) n.ints = {uniform(0, 3)};  // a > b written as gt, ge, lt or le
    double out = 0;
    switch (n.op) {
      case Op::Add: case Op::Sub: out = a.mag + c.mag; break;
      case Op::Mul: out = a.mag * c.mag; break;
      case Op::DivSafe: out = 2 * a.mag; break;
      case Op::PowSafe: out = 1 + a.mag * a.mag; break;
      case Op::Atan2: out = 3.2; break;
      case Op::RemSafe: out = 2.5; break;
      case Op::NextAfter: out = a.mag * 1.001; break;
      case Op::LogAddExp: out = std::max(a.mag, c.mag) + std::log(2.0); break;
      case Op::SelectGt: out = 2 * std::max(a.mag, c.mag); break;
      default: out = std::max(a.mag, c.mag); break;
    }
    if (out > kMaxMag) return false;
    push(s, b, n, {out});
    return true;
  }

  /// A random subset of the axes of rank r (in order; sometimes negative spellings).
  std::vector<std::int64_t> axes_subset(std::size_t r, bool nonempty) {
    std::vector<std::int64_t> axes;
    for (std::size_t k = 0; k < r; ++k)
      if (coin(0.5)) axes.push_back(coin(0.3) ? static_cast<std::int64_t>(k) - static_cast<std::int64_t>(r) : static_cast<std::int64_t>(k));
    if (nonempty && axes.empty() && r > 0) axes.push_back(uniform(0, static_cast<int>(r) - 1));
    return axes;
  }

  /// cumsum, cumprod (of tanh x: bounded, exact zeros kept), cummax, cummin (not in pure
  /// programs: kinks), cumlogsumexp along one axis, forward or reversed (variant: which).
  bool cumulative(Scope& s, Block& b) {
    const int variant = uniform(0, 4);
    if (s.r.pure && (variant == 2 || variant == 3)) return false;
    const int i = pick(s, [](const Val& v) { return !v.shape.empty(); });
    if (i < 0) return false;
    const Val v = at(s, i);
    const auto r = static_cast<int>(v.shape.size());
    Node n{.op = Op::Cumulative, .args = {i}};
    n.variant = variant;
    n.ints = {uniform(-r, r - 1)};
    n.flag = coin(0.4);  // reverse
    n.outs = {v.shape};
    const double len = static_cast<double>(v.shape[static_cast<std::size_t>((n.ints[0] + r) % r)]);
    const double mag = variant == 0 ? v.mag * len : variant == 1 ? 1.0 : variant == 4 ? v.mag + std::log(std::max(len, 1.0)) : v.mag;
    if (mag > kMaxMag) return false;
    push(s, b, n, {mag});
    return true;
  }

  /// sort along an axis, top_k's values along the last (k in ints[1]), or x gathered by its
  /// argsort (variant); not in pure programs (a kink wherever two elements tie).
  bool sort_op(Scope& s, Block& b) {
    if (s.r.pure) return false;
    const int i = pick(s, [](const Val& v) { return !v.shape.empty() && v.shape.back() > 0; });
    if (i < 0) return false;
    const Val v = at(s, i);
    const auto r = static_cast<int>(v.shape.size());
    Node n{.op = Op::Sort, .args = {i}};
    n.variant = uniform(0, 2);
    n.ints = {n.variant == 1 ? -1 : uniform(-r, r - 1), uniform(1, static_cast<int>(v.shape.back()))};
    n.outs = {v.shape};
    if (n.variant == 1) n.outs[0].back() = n.ints[1];
    push(s, b, n, {v.mag});
    return true;
  }

  /// A window reduction of a value of rank >= 1 (variant: 0 sum, 1 max, 2 min, 3 avg_pool-like
  /// mean of the sum); per dim in ints (6 each): window, stride, padding lo, hi, base dilation,
  /// window dilation. Max and min (not in pure programs: kinks at ties) keep every window on at
  /// least one element (no base dilation, padding below the window), so no output is +-inf.
  bool window_op(Scope& s, Block& b) {
    const int variant = uniform(0, 3);
    if (s.r.pure && (variant == 1 || variant == 2)) return false;
    const int i = pick(s, [](const Val& v) { return !v.shape.empty() && size_of(v.shape) > 0; });
    if (i < 0) return false;
    const Val v = at(s, i);
    Node n{.op = Op::Window, .args = {i}};
    n.variant = variant;
    const bool chooser = variant == 1 || variant == 2;
    Shape out;
    double count = 1;
    for (const std::int64_t size : v.shape) {
      const std::int64_t window = uniform(1, 3), stride = uniform(1, 2);
      const std::int64_t base = chooser || coin(0.7) ? 1 : 2, wdil = chooser || coin(0.7) ? 1 : 2;
      const std::int64_t lo = uniform(0, static_cast<int>(window) - 1), hi = uniform(0, static_cast<int>(window) - 1);
      const std::int64_t padded = (size - 1) * base + 1 + lo + hi, extent = (window - 1) * wdil + 1;
      if (padded < extent) return false;
      out.push_back((padded - extent) / stride + 1);
      n.ints.insert(n.ints.end(), {window, stride, lo, hi, base, wdil});
      count *= static_cast<double>(window);
    }
    const double mag = variant == 0 ? v.mag * count : v.mag;
    if (mag > kMaxMag) return false;
    n.outs = {out};
    push(s, b, n, {mag});
    return true;
  }

  bool reduction(Scope& s, Block& b) {
    static constexpr Op ops[] = {Op::Sum,     Op::Mean,       Op::Max, Op::Min,       Op::ProdPos,
                                 Op::LogSumExp, Op::Softmax, Op::LogSoftmax, Op::Var, Op::Cumulative, Op::Sort, Op::Window,
                                 Op::Window};  // twice: the max / min windows' select pair is rare otherwise
    Op op = ops[static_cast<std::size_t>(uniform(0, std::size(ops) - 1))];
    if (s.r.pure && (op == Op::Max || op == Op::Min)) return false;
    if (op == Op::Cumulative) return cumulative(s, b);
    if (op == Op::Sort) return sort_op(s, b);
    if (op == Op::Window) return window_op(s, b);
    int i = pick(s, [&](const Val& v) { return op == Op::Sum || size_of(v.shape) > 0; });
    if (i < 0) return false;
    const Val v = at(s, i);
    Node n{.op = op, .args = {i}};
    std::size_t r = v.shape.size();
    if (op == Op::Softmax || op == Op::LogSoftmax) {
      if (r == 0) return false;
      n.ints = {uniform(-static_cast<int>(r), static_cast<int>(r) - 1)};
      n.outs = {v.shape};
      double len = static_cast<double>(v.shape[static_cast<std::size_t>((n.ints[0] + static_cast<std::int64_t>(r)) % static_cast<std::int64_t>(r))]);
      push(s, b, n, {op == Op::Softmax ? 1.0 : 2 * v.mag + std::log(len)});
      return true;
    }
    n.ints = axes_subset(r, false);
    n.flag = coin(0.3);  // keepdims
    std::vector<bool> reduced(r, n.ints.empty());
    for (auto a : n.ints) reduced[static_cast<std::size_t>((a + static_cast<std::int64_t>(r)) % static_cast<std::int64_t>(r))] = true;
    Shape out;
    double count = 1;
    for (std::size_t k = 0; k < r; ++k) {
      if (!reduced[k]) out.push_back(v.shape[k]);
      else {
        count *= static_cast<double>(v.shape[k]);
        if (n.flag) out.push_back(1);
      }
    }
    n.outs = {out};
    double mag = v.mag;
    if (op == Op::Sum) mag = v.mag * count;
    if (op == Op::ProdPos) {
      // Known bug (kReduceProdZeroBugFixed): prod's derivative divides by x, wrong at an exact 0
      // (relu, constants and iota make exact zeros); until fixed, prod only sees 1.5 + tanh x.
      n.variant = kReduceProdZeroBugFixed && coin(0.5) && std::pow(v.mag, count) <= kMaxMag ? 1 : 0;
      mag = n.variant == 1 ? std::pow(v.mag, count) : std::pow(2.5, count);
    }
    if (op == Op::LogSumExp) mag = v.mag + std::log(count);
    if (op == Op::Var) {  // ddof 1 needs two values; var <= (2 mag)^2 N / (N - ddof)
      n.variant = count >= 2 && coin(0.5) ? 1 : 0;
      mag = 4 * v.mag * v.mag * count / (count - n.variant);
    }
    if (mag > kMaxMag) return false;
    push(s, b, n, {mag});
    return true;
  }

  /// The training-loop pieces (issue 34): take_along_axis, standardize / layer_norm / rms_norm,
  /// and the optax losses, on a value of rank >= 1.
  bool training(Scope& s, Block& b) {
    int i = pick(s, [](const Val& v) { return !v.shape.empty() && size_of(v.shape) > 0; });
    if (i < 0) return false;
    const Val v = at(s, i);
    const int kind = uniform(0, 2);
    if (kind == 0) return take_along_axis(s, b, i);
    if (kind == 1) return normalization(s, b, i);
    return loss(s, b, i);
  }

  /// ints: the axis, then the indices' shape (the operand's, but 1-4 along the axis and sometimes
  /// 1 elsewhere: broadcast); ints2: the indices, in [-d, d - 1]; variant 1 adds an index from data.
  bool take_along_axis(Scope& s, Block& b, int i) {
    const Shape sh = at(s, i).shape;
    const int r = static_cast<int>(sh.size());
    const int axis = uniform(0, r - 1);
    const auto d = static_cast<int>(sh[static_cast<std::size_t>(axis)]);
    Shape idx = sh, out = sh;
    idx[static_cast<std::size_t>(axis)] = out[static_cast<std::size_t>(axis)] = uniform(1, 4);
    for (int q = 0; q < r; ++q)
      if (q != axis && coin(0.2)) idx[static_cast<std::size_t>(q)] = 1;
    Node n{.op = Op::TakeAlongAxis, .args = {i}, .outs = {out}};
    n.ints = {coin(0.3) ? axis - r : axis};
    n.ints.insert(n.ints.end(), idx.begin(), idx.end());
    for (std::int64_t k = 0; k < size_of(idx); ++k) n.ints2.push_back(uniform(-d, d - 1));
    maybe_data_indices(s, n);
    push(s, b, n, {at(s, i).mag});
    return true;
  }

  /// variant: standardize, layer_norm, rms_norm; ints: the axis, whether a scale and a bias
  /// (other values, fitted to the axis' length) are given; c: epsilon, large (1/4 or 1) so that
  /// 1/sqrt(var + epsilon) stays small and finite differences meaningful.
  bool normalization(Scope& s, Block& b, int i) {
    const Val v = at(s, i);
    const int r = static_cast<int>(v.shape.size());
    Node n{.op = Op::Norm, .args = {i}, .outs = {v.shape}};
    n.variant = uniform(0, 2);
    const int axis = uniform(-r, r - 1);
    const auto len = static_cast<double>(v.shape[static_cast<std::size_t>((axis + r) % r)]);
    const bool scale = n.variant != 0 && coin(0.7), bias = n.variant == 1 && coin(0.5);
    n.ints = {axis, scale, bias};
    n.c = coin(0.5) ? 0.25 : 1.0;
    double mag = std::sqrt(len);  // |x - mean| <= sqrt(n var), |x| <= sqrt(n mean(x^2))
    if (scale) {
      n.args.push_back(pick_any(s));
      mag *= at(s, n.args.back()).mag;
    }
    if (bias) {
      n.args.push_back(pick_any(s));
      mag += at(s, n.args.back()).mag;
    }
    if (mag > kMaxMag) return false;
    push(s, b, n, {mag});
    return true;
  }

  /// variant: softmax_cross_entropy (labels: softmax of another value), the same with integer
  /// labels (ints2), sigmoid_binary_cross_entropy (labels: logistic of another value), l2_loss,
  /// huber_loss (c: delta); flag: targets given (l2, huber). The other value has the logits' shape.
  bool loss(Scope& s, Block& b, int i) {
    const Val v = at(s, i);
    Node n{.op = Op::Loss, .args = {i}};
    n.variant = uniform(0, 4);
    if (s.r.pure && n.variant == 4) return false;  // huber's second derivative jumps at |e| = delta
    Shape rows(v.shape.begin(), v.shape.end() - 1);
    const auto len = static_cast<double>(v.shape.back());
    n.flag = n.variant <= 2 || coin(0.6);
    double other = 0;
    if (n.flag && n.variant != 1) {
      int j = pick(s, [&](const Val& w) { return w.shape == v.shape; });
      n.args.push_back(j);
      other = at(s, j).mag;
    }
    if (n.variant == 1) {
      n.flag = false;
      for (std::int64_t k = 0; k < size_of(rows); ++k) n.ints2.push_back(uniform(0, static_cast<int>(len) - 1));
    }
    double mag = 0;
    switch (n.variant) {
      case 0: case 1: mag = 2 * v.mag + std::log(len); break;  // -log softmax <= max - min + log n
      case 2: mag = 2 * v.mag + 0.7; break;                     // softplus(x) - l x
      case 3: mag = 0.5 * (v.mag + other) * (v.mag + other); break;
      default:
        n.c = coin(0.5) ? 0.5 : 1.0;
        mag = n.c * (v.mag + other);
        break;
    }
    if (mag > kMaxMag) return false;
    n.outs = {n.variant <= 1 ? rows : v.shape};
    push(s, b, n, {mag});
    return true;
  }

  /// Matrices of size n <= 4 in the last two axes, well conditioned by construction
  /// (interpret.cpp): cholesky of x x^T + 3 I (flag: without symmetrize_input); triangular_solve
  /// with a = 4 I + tanh(x) (ints: left_side, lower, transpose_a, unit_diagonal), whose inverse's
  /// rows sum to at most 1; cho_solve with the factor of x x^T + 3 I (flag: the upper factor);
  /// qr (variant: q or r) of dominant (below), eigh (variant: w or v) and svd (variant: u, s or
  /// vh) of 2 diag(1..n) + 0.2 tanh(x) (eigen- and singular values at least 1 apart), vectors
  /// with their first entry made positive (LAPACK's signs are arbitrary);
  /// lu (its factors), solve, lu_solve of lu_factor (ints: trans), inv and slogdet (sign * logabsdet) of 5 I + tanh(x) (diagonally
  /// dominant by rows and columns, so no pivot ties; flag: its rows reversed, so pivoting
  /// exchanges them).
  bool matrix_op(Scope& s, Block& b) {
    int i = pick(s, [](const Val& v) {
      const auto r = v.shape.size();
      return r >= 2 && v.shape[r - 1] == v.shape[r - 2] && v.shape[r - 1] <= 4;
    });
    if (i < 0) return false;
    const Val a = at(s, i);
    const std::int64_t n = a.shape.back();
    const Shape batch(a.shape.begin(), a.shape.end() - 2);
    Node node{.args = {i}};
    node.op = std::array{Op::Cholesky, Op::TriangularSolve, Op::ChoSolve, Op::Lu, Op::Solve, Op::LuSolve, Op::Inv,
                         Op::Slogdet, Op::Qr, Op::Eigh, Op::Svd}[static_cast<std::size_t>(uniform(0, 10))];
    if (node.op == Op::Qr || node.op == Op::Eigh || node.op == Op::Svd) {
      // One output of the factorization (variant), the vectors' signs normalized (interpret.cpp).
      node.variant = uniform(0, node.op == Op::Svd ? 2 : 1);
      const bool values = (node.op == Op::Eigh && node.variant == 0) || (node.op == Op::Svd && node.variant == 1);
      node.outs = {values ? Shape(a.shape.begin(), a.shape.end() - 1) : a.shape};
      // |q|, |v|, |u| <= 1; |r| <= |dominant a| <= 7; eigenvalues and singular values <= 2 n + 1.
      push(s, b, node, {values ? 2.0 * static_cast<double>(n) + 1 : node.op == Op::Qr && node.variant == 1 ? 7.0 : 1.0});
      return true;
    }
    if (node.op == Op::Lu || node.op == Op::Inv || node.op == Op::Slogdet) {
      node.flag = coin(0.5);
      node.outs = {node.op == Op::Slogdet ? batch : a.shape};
      // |l_ij| <= 1 and |u_ij| <= 7 (6 + a row's pivots' multiples); ||inv||_inf <= 1; |log det| <= n log 6.
      push(s, b, node, {node.op == Op::Lu ? 8.0 : node.op == Op::Inv ? 1.0 : static_cast<double>(n) * std::log(6.0)});
      return true;
    }
    if (node.op == Op::Cholesky) {
      node.flag = coin(0.3);
      node.outs = {a.shape};
      const double mag = std::sqrt(static_cast<double>(n) * a.mag * a.mag + 3);
      if (mag > kMaxMag) return false;
      push(s, b, node, {mag});
      return true;
    }
    const bool left = node.op == Op::ChoSolve || node.op == Op::Solve || node.op == Op::LuSolve || coin(0.5);
    int j = pick(s, [&](const Val& v) {
      if (v.shape.size() != a.shape.size() || !std::equal(batch.begin(), batch.end(), v.shape.begin())) return false;
      return (left ? v.shape[v.shape.size() - 2] : v.shape.back()) == n;
    });
    if (j < 0) return false;
    node.args.push_back(j);
    node.outs = {at(s, j).shape};
    if (node.op == Op::TriangularSolve) node.ints = {left, coin(0.5), coin(0.5), coin(0.3)};
    else node.flag = coin(0.4);
    if (node.op == Op::LuSolve) node.ints = {uniform(0, 2)};  // trans
    if (node.op == Op::Solve) node.variant = uniform(0, 2);  // general (lu), "pos" (cholesky), cg
    // |x| <= ||a^-1||_inf |b| <= |b| (triangular, cholesky: at most 1; solve: margin 1 of dominance;
    // spd: eigenvalues >= 3)
    push(s, b, node, {at(s, j).mag});
    return true;
  }

  /// conv_general_dilated of a rank 2-4 value (batch, features, spatial... or, variant 1,
  /// channels last) with a kernel fitted from another value (interpret.cpp); ints: out features,
  /// feature groups (1, the features: depthwise, or 2), batch groups (variant 2), then per
  /// spatial dim: window, stride, padding lo, hi, rhs dilation, lhs dilation.
  bool conv_op(Scope& s, Block& b) {
    const int i = pick(s, [](const Val& v) { return v.shape.size() >= 2 && v.shape.size() <= 4 && size_of(v.shape) > 0; });
    if (i < 0) return false;
    const Val a = at(s, i);
    Node n{.op = Op::Conv, .args = {i, pick_any(s)}};
    n.variant = uniform(0, 2);
    const bool last = n.variant == 1;
    const std::size_t r = a.shape.size();
    const std::int64_t batch = a.shape[0], c = last ? a.shape[r - 1] : a.shape[1];
    std::int64_t groups = 1, batch_groups = 1;
    if (n.variant == 2 && batch % 2 == 0) batch_groups = 2;
    else if (coin(0.3)) groups = c;
    else if (c % 2 == 0 && coin(0.3)) groups = 2;
    std::int64_t o = std::max(groups, batch_groups) * uniform(1, 2);
    // One group with 8 or 16 outputs, a multiple of half the SIMD width: the patch tiles and
    // register-blocked product loops of conv.cpp (other convolutions go to BLAS).
    if (groups == 1 && batch_groups == 1 && std::bernoulli_distribution(0.4)(side_))
      o = 8 * std::uniform_int_distribution<std::int64_t>(1, 2)(side_);
    n.ints = {o, groups, batch_groups};
    Shape out{batch / batch_groups};
    if (!last) out.push_back(o);
    double window = 1;
    for (std::size_t d = last ? 1 : 2; d < (last ? r - 1 : r); ++d) {
      const std::int64_t k = uniform(1, 3), stride = uniform(1, 2), rd = coin(0.8) ? 1 : 2, ld = coin(0.85) ? 1 : 2;
      const std::int64_t lo = uniform(-1, 2), hi = uniform(-1, 2);
      const std::int64_t padded = (a.shape[d] - 1) * ld + 1 + lo + hi, extent = (k - 1) * rd + 1;
      if (padded < extent) return false;
      out.push_back((padded - extent) / stride + 1);
      n.ints.insert(n.ints.end(), {k, stride, lo, hi, rd, ld});
      window *= static_cast<double>(k);
    }
    if (last) out.push_back(o);
    const double mag = a.mag * std::min(at(s, n.args[1]).mag, 1.0) * window * static_cast<double>(c / groups);
    if (mag > kMaxMag) return false;
    n.outs = {out};
    push(s, b, n, {mag});
    return true;
  }

  bool linalg(Scope& s, Block& b) {
    int kind = uniform(0, 6);
    if (kind == 6) return conv_op(s, b);
    if (kind >= 4) return matrix_op(s, b);
    int i = pick(s, [](const Val& v) { return !v.shape.empty(); });
    if (i < 0) return false;
    const Val a = at(s, i);
    Node n{.args = {i}};
    Shape out;
    std::int64_t k = 0;
    int j = -1;
    if (kind == 0) {  // matmul, NumPy semantics (1-D operands, broadcast batch)
      n.op = Op::Matmul;
      std::int64_t ka = a.shape.back();
      j = pick(s, [&](const Val& v) {
        if (v.shape.empty()) return false;
        if (v.shape.size() == 1) return v.shape[0] == ka;
        if (v.shape[v.shape.size() - 2] != ka) return false;
        if (a.shape.size() == 1) return true;
        Shape ba(a.shape.begin(), a.shape.end() - 2), bb(v.shape.begin(), v.shape.end() - 2);
        return broadcast(ba, bb).has_value();
      });
      if (j < 0) return false;
      const Shape& bs = at(s, j).shape;
      k = ka;
      if (a.shape.size() == 1 && bs.size() == 1) out = {};
      else if (a.shape.size() == 1) { out = bs; out.erase(out.end() - 2); }
      else if (bs.size() == 1) { out = a.shape; out.pop_back(); }
      else {
        out = *broadcast(Shape(a.shape.begin(), a.shape.end() - 2), Shape(bs.begin(), bs.end() - 2));
        out.push_back(a.shape[a.shape.size() - 2]);
        out.push_back(bs.back());
      }
    } else if (kind == 1) {  // dot: 1-D . 1-D, 2-D . 1-D, 2-D . 2-D
      n.op = Op::Dot;
      if (a.shape.size() > 2) return false;
      j = pick(s, [&](const Val& v) { return (v.shape.size() == 1 || (v.shape.size() == 2 && a.shape.size() == 2)) && v.shape[0] == a.shape.back(); });
      if (j < 0) return false;
      const Shape& bs = at(s, j).shape;
      k = a.shape.back();
      out = a.shape;
      out.pop_back();
      if (bs.size() == 2) out.push_back(bs[1]);
    } else if (kind == 2) {  // einsum
      n.op = Op::Einsum;
      static const char* specs[] = {"ij,jk->ik", "ij,kj->ik", "i,i->", "ij,ij->i", "i,j->ij", "bij,bjk->bik", "ij->ji", "ij->i"};
      n.text = specs[uniform(0, 7)];
      std::string in = n.text.substr(0, n.text.find("->")), res = n.text.substr(n.text.find("->") + 2);
      std::string sa = in.substr(0, in.find(',')), sb = in.find(',') == std::string::npos ? "" : in.substr(in.find(',') + 1);
      if (a.shape.size() != sa.size()) return false;
      std::map<char, std::int64_t> dim;
      for (std::size_t q = 0; q < sa.size(); ++q) dim[sa[q]] = a.shape[q];
      if (!sb.empty()) {
        j = pick(s, [&](const Val& v) {
          if (v.shape.size() != sb.size()) return false;
          for (std::size_t q = 0; q < sb.size(); ++q)
            if (dim.count(sb[q]) && dim[sb[q]] != v.shape[q]) return false;
          return true;
        });
        if (j < 0) return false;
        for (std::size_t q = 0; q < sb.size(); ++q) dim[sb[q]] = at(s, j).shape[q];
      }
      k = 1;
      for (auto [ch, d] : dim)
        if (res.find(ch) == std::string::npos) k *= d;
      for (char ch : res) out.push_back(dim[ch]);
    } else {  // dot_general: one contracting pair, sometimes a batch pair
      n.op = Op::DotGeneral;
      j = pick(s, [&](const Val& v) {
        for (auto d : v.shape)
          if (std::find(a.shape.begin(), a.shape.end(), d) != a.shape.end()) return true;
        return false;
      });
      if (j < 0) return false;
      const Shape& bs = at(s, j).shape;
      std::vector<std::pair<int, int>> pairs;
      for (std::size_t p = 0; p < a.shape.size(); ++p)
        for (std::size_t q = 0; q < bs.size(); ++q)
          if (a.shape[p] == bs[q]) pairs.emplace_back(p, q);
      auto [ca, cb] = pairs[static_cast<std::size_t>(uniform(0, static_cast<int>(pairs.size()) - 1))];
      n.ints = {ca, cb};
      k = a.shape[static_cast<std::size_t>(ca)];
      // A batch pair: another equal pair using neither contracting dimension.
      for (auto [p, q] : pairs)
        if (p != ca && q != cb && coin(0.5)) {
          n.ints2 = {p, q};
          break;
        }
      if (!n.ints2.empty()) out.push_back(a.shape[static_cast<std::size_t>(n.ints2[0])]);
      for (std::size_t p = 0; p < a.shape.size(); ++p)
        if (static_cast<int>(p) != ca && (n.ints2.empty() || static_cast<int>(p) != n.ints2[0])) out.push_back(a.shape[p]);
      for (std::size_t q = 0; q < bs.size(); ++q)
        if (static_cast<int>(q) != cb && (n.ints2.empty() || static_cast<int>(q) != n.ints2[1])) out.push_back(bs[q]);
    }
    if (j >= 0) n.args.push_back(j);
    double mag = a.mag * (j >= 0 ? at(s, j).mag : 1) * static_cast<double>(std::max<std::int64_t>(k, 1));
    if (mag > kMaxMag) return false;
    n.outs = {out};
    push(s, b, n, {mag});
    return true;
  }

  /// Every shape with product n and rank <= 3.
  std::vector<Shape> factorizations(std::int64_t n) {
    std::vector<Shape> out;
    if (n == 1) out.push_back({});
    out.push_back({n});
    for (std::int64_t a = 1; a <= n; ++a) {
      if (n % a) continue;
      out.push_back({a, n / a});
      for (std::int64_t b = 1; b <= n / a; ++b)
        if ((n / a) % b == 0) out.push_back({a, b, n / a / b});
    }
    return out;
  }

  /// xj::at(x, idx) along x's first one or two axes: ints = {how (0 get, 1 set, 2 add, 3 mul,
  /// 4 min, 5 max), index arrays k, clip}, ints2 = the k index arrays of cnt entries each (some
  /// outside their axis: dropped or clamped), args = {x, the updates' source}. min and max take
  /// distinct in-range indices (no two updates tie by construction; ties with x are noted).
  bool at_op(Scope& s, Block& b) {
    int i = pick_any(s);
    const Val v = at(s, i);
    const Shape& sh = v.shape;
    if (sh.empty() || size_of(sh) == 0) return false;
    const int how = uniform(0, 5);
    if (how >= 4 && s.r.pure) return false;
    const int k = sh.size() >= 2 && coin(0.3) ? 2 : 1;
    Node n{.op = Op::At, .args = {i}};
    n.ints = {how, k, coin(0.3) ? 1 : 0};
    int cnt = uniform(1, 4);
    if (how >= 4) cnt = std::min(cnt, static_cast<int>(sh[0]));
    const int offset = uniform(0, static_cast<int>(sh[0]) - 1);
    for (int q = 0; q < k; ++q) {
      const auto d = static_cast<int>(sh[static_cast<std::size_t>(q)]);
      for (int e = 0; e < cnt; ++e) {
        if (how < 4) n.ints2.push_back(uniform(-d - 1, d));
        else if (q == 0) n.ints2.push_back((e + offset) % d - (coin(0.5) ? d : 0));  // distinct rows, some spelled negative
        else n.ints2.push_back(uniform(0, d - 1));
      }
    }
    Shape upd{cnt};
    upd.insert(upd.end(), sh.begin() + k, sh.end());
    double mag = v.mag;
    if (how > 0) {
      int j = pick_any(s);
      n.args.push_back(j);
      const double u = at(s, j).mag;
      mag = how == 2 ? v.mag + cnt * u : how == 3 ? v.mag * std::pow(std::max(1.0, u), cnt) : std::max(v.mag, u);
      if (how <= 3) maybe_data_indices(s, n);
    }
    if (mag > kMaxMag) return false;
    Shape out = sh;
    if (how == 0) out = upd;
    n.outs = {out};
    push(s, b, n, {mag});
    return true;
  }

  bool shape_op(Scope& s, Block& b) {
    int kind = uniform(0, 12);
    int i = pick_any(s);
    const Val v = at(s, i);
    const Shape& sh = v.shape;
    int r = static_cast<int>(sh.size());
    Node n{.args = {i}};
    Shape out;
    switch (kind) {
      case 0: {
        n.op = Op::Reshape;
        auto fs = factorizations(size_of(sh));
        if (size_of(sh) == 0) return false;
        out = fs[static_cast<std::size_t>(uniform(0, static_cast<int>(fs.size()) - 1))];
        n.ints = out;
        if (!out.empty() && coin(0.3)) n.ints[static_cast<std::size_t>(uniform(0, static_cast<int>(out.size()) - 1))] = -1;
        break;
      }
      case 1: {
        n.op = Op::Transpose;
        if (r < 2) return false;
        std::vector<std::int64_t> perm(static_cast<std::size_t>(r));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng_);
        if (coin(0.25)) {  // the empty perm: reverse the axes
          std::iota(perm.rbegin(), perm.rend(), 0);
          n.flag = true;
        }
        for (auto p : perm) out.push_back(sh[static_cast<std::size_t>(p)]);
        n.ints = perm;
        break;
      }
      case 2: {
        n.op = Op::BroadcastTo;
        out = sh;
        for (auto& d : out)
          if (d == 1 && coin(0.5)) d = uniform(2, 3);
        if (r < 3 && coin(0.6)) out.insert(out.begin(), uniform(1, 3));
        n.ints = out;
        break;
      }
      case 3:
        n.op = Op::ExpandDims;
        if (r >= 3) return false;
        n.ints = {uniform(-(r + 1), r)};
        out = sh;
        out.insert(out.begin() + (n.ints[0] < 0 ? n.ints[0] + r + 1 : n.ints[0]), 1);
        break;
      case 4: {
        n.op = Op::Squeeze;
        std::vector<std::int64_t> ones;
        for (int k = 0; k < r; ++k)
          if (sh[static_cast<std::size_t>(k)] == 1) ones.push_back(k);
        if (ones.empty()) return false;
        if (coin(0.5)) n.ints = {ones[static_cast<std::size_t>(uniform(0, static_cast<int>(ones.size()) - 1))]};
        for (int k = 0; k < r; ++k) {
          bool gone = n.ints.empty() ? sh[static_cast<std::size_t>(k)] == 1 : k == n.ints[0];
          if (!gone) out.push_back(sh[static_cast<std::size_t>(k)]);
        }
        break;
      }
      case 5: case 6: {
        n.op = kind == 5 ? Op::Concat : Op::Stack;
        if (kind == 5 && r == 0) return false;
        int axis = kind == 5 ? uniform(0, r - 1) : uniform(0, r);
        n.ints = {axis};
        int cnt = uniform(1, 2);
        out = sh;
        if (kind == 6) out.insert(out.begin() + axis, 1);
        for (int k = 0; k < cnt; ++k) {
          int j = pick(s, [&](const Val& w) {
            if (w.shape.size() != sh.size()) return false;
            for (int q = 0; q < r; ++q)
              if (w.shape[static_cast<std::size_t>(q)] != sh[static_cast<std::size_t>(q)] && (kind == 6 || q != axis)) return false;
            return true;
          });
          n.args.push_back(j);
          out[static_cast<std::size_t>(axis)] += kind == 5 ? at(s, j).shape[static_cast<std::size_t>(axis)] : 1;
        }
        double mag = 0;
        for (int a : n.args) mag = std::max(mag, at(s, a).mag);
        n.outs = {out};
        push(s, b, n, {mag});
        return true;
      }
      case 7: {
        n.op = Op::Slice;
        if (r == 0 || size_of(sh) == 0) return false;
        for (int k = 0; k < r; ++k) {
          auto d = sh[static_cast<std::size_t>(k)];
          auto start = uniform(0, static_cast<int>(d) - 1);
          auto limit = uniform(start + 1, static_cast<int>(d));
          auto stride = uniform(1, 2);
          n.ints.push_back(start);
          n.ints.push_back(limit);
          n.ints.push_back(stride);
          out.push_back((limit - start + stride - 1) / stride);
        }
        n.flag = coin(0.5);  // strides given explicitly
        if (!n.flag)
          for (int k = 0; k < r; ++k) {
            n.ints[static_cast<std::size_t>(3 * k + 2)] = 1;
            out[static_cast<std::size_t>(k)] = n.ints[static_cast<std::size_t>(3 * k + 1)] - n.ints[static_cast<std::size_t>(3 * k)];
          }
        break;
      }
      case 8: {
        n.op = Op::DynSlice;
        if (r == 0 || size_of(sh) == 0) return false;
        for (int k = 0; k < r; ++k) {
          auto d = sh[static_cast<std::size_t>(k)];
          n.ints.push_back(uniform(-1, static_cast<int>(d) + 1));  // out of range: clamped
          out.push_back(uniform(1, static_cast<int>(d)));
        }
        n.ints2 = out;
        maybe_data_indices(s, n);
        break;
      }
      case 9: {
        n.op = Op::DynUpdateSlice;
        if (r == 0) return false;
        int j = pick(s, [&](const Val& w) {
          if (w.shape.size() != sh.size()) return false;
          for (int q = 0; q < r; ++q)
            if (w.shape[static_cast<std::size_t>(q)] > sh[static_cast<std::size_t>(q)]) return false;
          return true;
        });
        n.args.push_back(j);
        for (int k = 0; k < r; ++k) n.ints.push_back(uniform(-1, static_cast<int>(sh[static_cast<std::size_t>(k)]) + 1));
        maybe_data_indices(s, n);
        out = sh;
        n.outs = {out};
        push(s, b, n, {std::max(v.mag, at(s, j).mag)});
        return true;
      }
      case 10: {
        n.op = Op::Take;
        if (r == 0 || size_of(sh) == 0) return false;
        int axis = uniform(0, r - 1);
        auto d = static_cast<int>(sh[static_cast<std::size_t>(axis)]);
        n.ints = {axis};
        int cnt = uniform(1, 4);
        for (int k = 0; k < cnt; ++k) n.ints2.push_back(uniform(-d, d - 1));
        out = sh;
        out[static_cast<std::size_t>(axis)] = cnt;
        maybe_data_indices(s, n);
        break;
      }
      case 12:
        n.op = Op::Flip;
        n.flag = coin(0.2);  // every axis
        n.ints = n.flag ? std::vector<std::int64_t>{} : axes_subset(static_cast<std::size_t>(r), false);
        out = sh;
        break;
      default: {
        n.op = Op::Index;
        if (r == 0 || size_of(sh) == 0) return false;
        auto d = static_cast<int>(sh[0]);
        n.flag = coin(0.3);  // traced index (an i32 Array)
        n.ints = {n.flag ? uniform(0, d - 1) : uniform(-d, d - 1)};
        if (n.flag) maybe_data_indices(s, n);
        out = Shape(sh.begin() + 1, sh.end());
        break;
      }
    }
    n.outs = {out};
    push(s, b, n, {v.mag});
    return true;
  }

  // ---- wrappers ----

  /// 1-2 distinct-or-not env values as a wrapper's operands.
  std::vector<int> operands(Scope& s, int lo, int hi) {
    std::vector<int> a;
    int cnt = uniform(lo, hi);
    for (int k = 0; k < cnt; ++k) a.push_back(pick_any(s));
    return a;
  }
  std::vector<Shape> shapes_of(const Scope& s, const std::vector<int>& idx) {
    std::vector<Shape> out;
    for (int i : idx) out.push_back(s.env[static_cast<std::size_t>(i)].shape);
    return out;
  }
  std::vector<double> mags_of(const Scope& s, const std::vector<int>& idx) {
    std::vector<double> out;
    for (int i : idx) out.push_back(s.env[static_cast<std::size_t>(i)].mag);
    return out;
  }
  /// Result shapes: each an operand's shape or a random one.
  std::vector<Shape> result_shapes(const Scope& s, const std::vector<int>& args, int cnt) {
    std::vector<Shape> out;
    for (int k = 0; k < cnt; ++k)
      out.push_back(coin(0.6) ? at(s, args[static_cast<std::size_t>(uniform(0, static_cast<int>(args.size()) - 1))]).shape : random_shape(2));
    return out;
  }
  int sub_nodes() { return big_ ? uniform(2, 6) : uniform(1, 4); }

  bool wrapper(Scope& s, Block& b) {
    if (s.depth >= max_depth_ || wrappers_ >= max_wrappers_) return false;
    static constexpr Op ops[] = {Op::Checkpoint, Op::Scan, Op::ForiLoop, Op::While, Op::Cond,
                                 Op::Switch, Op::Jit, Op::CustomJvp, Op::CustomVjp, Op::InnerGrad};
    Node n{.op = ops[static_cast<std::size_t>(uniform(0, std::size(ops) - 1))]};
    if (n.op == Op::While && s.r.no_while) return false;
    if (s.r.pure && (n.op == Op::While || n.op == Op::Cond || n.op == Op::Switch)) return false;
    if (n.op == Op::CustomVjp && s.r.no_custom_vjp) return false;
    ++wrappers_;
    int d = s.depth + 1;
    std::vector<double> mags;
    switch (n.op) {
      case Op::Checkpoint: {
        n.args = operands(s, 1, 2);
        n.outs = result_shapes(s, n.args, uniform(1, 2));
        mags.assign(n.outs.size(), kMaxMag);
        n.variant = uniform(0, 9);  // policy
        n.flag = coin(0.7);         // prevent_cse
        for (int k = 0; k < 4; ++k)
          if (coin(0.5)) n.ints.push_back(k);  // names the policy mentions
        count("checkpoint_policy" + std::to_string(n.variant));
        if ((n.narrowed_residuals = std::bernoulli_distribution(0.3)(side_))) {
          feat_->has_narrowed_residuals = true;
          count("checkpoint_narrowed_residuals");
        }
        n.subs.push_back(block(shapes_of(s, n.args), mags_of(s, n.args), s, n.outs, mags, d, s.r, sub_nodes() + 1, true, s.in_while, true));
        break;
      }
      case Op::Scan: {
        std::vector<int> carry = operands(s, 1, 2);
        int x0 = coin(0.7) ? pick(s, [](const Val& v) { return !v.shape.empty(); }) : -1;
        std::vector<int> xs;
        std::int64_t length = big_ ? uniform(0, 12) : uniform(0, 4);
        if (x0 >= 0) {
          xs.push_back(x0);
          length = at(s, x0).shape[0];
          if (coin(0.3)) {
            int x1 = pick(s, [&](const Val& v) { return !v.shape.empty() && v.shape[0] == length; });
            xs.push_back(x1);
          }
        }
        n.args = carry;
        n.args.insert(n.args.end(), xs.begin(), xs.end());
        n.ints = {static_cast<std::int64_t>(carry.size()), static_cast<std::int64_t>(xs.size()), length,
                  std::array<std::int64_t, 4>{1, 1, 2, 3}[static_cast<std::size_t>(uniform(0, 3))]};  // ncarry, nxs, length, unroll
        if (coin(0.15)) n.ints[3] = length + 1;
        if (coin(0.1)) n.ints[3] = 0;  // 0: {.unroll = true}, JAX's full unroll
        n.flag = coin(0.5);  // reverse
        n.ints.push_back(coin(0.45) ? uniform(1, 3) : 0);  // ints[4]: binomial(k) snapshots, 0: all()
        int ny = uniform(0, 1);
        n.variant = (xs.empty() && coin(0.5) ? 1 : 0) | (ny == 0 && coin(0.5) ? 2 : 0);  // xs None, ys None
        std::vector<Shape> in = shapes_of(s, carry), body_out = in;
        std::vector<double> in_mag, out_mag(carry.size(), kCarryMag);
        for (int c : carry) in_mag.push_back(std::max(at(s, c).mag, kCarryMag));
        for (int x : xs) {
          in.push_back(Shape(at(s, x).shape.begin() + 1, at(s, x).shape.end()));
          in_mag.push_back(at(s, x).mag);
        }
        n.outs = shapes_of(s, carry);
        mags = in_mag;
        mags.resize(carry.size());
        for (int k = 0; k < ny; ++k) {
          Shape y = random_shape(2);
          body_out.push_back(y);
          out_mag.push_back(8);
          y.insert(y.begin(), length);
          n.outs.push_back(y);
          mags.push_back(8);
        }
        count(std::string("scan") + (n.flag ? "_reverse" : "") + (length == 0 ? "_empty" : "") + (n.ints[3] > 1 ? "_unrolled" : "") + (n.ints[3] == 0 ? "_fully_unrolled" : "") + (n.ints[4] > 0 ? "_binomial" : ""));
        n.subs.push_back(block(in, in_mag, s, body_out, out_mag, d, s.r, sub_nodes(), true, s.in_while, false,
                               n.ints[4] > 0 ? 1 : 0));  // a scheduled scan reads a loop invariant
        break;
      }
      case Op::ForiLoop: case Op::While: {
        n.args = operands(s, 1, 2);
        std::vector<Shape> in = shapes_of(s, n.args);
        std::vector<double> in_mag;
        for (int c : n.args) in_mag.push_back(std::max(at(s, c).mag, kCarryMag));
        n.outs = in;
        mags = in_mag;
        in.push_back({});  // the counter, as a float scalar
        in_mag.push_back(5);
        if (n.op == Op::ForiLoop) {
          n.ints = {uniform(-1, 2), uniform(-1, 4)};  // lo, hi
          n.flag = coin(0.25);  // Array bounds: lowers to while_loop
          if (n.flag) {
            if (s.r.no_while || s.r.pure) n.flag = false;
            else count("fori_loop_dynamic");
          }
        } else {
          n.ints = {uniform(0, 4), coin(0.5) ? uniform(1, 3) : 0};  // trip count, online(k) snapshots (0: none)
          n.variant = uniform(0, 1);  // 1: also stop once sum(carry[0]) > c
          n.c = constant(-2, 2);
        }
        bool is_while = n.op == Op::While || n.flag;
        if (n.op == Op::While && n.ints[1] > 0) count("while_online");
        if (is_while) {
          feat_->has_while = true;
          if (s.in_while) feat_->has_nested_while = true;
        }
        n.subs.push_back(block(in, in_mag, s, shapes_of(s, n.args), std::vector<double>(n.args.size(), kCarryMag), d, s.r,
                               sub_nodes(), true, s.in_while || is_while));
        break;
      }
      case Op::Cond: case Op::Switch: {
        int p = pick_any(s);
        n.args = {p};
        auto ops = operands(s, 1, 2);
        n.args.insert(n.args.end(), ops.begin(), ops.end());
        n.outs = result_shapes(s, ops, uniform(1, 2));
        mags.assign(n.outs.size(), kMaxMag);
        int branches = 2;
        if (n.op == Op::Cond) {
          n.variant = uniform(0, 2);  // const pred, sum(p) > c, numeric pred sum(p) - c
          n.c = n.variant == 0 ? static_cast<double>(uniform(0, 1)) : constant(-2, 2);
        } else {
          branches = uniform(2, 3);
          n.variant = size_of(at(s, p).shape) > 0 ? uniform(0, 1) : 0;  // const index, argmax(p)
          n.ints = {uniform(-1, 3)};  // const index: out of range clamps
        }
        for (int k = 0; k < branches; ++k)
          n.subs.push_back(block(shapes_of(s, ops), mags_of(s, ops), s, n.outs, mags, d, s.r, sub_nodes(), true, s.in_while));
        break;
      }
      case Op::InnerGrad: {  // the gradient of sum(block(args)) with respect to args[0], squashed
        n.args = operands(s, 1, 2);
        n.outs = {at(s, n.args[0]).shape};
        mags = {4};
        Restrict r = s.r;
        r.pure = true;
        n.subs.push_back(block(shapes_of(s, n.args), mags_of(s, n.args), s, {random_shape(1)}, {kMaxMag}, d, r, sub_nodes(), true, s.in_while));
        break;
      }
      case Op::Jit: {
        // variant 1: the first output times a C++ number passed to the jitted function (traced,
        // weakly typed; c, an int when flag); variant 2: the first operand donated.
        n.variant = uniform(0, 2);
        n.args = operands(s, 1, 2);
        n.outs = result_shapes(s, n.args, uniform(1, 2));
        mags.assign(n.outs.size(), n.variant == 1 ? kMaxMag / 2 : kMaxMag);
        if (n.variant == 1) {
          n.flag = coin(0.4);
          n.c = n.flag ? (coin(0.5) ? 2.0 : -2.0) : std::array{0.5, 1.5, -1.25}[static_cast<std::size_t>(uniform(0, 2))];
        }
        count(std::string("Jit_") + std::array{"call", "number", "donated"}[static_cast<std::size_t>(n.variant)]);
        n.subs.push_back(block(shapes_of(s, n.args), mags_of(s, n.args), s, n.outs, mags, d, s.r, sub_nodes(), true, s.in_while));
        break;
      }
      case Op::CustomJvp: case Op::CustomVjp: {
        if (n.op == Op::CustomVjp) feat_->has_custom_vjp = true;
        n.variant = uniform(0, 1);  // 0: a formula with hand-written rules, 1: rules by jvp/vjp of the block
        if (n.variant == 0) {
          int i = pick_any(s);
          n.args = {i};
          int j = pick(s, [&](const Val& v) { return v.shape == at(s, i).shape && v.mag < 4; });
          std::vector<int> fit;
          for (int k = 0; k < formula_count(); ++k)
            if (formula_arity(k) == 1 || (j >= 0 && at(s, i).mag < 4)) fit.push_back(k);
          n.ints = {fit[static_cast<std::size_t>(uniform(0, static_cast<int>(fit.size()) - 1))]};
          if (formula_arity(static_cast<int>(n.ints[0])) == 2) n.args.push_back(j);
          n.outs = {at(s, i).shape};
          mags = {std::max(6.0, at(s, i).mag)};
          count(std::string(op_name(n.op)) + "_" + formula_name(static_cast<int>(n.ints[0])));
        } else {
          n.args = operands(s, 1, 2);
          n.outs = result_shapes(s, n.args, 1);
          mags = {kMaxMag};
          Restrict r = s.r;
          if (n.op == Op::CustomVjp) r.no_while = true;
          else r.no_custom_vjp = true;
          count(std::string(op_name(n.op)) + "_block");
          n.subs.push_back(block(shapes_of(s, n.args), mags_of(s, n.args), s, n.outs, mags, d, r, sub_nodes(), false, s.in_while));
        }
        break;
      }
      default: return false;
    }
    push(s, b, n, mags);
    return true;
  }
};

}  // namespace

std::int64_t size_of(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>());
}

Program generate(std::uint64_t seed) { return Gen(seed).program(seed); }

}  // namespace fuzz

// interpret.cpp: a Program as an xj::Array computation. Full mode calls the real wrappers
// (xj::checkpoint, xj::scan, ...); Plain mode gives each wrapper its meaning in C++: the function
// itself, an unrolled loop, the branch chosen from the concrete predicate (recorded on a Tape).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "program.hpp"

namespace fuzz {

namespace {

using V = Arrays;

Arrays pick(const Arrays& env, const std::vector<int>& idx, std::size_t from = 0, std::size_t to = SIZE_MAX) {
  Arrays out;
  for (std::size_t k = from; k < std::min(to, idx.size()); ++k) out.push_back(env.at(static_cast<std::size_t>(idx[k])));
  return out;
}

/// v reshaped, broadcast or averaged into `target` (the generator's glue between shapes).
Array fit(const Array& v, const Shape& target) {
  if (v.shape() == target) return v;
  if (broadcast(v.shape(), target) == target) return xj::broadcast_to(v, target);
  if (v.size() == size_of(target) && v.size() > 0) return xj::reshape(v, target);
  Array s = v.size() == 0 ? xj::sum(v) : xj::mean(v);
  return xj::broadcast_to(s, target);
}

/// Window and Conv nodes keep six ints per windowed dim from ints[first]: window, stride,
/// padding low, high, and two dilations (generate.cpp says which).
struct WindowInts {
  std::vector<std::int64_t> window, strides, dilation_a, dilation_b;
  std::vector<std::pair<std::int64_t, std::int64_t>> pads;
};
WindowInts window_ints(const std::vector<std::int64_t>& ints, std::size_t first) {
  WindowInts w;
  for (std::size_t d = first; d + 5 < ints.size(); d += 6) {
    w.window.push_back(ints[d]);
    w.strides.push_back(ints[d + 1]);
    w.pads.emplace_back(ints[d + 2], ints[d + 3]);
    w.dilation_a.push_back(ints[d + 4]);
    w.dilation_b.push_back(ints[d + 5]);
  }
  return w;
}

xj::Policy policy(const Node& n) {
  namespace cp = xj::checkpoint_policies;
  std::set<std::string> names;
  for (auto k : n.ints) names.insert("n" + std::to_string(k));
  switch (n.variant) {
    case 1: return cp::everything_saveable;
    case 2: return cp::nothing_saveable;
    case 3: return cp::dots_saveable;
    case 4: return cp::dots_with_no_batch_dims_saveable;
    case 5: return cp::save_only_these_names(names);
    case 6: return cp::save_any_names_but_these(names);
    case 7: return cp::save_anything_except_these_names(names);
    case 8: return cp::save_from_both_policies(cp::dots_saveable, cp::save_only_these_names(names));
    default:  // a user predicate: save what sin, exp and tanh produce
      return [](const xj::Primitive& p, std::span<const xj::ShapedArray>, const xj::Params&) {
        return p == xj::Primitive::sin || p == xj::Primitive::exp || p == xj::Primitive::tanh;
      };
  }
}

/// The identity matrix of x's last axis, in x's dtype.
Array identity(const Array& x) {
  const Shape s{x.dim(-1), x.dim(-1)};
  return xj::astype(xj::eq(xj::iota(xj::i32, s, 0), xj::iota(xj::i32, s, 1)), x.dtype());
}
/// x x^T + 3 I: symmetric positive definite, its eigenvalues at least 3.
Array spd(const Array& x) { return xj::matmul(x, xj::matrix_transpose(x)) + identity(x) * 3.0; }

/// 5 I + tanh(x), its rows reversed when `reversed`: diagonally dominant by rows and columns
/// with a margin of 1 (so ||a^-1||_inf <= 1 and no two pivot candidates tie).
Array dominant(const Array& x, bool reversed) {
  const Array a = xj::tanh(x) + identity(x) * 5.0;
  if (!reversed) return a;
  const Shape s{x.dim(-1), x.dim(-1)};
  return xj::matmul(xj::astype(xj::iota(xj::i32, s, 0) + xj::iota(xj::i32, s, 1) == x.dim(-1) - 1, x.dtype()), a);
}

/// 2 diag(1..n) + 0.2 tanh(x): eigen- and singular values at least 1 apart (the perturbation's
/// norm is at most 0.2 n <= 0.8), so eigh's and svd's vectors are differentiable.
Array separated(const Array& x) {
  const Shape s{x.dim(-1), x.dim(-1)};
  const Array i = xj::iota(xj::i32, s, 0);
  return xj::tanh(x) * 0.2 + xj::astype(i == xj::iota(xj::i32, s, 1), x.dtype()) * xj::astype(i + 1, x.dtype()) * 2.0;
}
/// v with the sign that makes each column's first entry positive (sign's derivative is zero).
Array column_signs(const Array& v) { return xj::sign(xj::slice_in_dim(v, 0, 1, 1, -2)); }

std::vector<Array> i32_scalars(const std::vector<std::int64_t>& v) {
  std::vector<Array> out;
  for (auto x : v) out.push_back(xj::scalar(static_cast<double>(x), xj::i32));
  return out;
}

/// The k-th integer index in [lo, hi] computed from data (a node's variant 1): lo plus the integer
/// part of (hi - lo + 1) (1 + sin(3 sum(src) + k)) / 2, capped at hi; an i32 scalar whose
/// derivative is zero. The Monitor records the distance to the integer part's next jump, so the
/// finite-difference and rounding-sensitive oracles skip programs whose index is about to change.
/// The distance is measured in units of sum(src), like the other kinks' (the value moves up to
/// 1.5 (hi - lo + 1) times as fast as the sum): a wide range jumps that much more often (fuzzer
/// seed 700563: a key index in [0, 1000] crossed a jump within the finite-difference step).
Array data_index(const Array& src, std::int64_t k, std::int64_t lo, std::int64_t hi, Monitor* m) {
  const double span = static_cast<double>(hi - lo + 1);
  Array v = span * 0.5 * (1.0 + xj::sin(3.0 * xj::sum(src) + static_cast<double>(k)));
  if (m && v.is_concrete()) {
    double e = v.to_vector<double>().at(0);
    m->note(std::min(e - std::floor(e), std::ceil(e) - e) / (1.5 * span));
  }
  Array i = xj::add(xj::astype(v, xj::i32), xj::scalar(static_cast<double>(lo), xj::i32));
  return xj::minimum(i, xj::scalar(static_cast<double>(hi), xj::i32));
}

}  // namespace

// ---- formulas for custom rules (elementwise; arguments of one shape) ----------------------------

int formula_count() { return 5; }
int formula_arity(int k) { return k >= 3 ? 2 : 1; }
const char* formula_name(int k) {
  static const char* names[] = {"softsign", "logcosh", "gauss", "sinmul", "hypot1"};
  return names[k];
}

Array formula_f(int k, const Arrays& x) {
  switch (k) {
    case 0: return x[0] * xj::rsqrt(1.0 + xj::square(x[0]));                          // x / sqrt(1 + x^2)
    case 1: return xj::softplus(2.0 * x[0]) - x[0] - std::log(2.0);                  // log cosh x
    case 2: return xj::exp(-xj::square(x[0]));                                      // exp(-x^2)
    case 3: return xj::sin(x[0]) * x[1];                                            // sin(x) y
    default: return xj::sqrt(1.0 + xj::square(x[0]) + xj::square(x[1]));            // sqrt(1 + x^2 + y^2)
  }
}

Array formula_jvp(int k, const Arrays& x, const Arrays& t) {
  switch (k) {
    case 0: return t[0] * xj::integer_pow(xj::rsqrt(1.0 + x[0] * x[0]), 3);         // d = (1 + x^2)^(-3/2)
    case 1: return t[0] * xj::tanh(x[0]);                                           // d log cosh = tanh
    case 2: return t[0] * (-2.0 * x[0]) * xj::exp(-(x[0] * x[0]));                  // d = -2x exp(-x^2)
    case 3: return t[0] * xj::cos(x[0]) * x[1] + t[1] * xj::sin(x[0]);              // d = cos(x) y dx + sin(x) dy
    default: return (x[0] * t[0] + x[1] * t[1]) / formula_f(k, x);                  // d = (x dx + y dy) / f
  }
}

Arrays formula_vjp(int k, const Arrays& x, const Array& ct) {
  switch (k) {
    case 0: return {ct / ((1.0 + x[0] * x[0]) * xj::sqrt(1.0 + x[0] * x[0]))};     // ct (1 + x^2)^(-3/2)
    case 1: return {ct * xj::tanh(x[0])};
    case 2: return {ct * -2.0 * x[0] * formula_f(k, x)};
    case 3: return {ct * x[1] * xj::cos(x[0]), ct * xj::sin(x[0])};
    default: {
      Array f = formula_f(k, x);
      return {ct * x[0] / f, ct * x[1] / f};
    }
  }
}

// ---- the interpreter ----------------------------------------------------------------------------

Array Runner::operator()(const Program& p, const Arrays& inputs) const {
  if (tape && !tape->recording) tape->pos = 0;  // every Plain call replays the tape from its start
  // Inputs of a narrower dtype (bf16 in f32 runs) are promoted by JAX's rule on their first use:
  // bf16 + f32 -> f32, a convert_element_type the trace records (its jvp and transpose convert
  // the tangent and cotangent: a bf16 input's gradient comes back in bf16).
  Arrays promoted = inputs;
  for (Array& x : promoted)
    if (x.dtype() != dtype) x = x + xj::zeros({}, dtype);
  Array out = run(p.main, promoted, {}).at(0);
  if (tape && !tape->recording && tape->pos != tape->entries.size())
    throw std::logic_error("fuzz: the Plain run did not replay its whole tape");
  return out;
}

Arrays Runner::run(const Block& b, const Arrays& inputs, const Arrays& parent) const {
  Arrays env = inputs;
  for (int c : b.captures) env.push_back(parent.at(static_cast<std::size_t>(c)));
  for (const auto& n : b.nodes) {
    Arrays outs = node(n, env);
    env.insert(env.end(), outs.begin(), outs.end());
  }
  return pick(env, b.outs);
}

namespace {

/// Records the smallest nonzero |d| of a concrete d (a distance to a kink or a switching point).
/// Exact ties do not count: they come from one value reaching a kink by two paths (max of a
/// broadcast, relu(x - x)), whose derivatives agree. stop_gradient, the one op that gives equal
/// values different derivatives, also shifts its value (see Op::StopGradient) so that it does not
/// tie with its input.
void note(Monitor* m, const Array& d) {
  if (!m || !d.is_concrete()) return;
  for (double e : d.to_vector<double>())
    if (e != 0) m->note(std::abs(e));
}

/// The next decision: computed (and recorded) by a recording run, replayed otherwise.
std::int64_t decision(Tape& t, const std::function<std::int64_t()>& compute) {
  if (t.recording) {
    std::int64_t v = compute();
    t.entries.emplace_back(v);
    return v;
  }
  return std::get<std::int64_t>(t.entries.at(t.pos++));
}

template <bool XsNone, bool YsNone>
Arrays scan_full(const Runner& r, const Block* blk, const Arrays& env, const Arrays& init, const Arrays& xs,
                 std::size_t nc, xj::ScanOptions opts) {
  auto body = [r, blk, env, nc](const Arrays& c, const auto& x) {
    Arrays in = c;
    if constexpr (!XsNone) in.insert(in.end(), x.begin(), x.end());
    Arrays o = r.run(*blk, in, env);
    Arrays carry(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(nc));
    if constexpr (YsNone) return std::pair<Arrays, xj::None>{carry, {}};
    else return std::pair<Arrays, Arrays>{carry, Arrays(o.begin() + static_cast<std::ptrdiff_t>(nc), o.end())};
  };
  Arrays out;
  if constexpr (XsNone) {
    auto [c, ys] = xj::scan(body, init, xj::None{}, opts);
    out = c;
    if constexpr (!YsNone) out.insert(out.end(), ys.begin(), ys.end());
  } else {
    auto [c, ys] = xj::scan(body, init, xs, opts);
    out = c;
    if constexpr (!YsNone) out.insert(out.end(), ys.begin(), ys.end());
  }
  return out;
}

/// 4 tanh(g / 4) of the gradient g of sum(block(args)) with respect to args[0].
Arrays inner_grad(const std::function<Arrays(const Arrays&)>& block, const Arrays& args) {
  auto loss = [block](const Arrays& xs) { return xj::sum(block(xs).at(0)); };
  Array g = xj::grad(loss)(args).at(0);
  return {4.0 * xj::tanh(g / 4.0)};
}

/// jit(f') with f'(xs, c) = f(xs) whose first output is times c, called with the C++ number c
/// (an int when `integer`): jit traces it as a weakly typed rank-0 input, so the output keeps the
/// program's dtype (a strongly typed f64 or i64 would promote an f32 program's output).
Arrays jit_with_number(const std::function<Arrays(const Arrays&)>& fn, const Arrays& args, double c, bool integer,
                       xj::DType dtype) {
  auto scaled = [fn](const Arrays& xs, const Array& k) {
    Arrays o = fn(xs);
    o[0] = o[0] * k;
    return o;
  };
  Arrays out = integer ? xj::jit(scaled)(args, static_cast<int>(c)) : xj::jit(scaled)(args, c);
  if (out[0].dtype() != dtype)
    throw std::logic_error(std::string("fuzz: jit's traced C++ number made the output ") + xj::dtype_name(out[0].dtype()));
  return out;
}

/// jit(f) with its first operand donated: a private copy of it, so that its buffer is the call's
/// alone; after an eager call the copy must be unusable (under a transform donation does nothing).
Arrays jit_donating(const std::function<Arrays(const Arrays&)>& fn, const Arrays& args) {
  Array own = args[0] + 0.0;
  Arrays rest(args.begin() + 1, args.end());
  auto f = [fn](const Array& x, const Arrays& more) {
    Arrays xs{x};
    xs.insert(xs.end(), more.begin(), more.end());
    return fn(xs);
  };
  const bool eager = own.is_concrete();
  Arrays out = xj::jit(f, {.donate_argnums = {0}})(own, rest);
  if (eager) {
    bool raised = false;
    try {
      (void)own.to_vector<double>();
    } catch (const xj::Error&) {
      raised = true;
    }
    if (!raised) throw std::logic_error("fuzz: an argument donated to an eager jit call could still be read");
  }
  return out;
}

}  // namespace

Arrays Runner::node(const Node& n, const Arrays& env) const {
  Arrays args = pick(env, n.args);
  if (is_wrapper(n.op)) return mode == Mode::Full ? wrapper(n, args, env) : plain_wrapper(n, args, env);
  const Array& a = args.empty() ? Array() : args[0];
  const Array& b = args.size() > 1 ? args[1] : a;
  const Shape& out = n.outs.at(0);
  bool op_form = n.variant == 0;  // operator spelling vs named function
  Monitor* m = mode == Mode::Plain ? monitor : nullptr;
  switch (n.op) {
    case Op::Const: return {xj::full(out, n.c, dtype)};
    case Op::Iota: return {xj::iota(dtype, out, n.ints[0])};
    case Op::RandNormal: {
      Array key = xj::random::key(static_cast<std::uint64_t>(n.ints[0]));
      if (n.variant == 1) key = xj::random::fold_in(key, data_index(a, 0, 0, 15, m));
      return {xj::random::normal(key, out, dtype)};
    }
    case Op::Neg: return {-a};
    case Op::Sin: return {xj::sin(a)};
    case Op::Cos: return {xj::cos(a)};
    case Op::Tanh: return {xj::tanh(a)};
    case Op::Logistic: return {xj::logistic(a)};
    case Op::Softplus: return {xj::softplus(a)};
    case Op::Gelu: return {n.args[0] % 2 == 0 ? xj::gelu(a) : xj::gelu(a, false)};  // tanh form or exact, by operand index
    case Op::Exp: return {xj::exp(a)};
    case Op::Expm1: return {xj::expm1(a)};
    case Op::Log1pSq: return {xj::log1p(xj::square(a))};
    case Op::LogOnePlusSq: return {xj::log(1.0 + a * a)};
    case Op::Rational: return {a / (1.0 + xj::square(a))};
    case Op::SqrtOnePlusSq: return {xj::sqrt(1.0 + xj::square(a))};
    case Op::RsqrtOnePlusSq: return {xj::rsqrt(1.0 + xj::square(a))};
    case Op::RecipOnePlusSq: return {xj::reciprocal(1.0 + xj::square(a))};
    case Op::Square: return {xj::square(a)};
    case Op::IntPow: return {xj::integer_pow(a, n.ints[0])};
    case Op::TanBounded: return {xj::tan(xj::tanh(a))};
    case Op::Elementary: {
      const Array t = xj::tanh(a);
      switch (n.variant) {
        case 0: return {xj::asin(t * 0.9)};
        case 1: return {xj::acos(t * 0.9)};
        case 2: return {xj::atan(a)};
        case 3: return {xj::sinh(t)};
        case 4: return {xj::cosh(t)};
        case 5: return {xj::asinh(a)};
        case 6: return {xj::acosh(t * t + 1.5)};
        case 7: return {xj::atanh(t * 0.9)};
        case 8: return {xj::erf(a)};
        case 9: return {xj::erfc(a)};
        case 10: return {xj::cbrt(t + 1.5)};
        case 11: return {xj::exp2(t)};
        case 12: return {xj::log2(t + 1.5)};
        case 15: return {xj::lgamma(t + 2.5)};
        case 16: return {xj::digamma(t + 2.5)};
        case 17: return {xj::erf_inv(t * 0.9)};
        case 18: case 19:  // round: jumps at the half-integers (the distance to the nearest one is noted)
          note(m, a - xj::floor(a) - 0.5);
          return {xj::round(a, n.variant == 18 ? xj::RoundingMethod::away_from_zero : xj::RoundingMethod::to_nearest_even)};
        default:  // 13, 14: floor, ceil: they jump at the integers (the distance to the nearest one is noted)
          note(m, a - xj::floor(a + 0.5));
          return {n.variant == 13 ? xj::floor(a) : xj::ceil(a)};
      }
    }
    case Op::PowScalar: return {xj::pow(1.0 + xj::square(a), n.c)};
    case Op::Squash: return {n.c * xj::tanh(a / n.c)};
    case Op::ScaleShift: {
      double f = static_cast<double>(n.ints[0]) / 2;
      switch (n.variant) {
        case 0: return {a * f + n.c};
        case 1: return {n.c + f * a};
        case 2: return {xj::add(xj::mul(a, xj::scalar_like(f, a)), xj::scalar_like(n.c, a))};
        default: return {a / (1.0 / f) + n.c};
      }
    }
    case Op::Logic: {  // generate.cpp: Op::Logic's variants; the kinks' distances noted
      switch (n.variant) {
        case 0: return {a * xj::astype(xj::is_finite(a), dtype)};
        case 1: note(m, a); return {xj::where(xj::all(a > 0.0, {}, true), a, -a)};
        case 2: note(m, a - 0.5); return {xj::where(xj::any(a > 0.5, {}, true), a, 2.0 * a)};
        case 3: note(m, a + 0.5), note(m, a - 0.5); return {xj::clamp(-0.5, a, 0.5)};
        case 4: {
          const Array lo = 0.3 * xj::sin(a) - 0.5, hi = 0.3 * xj::cos(a) + 0.5;
          note(m, a - lo), note(m, a - hi);
          return {xj::clamp(lo, a, hi)};
        }
        default: {
          const std::int64_t last = a.ndim() - 1;
          note(m, a - xj::min(a, {last}, true));
          return {a - xj::take_along_axis(a, xj::expand_dims(xj::argmin(a, last), last), last)};
        }
      }
    }
    case Op::Bitwise: {  // piecewise constant: jumps where 4 a crosses an integer (its distance noted)
      note(m, a * 4.0 - xj::floor(a * 4.0 + 0.5));
      const Array k = xj::astype(xj::floor(a * 4.0), xj::i32), c = xj::scalar(5.0, xj::i32), two = xj::scalar(2.0, xj::i32);
      const Array r = n.variant == 0 ? (k & c) : n.variant == 1 ? (k | c) : n.variant == 2 ? (k ^ c) : n.variant == 3 ? ~k
                    : n.variant == 4 ? xj::population_count(k) : n.variant == 5 ? xj::shift_left(k, two)
                    : n.variant == 6 ? xj::shift_right_logical(xj::abs(k), two) : xj::shift_right_arithmetic(k, two);
      return {xj::astype(r, dtype) * 0.125};
    }
    case Op::CastRoundTrip: {
      // Every other one (by operand index: no random draw, so the programs of older seeds keep
      // their shape) mixes dtypes that promote (issue 27): the program's dtype with f64, and an
      // i32 iota times a C++ float (weakly typed: f32), added and taken away again; its value is a.
      if (n.args[0] % 4 == 0) return {xj::astype(xj::astype(a, xj::f64), dtype)};
      if (n.args[0] % 4 == 2) {
        // The narrow dtypes: bf16, f16 and i8 arithmetic that cancels exactly (its tangent too),
        // bf16 + f16 promoting to f32, then f32 to the program's dtype; value and derivative a's.
        // Only doubling and halving, exact in every precision: a jitted bf16 chain keeps its
        // values in f32 (excess precision), so h * h - h * h cancels only where both products
        // are rounded alike, which fusion does not promise (nor does XLA's).
        // The sum's term has a conversion of its own (of -c, so CSE keeps it apart): sharing h, its
        // transposed broadcast was added into h's cotangent twice, in two sums that vmap's
        // transposes could place in different fused chains, one rounded to bf16 and one kept in
        // f32 (fuzz seed 431112: vmap against the loop off by one bf16 rounding).
        const Array c = xj::clamp(-100.0, a, 100.0);
        const Array h = xj::astype(c, xj::bf16), q = xj::astype(c, xj::f16), k = xj::astype(c, xj::i8);
        const Array g = xj::astype(-c, xj::bf16);
        const Array zero = ((h + h) * 0.5 - h) + xj::sum(g - g) + (q - q);
        return {a + zero + xj::astype(k - k, dtype)};
      }
      Array wide = xj::astype(a, xj::f64) * 0.5 + a * 0.5;  // f64 + the program's dtype: f64
      if (a.ndim() > 0) {
        const Array step = xj::iota(xj::i32, a.shape(), 0) * 0.125;  // f32
        wide = wide + step - step;                                   // f64 + f32: f64
      }
      return {xj::astype(wide, dtype)};
    }
    case Op::StopGradient:  // stop_gradient(x) / 2 + 1/4: not equal to x, so no exact tie with it
      if (mode == Mode::Full) return {xj::stop_gradient(a) * 0.5 + 0.25};
      if (tape->recording) {
        tape->entries.emplace_back(a);
        return {a * 0.5 + 0.25};
      }
      return {std::get<Array>(tape->entries.at(tape->pos++)) * 0.5 + 0.25};
    case Op::Name: return {xj::checkpoint_name(a, n.text)};
    case Op::Silu: return {xj::silu(a)};
    case Op::LogSigmoid: return {xj::log_sigmoid(a)};
    case Op::Elu: note(m, a); return {xj::elu(a, n.c)};
    case Op::LeakyRelu: note(m, a); return {xj::leaky_relu(a, n.c)};
    case Op::Abs: note(m, a); return {xj::abs(a)};
    case Op::Relu: note(m, a); return {xj::relu(a)};
    case Op::Sign: note(m, a); return {xj::sign(a)};
    case Op::Add: return {op_form ? a + b : xj::add(a, b)};
    case Op::Sub: return {op_form ? a - b : xj::sub(a, b)};
    case Op::Mul: return {op_form ? a * b : xj::mul(a, b)};
    case Op::DivSafe: return {op_form ? a / (1.5 + xj::tanh(b)) : xj::div(a, xj::add(xj::tanh(b), xj::scalar_like(1.5, b)))};
    case Op::PowSafe: return {xj::pow(1.0 + xj::square(a), xj::tanh(b))};
    // atan2 away from its cut and its pole: one coordinate kept positive (variant: which).
    case Op::Atan2: return {n.variant == 0 ? xj::atan2(a, 1.5 + xj::tanh(b)) : xj::atan2(1.5 + xj::tanh(a), b)};
    case Op::NextAfter: return {xj::nextafter(a, b)};
    // An operand against itself is an exact tie, where the derivatives' weights meet (1/2 each).
    case Op::LogAddExp: return {n.variant == 0 ? xj::logaddexp(a, b) : xj::logaddexp(b, a)};
    case Op::RemSafe: {  // rem by y in (0.5, 2.5) (or minus that): jumps where a / y is an integer
      const Array y = n.variant == 0 ? 1.5 + xj::tanh(b) : -1.5 - xj::tanh(b);
      const Array r = xj::rem(a, y);
      if (m) note(m, r), note(m, xj::abs(r) - xj::abs(y));
      return {r};
    }
    case Op::Maximum: if (m) note(m, a - b); return {xj::maximum(a, b)};
    case Op::Minimum: if (m) note(m, a - b); return {xj::minimum(a, b)};
    case Op::SelectGt: {  // where(a > b, 2a, b), the comparison spelled as gt, ge, lt or le (equal off the tie)
      if (m) note(m, a - b);
      const std::int64_t cmp = n.ints.empty() ? 0 : n.ints[0];
      Array pred = cmp == 0 ? (op_form ? a > b : xj::gt(a, b))
                 : cmp == 1 ? (op_form ? a >= b : xj::ge(a, b))
                 : cmp == 2 ? (op_form ? b < a : xj::lt(b, a))
                            : (op_form ? b <= a : xj::le(b, a));
      return {op_form ? xj::where(pred, a * 2.0, b) : xj::select(pred, xj::mul(a, xj::scalar_like(2, a)), b)};
    }
    case Op::Sum: return {xj::sum(a, n.ints, n.flag)};
    case Op::Mean: return {xj::mean(a, n.ints, n.flag)};
    case Op::Max: if (m) note(m, a - xj::max(a, n.ints, true)); return {xj::max(a, n.ints, n.flag)};
    case Op::Min: if (m) note(m, a - xj::min(a, n.ints, true)); return {xj::min(a, n.ints, n.flag)};
    case Op::ProdPos:  // variant 1 (only once kReduceProdZeroBugFixed): prod of x itself
      return {xj::prod(n.variant == 1 ? a : 1.5 + xj::tanh(a), n.ints, n.flag)};
    case Op::LogSumExp: return {xj::logsumexp(a, n.ints, n.flag)};
    case Op::Softmax: return {xj::softmax(a, n.ints[0])};
    case Op::Sort: {
      const std::int64_t axis = n.ints[0];
      const Array sorted = xj::sort(a, axis);
      if (m && a.dim(axis) > 1) {  // ties are kinks: the gaps between neighbours in sorted order
        const std::int64_t len = a.dim(axis);
        note(m, xj::slice_in_dim(sorted, 1, len, 1, axis) - xj::slice_in_dim(sorted, 0, len - 1, 1, axis));
      }
      if (n.variant == 0) return {sorted};
      if (n.variant == 1) return {xj::top_k(a, n.ints[1]).first};
      return {xj::take_along_axis(a, xj::argsort(a, axis), axis)};
    }
    case Op::Cumulative:
      switch (n.variant) {
        case 0: return {xj::cumsum(a, n.ints[0], n.flag)};
        case 1: return {xj::cumprod(xj::tanh(a), n.ints[0], n.flag)};
        case 2: return {xj::cummax(a, n.ints[0], n.flag)};
        case 3: return {xj::cummin(a, n.ints[0], n.flag)};
        default: return {xj::cumlogsumexp(a, n.ints[0], n.flag)};
      }
    case Op::Window: {
      const WindowInts w = window_ints(n.ints, 0);
      const double inf = std::numeric_limits<double>::infinity();
      const xj::WindowOp op = n.variant == 1 ? xj::WindowOp::max : n.variant == 2 ? xj::WindowOp::min : xj::WindowOp::add;
      const Array y = xj::reduce_window(a, n.variant == 1 ? -inf : n.variant == 2 ? inf : 0.0, op, w.window, w.strides, w.pads,
                                        w.dilation_a, w.dilation_b);
      return {n.variant == 3 ? y * 0.5 : y};
    }
    case Op::LogSoftmax: return {xj::log_softmax(a, n.ints[0])};
    case Op::Var: return {xj::var(a, n.ints, n.variant, n.flag)};
    case Op::Matmul: return {xj::matmul(a, b)};
    case Op::Dot: return {xj::dot(a, b)};
    case Op::Einsum: return {args.size() > 1 ? xj::einsum(n.text, a, b) : xj::einsum(n.text, a)};
    case Op::DotGeneral: {
      xj::Axes lb, rb;
      if (!n.ints2.empty()) lb = {n.ints2[0]}, rb = {n.ints2[1]};
      return {xj::dot_general(a, b, {n.ints[0]}, {n.ints[1]}, lb, rb)};
    }
    case Op::Conv: {
      // The kernel: the other value fitted to (O, I, window...) and squashed into [-1, 1].
      const bool last = n.variant == 1;
      const std::int64_t o = n.ints[0], groups = n.ints[1], batch_groups = n.ints[2];
      const std::int64_t r = a.ndim(), c = last ? a.dim(r - 1) : a.dim(1);
      const WindowInts w = window_ints(n.ints, 3);  // dilation_a: rhs's, dilation_b: lhs's
      Shape kshape{o, c / groups};
      kshape.insert(kshape.end(), w.window.begin(), w.window.end());
      const Array k = xj::tanh(fit(b, kshape));
      const std::string sp = std::string("HWD").substr(0, static_cast<std::size_t>(r - 2));
      const xj::ConvDimensionNumbers dn = last ? xj::ConvDimensionNumbers{"N" + sp + "C", "OI" + sp, "N" + sp + "C"}
                                               : xj::ConvDimensionNumbers{"NC" + sp, "OI" + sp, "NC" + sp};
      return {xj::conv_general_dilated(a, k, w.strides, w.pads, w.dilation_b, w.dilation_a, dn, groups, batch_groups)};
    }
    case Op::Cholesky: return {xj::linalg::cholesky(spd(a), !n.flag)};
    case Op::TriangularSolve: {
      const xj::linalg::TriangularSolveOptions o{.left_side = n.ints[0] != 0, .lower = n.ints[1] != 0,
                                                 .transpose_a = n.ints[2] != 0, .unit_diagonal = n.ints[3] != 0};
      return {xj::linalg::triangular_solve(xj::tanh(a) + identity(a) * 4.0, b, o)};
    }
    case Op::ChoSolve: {
      const Array l = xj::linalg::cholesky(spd(a));
      return {n.flag ? xj::linalg::cho_solve(xj::matrix_transpose(l), b, false) : xj::linalg::cho_solve(l, b)};
    }
    case Op::Lu: return {std::get<0>(xj::linalg::lu(dominant(a, n.flag)))};
    case Op::Solve: {
      if (n.variant == 0) return {xj::linalg::solve(dominant(a, n.flag), b)};
      if (n.variant == 1) return {xj::linalg::solve(spd(a), b, "pos")};
      // cg for a fixed number of steps (tol too small to stop it early: a derivative by finite
      // differences needs the same iteration count at every point), enough for the whole system
      // (the batch too: one inner product spans it).
      const Array m = spd(a);
      return {xj::sparse::cg([m](const Array& v) { return xj::matmul(m, v); }, b, {.tol = 1e-30, .maxiter = b.size()})};
    }
    case Op::LuSolve: {
      const auto [lu, pivots] = xj::linalg::lu_factor(dominant(a, n.flag));
      return {xj::linalg::lu_solve(lu, pivots, b, static_cast<int>(n.ints[0]))};
    }
    case Op::Qr: {
      const auto [q, r] = xj::linalg::qr(dominant(a, n.flag));
      return {n.variant == 0 ? q : r};
    }
    case Op::Eigh: {
      const auto [w, v] = xj::linalg::eigh(separated(a));
      return {n.variant == 0 ? w : v * column_signs(v)};
    }
    case Op::Svd: {
      const auto [u, s, vh] = xj::linalg::svd(separated(a));
      const Array signs = column_signs(u);
      return {n.variant == 0 ? u * signs : n.variant == 1 ? s : vh * xj::matrix_transpose(signs)};
    }
    case Op::Inv: return {xj::linalg::inv(dominant(a, n.flag))};
    case Op::Slogdet: {
      const auto [sign, logabsdet] = xj::linalg::slogdet(dominant(a, n.flag));
      return {sign * logabsdet};
    }
    case Op::Reshape: return {xj::reshape(a, n.ints)};
    case Op::Transpose: return {n.flag ? xj::transpose(a) : xj::transpose(a, n.ints)};
    case Op::Flip: return {n.flag ? xj::flip(a) : xj::flip(a, n.ints)};
    case Op::BroadcastTo: return {xj::broadcast_to(a, n.ints)};
    case Op::ExpandDims: return {xj::expand_dims(a, n.ints[0])};
    case Op::Squeeze: return {xj::squeeze(a, n.ints)};
    case Op::Concat: return {xj::concatenate(args, n.ints[0])};
    case Op::Stack: return {xj::stack(args, n.ints[0])};
    case Op::Slice: {
      xj::Axes start, limit, strides;
      for (std::size_t k = 0; k < n.ints.size(); k += 3) {
        start.push_back(n.ints[k]);
        limit.push_back(n.ints[k + 1]);
        strides.push_back(n.ints[k + 2]);
      }
      if (!n.flag && start.size() == 1) return {xj::slice_in_dim(a, start[0], limit[0], 1, 0)};
      return {n.flag ? xj::slice(a, start, limit, strides) : xj::slice(a, start, limit)};
    }
    case Op::DynSlice: case Op::DynUpdateSlice: {
      // variant 1: each start in [-1, d + 1] (clamped by the op) from the last argument
      Arrays starts = i32_scalars(n.ints);
      if (n.variant == 1)
        for (std::size_t k = 0; k < starts.size(); ++k)
          starts[k] = data_index(args.back(), static_cast<std::int64_t>(k), -1, a.shape()[k] + 1, m);
      if (n.op == Op::DynSlice) return {xj::dynamic_slice(a, starts, n.ints2)};
      return {xj::dynamic_update_slice(a, b, starts)};
    }
    case Op::Take: {
      if (n.variant == 1) {  // indices in [-d, d - 1] from the last argument
        std::int64_t d = a.shape()[static_cast<std::size_t>(n.ints[0])];
        Arrays idx;
        for (std::size_t k = 0; k < n.ints2.size(); ++k) idx.push_back(data_index(args.back(), static_cast<std::int64_t>(k), -d, d - 1, m));
        return {xj::take(a, xj::stack(idx), n.ints[0])};
      }
      std::vector<std::int32_t> idx(n.ints2.begin(), n.ints2.end());
      return {xj::take(a, xj::array<std::int32_t>(idx, {static_cast<std::int64_t>(idx.size())}), n.ints[0])};
    }
    case Op::Index:
      if (!n.flag) return {a[n.ints[0]]};
      if (n.variant == 1) return {a[data_index(args.back(), 0, 0, a.shape()[0] - 1, m)]};
      return {a[xj::scalar(static_cast<double>(n.ints[0]), xj::i32)]};
    case Op::Fit: return {fit(a, out)};
    case Op::At: {  // generate.cpp: at_op
      const std::int64_t how = n.ints[0], k = n.ints[1];
      const xj::IndexMode mode = n.ints[2] ? xj::IndexMode::clip : xj::IndexMode::drop;
      const auto cnt = static_cast<std::int64_t>(n.ints2.size()) / k;
      std::vector<Array> idx;
      for (std::int64_t q = 0; q < k; ++q) {
        const auto first = n.ints2.begin() + q * cnt;
        idx.push_back(xj::array<std::int32_t>(std::vector<std::int32_t>(first, first + cnt), {cnt}));
      }
      if (n.variant == 1) {  // the first axis's indices from data, in [-d, d] (d itself is outside)
        const std::int64_t d = a.shape()[0];
        Arrays parts;
        for (std::int64_t e = 0; e < cnt; ++e) parts.push_back(data_index(args.back(), e, -d, d, m));
        idx[0] = xj::stack(parts);
      }
      const xj::At view = xj::at(a, idx);
      if (how == 0) return {view.get()};
      Shape upd{cnt};
      upd.insert(upd.end(), a.shape().begin() + k, a.shape().end());
      const Array u = fit(args[1], upd);
      if (how >= 4) note(m, view.get() - u);
      switch (how) {
        case 1: return {view.set(u, mode)};
        case 2: return {view.add(u, mode)};
        case 3: return {view.mul(u, mode)};
        case 4: return {view.min(u, mode)};
        default: return {view.max(u, mode)};
      }
    }
    case Op::TakeAlongAxis: {  // variant 1: every index shifted by one from data (the op clamps)
      Shape ishape(n.ints.begin() + 1, n.ints.end());
      Array idx = xj::array<std::int32_t>(std::vector<std::int32_t>(n.ints2.begin(), n.ints2.end()), ishape);
      if (n.variant == 1) {
        std::int64_t d = a.shape()[static_cast<std::size_t>((n.ints[0] + a.ndim()) % a.ndim())];
        idx = idx + data_index(args.back(), 0, -d, d - 1, m);
      }
      return {xj::take_along_axis(a, idx, n.ints[0])};
    }
    case Op::Norm: {
      const std::int64_t axis = n.ints[0];
      const Shape len{a.shape()[static_cast<std::size_t>((axis + a.ndim()) % a.ndim())]};
      std::size_t next = 1;
      std::optional<Array> scale, bias;
      if (n.ints[1]) scale = fit(args.at(next++), len);
      if (n.ints[2]) bias = fit(args.at(next++), len);
      if (n.variant == 0) return {xj::standardize(a, axis, std::nullopt, std::nullopt, n.c)};
      if (n.variant == 1) return {xj::layer_norm(a, scale, bias, axis, n.c)};
      return {xj::rms_norm(a, scale, axis, n.c)};
    }
    case Op::Loss: {
      namespace optim = xj::optim;
      switch (n.variant) {
        case 0: return {optim::softmax_cross_entropy(a, xj::softmax(b, -1))};
        case 1: {
          const Shape rows(a.shape().begin(), a.shape().end() - 1);
          std::vector<std::int32_t> labels(n.ints2.begin(), n.ints2.end());
          return {optim::softmax_cross_entropy_with_integer_labels(a, xj::array<std::int32_t>(labels, rows))};
        }
        case 2: return {optim::sigmoid_binary_cross_entropy(a, xj::logistic(b))};
        case 3: return {n.flag ? optim::l2_loss(a, b) : optim::l2_loss(a)};
        default:  // the second derivative jumps where |e| = delta
          if (m) note(m, xj::abs(n.flag ? a - b : a) - n.c);
          return {n.flag ? optim::huber_loss(a, b, n.c) : optim::huber_loss(a, std::nullopt, n.c)};
      }
    }
    case Op::Checkpoint: case Op::Scan: case Op::ForiLoop: case Op::While: case Op::Cond: case Op::Switch:
    case Op::Jit: case Op::CustomJvp: case Op::CustomVjp: case Op::InnerGrad: case Op::Count_: break;
  }
  throw std::logic_error("fuzz: no interpretation of " + std::string(op_name(n.op)));
}

/// The real xjax wrappers.
Arrays Runner::wrapper(const Node& n, const Arrays& args, const Arrays& env) const {
  const Runner r = *this;
  const Block* blk = n.subs.empty() ? nullptr : &n.subs[0];
  auto fn = [r, blk, env](const Arrays& xs) { return r.run(*blk, xs, env); };
  xj::DType dt = dtype;
  switch (n.op) {
    case Op::Checkpoint: {
      xj::CheckpointOptions o;
      if (n.variant) o.policy = policy(n);
      // Residuals rounded (and the discontinuous equations that read them saved, narrowing.cpp).
      if (n.narrowed_residuals) o.policy = o.policy.value_or(xj::checkpoint_policies::nothing_saveable).as(residuals_as);
      o.prevent_cse = n.flag;
      return xj::checkpoint(fn, o)(args);
    }
    case Op::Scan: {
      auto nc = static_cast<std::size_t>(n.ints[0]);
      Arrays init(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(nc));
      Arrays xs(args.begin() + static_cast<std::ptrdiff_t>(nc), args.end());
      // ints[3] == 0 stands for {.unroll = true} (unroll the whole loop).
      // ints[4] > 0: reverse mode with the binomial schedule of that many snapshots.
      xj::ScanOptions o{.length = n.ints[2], .reverse = n.flag,
                        .unroll = n.ints[3] == 0 ? xj::ScanUnroll(true) : xj::ScanUnroll(n.ints[3]),
                        .checkpoints = n.ints[4] > 0 && !schedules_off ? xj::scan_checkpoints::binomial(n.ints[4])
                                                                       : xj::scan_checkpoints::all()};
      switch (n.variant) {
        case 0: return scan_full<false, false>(r, blk, env, init, xs, nc, o);
        case 1: return scan_full<true, false>(r, blk, env, init, xs, nc, o);
        case 2: return scan_full<false, true>(r, blk, env, init, xs, nc, o);
        default: return scan_full<true, true>(r, blk, env, init, xs, nc, o);
      }
    }
    case Op::ForiLoop: {
      auto body = [r, blk, env, dt](const Array& i, const Arrays& c) {
        Arrays in = c;
        in.push_back(xj::astype(i, dt));
        return r.run(*blk, in, env);
      };
      int lo = static_cast<int>(n.ints[0]), hi = static_cast<int>(n.ints[1]);
      if (n.flag) return xj::fori_loop(lo, xj::scalar(hi, xj::i32), body, args);
      return xj::fori_loop(lo, hi, body, args);
    }
    case Op::While: {
      using C = std::pair<Array, Arrays>;
      std::int64_t trip = n.ints[0];
      bool data = n.variant == 1;
      double c = n.c;
      auto cond = [trip, data, c](const C& ic) {
        Array go = xj::lt(ic.first, xj::scalar(static_cast<double>(trip), xj::i32));
        if (!data) return go;
        return xj::where(xj::sum(ic.second[0]) > c, xj::scalar(0, xj::bool_), go);
      };
      auto body = [r, blk, env, dt](const C& ic) {
        Arrays in = ic.second;
        in.push_back(xj::astype(ic.first, dt));
        return C{ic.first + 1, r.run(*blk, in, env)};
      };
      // ints[1] > 0: reverse mode with the online schedule of that many snapshots.
      xj::WhileOptions wo{.checkpoints = n.ints[1] > 0 ? xj::scan_checkpoints::online(n.ints[1]) : xj::scan_checkpoints::all()};
      return xj::while_loop(cond, body, C{xj::scalar(0, xj::i32), args}, wo).second;
    }
    case Op::Cond: {
      Array p = args[0];
      Arrays ops(args.begin() + 1, args.end());
      Array pred = n.variant == 0 ? xj::scalar(n.c, xj::bool_)
                   : n.variant == 1 ? xj::sum(p) > n.c
                                    : xj::sum(p) - n.c;
      const Block* fb = &n.subs[0];
      const Block* tb = &n.subs[1];
      auto f_false = [r, fb, env](const Arrays& xs) { return r.run(*fb, xs, env); };
      auto f_true = [r, tb, env](const Arrays& xs) { return r.run(*tb, xs, env); };
      return xj::cond(pred, f_true, f_false, ops);
    }
    case Op::Switch: {
      Array p = args[0];
      Arrays ops(args.begin() + 1, args.end());
      Array index = n.variant == 0 ? xj::scalar(static_cast<double>(n.ints[0]), xj::i32)
                                   : xj::argmax(xj::reshape(p, {-1}), 0);
      std::vector<std::function<Arrays(const Arrays&)>> branches;
      for (const auto& sb : n.subs) {
        const Block* bp = &sb;
        branches.emplace_back([r, bp, env](const Arrays& xs) { return r.run(*bp, xs, env); });
      }
      return xj::switch_(index, branches, ops);
    }
    case Op::Jit:
      if (n.variant == 1) return jit_with_number(fn, args, n.c, n.flag, dtype);
      if (n.variant == 2) return jit_donating(fn, args);
      return xj::jit(fn)(args);
    case Op::InnerGrad: return inner_grad(fn, args);
    case Op::CustomJvp: {
      if (n.variant == 0) {
        int k = static_cast<int>(n.ints[0]);
        auto f = [k](const Arrays& x) { return formula_f(k, x); };
        auto rule = [k](const std::tuple<Arrays>& p, const std::tuple<Arrays>& t) {
          const Arrays& x = std::get<0>(p);
          return std::pair<Array, Array>{formula_f(k, x), formula_jvp(k, x, std::get<0>(t))};
        };
        return {xj::custom_jvp(f, rule)(args)};
      }
      auto g = [r, blk](const Arrays& x) { return r.run(*blk, x, {}).at(0); };
      auto rule = [g](const std::tuple<Arrays>& p, const std::tuple<Arrays>& t) { return xj::jvp(g, p, t); };
      return {xj::custom_jvp(g, rule)(args)};
    }
    case Op::CustomVjp: {
      if (n.variant == 0) {
        int k = static_cast<int>(n.ints[0]);
        auto f = [k](const Arrays& x) { return formula_f(k, x); };
        auto fwd = [k](const Arrays& x) { return std::pair<Array, Arrays>{formula_f(k, x), x}; };
        auto bwd = [k](const Arrays& res, const Array& ct) { return std::tuple<Arrays>{formula_vjp(k, res, ct)}; };
        return {xj::custom_vjp(f, fwd, bwd)(args)};
      }
      auto g = [r, blk](const Arrays& x) { return r.run(*blk, x, {}).at(0); };
      auto fwd = [g](const Arrays& x) { return std::pair<Array, Arrays>{g(x), x}; };
      auto bwd = [g](const Arrays& res, const Array& ct) {
        auto [out, pull] = xj::vjp(g, res);
        return pull(ct);
      };
      return {xj::custom_vjp(g, fwd, bwd)(args)};
    }
    default: break;
  }
  throw std::logic_error("fuzz: not a wrapper");
}

/// Each wrapper's meaning written in C++.
Arrays Runner::plain_wrapper(const Node& n, const Arrays& args, const Arrays& env) const {
  const Block* blk = n.subs.empty() ? nullptr : &n.subs[0];
  Monitor* m = monitor;
  switch (n.op) {
    case Op::Checkpoint: return run(*blk, args, env);
    case Op::Jit: {
      Arrays out = run(*blk, args, env);
      if (n.variant == 1) out[0] = out[0] * n.c;
      return out;
    }
    case Op::Scan: {
      auto nc = static_cast<std::size_t>(n.ints[0]);
      std::int64_t length = n.ints[2];
      Arrays carry(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(nc));
      Arrays xs(args.begin() + static_cast<std::ptrdiff_t>(nc), args.end());
      std::size_t ny = n.outs.size() - nc;
      std::vector<Arrays> ys(ny, Arrays(static_cast<std::size_t>(length)));
      for (std::int64_t step = 0; step < length; ++step) {
        std::int64_t i = n.flag ? length - 1 - step : step;
        Arrays in = carry;
        for (const auto& x : xs) in.push_back(x[i]);
        Arrays o = run(*blk, in, env);
        carry.assign(o.begin(), o.begin() + static_cast<std::ptrdiff_t>(nc));
        for (std::size_t k = 0; k < ny; ++k) ys[k][static_cast<std::size_t>(i)] = o[nc + k];
      }
      Arrays out = carry;
      for (std::size_t k = 0; k < ny; ++k)
        out.push_back(length == 0 ? xj::zeros(n.outs[nc + k], dtype) : xj::stack(ys[k], 0));
      return out;
    }
    case Op::ForiLoop: {
      Arrays carry = args;
      for (std::int64_t i = n.ints[0]; i < n.ints[1]; ++i) {
        Arrays in = carry;
        in.push_back(xj::scalar(static_cast<double>(i), dtype));
        carry = run(*blk, in, env);
      }
      return carry;
    }
    case Op::While: {
      Arrays carry = args;
      for (std::int64_t i = 0;; ++i) {
        bool go = decision(*tape, [&]() -> std::int64_t {
          if (i >= n.ints[0]) return 0;
          if (n.variant == 0) return 1;
          Array s = xj::sum(carry[0]);
          note(m, s - n.c);
          return s.item<double>() > n.c ? 0 : 1;
        });
        if (!go) break;
        Arrays in = carry;
        in.push_back(xj::scalar(static_cast<double>(i), dtype));
        carry = run(*blk, in, env);
      }
      return carry;
    }
    case Op::Cond: {
      Arrays ops(args.begin() + 1, args.end());
      std::int64_t branch = decision(*tape, [&]() -> std::int64_t {
        if (n.variant == 0) return n.c != 0;
        Array s = xj::sum(args[0]) - n.c;
        note(m, s);
        return s.item<double>() != 0 && (n.variant == 2 || s.item<double>() > 0);
      });
      return run(n.subs[static_cast<std::size_t>(branch)], ops, env);
    }
    case Op::Switch: {
      Arrays ops(args.begin() + 1, args.end());
      auto nb = static_cast<std::int64_t>(n.subs.size());
      std::int64_t index = decision(*tape, [&]() -> std::int64_t {
        if (n.variant == 0) return std::clamp<std::int64_t>(n.ints[0], 0, nb - 1);
        auto v = args[0].to_vector<double>();
        auto best = std::max_element(v.begin(), v.end());
        note(m, xj::reshape(args[0], {-1}) - *best);
        return std::min<std::int64_t>(best - v.begin(), nb - 1);
      });
      return run(n.subs[static_cast<std::size_t>(index)], ops, env);
    }
    case Op::InnerGrad: {  // the same, on the Plain block
      const Runner r = *this;
      return inner_grad([r, blk, env](const Arrays& xs) { return r.run(*blk, xs, env); }, args);
    }
    case Op::CustomJvp: case Op::CustomVjp:
      if (n.variant == 0) return {formula_f(static_cast<int>(n.ints[0]), args)};
      return run(*blk, args, {});
    default: break;
  }
  throw std::logic_error("fuzz: not a wrapper");
}

}  // namespace fuzz

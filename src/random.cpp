// random.cpp: xj::random, built only from traceable operations and the threefry2x32 primitive
// (constructions documented in include/xjax/random.hpp).
#include "xjax/random.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "internal.hpp"

namespace xjax::random {

namespace {

constexpr std::int64_t kMaxCount = 0xffffffffLL;  // counters are u32

std::string at(const char* fn, const std::source_location& loc) {
  return std::string("xj::random::") + fn + " (at " + format_location(loc) + ")";
}

void check_key(const Array& key, const char* fn, const std::source_location& loc) {
  if (!key.valid()) throw Error(at(fn, loc) + ": the key is an empty Array");
  if (key.dtype() != u32) throw TypeError(at(fn, loc) + ": a key must be u32[2], got " + key.aval().str());
  if (key.shape() != Shape{2}) throw ShapeError(at(fn, loc) + ": a key must be u32[2], got " + key.aval().str());
}

void check_float(DType dtype, const char* fn, const std::source_location& loc) {
  if (!is_floating(dtype))
    throw TypeError(at(fn, loc) + ": needs a floating-point dtype (f32, f64, bf16 or f16), got " + dtype_name(dtype));
}

std::int64_t checked_count(const Shape& shape, std::int64_t words_per_element, const char* fn,
                           const std::source_location& loc) {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw ShapeError(at(fn, loc) + ": negative dimension in shape " + shape_str(shape));
    if (d != 0 && n > kMaxCount / d) n = kMaxCount + 1;  // saturate; rejected below
    else n *= d;
  }
  if (n > kMaxCount / words_per_element)
    throw ShapeError(at(fn, loc) + ": shape " + shape_str(shape) + " needs more than 2^32 random words");
  return n * words_per_element;
}

// n random words as u32[n]: JAX's threefry_2x32 over iota(n). The counters (0..n-1, and one 0
// when n is odd) are halved, the halves hashed pairwise (c[i], c[i+m]) -> (y0[i], y1[i]), and the
// result is y0 ++ y1 cut to n.
Array raw_words(const Array& key, std::int64_t n, const std::source_location& loc) {
  const std::int64_t m = (n + 1) / 2;
  Array flat = iota(u32, {n}, 0, loc);
  if (n % 2 != 0) flat = concatenate({flat, broadcast_to(scalar(0.0, u32), {1}, loc)}, 0, loc);
  Array counters = transpose(reshape(flat, {2, m}, loc), {1, 0}, loc);  // u32[m, 2]
  Array hashed = detail::bind1(Primitive::threefry2x32, {key, counters}, {}, loc);
  Array words = reshape(transpose(hashed, {1, 0}, loc), {2 * m}, loc);
  if (n % 2 != 0) words = slice_in_dim(words, 0, n, 1, 0, loc);
  return words;
}

// v rounded to the float dtype d (what JAX's arithmetic in d sees of a Python float).
double in_dtype(double v, DType d) {
  if (d == f32) return static_cast<double>(static_cast<float>(v));
  if (d == bf16) return static_cast<double>(bfloat16_t(v));
  if (d == f16) return static_cast<double>(float16_t(v));
  return v;
}

// Uniform floats in [0, 1) as a flat array of n elements (exact binary fractions).
Array unit_floats(const Array& key, std::int64_t n, DType dtype, const std::source_location& loc) {
  if (dtype == bf16 || dtype == f16) {
    // the top nmant bits of each word: k / 2^nmant, exact in the dtype (JAX draws them from bits too)
    const int nmant = finfo(dtype).nmant;
    Array w = raw_words(key, n, loc);
    return astype(div(w, scalar(std::ldexp(1.0, 32 - nmant), u32), loc), dtype, loc) * std::ldexp(1.0, -nmant);  // integer division
  }
  if (dtype == f32) {
    // top 23 bits of each word: the mantissa of a float in [1, 2), minus 1
    Array w = raw_words(key, n, loc);
    return astype(div(w, scalar(512.0, u32), loc), f32, loc) * std::ldexp(1.0, -23);  // w / 512: integer division (w >> 9)
  }
  // f64: 52 bits from a high word (first half) and a low word (second half)
  Array w = raw_words(key, 2 * n, loc);
  Array hi = astype(slice_in_dim(w, 0, n, 1, 0, loc), f64, loc);
  Array lo = astype(div(slice_in_dim(w, n, 2 * n, 1, 0, loc), scalar(4096.0, u32), loc), f64, loc);  // integer division (>> 12)
  return hi * std::ldexp(1.0, -32) + lo * std::ldexp(1.0, -52);
}

}  // namespace

Array key(std::uint64_t seed) {
  return array<std::uint32_t>({static_cast<std::uint32_t>(seed >> 32),
                               static_cast<std::uint32_t>(seed & 0xffffffffu)});
}

Array split(const Array& key, std::int64_t n, std::source_location loc) {
  check_key(key, "split", loc);
  if (n < 0) throw ShapeError(at("split", loc) + ": negative number of keys " + std::to_string(n));
  const std::int64_t words = checked_count({n}, 2, "split", loc);
  return reshape(raw_words(key, words, loc), {n, 2}, loc);
}

Array fold_in(const Array& key, std::uint32_t data, std::source_location loc) {
  return fold_in(key, scalar(static_cast<double>(data), u32), loc);
}

Array fold_in(const Array& key, const Array& data, std::source_location loc) {
  check_key(key, "fold_in", loc);
  // Any integer or bool, as JAX's jnp.uint32(data) (i64 / u64 keep their low 32 bits).
  if (!data.valid() || data.ndim() != 0 || !(is_integer(data.dtype()) || data.dtype() == bool_))
    throw TypeError(at("fold_in", loc) + ": data must be a rank-0 integer array, got " +
                    (data.valid() ? data.aval().str() : std::string("an empty Array")));
  // JAX: the data as u32 is the counter pair (0, data)
  Array d = astype(data, u32, loc);
  Array counters = reshape(stack({scalar(0.0, u32), d}, 0, loc), {1, 2}, loc);
  return reshape(detail::bind1(Primitive::threefry2x32, {key, counters}, {}, loc), {2}, loc);
}

Array bits(const Array& key, const Shape& shape, std::source_location loc) {
  check_key(key, "bits", loc);
  const std::int64_t n = checked_count(shape, 1, "bits", loc);
  return reshape(raw_words(key, n, loc), shape, loc);
}

Array uniform(const Array& key, const Shape& shape, DType dtype, double minval, double maxval,
              std::source_location loc) {
  check_key(key, "uniform", loc);
  check_float(dtype, "uniform", loc);
  const std::int64_t n = checked_count(shape, dtype == f64 ? 2 : 1, "uniform", loc) / (dtype == f64 ? 2 : 1);
  Array u = reshape(unit_floats(key, n, dtype, loc), shape, loc);
  if (minval == 0.0 && maxval == 1.0) return u;  // u * 1 + 0 clamped at 0 is u itself
  // JAX: u * (maxval - minval) + minval in the dtype, clamped below at minval; and above at the
  // dtype's value below maxval (JAX's can round up to maxval: 25% of f16 draws in [1000, 1001)),
  // so that every draw lies in [minval, maxval) as the header promises.
  // bf16 / f16 map in f32 and round once, so eager and jitted draws agree (two bf16 operations
  // round twice eagerly, once in a fused chain). A span past the dtype's range (f32 [-3e38, 3e38))
  // maps as the convex combination u hi + (1 - u) lo, which cannot overflow.
  const double lo = in_dtype(minval, dtype), hi = in_dtype(maxval, dtype);
  if (!std::isfinite(lo) || !std::isfinite(hi))
    throw Error(at("uniform", loc) + ": minval and maxval must be finite in " + std::string(dtype_name(dtype)) + ", got " +
                std::to_string(minval) + " and " + std::to_string(maxval));
  const DType work = dtype == bf16 || dtype == f16 ? f32 : dtype;
  const Array w = astype(u, work, loc);
  const double span = in_dtype(hi - lo, work);
  const Array mapped = std::isfinite(span) ? w * span + lo : w * hi + (1.0 - w) * lo;
  const Array draws = maximum(astype(mapped, dtype, loc), scalar(lo, dtype), loc);
  if (!(hi > lo)) return draws;  // an empty or reversed range: minval, as JAX's
  return minimum(draws, nextafter(scalar(hi, dtype), scalar(lo, dtype), loc), loc);
}

Array normal(const Array& key, const Shape& shape, DType dtype, std::source_location loc) {
  check_key(key, "normal", loc);
  check_float(dtype, "normal", loc);
  // bf16 / f16: drawn in f32 and rounded once (JAX draws them in the dtype itself).
  if (dtype == bf16 || dtype == f16) return astype(normal(key, shape, f32, loc), dtype, loc);
  const std::int64_t n = checked_count(shape, dtype == f64 ? 2 : 1, "normal", loc) / (dtype == f64 ? 2 : 1);
  // Box-Muller on m pairs of uniforms: u1 in (0, 1], u2 in [0, 1)
  const std::int64_t m = (n + 1) / 2;
  Array u = unit_floats(key, 2 * m, dtype, loc);
  Array u1 = 1.0 - slice_in_dim(u, 0, m, 1, 0, loc);
  Array theta = slice_in_dim(u, m, 2 * m, 1, 0, loc) * (2.0 * std::numbers::pi);
  Array r = sqrt(log(u1, loc) * -2.0, loc);
  Array z = concatenate({r * cos(theta, loc), r * sin(theta, loc)}, 0, loc);
  if (n % 2 != 0) z = slice_in_dim(z, 0, n, 1, 0, loc);
  return reshape(z, shape, loc);
}

Array bernoulli(const Array& key, double p, const Shape& shape, std::source_location loc) {
  check_key(key, "bernoulli", loc);
  return lt(uniform(key, shape, f32, 0.0, 1.0, loc), scalar(p, f32), loc);
}

Array bernoulli(const Array& key, const Array& p, const Shape& shape, std::source_location loc) {
  check_key(key, "bernoulli", loc);
  if (!p.valid()) throw Error(at("bernoulli", loc) + ": p is an empty Array");
  check_float(p.dtype(), "bernoulli", loc);
  if (broadcast_shapes(p.shape(), shape) != shape)
    throw ShapeError(at("bernoulli", loc) + ": p of shape " + shape_str(p.shape()) +
                     " does not broadcast to " + shape_str(shape));
  return lt(uniform(key, shape, p.dtype(), 0.0, 1.0, loc), p, loc);
}

}  // namespace xjax::random

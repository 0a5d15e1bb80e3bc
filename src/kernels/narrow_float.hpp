// narrow_float.hpp: bf16 and f16 bits to and from wider values, rounding to nearest even (not
// installed; the scalar code of every conversion, vectorized by callers where it matters).
//
// A 16-bit float format is its exponent and fraction widths: bf16 is (8, 7), f16 is (5, 10);
// both keep the sign in bit 15. Encoding rounds once from a double (exact for every f32, and for
// every integer below 2^53; larger integers are first rounded to odd at 53 bits, which keeps the
// final rounding correct); decoding is exact.
#pragma once
#include <bit>
#include <cstdint>
#include <type_traits>

namespace xjax::detail::narrow {

struct Format {
  int exp_bits;
  int frac_bits;
  constexpr int bias() const { return (1 << (exp_bits - 1)) - 1; }
  constexpr std::uint16_t inf_bits() const { return static_cast<std::uint16_t>(((1u << exp_bits) - 1) << frac_bits); }
  constexpr std::uint16_t quiet_nan_bits() const { return static_cast<std::uint16_t>(inf_bits() | (1u << (frac_bits - 1))); }
};
inline constexpr Format kBf16{8, 7};
inline constexpr Format kF16{5, 10};

/// v rounded to nearest even in format f (NaN: the quiet NaN of v's sign; overflow: inf).
inline std::uint16_t encode(double v, Format f) {
  const std::uint64_t b = std::bit_cast<std::uint64_t>(v);
  const auto sign = static_cast<std::uint16_t>((b >> 48) & 0x8000u);
  const std::uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
  if (a > 0x7FF0000000000000ull) return sign | f.quiet_nan_bits();
  if (a == 0x7FF0000000000000ull) return sign | f.inf_bits();
  if (a == 0) return sign;
  // v = sig * 2^(e - 52), sig < 2^53.
  int e = static_cast<int>(a >> 52) - 1023;
  std::uint64_t sig = a & 0x000FFFFFFFFFFFFFull;
  if (e == -1023) e = -1022;  // a double subnormal
  else sig |= 1ull << 52;
  if (e > f.bias()) return sign | f.inf_bits();
  const int emin = 1 - f.bias();
  const int quantum = (e > emin ? e : emin) - f.frac_bits;  // the result is a multiple of 2^quantum
  const int shift = quantum - (e - 52);                      // >= 52 - frac_bits > 0
  if (shift > 60) return sign;                               // below a quarter of the least subnormal
  std::uint64_t n = sig >> shift;
  const std::uint64_t rest = sig & ((1ull << shift) - 1), half = 1ull << (shift - 1);
  if (rest > half || (rest == half && (n & 1))) ++n;
  // Subnormal range: n is the fraction field (n = 2^frac_bits carries into the least normal).
  // Normal: n in [2^frac_bits, 2^(frac_bits+1)], the exponent field added; a carry moves it up.
  std::uint64_t bits = n;
  if (e > emin) bits = (static_cast<std::uint64_t>(e + f.bias()) << f.frac_bits) + (n - (1ull << f.frac_bits));
  if (bits >= f.inf_bits()) return sign | f.inf_bits();
  return static_cast<std::uint16_t>(sign | bits);
}

/// The value of bits in format f, exactly.
inline double decode(std::uint16_t bits, Format f) {
  const bool negative = (bits & 0x8000u) != 0;
  const unsigned exp = (bits >> f.frac_bits) & ((1u << f.exp_bits) - 1);
  const unsigned frac = bits & ((1u << f.frac_bits) - 1);
  double v;
  if (exp == (1u << f.exp_bits) - 1) {
    v = frac != 0 ? std::bit_cast<double>(0x7FF8000000000000ull) : std::bit_cast<double>(0x7FF0000000000000ull);
  } else {
    // frac * 2^(emin - frac_bits) for subnormals, (2^frac_bits + frac) * 2^(exp - bias - frac_bits) else.
    const int e = exp == 0 ? 1 - f.bias() : static_cast<int>(exp) - f.bias();
    const double significand = exp == 0 ? frac : (1u << f.frac_bits) + frac;
    v = significand * std::bit_cast<double>(static_cast<std::uint64_t>(1023 + e - f.frac_bits) << 52);
  }
  return negative ? -v : v;
}

/// A 64-bit integer as a double rounded to odd at 53 bits where it does not fit: encoding that
/// double rounds as encoding the integer would.
template <class I> double integer_as_double(I x) {
  static_assert(std::is_integral_v<I>);
  if constexpr (sizeof(I) < 8) {
    return static_cast<double>(x);
  } else {
    const bool negative = std::is_signed_v<I> && x < 0;
    std::uint64_t m = negative ? 0 - static_cast<std::uint64_t>(x) : static_cast<std::uint64_t>(x);
    if (m >> 53) {
      const int drop = 64 - std::countl_zero(m) - 53;
      const bool sticky = (m & ((1ull << drop) - 1)) != 0;
      m = ((m >> drop) | static_cast<std::uint64_t>(sticky)) << drop;  // exact in a double
    }
    const double v = static_cast<double>(m);
    return negative ? -v : v;
  }
}

/// f32 -> bf16, the usual integer form of round-to-nearest-even (what the vectorized loop computes).
inline std::uint16_t bf16_from_float(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float float_from_bf16(std::uint16_t b) { return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16); }
inline std::uint16_t f16_from_float(float v) { return encode(static_cast<double>(v), kF16); }
inline float float_from_f16(std::uint16_t b) { return static_cast<float>(decode(b, kF16)); }

}  // namespace xjax::detail::narrow

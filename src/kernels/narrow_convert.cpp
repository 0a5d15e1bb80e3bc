// narrow_convert.cpp: convert_element_type to and from the narrow dtypes (bf16, f16, i8, u8, i16,
// u16), compiled once per kernel set (kernel_sets.hpp).
//
// A narrow source is first widened exactly, a block at a time: a narrow float to f32, a narrow
// integer to i64. A narrow target is written from a wide value: a float by rounding once to
// nearest even (narrow_float.hpp), an integer from a float by truncation saturated at its range
// (NaN -> 0, as for the wide integers), from an integer by keeping the low bits (two's complement).
// f32 <-> bf16, the conversions mixed-precision training runs most, are loops the compiler
// vectorizes.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "kernels/kernel_sets.hpp"
#include "kernels/narrow_float.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
namespace {

using narrow::Format;

// The compiler vectorizes these at -O2 only under the dynamic cost model: ask for it here.
#if defined(__GNUC__) && !defined(__clang__)
#define XJAX_NARROW_VECTORIZE __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define XJAX_NARROW_VECTORIZE
#endif

XJAX_NARROW_VECTORIZE void bf16_from_f32_loop(const float* x, std::uint16_t* o, std::size_t n) {
  const auto* u = reinterpret_cast<const std::uint32_t*>(x);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t v = u[i];
    const std::uint32_t rounded = (v + 0x7FFFu + ((v >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (v >> 16) | 0x0040u;
    o[i] = static_cast<std::uint16_t>((v & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
  }
}

XJAX_NARROW_VECTORIZE void f32_from_bf16_plain(const std::uint16_t* x, std::uint32_t* u, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) u[i] = static_cast<std::uint32_t>(x[i]) << 16;
}

/// Outputs at least this large (a thread's share) are written with non-temporal stores: past the
/// last-level cache an ordinary store reads each line before writing it (the widening then ran at
/// half of memcpy's rate on a Zen 5 with 32 MiB of L3).
constexpr std::size_t kStreamBytes = std::size_t{16} << 20;

void f32_from_bf16_loop(const std::uint16_t* x, float* o, std::size_t n) {
  auto* u = reinterpret_cast<std::uint32_t*>(o);
#if defined(__SSE2__)
  if (n * sizeof(float) >= kStreamBytes) {
    // up to a 16-byte boundary of o, then 8 elements a step: each bf16 into the high half of a
    // 32-bit lane (interleaved with zeros), streamed past the caches
    const std::size_t head = std::min(n, (16 - reinterpret_cast<std::uintptr_t>(o) % 16) % 16 / sizeof(float));
    f32_from_bf16_plain(x, u, head);
    const __m128i zero = _mm_setzero_si128();
    std::size_t i = head;
    for (; i + 8 <= n; i += 8) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
      _mm_stream_si128(reinterpret_cast<__m128i*>(u + i), _mm_unpacklo_epi16(zero, v));
      _mm_stream_si128(reinterpret_cast<__m128i*>(u + i + 4), _mm_unpackhi_epi16(zero, v));
    }
    _mm_sfence();
    return f32_from_bf16_plain(x + i, u + i, n - i);
  }
#endif
  f32_from_bf16_plain(x, u, n);
}

template <class From> double as_double(From v) {
  if constexpr (std::is_floating_point_v<From>) return static_cast<double>(v);
  else if constexpr (std::is_same_v<From, std::uint8_t>) return v != 0 ? 1.0 : 0.0;  // bool
  else return narrow::integer_as_double(v);
}

// A float truncated toward zero into To's range (NaN -> 0); an integer's low bits.
template <class To, class From> To to_narrow_integer(From v) {
  if constexpr (std::is_floating_point_v<From>) {
    if (v != v) return To{0};
    if (v <= static_cast<From>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (v >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <class To, class From> void integer_loop(const From* x, void* o, std::size_t n) {
  To* out = static_cast<To*>(o);
  for (std::size_t i = 0; i < n; ++i) out[i] = to_narrow_integer<To>(x[i]);
}

template <class From> void float_loop(const From* x, Format f, void* o, std::size_t n) {
  auto* out = static_cast<std::uint16_t*>(o);
  for (std::size_t i = 0; i < n; ++i) out[i] = narrow::encode(as_double(x[i]), f);
}

// A wide dtype's elements into a narrow dtype.
void from_wide(DType from, DType to, const void* x, void* o, std::size_t n) {
  if (from == DType::f32 && to == DType::bf16)
    return bf16_from_f32_loop(static_cast<const float*>(x), static_cast<std::uint16_t*>(o), n);
  visit_dtype(from, [&](auto tag) {
    using From = typename decltype(tag)::type;
    const From* in = static_cast<const From*>(x);
    switch (to) {
      case DType::bf16: return float_loop(in, narrow::kBf16, o, n);
      case DType::f16: return float_loop(in, narrow::kF16, o, n);
      case DType::i8: return integer_loop<std::int8_t>(in, o, n);
      case DType::u8: return integer_loop<std::uint8_t>(in, o, n);
      case DType::i16: return integer_loop<std::int16_t>(in, o, n);
      case DType::u16: return integer_loop<std::uint16_t>(in, o, n);
      case DType::f32: case DType::f64: case DType::i32: case DType::i64: case DType::u32: case DType::u64:
      case DType::bool_: break;
    }
    throw Error(std::string("convert_element_type: ") + dtype_name(to) + " is not a narrow dtype");
  });
}

// A narrow dtype's elements widened exactly: narrow floats to f32, narrow integers to i64.
DType widened(DType d) { return d == DType::bf16 || d == DType::f16 ? DType::f32 : DType::i64; }

template <class T> void widen_integers(const void* x, std::int64_t* o, std::size_t n) {
  const T* in = static_cast<const T*>(x);
  for (std::size_t i = 0; i < n; ++i) o[i] = in[i];
}

void widen(DType from, const void* x, void* o, std::size_t n) {
  switch (from) {
    case DType::bf16: return f32_from_bf16_loop(static_cast<const std::uint16_t*>(x), static_cast<float*>(o), n);
    case DType::f16: {
      const auto* in = static_cast<const std::uint16_t*>(x);
      float* out = static_cast<float*>(o);
      for (std::size_t i = 0; i < n; ++i) out[i] = narrow::float_from_f16(in[i]);
      return;
    }
    case DType::i8: return widen_integers<std::int8_t>(x, static_cast<std::int64_t*>(o), n);
    case DType::u8: return widen_integers<std::uint8_t>(x, static_cast<std::int64_t*>(o), n);
    case DType::i16: return widen_integers<std::int16_t>(x, static_cast<std::int64_t*>(o), n);
    case DType::u16: return widen_integers<std::uint16_t>(x, static_cast<std::int64_t*>(o), n);
    case DType::f32: case DType::f64: case DType::i32: case DType::i64: case DType::u32: case DType::u64:
    case DType::bool_: break;
  }
  throw Error(std::string("convert_element_type: ") + dtype_name(from) + " is not a narrow dtype");
}

}  // namespace

void convert_narrow(DType from, DType to, const void* x, void* o, std::size_t n) {
  if (from == to) {
    if (n > 0) std::memcpy(o, x, n * itemsize(to));
    return;
  }
  if (!is_narrow(from)) return from_wide(from, to, x, o, n);
  if (from == DType::bf16 && to == DType::f32)
    return f32_from_bf16_loop(static_cast<const std::uint16_t*>(x), static_cast<float*>(o), n);
  // Through a block of the widened dtype (8 bytes at most an element).
  constexpr std::size_t kBlock = 2048;
  alignas(64) std::int64_t block[kBlock];
  const DType wide = widened(from);
  const auto* src = static_cast<const char*>(x);
  auto* dst = static_cast<char*>(o);
  for (std::size_t i = 0; i < n; i += kBlock) {
    const std::size_t m = std::min(kBlock, n - i);
    widen(from, src + i * itemsize(from), block, m);
    if (is_narrow(to)) from_wide(wide, to, block, dst + i * itemsize(to), m);
    else convert_elements(wide, to, block, dst + i * itemsize(to), m);
  }
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE

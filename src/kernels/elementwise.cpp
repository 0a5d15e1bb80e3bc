// elementwise.cpp: kernels of the elementwise primitives (operands of identical shape).
//
// Read top-down (the vectorized loop drivers and float arithmetic are in simd.hpp, shared with
// the fused executor): one section per primitive group: float unary, integer unary, integer_pow, binary, comparisons, select_n,
// convert_element_type. The entry points declared in kernels.hpp come last. Floats are
// vectorized; integers and bools use plain loops (wrap-around helpers are in kernels.hpp).

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernels.hpp"
#include "kernels/kernel_sets.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
namespace {

using namespace simd;

template <class T, class Op> void loop1(const T* x, T* out, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) out[i] = op(x[i]);
}

template <class T, class Op> void loop2(const T* x, const T* y, T* out, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) out[i] = op(x[i], y[i]);
}

std::size_t count(const ShapedArray& aval) { return static_cast<std::size_t>(aval.size()); }

// ---- float unary -------------------------------------------------------------------------------

// ---- integer unary -----------------------------------------------------------------------------

template <class T> void int_unary(Primitive p, const T* x, T* o, std::size_t n) {
  if (p == Primitive::neg) return loop1(x, o, n, [](T v) { return wrap_neg(v); });
  if constexpr (std::is_signed_v<T>) {
    if (p == Primitive::abs) return loop1(x, o, n, [](T v) { return v < 0 ? wrap_neg(v) : v; });
    if (p == Primitive::sign) return loop1(x, o, n, [](T v) { return static_cast<T>((v > 0) - (v < 0)); });
  } else {  // unsigned: |x| = x (jnp.abs's), sign x = [x != 0] (lax.sign's)
    if (p == Primitive::abs) return loop1(x, o, n, [](T v) { return v; });
    if (p == Primitive::sign) return loop1(x, o, n, [](T v) { return static_cast<T>(v != 0); });
  }
  unsupported_dtype(p, storage_dtype<T>());
}

// ---- integer_pow -------------------------------------------------------------------------------

template <class T> void int_integer_pow(const T* x, T* o, std::size_t n, std::int64_t y) {
  if (y < 0) throw Error("integer_pow: negative exponent " + std::to_string(y) + " on integers");
  const auto e = static_cast<std::uint64_t>(y);
  loop1(x, o, n, [e](T v) { return pow_by_squaring(v, e, T{1}, wrap_mul<T>); });
}

// ---- binary ------------------------------------------------------------------------------------

// x^y of integers (jnp.power), wrapping; a negative power is 1 / x^|y| truncated toward zero: 1 at
// x = 1, +-1 at x = -1, else 0 (also at x = 0, as x / 0 = 0).
template <class T> T int_pow(T x, T y) {
  if constexpr (std::is_signed_v<T>)
    if (y < 0) return x == T{1} ? T{1} : x == T(-1) ? ((y & 1) != 0 ? T(-1) : T{1}) : T{0};
  return pow_by_squaring(x, static_cast<std::uint64_t>(y), T{1}, wrap_mul<T>);
}

template <class T> void int_binary(Primitive p, const T* x, const T* y, T* o, std::size_t n) {
  // Integers wrap around (two's complement) and divide safely; atan2 has no integer kernel.
  if (p == Primitive::add) return loop2(x, y, o, n, wrap_add<T>);
  if (p == Primitive::sub) return loop2(x, y, o, n, wrap_sub<T>);
  if (p == Primitive::mul) return loop2(x, y, o, n, wrap_mul<T>);
  if (p == Primitive::div) return loop2(x, y, o, n, safe_div<T>);
  if (p == Primitive::rem) return loop2(x, y, o, n, safe_rem<T>);
  if (p == Primitive::pow) return loop2(x, y, o, n, int_pow<T>);
  if (p == Primitive::bitwise_and) return loop2(x, y, o, n, [](T a, T b) { return static_cast<T>(a & b); });
  if (p == Primitive::bitwise_or) return loop2(x, y, o, n, [](T a, T b) { return static_cast<T>(a | b); });
  if (p == Primitive::bitwise_xor) return loop2(x, y, o, n, [](T a, T b) { return static_cast<T>(a ^ b); });
  if (p == Primitive::shift_left) return loop2(x, y, o, n, shift_left_values<T>);
  if (p == Primitive::shift_right_logical) return loop2(x, y, o, n, shift_right_logical_values<T>);
  if (p == Primitive::shift_right_arithmetic) return loop2(x, y, o, n, shift_right_arithmetic_values<T>);
  if (p == Primitive::max) return loop2(x, y, o, n, [](T a, T b) { return std::max(a, b); });
  if (p == Primitive::min) return loop2(x, y, o, n, [](T a, T b) { return std::min(a, b); });
  unsupported_dtype(p, storage_dtype<T>());
}

// bool (stored as uint8 0/1): max is logical or, min is logical and.
void bool_binary(Primitive p, const std::uint8_t* x, const std::uint8_t* y, std::uint8_t* o,
                 std::size_t n) {
  using U8 = std::uint8_t;
  if (p == Primitive::max) return loop2(x, y, o, n, [](U8 a, U8 b) { return U8(a | b); });
  if (p == Primitive::min) return loop2(x, y, o, n, [](U8 a, U8 b) { return U8(a & b); });
  if (p == Primitive::bitwise_and) return loop2(x, y, o, n, [](U8 a, U8 b) { return U8(a & b); });
  if (p == Primitive::bitwise_or) return loop2(x, y, o, n, [](U8 a, U8 b) { return U8(a | b); });
  if (p == Primitive::bitwise_xor) return loop2(x, y, o, n, [](U8 a, U8 b) { return U8(a ^ b); });
  unsupported_dtype(p, DType::bool_);
}

// ---- comparisons -------------------------------------------------------------------------------

template <class T, class Cmp>
void compare_loop(const T* x, const T* y, std::uint8_t* o, std::size_t n, Cmp cmp) {
  for (std::size_t i = 0; i < n; ++i) o[i] = cmp(x[i], y[i]) ? 1 : 0;
}

template <class T> void compare(Primitive p, const T* x, const T* y, std::uint8_t* o, std::size_t n) {
  with_comparison(p, "compare_kernel", [&](auto cmp) { compare_loop(x, y, o, n, cmp); });
}

// ---- select_n ----------------------------------------------------------------------------------

// Which case element i comes from: which[i] (or which[0] when which is rank 0), clamped. The
// pointer and type are read once (not per element).
class CaseChooser {
 public:
  CaseChooser(const Array& which, std::int64_t num_cases)
      : bools_(which.dtype() == DType::bool_ ? in_ptr<std::uint8_t>(which) : nullptr),
        ints_(which.dtype() == DType::bool_ ? nullptr : in_ptr<std::int32_t>(which)),
        scalar_(which.ndim() == 0),
        last_(num_cases - 1) {}
  std::int64_t at(std::size_t i) const {
    const std::size_t k = scalar_ ? 0 : i;
    const std::int64_t c = bools_ ? bools_[k] : ints_[k];
    return std::clamp<std::int64_t>(c, 0, last_);
  }
  /// which[i] for a bool `which` of the output's size (two cases), else null.
  const std::uint8_t* per_element_bools() const { return scalar_ || last_ != 1 ? nullptr : bools_; }

 private:
  const std::uint8_t* bools_;
  const std::int32_t* ints_;
  bool scalar_;
  std::int64_t last_;
};

// Elements are moved as opaque words of type E (1, 4 or 8 bytes).
template <class E>
void select_words(const CaseChooser& choose, std::span<const Array> cases, void* out, std::size_t n) {
  std::vector<const E*> sources;
  for (const Array& c : cases) sources.push_back(in_ptr<E>(c));
  E* o = static_cast<E*>(out);
  if (const std::uint8_t* w = choose.per_element_bools()) {
    // where(w, b, a) as bit masks: no branch per element (a random mask would mispredict half of
    // them), and a loop the compiler vectorizes.
    const E* a = sources[0];
    const E* b = sources[1];
    for (std::size_t i = 0; i < n; ++i) {
      const E m = static_cast<E>(E{0} - static_cast<E>(w[i] != 0));
      o[i] = static_cast<E>((b[i] & m) | (a[i] & static_cast<E>(~m)));
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i) o[i] = sources[static_cast<std::size_t>(choose.at(i))][i];
}

// ---- convert_element_type ----------------------------------------------------------------------

// Float to integer: truncation toward zero, saturating at the target's range, NaN -> 0.
template <class To, class From> To float_to_int(From v) {
  if (v != v) return To{0};
  const auto lo = static_cast<From>(std::numeric_limits<To>::lowest());
  const auto hi = static_cast<From>(std::numeric_limits<To>::max());
  if (v <= lo) return std::numeric_limits<To>::lowest();
  if (v >= hi) return std::numeric_limits<To>::max();
  return static_cast<To>(v);
}

// uint8_t as To means bool: x != 0.
template <class To, class From> To convert_value(From v) {
  if constexpr (std::is_same_v<To, std::uint8_t>) return v != From{0} ? 1 : 0;
  else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>)
    return float_to_int<To>(v);
  else return static_cast<To>(v);
}

template <class To, class From> void convert_loop(const From* x, To* o, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) o[i] = convert_value<To>(x[i]);
}

// ---- the elementwise loops on raw elements (the Array entry points and elementwise_into) ------

void unary_elements(Primitive p, DType d, const void* x, void* o, std::size_t n) {
  visit_dtype(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>)
      float_unary(p, static_cast<const T*>(x), static_cast<T*>(o), n);
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      unsupported_dtype(p, DType::bool_);
    else
      int_unary(p, static_cast<const T*>(x), static_cast<T*>(o), n);
  });
}

void integer_pow_elements(DType d, const void* x, void* o, std::size_t n, std::int64_t y) {
  visit_dtype(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>)
      float_integer_pow(static_cast<const T*>(x), static_cast<T*>(o), n, y);
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      unsupported_dtype(Primitive::integer_pow, DType::bool_);
    else
      int_integer_pow(static_cast<const T*>(x), static_cast<T*>(o), n, y);
  });
}

void binary_elements(Primitive p, DType d, const void* x, const void* y, void* o, std::size_t n) {
  visit_dtype(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *a = static_cast<const T*>(x), *b = static_cast<const T*>(y);
    if constexpr (std::is_floating_point_v<T>)
      float_binary(p, a, b, static_cast<T*>(o), n);
    else if constexpr (std::is_same_v<T, std::uint8_t>)
      bool_binary(p, a, b, static_cast<T*>(o), n);
    else
      int_binary(p, a, b, static_cast<T*>(o), n);
  });
}

void compare_elements(Primitive p, DType d, const void* x, const void* y, void* o, std::size_t n) {
  visit_dtype(d, [&](auto tag) {
    using T = typename decltype(tag)::type;
    compare(p, static_cast<const T*>(x), static_cast<const T*>(y), static_cast<std::uint8_t*>(o), n);
  });
}

// fn(first element, count) over [0, n), split among the kernel threads (chunks of at least
// kParallelElements), each chunk starting at a multiple of 16 elements: SIMD batches then group
// the same lanes at any thread count and as a fused chain's 512-element blocks do, so the bits do
// not depend on the split even where xsimd's math picks one path for a whole batch (sin / cos /
// tan reduce a batch by its largest lane: review finding, 1 ulp between thread counts).
// With no elements fn still runs once, on none: its checks (a negative integer exponent...) throw
// whatever the size.
template <class F> void split_elements(std::size_t n, F&& fn) {
  if (n == 0) return fn(std::size_t{0}, std::size_t{0});
  constexpr std::int64_t kGroup = 16;  // elements: a multiple of every batch width (64-byte f32 batches)
  const auto total = static_cast<std::int64_t>(n), groups = (total + kGroup - 1) / kGroup;
  parallel_for(groups, std::max<std::int64_t>(1, parallel_elements(total) / kGroup), [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t first = begin * kGroup, last = std::min(end * kGroup, total);
    fn(static_cast<std::size_t>(first), static_cast<std::size_t>(last - first));
  }, ChunkCalls::no_blas);
}

// A fresh array of type `out` whose element ranges [i, i + n) are filled, split across the kernel
// threads, by fill(i, n, the output at element i).
template <class F> Array fill_split(const ShapedArray& out, F&& fill) {
  Array result = alloc_array(out);
  void* o = mutable_data(result);
  split_elements(count(out), [&](std::size_t i, std::size_t n) { fill(i, n, static_cast<char*>(o) + i * itemsize(out.dtype)); });
  return result;
}

// Element i of an array of dtype d at p.
const void* element(const void* p, DType d, std::size_t i) { return static_cast<const char*>(p) + i * itemsize(d); }
void* element(void* p, DType d, std::size_t i) { return static_cast<char*>(p) + i * itemsize(d); }

/// What elementwise_into resolved: the primitive, the operands' and the output's dtype, the
/// element count and integer_pow's exponent.
struct ElementwiseInto {
  Primitive p;
  DType in, out;
  std::size_t n;
  std::int64_t y;
};

// Elements [i, i + n) of c's op.
void elementwise_range(const ElementwiseInto& c, const void* const* ins, void* const* outs, std::size_t i, std::size_t n) {
  const void* x = element(ins[0], c.in, i);
  void* o = element(outs[0], c.out, i);
  if (is_float_binary(c.p)) return binary_elements(c.p, c.in, x, element(ins[1], c.in, i), o, n);
  if (is_comparison(c.p)) return compare_elements(c.p, c.in, x, element(ins[1], c.in, i), o, n);
  if (c.p == Primitive::integer_pow) return integer_pow_elements(c.in, x, o, n, c.y);
  if (c.p == Primitive::convert_element_type) return convert_elements(c.in, c.out, x, o, n);
  if (c.p == Primitive::copy) {
    if (n) std::memcpy(o, x, n * static_cast<std::size_t>(itemsize(c.out)));
    return;
  }
  unary_elements(c.p, c.in, x, o, n);  // the unary families (else: unsupported)
}

void run_elementwise_into(const void* ctx, const void* const* ins, void* const* outs) {
  const auto& c = *static_cast<const ElementwiseInto*>(ctx);
  split_elements(c.n, [&](std::size_t i, std::size_t n) { elementwise_range(c, ins, outs, i, n); });
}

}  // namespace

void convert_elements(DType from, DType to, const void* x, void* o, std::size_t n) {
  if (is_narrow(from) || is_narrow(to)) return convert_narrow(from, to, x, o, n);
  visit_dtype(from, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    visit_dtype(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      convert_loop(static_cast<const From*>(x), static_cast<To*>(o), n);
    });
  });
}

// ---- entry points ------------------------------------------------------------------------------

Array unary_kernel(Primitive p, const Array& x, const ShapedArray& out) {
  const void* in = elements_of(x);
  return fill_split(out, [&](std::size_t i, std::size_t n, void* o) {
    unary_elements(p, x.dtype(), element(in, x.dtype(), i), o, n);
  });
}

Array integer_pow_kernel(const Array& x, std::int64_t y, const ShapedArray& out) {
  const void* in = elements_of(x);
  return fill_split(out, [&](std::size_t i, std::size_t n, void* o) {
    integer_pow_elements(x.dtype(), element(in, x.dtype(), i), o, n, y);
  });
}

Array binary_kernel(Primitive p, const Array& x, const Array& y, const ShapedArray& out) {
  const void *a = elements_of(x), *b = elements_of(y);
  return fill_split(out, [&](std::size_t i, std::size_t n, void* o) {
    binary_elements(p, x.dtype(), element(a, x.dtype(), i), element(b, x.dtype(), i), o, n);
  });
}

Array compare_kernel(Primitive p, const Array& x, const Array& y, const ShapedArray& out) {
  const void *a = elements_of(x), *b = elements_of(y);
  return fill_split(out, [&](std::size_t i, std::size_t n, void* o) {
    compare_elements(p, x.dtype(), element(a, x.dtype(), i), element(b, x.dtype(), i), o, n);
  });
}

Array select_n_kernel(std::span<const Array> in, const ShapedArray& out) {
  const Array& which = in[0];
  std::span<const Array> cases = in.subspan(1);
  if (which.dtype() != DType::bool_ && which.dtype() != DType::i32)
    unsupported_dtype(Primitive::select_n, which.dtype());
  CaseChooser choose(which, static_cast<std::int64_t>(cases.size()));
  if (which.ndim() == 0 && out.size() > 0)
    return share_buffer(cases[static_cast<std::size_t>(choose.at(0))], out);
  Array result = alloc_array(out);
  void* o = mutable_data(result);
  switch (itemsize(out.dtype)) {
    case 1: select_words<std::uint8_t>(choose, cases, o, count(out)); break;
    case 2: select_words<std::uint16_t>(choose, cases, o, count(out)); break;
    case 4: select_words<std::uint32_t>(choose, cases, o, count(out)); break;
    case 8: select_words<std::uint64_t>(choose, cases, o, count(out)); break;
    default: unsupported_dtype(Primitive::select_n, out.dtype);
  }
  return result;
}

Array convert_element_type_kernel(const Array& x, const ShapedArray& out) {
  const void* in = elements_of(x);
  return fill_split(out, [&](std::size_t i, std::size_t n, void* o) {
    convert_elements(x.dtype(), out.dtype, element(in, x.dtype(), i), o, n);
  });
}

Array copy_kernel(const Array& x, const ShapedArray& out) {
  Array result = alloc_array(out);
  if (out.nbytes() > 0) std::memcpy(mutable_data(result), x.raw_data(), out.nbytes());
  return result;
}

IntoKernel elementwise_into(Primitive p, const Params& params, std::span<const ShapedArray> in, const ShapedArray& out) {
  IntoKernel k;
  if (is_unary_math(p)) {
    if (out.dtype == DType::bool_) return k;
  } else if (!is_float_binary(p) && !is_comparison(p) && p != Primitive::convert_element_type && p != Primitive::copy) {
    return k;
  }
  for (const auto& a : in)
    if (a.shape != out.shape) return k;  // elementwise operands have the output's shape
  // Narrow dtypes compute widened (run_kernel); convert_element_type and copy take them as they are.
  const bool narrow = is_narrow(out.dtype) || std::any_of(in.begin(), in.end(), [](const ShapedArray& a) { return is_narrow(a.dtype); });
  if (narrow && p != Primitive::convert_element_type && p != Primitive::copy) return k;
  const std::int64_t y = p == Primitive::integer_pow ? params.get<params::IntegerPow>().y : 0;
  k.fn = run_elementwise_into;
  k.ctx = std::make_shared<ElementwiseInto>(ElementwiseInto{p, in[0].dtype, out.dtype, count(out), y});
  return k;
}

// bitwise_not (bool: logical not) and population_count (set bits of the two's-complement value).
Array bitwise_unary_kernel(Primitive p, const Array& x, const ShapedArray& out) {
  Array result = alloc_array(out);
  const std::size_t n = count(out);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = in_ptr<T>(x);
    T* o = out_ptr<T>(result);
    if constexpr (std::is_floating_point_v<T>) {
      unsupported_dtype(p, x.dtype());
    } else if constexpr (std::is_same_v<T, std::uint8_t>) {  // bool
      if (p != Primitive::bitwise_not) unsupported_dtype(p, x.dtype());
      for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<T>(in[i] ? 0 : 1);
    } else if (p == Primitive::bitwise_not) {
      for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<T>(~in[i]);
    } else {
      using U = std::make_unsigned_t<T>;
      for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<T>(std::popcount(static_cast<U>(in[i])));
    }
  });
  return result;
}

Array is_finite_kernel(const Array& x, const ShapedArray& out) {
  Array result = alloc_array(out);
  const std::size_t n = count(out);
  std::uint8_t* o = out_ptr<std::uint8_t>(result);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      const T* in = in_ptr<T>(x);
      for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<std::uint8_t>(in[i] - in[i] == T(0));  // inf - inf, NaN: NaN
    } else {
      unsupported_dtype(Primitive::is_finite, x.dtype());
    }
  });
  return result;
}

Array clamp_kernel(const Array& lo, const Array& x, const Array& hi, const ShapedArray& out) {
  Array result = alloc_array(out);
  const std::size_t n = count(out);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *l = in_ptr<T>(lo), *v = in_ptr<T>(x), *h = in_ptr<T>(hi);
    const std::size_t l_step = lo.size() == 1 ? 0 : 1, h_step = hi.size() == 1 ? 0 : 1;
    T* o = out_ptr<T>(result);
    for (std::size_t i = 0; i < n; ++i) {
      const T a = l[i * l_step], b = h[i * h_step], x = v[i];
      // min(max(x, lo), hi), NaN from any operand (XLA's min and max propagate it)
      const T r = (x >= b || a >= b) ? b : x <= a ? a : x;
      if constexpr (std::is_floating_point_v<T>) o[i] = x != x ? x : a != a ? a : b != b ? b : r;  // that NaN itself
      else o[i] = r;
    }
  });
  return result;
}

// round: halfway cases away from zero (xsimd::round) or to the nearest even integer (nearbyint in
// the default rounding mode, which xjax never changes).
Array round_kernel(const Array& x, bool to_nearest_even, const ShapedArray& out) {
  Array result = alloc_array(out);
  const std::size_t n = count(out);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      using B = xsimd::batch<T>;
      if (to_nearest_even) simd::map1(in_ptr<T>(x), out_ptr<T>(result), n, [](B v) { return xsimd::nearbyint(v); });
      else simd::map1(in_ptr<T>(x), out_ptr<T>(result), n, [](B v) { return xsimd::round(v); });
    } else {
      unsupported_dtype(Primitive::round, x.dtype());
    }
  });
  return result;
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE

// dtype.hpp: element types, shapes and abstract values (ShapedArray).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

// libstdc++'s debug mode changes std::vector's layout, and libxjax.so's interface passes vectors
// (shapes, leaves): a program built with it against a normal libxjax.so failed to link or crashed
// (a header hunt). _GLIBCXX_ASSERTIONS keeps the layout and works.
#if defined(_GLIBCXX_DEBUG) && !defined(XJAX_ALLOW_GLIBCXX_DEBUG)
#error "xjax: _GLIBCXX_DEBUG changes std::vector's layout, which libxjax.so's interface passes; use -D_GLIBCXX_ASSERTIONS (or define XJAX_ALLOW_GLIBCXX_DEBUG if libxjax itself was built with _GLIBCXX_DEBUG)"
#endif

namespace xjax {

/// Element type of an array. `bool_` is stored as one byte (0 or 1); `bf16` (bfloat16: 8 exponent
/// bits, 7 fraction bits) and `f16` (IEEE binary16: 5 and 10) in two bytes. Values are appended
/// (never renumbered): a DType's number is part of cache keys and files.
enum class DType : std::uint8_t { f32, f64, i32, i64, u32, bool_, bf16, f16, i8, u8, i16, u16, u64 };

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType u32 = DType::u32;
inline constexpr DType bool_ = DType::bool_;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType f16 = DType::f16;
inline constexpr DType i8 = DType::i8;
inline constexpr DType u8 = DType::u8;
inline constexpr DType i16 = DType::i16;
inline constexpr DType u16 = DType::u16;
inline constexpr DType u64 = DType::u64;
/// Every dtype, in DType's order.
inline constexpr DType kAllDtypes[] = {f32, f64, i32, i64, u32, bool_, bf16, f16, i8, u8, i16, u16, u64};

/// Bytes per element.
std::size_t itemsize(DType d);
/// JAX's short names: "f32", "f64", "bf16", "f16", "i8" ... "u64", "bool".
const char* dtype_name(DType d);
bool is_floating(DType d);  // f64, f32, bf16, f16
bool is_integer(DType d);   // i8 ... i64, u8 ... u64 (not bool)
bool is_signed_integer(DType d);
std::ostream& operator<<(std::ostream& os, DType d);

/// jnp.finfo: the limits of a floating dtype, as doubles (exact: every value of every float dtype
/// is a double). TypeError for other dtypes.
struct FloatInfo {
  int bits;                   // storage bits
  int nmant;                  // fraction bits (the significand has nmant + 1)
  int nexp;                   // exponent bits
  int minexp, maxexp;         // 2^minexp is the least normal number; 2^maxexp overflows
  double eps;                 // 2^-nmant: the gap above 1
  double epsneg;              // 2^-(nmant + 1): the gap below 1
  double max, min;            // the largest finite number and its negative
  double smallest_normal;     // 2^minexp (JAX's `tiny`)
  double smallest_subnormal;  // 2^(minexp - nmant)
  double resolution;          // 10^-precision
  int precision;              // decimal digits: floor(nmant * log10(2))
  DType dtype;
};
FloatInfo finfo(DType d);

/// jnp.iinfo: the range of an integer dtype (or bool). `max` is unsigned so that u64's fits.
struct IntInfo {
  int bits;
  std::int64_t min;
  std::uint64_t max;
  DType dtype;
};
IntInfo iinfo(DType d);

/// bfloat16 and float16 elements as stored (two bytes each; what Array::data<T>() points at for
/// bf16 / f16 arrays). Converting from float or double rounds to nearest, ties to even (NaN stays
/// NaN, too large becomes inf, tiny values become subnormal or zero); converting to float is exact.
/// kExpBits is the format's exponent width (bf16: 8, f16: 5); the rest of the 15 bits are fraction.
template <int kExpBits> struct Float16Storage {
  std::uint16_t bits = 0;
  Float16Storage() = default;
  explicit Float16Storage(double v);
  explicit operator float() const;
  explicit operator double() const { return static_cast<double>(static_cast<float>(*this)); }
  static Float16Storage from_bits(std::uint16_t b) {
    Float16Storage x;
    x.bits = b;
    return x;
  }
};
using bfloat16_t = Float16Storage<8>;
using float16_t = Float16Storage<5>;
extern template struct Float16Storage<8>;
extern template struct Float16Storage<5>;

/// JAX's type promotion (jnp.promote_types with x64 enabled): the least dtype both convert to
/// without loss on JAX's lattice bool -> unsigned / signed integers -> floats, e.g.
/// promote_types(u32, i32) = i64, promote_types(i64, f32) = f32, promote_types(f32, f64) = f64.
DType promote_types(DType a, DType b);

/// How binary operations (add, where, concatenate, dot_general ...) treat operands of different
/// dtypes: promote them (JAX's default, `jax_numpy_dtype_promotion = 'standard'`), or throw a
/// TypeError naming both dtypes (`'strict'`; a C++ number then adopts the array's dtype).
enum class PromotionMode : std::uint8_t { standard, strict };
/// The calling thread's mode (standard unless a DtypePromotion scope says otherwise).
PromotionMode promotion_mode();
/// A scope with another promotion mode for the calling thread (JAX's numpy_dtype_promotion
/// context manager): `xj::DtypePromotion strict;` makes mixed dtypes an error until it ends.
class DtypePromotion {
 public:
  explicit DtypePromotion(PromotionMode mode = PromotionMode::strict);
  ~DtypePromotion();
  DtypePromotion(const DtypePromotion&) = delete;
  DtypePromotion& operator=(const DtypePromotion&) = delete;

 private:
  PromotionMode previous_;
};

/// The C++ element type of a dtype, and back.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = f32; };
template <> struct dtype_of<double> { static constexpr DType value = f64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = i64; };
template <> struct dtype_of<std::uint32_t> { static constexpr DType value = u32; };
template <> struct dtype_of<bool> { static constexpr DType value = bool_; };
template <> struct dtype_of<bfloat16_t> { static constexpr DType value = bf16; };
template <> struct dtype_of<float16_t> { static constexpr DType value = f16; };
template <> struct dtype_of<std::int8_t> { static constexpr DType value = i8; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = u8; };
template <> struct dtype_of<std::int16_t> { static constexpr DType value = i16; };
template <> struct dtype_of<std::uint16_t> { static constexpr DType value = u16; };
template <> struct dtype_of<std::uint64_t> { static constexpr DType value = u64; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

/// Dimensions of an array, outermost first.
using Shape = std::vector<std::int64_t>;
std::int64_t shape_size(const Shape& s);
std::string shape_str(const Shape& s);  // "[3,4]"

/// The abstract value of an array: its shape and dtype. Prints as `f32[3,4]`.
struct ShapedArray {
  Shape shape;
  DType dtype = f32;
  std::int64_t ndim() const { return static_cast<std::int64_t>(shape.size()); }
  std::int64_t size() const { return shape_size(shape); }
  std::size_t nbytes() const { return static_cast<std::size_t>(size()) * itemsize(dtype); }
  std::string str() const;
  friend bool operator==(const ShapedArray&, const ShapedArray&) = default;
};
std::ostream& operator<<(std::ostream& os, const ShapedArray& a);

}  // namespace xjax

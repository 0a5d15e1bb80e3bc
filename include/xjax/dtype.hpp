// dtype.hpp: element types, shapes and abstract values (ShapedArray).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace xjax {

/// Element type of an array. `bool_` is stored as one byte (0 or 1).
enum class DType : std::uint8_t { f32, f64, i32, i64, u32, bool_ };

inline constexpr DType f32 = DType::f32;
inline constexpr DType f64 = DType::f64;
inline constexpr DType i32 = DType::i32;
inline constexpr DType i64 = DType::i64;
inline constexpr DType u32 = DType::u32;
inline constexpr DType bool_ = DType::bool_;

/// Bytes per element.
std::size_t itemsize(DType d);
/// "f32", "f64", "i32", "i64", "u32", "bool".
const char* dtype_name(DType d);
bool is_floating(DType d);
bool is_integer(DType d);  // i32, i64, u32 (not bool)
std::ostream& operator<<(std::ostream& os, DType d);

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

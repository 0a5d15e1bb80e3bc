// indexing.hpp: JAX's indexed updates, x.at[idx].set(v) / add / mul / min / max / get, spelled
// xj::at(x, idx).set(v). They return a new array (x is never modified) and lower to the gather
// and scatter primitives (docs/jaxpr.md), so every transformation applies.
#pragma once
#include <concepts>
#include <cstdint>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <vector>

#include "xjax/ops.hpp"

namespace xjax {

/// What an update does with an index outside its axis once negative ones are counted from the
/// end: drop it (JAX's default for updates, mode="drop") or clamp it onto the edge ("clip").
/// Reads (`get`) always clamp, as JAX's indexing does by default.
enum class IndexMode { drop, clip };

/// The view x.at[idx]: `idx` selects along x's leading axes, one index array per axis (an int, an
/// array of indices, or several, broadcast together). Selected shape: the indices' broadcast
/// shape followed by x's remaining axes. Updates `v` are converted to x's dtype and broadcast to
/// the selected shape. Where indices repeat, add / mul / min / max combine every update and set
/// keeps the last one (JAX leaves that order unspecified).
class At {
 public:
  At(Array x, std::vector<Array> indices, std::source_location loc);
  /// x[idx] (indices clamped).
  Array get(XJAX_LOC) const;
  /// x with x[idx] = v.
  Array set(const Array& v, IndexMode mode = IndexMode::drop, XJAX_LOC) const;
  /// x with x[idx] += v.
  Array add(const Array& v, IndexMode mode = IndexMode::drop, XJAX_LOC) const;
  /// x with x[idx] *= v.
  Array mul(const Array& v, IndexMode mode = IndexMode::drop, XJAX_LOC) const;
  /// x with x[idx] = minimum(x[idx], v).
  Array min(const Array& v, IndexMode mode = IndexMode::drop, XJAX_LOC) const;
  /// x with x[idx] = maximum(x[idx], v).
  Array max(const Array& v, IndexMode mode = IndexMode::drop, XJAX_LOC) const;
  /// The same with a C++ number (weakly typed: it takes x's dtype): a float converts as astype
  /// (saturating), an integer exactly, wrapping to an integer x's width as jnp converts its int
  /// array (u8's at(0).set(-1) holds 255).
  template <class T> requires std::is_arithmetic_v<T>
  Array set(T v, IndexMode mode = IndexMode::drop, XJAX_LOC) const { return set(number(v), mode, loc); }
  template <class T> requires std::is_arithmetic_v<T>
  Array add(T v, IndexMode mode = IndexMode::drop, XJAX_LOC) const { return add(number(v), mode, loc); }
  template <class T> requires std::is_arithmetic_v<T>
  Array mul(T v, IndexMode mode = IndexMode::drop, XJAX_LOC) const { return mul(number(v), mode, loc); }
  template <class T> requires std::is_arithmetic_v<T>
  Array min(T v, IndexMode mode = IndexMode::drop, XJAX_LOC) const { return min(number(v), mode, loc); }
  template <class T> requires std::is_arithmetic_v<T>
  Array max(T v, IndexMode mode = IndexMode::drop, XJAX_LOC) const { return max(number(v), mode, loc); }

 private:
  template <class T> Array number(T v) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return scalar(v, x_.dtype());
    else return scalar(static_cast<double>(v), x_.dtype());
  }
  enum class Combine { set, add, mul, min, max };
  Array update(Combine how, const Array& v, IndexMode mode, std::source_location loc) const;
  Array x_;
  std::vector<Array> indices_;
};

/// x.at[i] for an index along x's first axis.
At at(const Array& x, std::int64_t i, XJAX_LOC);
/// x.at[idx] for an array of indices along x's first axis.
At at(const Array& x, const Array& indices, XJAX_LOC);
/// x.at[i0, i1, ...]: one index (array) per leading axis, broadcast together.
At at(const Array& x, std::vector<Array> indices, XJAX_LOC);
/// x.at[i0, i1, ...] with C++ integers: `at(x, {1, 2})`.
At at(const Array& x, const std::vector<std::int64_t>& indices, XJAX_LOC);
namespace detail {
inline Array index_array(const Array& i) { return i; }
/// A C++ integer index: i64, or u64 for an unsigned 64-bit one (2^63 and past clamp, as an index
/// array of u64 does, rather than wrapping negative). A bool is no index (numpy reads x[True] as
/// a new axis).
template <std::integral I> Array index_array(I i) {
  static_assert(!std::is_same_v<I, bool>, "xj::at: a bool is not an index (numpy reads x[True] as a new axis)");
  if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(std::int64_t)) return scalar(i, u64);
  else return scalar(static_cast<std::int64_t>(i), i64);
}
}  // namespace detail
/// x.at[(i0, i1, ...)] with a tuple of indices, C++ integers or Arrays: `at(x, std::tuple{i, 2})`.
template <class... I> At at(const Array& x, const std::tuple<I...>& indices, XJAX_LOC) {
  std::vector<Array> each;
  std::apply([&](const auto&... i) { (each.push_back(detail::index_array(i)), ...); }, indices);
  return at(x, std::move(each), loc);
}

/// jnp.meshgrid: coordinate arrays from 1-D vectors. indexing "xy" (default, Cartesian) swaps
/// the first two output axes of "ij" (matrix) indexing.
std::vector<Array> meshgrid(const std::vector<Array>& xs, const std::string& indexing = "xy", XJAX_LOC);

}  // namespace xjax

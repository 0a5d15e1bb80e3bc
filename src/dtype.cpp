// dtype.cpp: element types, shapes and their printing.
#include "xjax/dtype.hpp"

#include <cmath>
#include <limits>
#include <ostream>

#include "internal.hpp"
#include "kernels/narrow_float.hpp"
#include "xjax/errors.hpp"

namespace xjax {

std::size_t itemsize(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u32: return 4;
    case DType::bool_: return 1;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::i16: return 2;
    case DType::u16: return 2;
    case DType::u64: return 8;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u32: return "u32";
    case DType::bool_: return "bool";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i16: return "i16";
    case DType::u16: return "u16";
    case DType::u64: return "u64";
  }
  return "?";
}

bool is_floating(DType d) { return d == f32 || d == f64 || d == bf16 || d == f16; }
bool is_signed_integer(DType d) { return d == i8 || d == i16 || d == i32 || d == i64; }
bool is_integer(DType d) { return is_signed_integer(d) || d == u8 || d == u16 || d == u32 || d == u64; }

FloatInfo finfo(DType d) {
  FloatInfo fi{};
  if (d == f64) fi.nexp = 11, fi.nmant = 52;
  else if (d == f32) fi.nexp = 8, fi.nmant = 23;
  else if (d == bf16) fi.nexp = 8, fi.nmant = 7;
  else if (d == f16) fi.nexp = 5, fi.nmant = 10;
  else throw TypeError(std::string("finfo: ") + dtype_name(d) + " is not a floating dtype (iinfo gives integer ranges)");
  fi.dtype = d;
  fi.bits = 1 + fi.nexp + fi.nmant;
  fi.maxexp = 1 << (fi.nexp - 1);
  fi.minexp = 2 - fi.maxexp;
  fi.eps = std::ldexp(1.0, -fi.nmant);
  fi.epsneg = std::ldexp(1.0, -fi.nmant - 1);
  fi.max = std::ldexp(2.0 - fi.eps, fi.maxexp - 1);
  fi.min = -fi.max;
  fi.smallest_normal = std::ldexp(1.0, fi.minexp);
  fi.smallest_subnormal = std::ldexp(1.0, fi.minexp - fi.nmant);
  fi.precision = static_cast<int>(std::floor(fi.nmant * std::log10(2.0)));
  fi.resolution = std::pow(10.0, -fi.precision);
  return fi;
}

IntInfo iinfo(DType d) {
  if (!is_integer(d) && d != bool_)
    throw TypeError(std::string("iinfo: ") + dtype_name(d) + " is not an integer dtype (finfo gives float limits)");
  IntInfo ii{};
  ii.dtype = d;
  ii.bits = d == bool_ ? 8 : static_cast<int>(itemsize(d) * 8);
  if (d == bool_) {
    ii.min = 0, ii.max = 1;
  } else if (is_signed_integer(d)) {
    ii.min = -(std::int64_t{1} << (ii.bits - 2)) * 2;
    ii.max = (std::uint64_t{1} << (ii.bits - 1)) - 1;
  } else {
    ii.min = 0;
    ii.max = ii.bits == 64 ? std::numeric_limits<std::uint64_t>::max() : (std::uint64_t{1} << ii.bits) - 1;
  }
  return ii;
}

bool detail::numbers_positions(DType index, const Shape& shape, std::int64_t axis) {
  const std::int64_t n = shape.at(static_cast<std::size_t>(axis));
  return shape_size(shape) == 0 || static_cast<std::uint64_t>(n - 1) <= iinfo(index).max;
}

template <int kExpBits>
Float16Storage<kExpBits>::Float16Storage(double v) : bits(detail::narrow::encode(v, {kExpBits, 15 - kExpBits})) {}
template <int kExpBits> Float16Storage<kExpBits>::operator float() const {
  return static_cast<float>(detail::narrow::decode(bits, {kExpBits, 15 - kExpBits}));
}
template struct Float16Storage<8>;
template struct Float16Storage<5>;

std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

std::int64_t shape_size(const Shape& s) {
  for (auto d : s)
    if (d == 0) return 0;  // whatever the other dimensions: none of them overflows an empty count
  std::int64_t n = 1;
  for (auto d : s)
    if (__builtin_mul_overflow(n, d, &n))  // wrapped silently: 2^62 x 4 elements was an array of size 0
      throw ShapeError("shape " + shape_str(s) + " has more than 2^63 - 1 elements");
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::string ShapedArray::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

std::ostream& operator<<(std::ostream& os, const ShapedArray& a) { return os << a.str(); }

std::string format_location(const std::source_location& loc) {
  std::string file = loc.file_name();
  if (file.empty()) return "<unknown>";
  return file + ":" + std::to_string(loc.line());
}

}  // namespace xjax

// dtype.cpp: element types, shapes and their printing.
#include "xjax/dtype.hpp"

#include <ostream>

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
  }
  return "?";
}

bool is_floating(DType d) { return d == f32 || d == f64; }
bool is_integer(DType d) { return d == i32 || d == i64 || d == u32; }

std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

std::int64_t shape_size(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
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

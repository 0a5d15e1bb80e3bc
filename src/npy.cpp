// npy.cpp: NumPy's .npy format (numpy.lib.format's documentation): the magic "\x93NUMPY", a major
// and minor version byte, the header length (2 bytes little-endian in 1.0, 4 in 2.0 and 3.0),
// then a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with
// spaces and a newline so that the data starts 64-byte aligned, then the elements in C order.
#include <cctype>
#include <cstring>
#include <optional>

#include "file_io.hpp"
#include "internal.hpp"
#include "xjax/serialization.hpp"

namespace xjax {
namespace {

struct Descr {
  DType dtype;
  const char* descr;
};
// bf16 has no numpy description (numpy has no bfloat16): save_npy refuses it, naming the dtype.
constexpr Descr kDescrs[] = {{f32, "<f4"}, {f64, "<f8"}, {i32, "<i4"}, {i64, "<i8"}, {u32, "<u4"}, {bool_, "|b1"},
                             {f16, "<f2"}, {i8, "|i1"}, {u8, "|u1"}, {i16, "<i2"}, {u16, "<u2"}, {u64, "<u8"}};
constexpr char kMagic[] = "\x93NUMPY";

// The header dict's fields, read as numpy writes them (a literal dict of three keys).
class HeaderReader {
 public:
  HeaderReader(std::string path, std::string text) : path_(std::move(path)), text_(std::move(text)) {}

  // The text right after 'key': (spaces skipped).
  std::size_t value_at(const char* key) const {
    const std::string quoted = std::string("'") + key + "'";
    const auto k = text_.find(quoted);
    if (k == std::string::npos) detail::file_error(path_, std::string("the header has no '") + key + "' field");
    auto p = text_.find(':', k + quoted.size());
    if (p == std::string::npos) bad_field(key, "field has no value");
    return skip_spaces(p + 1);
  }
  std::string string_field(const char* key) const {
    const std::size_t p = value_at(key);
    if (p >= text_.size() || (text_[p] != '\'' && text_[p] != '"')) bad_field(key, "is not a string");
    const auto end = text_.find(text_[p], p + 1);
    if (end == std::string::npos) bad_field(key, "string is not closed");
    return text_.substr(p + 1, end - p - 1);
  }
  bool bool_field(const char* key) const {
    const std::size_t p = value_at(key);
    if (text_.compare(p, 4, "True") == 0) return true;
    if (text_.compare(p, 5, "False") == 0) return false;
    bad_field(key, "is neither True nor False");
  }
  // (Appended, not `std::string(...) + key + ...`: GCC 12's -Warray-bounds misfires on that
  // chain once inlined here.)
  [[noreturn]] void bad_field(const char* key, const char* what) const {
    std::string message = "the header's '";
    message.append(key).append("' ").append(what);
    detail::file_error(path_, message);
  }
  std::vector<std::uint64_t> shape_field(const char* key) const {
    std::size_t p = value_at(key);
    if (p >= text_.size() || text_[p] != '(') bad_field(key, "is not a tuple");
    std::vector<std::uint64_t> s;
    p = skip_spaces(p + 1);
    while (p < text_.size() && text_[p] != ')') {
      std::size_t digits = p;
      while (digits < text_.size() && std::isdigit(static_cast<unsigned char>(text_[digits]))) ++digits;
      if (digits == p || digits - p > 18) bad_field(key, "holds a bad dimension");
      s.push_back(std::stoull(text_.substr(p, digits - p)));
      p = skip_spaces(digits);
      if (p < text_.size() && text_[p] == ',') p = skip_spaces(p + 1);
      else if (p < text_.size() && text_[p] != ')') bad_field(key, "is not a tuple of integers");
    }
    if (p >= text_.size()) bad_field(key, "tuple is not closed");
    return s;
  }

 private:
  std::size_t skip_spaces(std::size_t p) const {
    while (p < text_.size() && text_[p] == ' ') ++p;
    return p;
  }
  std::string path_, text_;
};

std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += std::to_string(s[i]) + (s.size() == 1 || i + 1 < s.size() ? "," : "") + (i + 1 < s.size() ? " " : "");
  return out + ")";
}

}  // namespace

void save_npy(const std::string& path, const Array& a) {
  if (!a.valid() || a.is_tracer()) detail::file_error(path, "save_npy needs a concrete array");
  const char* descr = nullptr;
  for (const auto& d : kDescrs)
    if (d.dtype == a.dtype()) descr = d.descr;
  if (!descr) detail::file_error(path, std::string("save_npy: dtype ") + dtype_name(a.dtype()) + " has no .npy description");
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_tuple(a.shape()) + ", }";
  const std::size_t prefix = 10;  // magic, version, 2-byte length
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  if (header.size() > 65535) detail::file_error(path, "save_npy: the shape's header is too long for format 1.0");
  detail::AtomicFile out(path);
  out.write(kMagic, 6);
  const unsigned char version[2] = {1, 0};
  out.write(version, 2);
  const auto len = static_cast<std::uint16_t>(header.size());
  out.write(&len, 2);
  out.write(header.data(), header.size());
  if (a.aval().nbytes()) out.write(a.raw_data(), a.aval().nbytes());
  out.commit();
}

Array load_npy(const std::string& path) {
  const detail::InputFile in(path);
  if (in.size() < 10) detail::file_error(path, "truncated: not a .npy file (" + std::to_string(in.size()) + " bytes)");
  char head[12] = {};
  in.read_at(0, head, 10);
  if (std::memcmp(head, kMagic, 6) != 0) detail::file_error(path, "not a .npy file (no \\x93NUMPY magic)");
  const auto major = static_cast<unsigned char>(head[6]);
  if (major < 1 || major > 3) detail::file_error(path, "unsupported .npy format version " + std::to_string(major));
  std::uint64_t start = 10, header_len = 0;
  if (major == 1) {
    std::uint16_t n;
    std::memcpy(&n, head + 8, 2);
    header_len = n;
  } else {
    if (in.size() < 12) detail::file_error(path, "truncated: no header length");
    in.read_at(8, head + 8, 4);
    std::uint32_t n;
    std::memcpy(&n, head + 8, 4);
    header_len = n;
    start = 12;
  }
  if (header_len > in.size() - start) detail::file_error(path, "the header length " + std::to_string(header_len) + " exceeds the file");
  std::string text(header_len, '\0');
  in.read_at(start, text.data(), header_len);
  const HeaderReader h(path, text);
  const std::string descr = h.string_field("descr");
  if (h.bool_field("fortran_order")) detail::file_error(path, "the array is in Fortran order; only C order is read");
  const std::vector<std::uint64_t> dims = h.shape_field("shape");
  std::optional<DType> dtype;
  for (const auto& d : kDescrs)
    if (descr == d.descr) dtype = d.dtype;
  if (!dtype)
    detail::file_error(path, "dtype '" + descr + "' is not one xjax reads (" + std::string(descr.size() && descr[0] == '>' ? "big-endian; " : "") +
                  "xjax has <f8 <f4 <f2 <i8 <i4 <i2 |i1 <u8 <u4 <u2 |u1 |b1)");
  const Shape shape = detail::checked_shape(path, "the array", dims, itemsize(*dtype));
  const ShapedArray aval{shape, *dtype};
  const std::uint64_t data = start + header_len;
  if (in.size() - data != aval.nbytes())
    detail::file_error(path, "shape " + shape_str(shape) + " of " + descr + " needs " + std::to_string(aval.nbytes()) + " bytes of data, the file holds " +
                  std::to_string(in.size() - data));
  Array a = detail::alloc_array(aval);
  if (aval.nbytes()) in.read_at(data, detail::mutable_data(a), aval.nbytes());
  if (*dtype == bool_) detail::check_bool_bytes(path, "the array", a);
  return a;
}

}  // namespace xjax

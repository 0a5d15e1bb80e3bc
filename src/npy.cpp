// npy.cpp: NumPy's .npy format (numpy.lib.format's documentation): the magic "\x93NUMPY", a major
// and minor version byte, the header length (2 bytes little-endian in 1.0, 4 in 2.0 and 3.0),
// then a Python dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded with
// spaces and a newline so that the data starts 64-byte aligned, then the elements in C order.
#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>
#include <optional>
#include <string_view>

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

// numpy's descr as numpy reads it: a byte-order mark ('<' little, '=' native, '|' not applicable,
// read as native, '>' big, or none: native) and a type code with its size ('?' is 'b1');
// one-byte types have no order.
// Big-endian multi-byte types are not read (nullopt, as an unknown type).
std::optional<DType> dtype_of_descr(const std::string& descr) {
  std::string code = descr;
  char order = '=';
  if (!code.empty() && std::string_view("<>=|").find(code[0]) != std::string_view::npos) {
    order = code[0];
    code.erase(0, 1);
  }
  if (code == "?") code = "b1";
  for (const auto& d : kDescrs)
    if (code == d.descr + 1) {
      const bool one_byte = itemsize(d.dtype) == 1;
      // ('|', "not applicable", numpy reads as native too)
      const bool little = order == '<' || ((order == '=' || order == '|') && std::endian::native == std::endian::little);
      if (one_byte || little) return d.dtype;
    }
  return std::nullopt;
}

// The header: a Python dict literal of exactly the keys 'descr' (a string), 'fortran_order'
// (True or False) and 'shape' (a tuple of integers; one element needs its comma), each once, with
// an optional trailing comma, then spaces and a newline. Anything else is an error naming the
// file, as numpy's safe_eval refuses it (a repeated key numpy would read as its last value, an
// extra key, `(3)`, `Falsehood`, a leading zero).
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::uint64_t> shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string path, std::string text) : path_(std::move(path)), text_(std::move(text)) {}

  Header parse() {
    Header h;
    bool seen[3] = {false, false, false};
    expect('{', "does not start with '{'");
    while (true) {
      skip_spaces();
      if (peek() == '}') break;
      const std::string key = quoted("a key");
      skip_spaces();
      expect(':', "has a key without ':'");
      skip_spaces();
      const int which = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (which < 0) fail("has the key '" + key + "' (only 'descr', 'fortran_order' and 'shape')");
      if (seen[which]) fail("repeats the key '" + key + "'");
      seen[which] = true;
      if (which == 0) h.descr = quoted("'descr'");
      else if (which == 1) h.fortran_order = boolean();
      else h.shape = tuple();
      skip_spaces();
      if (peek() == ',') ++p_;
      else if (peek() != '}') fail("has no ',' or '}' after the value of '" + key + "'");
    }
    ++p_;
    skip_spaces();
    if (p_ != text_.size()) fail("has text after its dict");
    for (int k = 0; k < 3; ++k)
      if (!seen[k]) fail(std::string("has no '") + (k == 0 ? "descr" : k == 1 ? "fortran_order" : "shape") + "' key");
    return h;
  }

 private:
  char peek() const { return p_ < text_.size() ? text_[p_] : '\0'; }
  // Python's whitespace between tokens (np.load evaluates the dict as a literal, so a tab or a
  // newline inside it reads; xjax had refused them, a hunt of the thirty-sixth session).
  void skip_spaces() {
    while (p_ < text_.size() && std::string_view(" \t\n\r\f").find(text_[p_]) != std::string_view::npos) ++p_;
  }
  [[noreturn]] void fail(const std::string& what) const { detail::file_error(path_, "the .npy header " + what); }
  void expect(char c, const char* what) {
    if (peek() != c) fail(what);
    ++p_;
  }
  std::string quoted(const std::string& what) {
    const char q = peek();
    if (q != '\'' && q != '"') fail("has " + what + " that is not a string");
    const auto end = text_.find(q, p_ + 1);
    if (end == std::string::npos) fail("has " + what + " whose string is not closed");
    std::string out = text_.substr(p_ + 1, end - p_ - 1);
    p_ = end + 1;
    return out;
  }
  bool boolean() {
    for (const auto& [word, value] : {std::pair{std::string("True"), true}, std::pair{std::string("False"), false}})
      if (text_.compare(p_, word.size(), word) == 0) {
        const std::size_t after = p_ + word.size();
        if (after < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[after])) || text_[after] == '_')) break;
        p_ = after;
        return value;
      }
    fail("'fortran_order' is neither True nor False");
  }
  std::vector<std::uint64_t> tuple() {
    expect('(', "'shape' is not a tuple");
    std::vector<std::uint64_t> dims;
    bool comma_after_last = false;
    skip_spaces();
    while (peek() != ')') {
      const std::size_t first = p_;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++p_;
      const std::size_t digits = p_ - first;
      if (digits == 0 || digits > 18 || (digits > 1 && text_[first] == '0')) fail("'shape' holds a bad dimension");
      dims.push_back(std::stoull(text_.substr(first, digits)));
      skip_spaces();
      comma_after_last = peek() == ',';
      if (comma_after_last) {
        ++p_;
        skip_spaces();
      } else if (peek() != ')') {
        fail("'shape' is not a tuple of integers");
      }
    }
    if (dims.size() == 1 && !comma_after_last) fail("'shape' (n) is an integer, not a tuple (n,)");
    ++p_;
    return dims;
  }

  std::string path_, text_;
  std::size_t p_ = 0;
};

std::string shape_tuple(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += std::to_string(s[i]) + (s.size() == 1 || i + 1 < s.size() ? "," : "") + (i + 1 < s.size() ? " " : "");
  return out + ")";
}

}  // namespace

void save_npy(const std::string& path, const Array& a) {
  if (!a.valid() || a.is_tracer()) detail::file_error(path, "save_npy needs a concrete array");
  detail::check_savable(path, "save_npy", a);
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
  const auto major = static_cast<unsigned char>(head[6]), minor = static_cast<unsigned char>(head[7]);
  if (major < 1 || major > 3 || minor != 0)
    detail::file_error(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) + " (1.0, 2.0 and 3.0 are)");
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
  const Header h = HeaderParser(path, text).parse();
  const std::string& descr = h.descr;
  const std::vector<std::uint64_t>& dims = h.shape;
  // Fortran order lays out an array of at most one axis longer than 1 as C order does (numpy
  // writers mark 0-d and 1-d arrays either way)
  const bool empty = std::find(dims.begin(), dims.end(), std::uint64_t{0}) != dims.end();
  if (h.fortran_order && !empty && std::count_if(dims.begin(), dims.end(), [](std::uint64_t n) { return n > 1; }) > 1)
    detail::file_error(path, "the array is in Fortran order; only C order is read");
  const std::optional<DType> dtype = dtype_of_descr(descr);
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

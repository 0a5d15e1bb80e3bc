// safetensors.cpp: the safetensors format (huggingface/safetensors' documentation): an unsigned
// 64-bit little-endian header length N, N bytes of JSON (padded with spaces; each tensor's name
// maps to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative to the data section;
// "__metadata__" optional), then the data section. The JSON is nlohmann-json's.
#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "file_io.hpp"
#include "internal.hpp"
#include "xjax/serialization.hpp"

namespace xjax {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors and .npy files are little-endian");

struct DtypeName {
  DType dtype;
  const char* name;
};
constexpr DtypeName kDtypes[] = {{f32, "F32"}, {f64, "F64"}, {i32, "I32"}, {i64, "I64"}, {u32, "U32"},
                                 {bool_, "BOOL"}, {bf16, "BF16"}, {f16, "F16"}, {i8, "I8"}, {u8, "U8"},
                                 {i16, "I16"}, {u16, "U16"}, {u64, "U64"}};
// Names of the format that xjax has no dtype for (yet): an error that says so, not "unknown".
constexpr const char* kForeign[] = {"F8_E4M3", "F8_E5M2", "C64"};

const char* name_of(DType d) {
  for (const auto& e : kDtypes)
    if (e.dtype == d) return e.name;
  throw Error(std::string("save_safetensors: dtype ") + dtype_name(d) + " has no safetensors name");
}

DType dtype_of(const std::string& path, const std::string& tensor, const std::string& name) {
  for (const auto& e : kDtypes)
    if (name == e.name) return e.dtype;
  for (const char* f : kForeign)
    if (name == f) detail::file_error(path, "tensor '" + tensor + "' has dtype " + name + ", which xjax does not have");
  detail::file_error(path, "tensor '" + tensor + "' has an unknown dtype '" + name + "'");
}

std::uint64_t non_negative(const std::string& path, const std::string& tensor, const char* field, const nlohmann::json& v) {
  if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0))
    detail::file_error(path, "tensor '" + tensor + "': " + field + " must hold non-negative integers, got a " + v.type_name() +
                  (v.is_number() ? " " + v.dump() : std::string()));
  return v.get<std::uint64_t>();
}

struct Entry {
  std::string name;
  ShapedArray aval;
  std::uint64_t begin = 0, end = 0;
};

Entry entry_of(const std::string& path, const std::string& name, const nlohmann::json& v, std::uint64_t data_bytes) {
  if (!v.is_object()) detail::file_error(path, "tensor '" + name + "': its header entry is not an object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) detail::file_error(path, "tensor '" + name + "': the header entry has no \"" + field + "\"");
  if (!v["dtype"].is_string()) detail::file_error(path, "tensor '" + name + "': \"dtype\" is not a string");
  if (!v["shape"].is_array()) detail::file_error(path, "tensor '" + name + "': \"shape\" is not an array");
  const auto& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) detail::file_error(path, "tensor '" + name + "': \"data_offsets\" is not [begin, end]");
  Entry e;
  e.name = name;
  e.aval.dtype = dtype_of(path, name, v["dtype"].get<std::string>());
  std::vector<std::uint64_t> dims;
  for (const auto& d : v["shape"]) dims.push_back(non_negative(path, name, "\"shape\"", d));
  e.aval.shape = detail::checked_shape(path, "tensor '" + name + "'", dims, itemsize(e.aval.dtype));
  e.begin = non_negative(path, name, "\"data_offsets\"", offsets[0]);
  e.end = non_negative(path, name, "\"data_offsets\"", offsets[1]);
  if (e.begin > e.end || e.end > data_bytes)
    detail::file_error(path, "tensor '" + name + "': data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] lie outside the data section (" + std::to_string(data_bytes) + " bytes)");
  if (e.aval.nbytes() != e.end - e.begin)
    detail::file_error(path, "tensor '" + name + "': shape " + shape_str(e.aval.shape) + " of " + v["dtype"].get<std::string>() +
                  " needs " + std::to_string(e.aval.nbytes()) + " bytes, but data_offsets hold " + std::to_string(e.end - e.begin));
  return e;
}

}  // namespace

void save_safetensors_named(const std::string& path, const std::vector<std::pair<std::string, Array>>& tensors) {
  // The header is written as text, entry by entry in the tensors' order: an ordered_json object
  // searched its keys on every insertion (32000 tensors took 3.3 s to save; a hunt of the
  // thirty-sixth session). Names are checked unique here.
  std::string text = "{";
  std::set<std::string> seen;
  std::uint64_t offset = 0;
  for (const auto& [name, a] : tensors) {
    if (name.empty() || name == "__metadata__" || !seen.insert(name).second)
      detail::file_error(path, "cannot save tensor name '" + name + "' (empty, reserved, or used twice)");
    if (!a.valid()) detail::file_error(path, "tensor '" + name + "' is an empty xj::Array");
    if (a.is_tracer()) detail::file_error(path, "tensor '" + name + "' is a tracer (traced value); save concrete arrays");
    detail::check_savable(path, "tensor '" + name + "'", a);
    const std::uint64_t bytes = a.aval().nbytes();
    // (ordered: the reference writer's field order, dtype, shape, data_offsets)
    const nlohmann::ordered_json entry = {{"dtype", name_of(a.dtype())}, {"shape", a.shape()}, {"data_offsets", {offset, offset + bytes}}};
    try {
      text += (text.size() > 1 ? "," : "") + nlohmann::json(name).dump() + ":" + entry.dump();
    } catch (const nlohmann::json::exception& e) {
      detail::file_error(path, "cannot write tensor name '" + name + "' in the header (not UTF-8?): " + e.what());
    }
    offset += bytes;
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const std::uint64_t n = text.size();
  detail::AtomicFile out(path);
  out.write(&n, sizeof n);
  out.write(text.data(), text.size());
  for (const auto& [name, a] : tensors)
    if (a.aval().nbytes()) out.write(a.raw_data(), a.aval().nbytes());
  out.commit();
}

namespace {
// The header's structure checked before it is parsed into a tree (nlohmann-json's SAX interface):
// a key repeated in one object is an error at every level (a tensor named twice, or a tensor's
// "data_offsets" given twice: readers keeping the first or the last copy would disagree), and so
// is nesting as deep as the reference reader refuses (serde_json's recursion limit: its 128th
// nested container is an error). A parse callback had checked the keys, but nlohmann-json
// rescans the enclosing container after each object a callback sees: a 1 MB header of 330000
// empty objects took 76 s to load (a hunt of the thirty-sixth session).
class HeaderStructure final : public nlohmann::json_sax<nlohmann::json> {
 public:
  static constexpr std::size_t kMaxDepth = 128;
  std::string problem;  // empty when none

  bool start_object(std::size_t) override { return open(); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    const bool top_level = open_.size() == 1;
    if (!open_.back().insert(k).second) {
      problem = "the header names " + (top_level ? "'" + k + "'" : "\"" + k + "\" in '" + entry_ + "'") + " twice";
      return false;
    }
    if (top_level) entry_ = k;
    return true;
  }
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  bool open() {
    if (open_.size() + 1 >= kMaxDepth) {
      problem = "the header nests deeper than " + std::to_string(kMaxDepth - 1) + " levels";
      return false;
    }
    open_.emplace_back();
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
  std::vector<std::set<std::string>> open_;  // the keys read in each open container (none in an array)
  std::string entry_;  // the last top-level key read: the tensor whose entry is being read
};
}  // namespace

std::map<std::string, Array> load_safetensors(const std::string& path) {
  const detail::InputFile in(path);
  if (in.size() < 8) detail::file_error(path, "truncated: " + std::to_string(in.size()) + " bytes, no 8-byte header length");
  std::uint64_t n = 0;
  in.read_at(0, &n, sizeof n);
  if (n > in.size() - 8)
    detail::file_error(path, "the header length " + std::to_string(n) + " exceeds the file (" + std::to_string(in.size()) + " bytes)");
  // The reference reader's limit (huggingface/safetensors' MAX_HEADER_SIZE): parsed, a header
  // takes many times its size in memory.
  constexpr std::uint64_t kMaxHeader = 100'000'000;
  if (n > kMaxHeader)
    detail::file_error(path, "the header length " + std::to_string(n) + " exceeds the format's limit of " + std::to_string(kMaxHeader) + " bytes");
  std::string text(n, '\0');
  in.read_at(8, text.data(), n);
  // The format: a JSON object padded with spaces (0x20); accepted as the reference reader
  // (serde_json) accepts it, with any JSON whitespace around it, but no NUL padding or other bytes.
  const char* const blank = " \t\n\r";
  const std::size_t first = text.find_first_not_of(blank), last = text.find_last_not_of(blank);
  if (first == std::string::npos || text[first] != '{' || text[last] != '}')
    detail::file_error(path, "the header is not a JSON object padded with spaces");
  HeaderStructure structure;
  (void)nlohmann::json::sax_parse(text, &structure);  // a syntax error: the parse below names it
  if (!structure.problem.empty()) detail::file_error(path, structure.problem);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    detail::file_error(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) detail::file_error(path, "the header is not a JSON object");
  if (header.contains("__metadata__") && !header["__metadata__"].is_null()) {  // null: none (the reference reader's Option)
    const auto& meta = header["__metadata__"];
    if (!meta.is_object()) detail::file_error(path, "\"__metadata__\" is not an object of strings");
    for (const auto& [key, value] : meta.items())
      if (!value.is_string()) detail::file_error(path, "\"__metadata__\": the value of '" + key + "' is not a string");
  }
  const std::uint64_t data_start = 8 + n, data_bytes = in.size() - data_start;
  std::vector<Entry> entries;
  for (const auto& [name, v] : header.items())
    if (name != "__metadata__") entries.push_back(entry_of(path, name, v, data_bytes));
  std::vector<const Entry*> by_offset;
  for (const auto& e : entries) by_offset.push_back(&e);
  // The tensors tile the data section exactly, as the format requires (no overlap, no hole, no
  // bytes past the last): sorted by (begin, end), an empty tensor comes before one starting where it does.
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Entry* a, const Entry* b) { return std::pair(a->begin, a->end) < std::pair(b->begin, b->end); });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < by_offset.size(); ++i) {
    const Entry& e = *by_offset[i];
    if (e.begin < covered)
      detail::file_error(path, "tensors '" + by_offset[i - 1]->name + "' and '" + e.name + "' overlap in the data section");
    if (e.begin > covered)
      detail::file_error(path, "the data section has " + std::to_string(e.begin - covered) + " bytes no tensor covers, before tensor '" +
                                   e.name + "' (offset " + std::to_string(e.begin) + ")");
    covered = e.end;
  }
  if (covered != data_bytes)
    detail::file_error(path, "the data section has " + std::to_string(data_bytes - covered) +
                                 " bytes past the last tensor's (the header's offsets cover " + std::to_string(covered) + " of " +
                                 std::to_string(data_bytes) + ")");
  std::map<std::string, Array> out;
  for (const auto& e : entries) {
    Array a = detail::alloc_array(e.aval);
    if (e.end > e.begin) in.read_at(data_start + e.begin, detail::mutable_data(a), e.end - e.begin);
    if (e.aval.dtype == bool_) detail::check_bool_bytes(path, "tensor '" + e.name + "'", a);
    out.emplace(e.name, std::move(a));
  }
  return out;
}

std::vector<Array> detail::leaves_from_tensors(const std::string& path, std::map<std::string, Array> tensors,
                                               const std::vector<std::pair<KeyPath, Array>>& like) {
  std::set<std::string> seen;
  for (const auto& entry : like)
    if (const std::string name = dotted_path(entry.first); !seen.insert(name).second)
      detail::file_error(path, "two leaves of the tree have the file key '" + name + "' (one is " + keystr(entry.first) + "): rename one");
  std::vector<Array> leaves;
  for (const auto& [key, leaf] : like) {
    const std::string name = dotted_path(key);
    auto it = tensors.find(name);
    if (it == tensors.end()) detail::file_error(path, "no tensor '" + name + "' (the tree's leaf " + keystr(key) + ")");
    if (it->second.aval() != leaf.aval())
      detail::file_error(path, "tensor '" + name + "' is " + it->second.aval().str() + ", the tree's leaf " + keystr(key) + " is " +
                    leaf.aval().str());
    leaves.push_back(std::move(it->second));
  }
  return leaves;
}

}  // namespace xjax

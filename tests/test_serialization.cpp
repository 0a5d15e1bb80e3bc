// test_serialization.cpp: key paths (tree_flatten_with_path, keystr), safetensors and .npy round
// trips of every dtype and nested trees, the files' bytes read back by hand (not by xjax's
// reader), each kind of bad input an Error naming the file and the problem, and atomic writes.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <atomic>
#include <chrono>
#include <thread>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

namespace xj = xjax;
namespace fs = std::filesystem;

namespace {

struct Attn {
  BOOST_HANA_DEFINE_STRUCT(Attn, (xj::Array, q), (xj::Array, k));
};
/// Leaves in an order that is not the names' (the file's header lists them by name).
struct EmptyFirst {
  BOOST_HANA_DEFINE_STRUCT(EmptyFirst, (xj::Array, w), (xj::Array, b));
};

struct Model {
  BOOST_HANA_DEFINE_STRUCT(Model, (std::vector<Attn>, blocks), (std::map<std::string, xj::Array>, layers),
                           (std::tuple<xj::Array, xj::Array>, extra));
};

xj::Array ramp(xj::Shape shape, xj::DType dtype, double offset) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = dtype == xj::bool_ ? double((i + 1) % 2) : offset + 1.5 * static_cast<double>(i) - 3;
  return xj::astype(test_util::f64v(v, shape), dtype);
}

Model model() {
  Model m;
  m.blocks = {{ramp({2, 3}, xj::f32, 0), ramp({3}, xj::f64, 1)}, {ramp({2, 2}, xj::i32, 2), ramp({}, xj::i64, 3)}};
  m.layers = {{"W1", ramp({4}, xj::u32, 10)}, {"mask", ramp({5}, xj::bool_, 0)}};
  m.extra = {ramp({0, 3}, xj::f32, 0), ramp({1, 1, 2}, xj::f64, -7)};
  return m;
}

std::vector<unsigned char> bytes_of(const xj::Array& a) {
  const auto* p = static_cast<const unsigned char*>(a.raw_data());
  return {p, p + a.aval().nbytes()};
}

// A fresh directory for one test's files.
fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("xjax_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header text and a data section.
std::string safetensors_bytes(const std::string& header, const std::string& data, std::uint64_t claimed = 0) {
  const std::uint64_t n = claimed ? claimed : header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

}  // namespace

TEST_CASE("pytree: tree_flatten_with_path, keystr (JAX's) and dotted_path (file keys) for structs, vectors, maps, tuples") {
  auto [leaves, def] = xj::tree_flatten_with_path(model());
  std::vector<std::string> jax, dotted;
  for (const auto& [path, leaf] : leaves) {
    jax.push_back(xj::keystr(path));
    dotted.push_back(xj::dotted_path(path));
  }
  CHECK(jax == std::vector<std::string>{".blocks[0].q", ".blocks[0].k", ".blocks[1].q", ".blocks[1].k", ".layers['W1']",
                                        ".layers['mask']", ".extra[0]", ".extra[1]"});
  CHECK(dotted == std::vector<std::string>{"blocks[0].q", "blocks[0].k", "blocks[1].q", "blocks[1].k", "layers.W1",
                                           "layers.mask", "extra[0]", "extra[1]"});
  CHECK(leaves[4].second.dtype() == xj::u32);
  // tree_leaves: the same leaves in the same order (jax.tree.leaves).
  const std::vector<xj::Array> plain = xj::tree_leaves(model());
  REQUIRE(plain.size() == leaves.size());
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(plain[i].aval() == leaves[i].second.aval());
  CHECK(xj::keystr({}) == "");
}

TEST_CASE("safetensors: a nested tree of every dtype round-trips, and the bytes are the format's (read by hand)") {
  const fs::path dir = scratch("st_round_trip");
  const std::string path = (dir / "model.safetensors").string();
  const Model m = model();
  xj::save_safetensors(path, m);
  const Model back = xj::load_safetensors(path, model());
  auto [a, da] = xj::tree_flatten(m);
  auto [b, db] = xj::tree_flatten(back);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].aval() == b[i].aval());
    CHECK(bytes_of(a[i]) == bytes_of(b[i]));
  }
  // By hand: the header length, the JSON entries, each tensor's bytes at its offsets.
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  CHECK(n % 8 == 0);
  const auto header = nlohmann::json::parse(file.substr(8, n));
  const auto& q = header.at("blocks[0].q");
  CHECK(q.at("dtype") == "F32");
  CHECK(q.at("shape") == nlohmann::json::array({2, 3}));
  const std::uint64_t begin = q.at("data_offsets")[0], end = q.at("data_offsets")[1];
  CHECK(end - begin == 24);
  CHECK(std::memcmp(file.data() + 8 + n + begin, m.blocks[0].q.raw_data(), 24) == 0);
  CHECK(header.at("layers.mask").at("dtype") == "BOOL");
  CHECK(header.at("blocks[1].k").at("shape") == nlohmann::json::array());
  CHECK(header.at("extra[0]").at("data_offsets")[0] == header.at("extra[0]").at("data_offsets")[1]);
  // Loaded without a tree: every tensor by name.
  const auto all = xj::load_safetensors(path);
  CHECK(all.size() == 8);
  CHECK(all.at("layers.W1").to_vector<std::uint32_t>() == m.layers.at("W1").to_vector<std::uint32_t>());
  fs::remove_all(dir);
}

TEST_CASE("safetensors: bad input is an Error naming the file and the problem") {
  const fs::path dir = scratch("st_bad");
  const std::string p = (dir / "bad.safetensors").string();
  auto expect = [&](const std::string& bytes, const std::string& what) {
    write_bytes(p, bytes);
    CAPTURE(what);
    CHECK_THROWS_WITH_AS((void)xj::load_safetensors(p), doctest::Contains((p + ": " + what).c_str()), xj::Error);
  };
  const std::string ok_entry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect("abc", "truncated: 3 bytes, no 8-byte header length");
  expect(safetensors_bytes("{" + ok_entry + "}", std::string(8, '\0'), 4096), "the header length 4096 exceeds the file");
  expect(safetensors_bytes("{\"x\":}", ""), "the header is not valid JSON");
  expect(safetensors_bytes("{\"x\":", ""), "the header is not a JSON object padded with spaces");
  expect(safetensors_bytes("[1,2]", ""), "the header is not a JSON object");
  expect(safetensors_bytes("{" + ok_entry + "}", std::string(4, '\0')), "tensor 'x': data_offsets [0, 8] lie outside the data section (4 bytes)");
  expect(safetensors_bytes(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')), "tensor 'x' has an unknown dtype 'Q7'");
  expect(safetensors_bytes(R"({"x":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", std::string(8, '\0')),
         "tensor 'x' has dtype F8_E4M3, which xjax does not have");
  expect(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
         "tensor 'x': shape [3] of F32 needs 12 bytes, but data_offsets hold 8");
  expect(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0')),
         "tensor 'x': \"shape\" must hold non-negative integers");
  expect(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')), "tensor 'x': the header entry has no \"data_offsets\"");
  expect(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           std::string(8, '\0')),
         "tensors 'x' and 'y' overlap in the data section");
  CHECK_THROWS_WITH_AS((void)xj::load_safetensors((dir / "absent.safetensors").string()), doctest::Contains("absent.safetensors: cannot open it"),
                       xj::Error);
  // A file of the wrong tree: a missing key, a shape that differs.
  xj::save_safetensors(p, std::map<std::string, xj::Array>{{"a", xj::zeros({2})}});
  const std::map<std::string, xj::Array> wants_b{{"a", xj::zeros({2})}, {"b", xj::zeros({2})}};
  CHECK_THROWS_WITH_AS((void)xj::load_safetensors(p, wants_b), doctest::Contains((p + ": no tensor 'b' (the tree's leaf ['b'])").c_str()), xj::Error);
  const std::map<std::string, xj::Array> wants_3{{"a", xj::zeros({3})}};
  CHECK_THROWS_WITH_AS((void)xj::load_safetensors(p, wants_3), doctest::Contains("tensor 'a' is f32[2], the tree's leaf ['a'] is f32[3]"), xj::Error);
  fs::remove_all(dir);
}

TEST_CASE("safetensors regressions from review: empty tensors sharing an offset load; repeated names, holes and trailing bytes are errors") {
  const fs::path dir = scratch("st_tiling");
  const std::string p = (dir / "t.safetensors").string();
  // An empty leaf before a non-empty one: xjax wrote 'w' at [0, 0] and 'b' at [0, 8] and then
  // refused its own file ('b' sorted before 'w' and was taken to overlap it).
  const EmptyFirst tree{xj::zeros({0, 3}), xj::array<float>({1.5f, -2.0f}, {2})};
  xj::save_safetensors(p, tree);
  const EmptyFirst back = xj::load_safetensors(p, tree);
  CHECK(back.w.shape() == xj::Shape{0, 3});
  CHECK(back.b.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  // The reference writer's order (dtype, then name): an empty F64 'z' at [0, 0] before 'a'.
  std::string data(8, '\0');
  const float two[2] = {3.0f, 4.0f};
  std::memcpy(data.data(), two, 8);
  write_bytes(p, safetensors_bytes(R"({"z":{"dtype":"F64","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                   data));
  const auto loaded = xj::load_safetensors(p);
  CHECK(loaded.at("a").to_vector<float>() == std::vector<float>{3.0f, 4.0f});
  CHECK(loaded.at("z").shape() == xj::Shape{0});
  // The format's rules: no name twice (the JSON parser kept the last one silently), the tensors
  // tile the data section (no hole, nothing past the last).
  auto expect = [&](const std::string& bytes, const std::string& what) {
    write_bytes(p, bytes);
    CAPTURE(what);
    CHECK_THROWS_WITH_AS((void)xj::load_safetensors(p), doctest::Contains((p + ": " + what).c_str()), xj::Error);
  };
  expect(safetensors_bytes(R"({"x":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]},"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           std::string(8, '\0')),
         "the header names 'x' twice");
  expect(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
         "the data section has 4 bytes no tensor covers, before tensor 'x' (offset 4)");
  expect(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"y":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                           std::string(12, '\0')),
         "the data section has 4 bytes no tensor covers, before tensor 'y' (offset 8)");
  expect(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(12, '\0')),
         "the data section has 8 bytes past the last tensor's (the header's offsets cover 4 of 12)");
  expect(safetensors_bytes("{}", std::string(8, '\0')), "the data section has 8 bytes past the last tensor's");
  // A repeated name inside an entry's own object is the JSON's business, not the format's: the
  // top level only is checked (a nested object's keys may repeat the tensors' names).
  write_bytes(p, safetensors_bytes(R"({"__metadata__":{"x":"1"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')));
  CHECK(xj::load_safetensors(p).at("x").shape() == xj::Shape{1});
  fs::remove_all(dir);
}

TEST_CASE("safetensors and npy: a failure mid-write leaves the old file intact and no temporary behind") {
  const fs::path dir = scratch("st_atomic");
  const std::string p = (dir / "params.safetensors").string();
  const std::map<std::string, xj::Array> old{{"a", ramp({3}, xj::f32, 0)}, {"b", ramp({2}, xj::f64, 1)}};
  xj::save_safetensors(p, old);
  // A write that fails part-way (the file size limit, RLIMIT_FSIZE, below the new file's size:
  // write() fails with EFBIG once the header and some data are out).
  const xj::Array big = ramp({1000}, xj::f32, 5);
  const std::map<std::string, xj::Array> failing{{"a", big}, {"b", big}};
  const std::string q = (dir / "x.npy").string();
  xj::save_npy(q, old.at("a"));
  {
    struct rlimit saved {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    const auto previous = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = saved;
    small.rlim_cur = 1000;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    CHECK_THROWS_WITH_AS(xj::save_safetensors(p, failing), doctest::Contains(p.c_str()), xj::Error);
    CHECK_THROWS_WITH_AS(xj::save_npy(q, big), doctest::Contains(q.c_str()), xj::Error);
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &saved) == 0);
    std::signal(SIGXFSZ, previous);
  }
  const auto back = xj::load_safetensors(p, old);
  CHECK(bytes_of(back.at("a")) == bytes_of(old.at("a")));
  CHECK(bytes_of(back.at("b")) == bytes_of(old.at("b")));
  CHECK(xj::load_npy(q).to_vector<float>() == old.at("a").to_vector<float>());
  // A donated array is refused before anything is written, the error naming the file (it had
  // been the donation's error alone; a hunt of the thirty-sixth session).
  xj::Array gone = ramp({4}, xj::f32, 0);
  (void)xj::jit([](const xj::Array& x) { return x * 2.0f; }, {.donate_argnums = {0}})(gone);
  CHECK_THROWS_WITH_AS(xj::save_safetensors(p, std::map<std::string, xj::Array>{{"a", big}, {"b", gone}}),
                       doctest::Contains((p + ": tensor 'b': an xj::Array f32[4] was saved after it was donated").c_str()), xj::Error);
  CHECK_THROWS_WITH_AS(xj::save_npy(q, gone), doctest::Contains((q + ": save_npy: an xj::Array").c_str()), xj::Error);
  CHECK(xj::load_npy(q).to_vector<float>() == old.at("a").to_vector<float>());
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  CHECK(files == 2);  // params.safetensors and x.npy: no temporaries left
  fs::remove_all(dir);
}

TEST_CASE("npy: every dtype and rank round-trips; the header is numpy's, 64-byte aligned; bad files are errors") {
  const fs::path dir = scratch("npy");
  const std::string p = (dir / "a.npy").string();
  for (xj::DType d : {xj::f32, xj::f64, xj::i32, xj::i64, xj::u32, xj::bool_})
    for (const xj::Shape& s : {xj::Shape{}, xj::Shape{5}, xj::Shape{2, 0}, xj::Shape{2, 3, 4}}) {
      const xj::Array a = ramp(s, d, 2);
      xj::save_npy(p, a);
      const xj::Array b = xj::load_npy(p);
      CHECK(a.aval() == b.aval());
      CHECK(bytes_of(a) == bytes_of(b));
    }
  xj::save_npy(p, ramp({2, 3}, xj::f32, 0));
  std::ifstream in(p, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(file.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  std::uint16_t len = 0;
  std::memcpy(&len, file.data() + 8, 2);
  CHECK((10 + len) % 64 == 0);
  CHECK(file.substr(10, len).starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
  CHECK(file.size() == 10u + len + 24u);
  auto header = [](const std::string& dict) {
    std::string h = dict;
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h.push_back('\n');
    std::string out = std::string("\x93NUMPY\x01\x00", 8);
    const auto n = static_cast<std::uint16_t>(h.size());
    out.append(reinterpret_cast<const char*>(&n), 2);
    return out + h;
  };
  auto expect = [&](const std::string& bytes, const std::string& what) {
    write_bytes(p, bytes);
    CAPTURE(what);
    CHECK_THROWS_WITH_AS((void)xj::load_npy(p), doctest::Contains((p + ": " + what).c_str()), xj::Error);
  };
  expect("PK\x03\x04 not npy at all", "not a .npy file");
  expect(header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }") + std::string(24, '\0'), "the array is in Fortran order; only C order is read");
  // descriptions numpy reads and other writers use (cnpy's '<u1', '=f4', a bare 'u1', '?'), and
  // Fortran order on an array with at most one axis longer than 1 (C order's bytes): refused before
  const auto loads = [&](const std::string& dict, const std::string& data, xj::DType dtype, const xj::Shape& shape) {
    CAPTURE(dict);
    write_bytes(p, header(dict) + data);
    const xj::Array a = xj::load_npy(p);
    CHECK(a.dtype() == dtype);
    CHECK(a.shape() == shape);
    return a;
  };
  const std::string bytes3("\x01\x00\x07", 3);
  for (const char* d : {"<u1", ">u1", "=u1", "u1"}) loads(std::string("{'descr': '") + d + "', 'fortran_order': False, 'shape': (3,), }", bytes3, xj::u8, {3});
  CHECK(loads("{'descr': '<b1', 'fortran_order': False, 'shape': (3,), }", bytes3.substr(0, 2) + std::string(1, '\1'), xj::bool_, {3}).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{1, 0, 1});
  loads("{'descr': '?', 'fortran_order': False, 'shape': (2,), }", std::string("\x01\x00", 2), xj::bool_, {2});
  loads("{'descr': '<i1', 'fortran_order': False, 'shape': (1,), }", std::string(1, '\xff'), xj::i8, {1});
  const float f4[3] = {1.5f, -2.0f, 0.25f};
  const std::string f4_bytes(reinterpret_cast<const char*>(f4), sizeof f4);
  CHECK(loads("{'descr': '=f4', 'fortran_order': False, 'shape': (3,), }", f4_bytes, xj::f32, {3}).to_vector<float>() == std::vector<float>{1.5f, -2.0f, 0.25f});
  CHECK(loads("{'descr': 'f4', 'fortran_order': True, 'shape': (3,), }", f4_bytes, xj::f32, {3}).to_vector<float>() == std::vector<float>{1.5f, -2.0f, 0.25f});
  loads("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 3, 1), }", f4_bytes, xj::f32, {1, 3, 1});
  loads("{'descr': '|f4', 'fortran_order': False, 'shape': (3,), }", f4_bytes, xj::f32, {3});
  loads("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 0, 3), }", "", xj::f32, {2, 0, 3});
  expect(header("{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }") + f4_bytes, "dtype '>f4' is not one xjax reads");
  expect(header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }") + std::string(8, '\0'), "dtype '>f4' is not one xjax reads (big-endian");
  expect(header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }") + std::string(5, '\0'), "shape [2] of <f4 needs 8 bytes of data, the file holds 5");
  expect(header("{'descr': '<f4', 'fortran_order': False, }"), "the .npy header has no 'shape' key");
  expect(header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }"), "the .npy header 'shape' holds a bad dimension");
  // Review finding (twenty-fifth session): the header was searched for each key's first mention,
  // so a repeated key was read as its first value (numpy's dict keeps the last: another dtype,
  // another shape, no error) and malformed dicts numpy refuses were accepted.
  const std::string f4x3(12, '\0');
  expect(header("{'descr': '<i4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,), }") + f4x3, "the .npy header repeats the key 'descr'");
  expect(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'shape': (1,), }") + f4x3, "the .npy header repeats the key 'shape'");
  expect(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'foo': 1, }") + f4x3, "the .npy header has the key 'foo'");
  expect(header("'descr': '<f4', 'fortran_order': False, 'shape': (3,), ") + f4x3, "the .npy header does not start with '{'");
  expect(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }") + f4x3, "the .npy header 'shape' (n) is an integer, not a tuple");
  expect(header("{'descr': '<f4', 'fortran_order': Falsehood, 'shape': (3,), }") + f4x3, "the .npy header 'fortran_order' is neither True nor False");
  expect(header("{'descr': '<f4'x, 'fortran_order': False, 'shape': (3,), }") + f4x3, "the .npy header has no ',' or '}' after the value of 'descr'");
  expect(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)(5,), }") + f4x3, "the .npy header has no ',' or '}' after the value of 'shape'");
  expect(header("{'descr': '<f4', 'fortran_order': False, 'shape': (03,), }") + f4x3, "the .npy header 'shape' holds a bad dimension");
  std::string minor5 = header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }") + f4x3;
  minor5[7] = 5;
  expect(minor5, "unsupported .npy format version 1.5");
  // What numpy writes (spaces, no trailing comma, double quotes, rank 0 and 2) still loads.
  for (const std::string& dict : {std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}"),
                                  std::string("{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(3, )}")}) {
    write_bytes(p, header(dict) + f4x3);
    CHECK(xj::load_npy(p).shape() == xj::Shape{3});
  }
  write_bytes(p, header("{'descr': '<f4', 'fortran_order': False, 'shape': (), }") + std::string(4, '\0'));
  CHECK(xj::load_npy(p).shape() == xj::Shape{});
  write_bytes(p, header("{'shape': (1, 3), 'fortran_order': False, 'descr': '<f4'}") + f4x3);
  CHECK(xj::load_npy(p).shape() == xj::Shape{1, 3});
  fs::remove_all(dir);
}

TEST_CASE("serialization regressions from review: sizes that overflow, deep JSON, bool bytes, permissions, names") {
  const fs::path dir = scratch("review");
  const std::string st = (dir / "r.safetensors").string(), np = (dir / "r.npy").string();
  auto load_st = [&](const std::string& bytes) {
    write_bytes(st, bytes);
    return xj::load_safetensors(st);
  };
  // A shape of 2^64 + 16 elements wrapped to 16 and read out of bounds later; dimensions of
  // 2^63 and more became negative; [2^32, 2^32, 0, 7] overflowed int64 before the zero.
  auto npy_with_shape = [](const std::string& shape, std::size_t data) {
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h.push_back('\n');
    std::string out = std::string("\x93NUMPY\x01\x00", 8);
    const auto n = static_cast<std::uint16_t>(h.size());
    out.append(reinterpret_cast<const char*>(&n), 2);
    return out + h + std::string(data, '\0');
  };
  write_bytes(np, npy_with_shape("(16, 17, 67818912035696881)", 64));
  CHECK_THROWS_WITH_AS((void)xj::load_npy(np), doctest::Contains("exceeds 2^63 bytes"), xj::Error);
  write_bytes(np, npy_with_shape("(4294967296, 4294967296)", 0));
  CHECK_THROWS_WITH_AS((void)xj::load_npy(np), doctest::Contains("exceeds 2^63 bytes"), xj::Error);
  CHECK_THROWS_WITH_AS((void)load_st(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[9223372036854775808,0],"data_offsets":[0,0]}})", "")),
                       doctest::Contains("exceeds 2^63 bytes"), xj::Error);
  CHECK_THROWS_WITH_AS((void)load_st(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,0,7],"data_offsets":[0,0]}})", "")),
                       doctest::Contains("exceeds 2^63 bytes"), xj::Error);
  // A shape element nested deeply: an Error, not a stack overflow printing it.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_THROWS_AS((void)load_st(safetensors_bytes(R"({"x":{"dtype":"F32","shape":[)" + deep + R"(],"data_offsets":[0,0]}})", "")), xj::Error);
  // Bool bytes other than 0 and 1.
  CHECK_THROWS_WITH_AS((void)load_st(safetensors_bytes(R"({"x":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})", std::string("\x00\x01\x02\x00", 4))),
                       doctest::Contains("bool element 2 is the byte 2"), xj::Error);
  // Saving over a file keeps its mode.
  xj::save_safetensors(st, std::map<std::string, xj::Array>{{"a", xj::zeros({2})}});
  ::chmod(st.c_str(), 0600);
  xj::save_safetensors(st, std::map<std::string, xj::Array>{{"a", xj::ones({2})}});
  struct stat info {};
  REQUIRE(::stat(st.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0600);
  // A name that is not UTF-8; two leaves with one file key.
  CHECK_THROWS_AS(xj::save_safetensors_named(st, {{std::string("\xff\xfe"), xj::zeros({1})}}), xj::Error);
  using Nested = std::map<std::string, std::map<std::string, xj::Array>>;
  const Nested clash{{"a", {{"b.c", xj::zeros({1})}}}, {"a.b", {{"c", xj::zeros({1})}}}};
  CHECK_THROWS_AS(xj::save_safetensors(st, clash), xj::Error);
  CHECK_THROWS_WITH_AS((void)xj::load_safetensors(st, clash), doctest::Contains("two leaves of the tree have the file key 'a.b.c'"), xj::Error);
  fs::remove_all(dir);
}

TEST_CASE("files: a load refused because the path is not a regular file closes what it opened (review finding: a descriptor leaked per call)") {
  const auto open_descriptors = [] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  const fs::path dir = scratch("fd_leak");
  const std::size_t before = open_descriptors();
  for (int i = 0; i < 50; ++i) {
    CHECK_THROWS_AS((void)xj::load_npy(dir.string()), xj::Error);
    CHECK_THROWS_AS((void)xj::load_npy("/dev/null"), xj::Error);
  }
  CHECK(open_descriptors() <= before + 1);  // +1: the directory_iterator's own
  fs::remove_all(dir);
}

TEST_CASE("npy and safetensors regressions from the twenty-sixth session: a save through a symbolic link writes its target") {
  const fs::path dir = scratch("symlink");
  const fs::path target = dir / "ckpt_100.npy", link = dir / "latest.npy";
  xj::save_npy(target.string(), xj::array<float>({1.0f, 2.0f}, {2}));
  fs::create_symlink(target, link);
  // the rename replaced the link with a regular file, leaving the target's old data
  xj::save_npy(link.string(), xj::array<float>({3.0f, 4.0f}, {2}));
  CHECK(fs::is_symlink(link));
  CHECK(xj::load_npy(target.string()).to_vector<float>() == std::vector<float>{3.0f, 4.0f});
  fs::remove_all(dir);
}

TEST_CASE("npy regressions from the twenty-seventh session: a named pipe is written through, not replaced; a directory is refused") {
  // the rename replaced any target: as root, save_npy("/dev/null", a) turned /dev/null into a file
  const fs::path dir = scratch("fifo");
  const fs::path pipe = dir / "pipe.npy", regular = dir / "regular.npy";
  REQUIRE(::mkfifo(pipe.c_str(), 0600) == 0);
  const int reader_fd = ::open(pipe.c_str(), O_RDONLY | O_NONBLOCK);  // a reader first, so the writer's open returns
  REQUIRE(reader_fd >= 0);
  std::string received;
  std::atomic<bool> saved{false};
  std::thread reader([&] {
    char buf[4096];
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      const bool writer_done = saved.load();  // read before the read: EOF after it means all arrived
      const ssize_t n = ::read(reader_fd, buf, sizeof buf);
      if (n > 0) {
        received.append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 && writer_done) {
        break;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  });
  const xj::Array a = xj::array<float>({1.0f, 2.0f, 3.0f}, {3});
  xj::save_npy(pipe.string(), a);
  saved = true;
  reader.join();
  ::close(reader_fd);
  CHECK(fs::is_fifo(pipe));
  xj::save_npy(regular.string(), a);
  std::ifstream in(regular, std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(received == written);
  CHECK_THROWS_WITH_AS(xj::save_npy(dir.string(), a), doctest::Contains("not a regular file"), xj::Error);
  fs::remove_all(dir);
}

TEST_CASE("safetensors regressions from the twenty-ninth session: a field repeated inside a tensor's entry, the header's start and padding, __metadata__'s type") {
  const fs::path dir = scratch("st29");
  const auto expect = [&](const std::string& name, const std::string& header, const std::string& data, const std::string& what) {
    const std::string p = (dir / name).string();
    write_bytes(p, safetensors_bytes(header, data));
    CHECK_THROWS_WITH_AS((void)xj::load_safetensors(p), doctest::Contains((p + ": " + what).c_str()), xj::Error);
  };
  const std::string eight("\0\1\2\3\4\5\6\7", 8);
  // the last "data_offsets" won: a reads 4..7 where a reader keeping the first reads 0..3
  expect("offsets.safetensors",
         R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4],"data_offsets":[4,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
         eight, "the header names \"data_offsets\" in 'a' twice");
  expect("dtype.safetensors", R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8],"dtype":"F32"}})", eight,
         "the header names \"dtype\" in 'a' twice");
  expect("names.safetensors", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
         eight, "the header names 'a' twice");
  // the format: a JSON object padded with spaces (whitespace around it is read, as the reference
  // reader reads it; NUL padding is not)
  const std::string ok = R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})";
  expect("nul.safetensors", ok + std::string(3, '\0'), eight, "the header is not a JSON object padded with spaces");
  expect("junk.safetensors", ok + "x", eight, "the header is not a JSON object padded with spaces");
  expect("meta.safetensors", R"({"__metadata__":{"k":1},"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight,
         "\"__metadata__\": the value of 'k' is not a string");
  expect("meta2.safetensors", R"({"__metadata__":[1,2],"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight,
         "\"__metadata__\" is not an object of strings");
  // what the format (or the reference reader) allows still loads: space padding, string
  // metadata, null metadata, the same key in two objects, whitespace around the object
  const std::string p = (dir / "fine.safetensors").string();
  for (const std::string& header :
       {std::string(R"({"__metadata__":{"dtype":"x"},"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})") + std::string(5, ' '),
        std::string(R"({"__metadata__":null,"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})"), " " + ok + "\n"}) {
    write_bytes(p, safetensors_bytes(header, eight));
    CHECK(xj::load_safetensors(p).at("a").to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  }
}

TEST_CASE("safetensors and npy regressions from the thirty-sixth session: header cost, nesting, long and empty names") {
  const fs::path dir = scratch("st_36");
  const std::string st = (dir / "h.safetensors").string();
  // A tensor entry carrying 200000 empty objects in a field the reader ignores: nlohmann-json's
  // parse callback (the repeated-key check) rescanned the enclosing array after each object,
  // quadratic in the header (a 1 MB header took 76 s; now one linear pass and a plain parse).
  std::string pad = "[";
  for (int i = 0; i < 200000; ++i) pad += i ? ",{}" : "{}";
  pad += "]";
  const float one = 1.5f;
  write_bytes(st, safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"pad":)" + pad + "}}",
                                    std::string(reinterpret_cast<const char*>(&one), 4)));
  CHECK(xj::load_safetensors(st).at("x").to_vector<float>() == std::vector<float>{1.5f});
  // Nesting as deep as the reference reader refuses (serde_json's 128th nested container) is
  // refused before a tree of it is built (a 6 MB header of brackets took 900 MB); 127 levels
  // load: the header object, the entry and 125 arrays.
  const std::string deep = std::string(126, '[') + std::string(126, ']');
  write_bytes(st, safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"pad":)" + deep + "}}",
                                    std::string(reinterpret_cast<const char*>(&one), 4)));
  CHECK_THROWS_WITH_AS((void)xj::load_safetensors(st), doctest::Contains("nests deeper than 127 levels"), xj::Error);
  const std::string shallow = std::string(125, '[') + std::string(125, ']');
  write_bytes(st, safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"pad":)" + shallow + "}}",
                                    std::string(reinterpret_cast<const char*>(&one), 4)));
  CHECK(xj::load_safetensors(st).at("x").to_vector<float>() == std::vector<float>{1.5f});
  // A repeated key at any level is still refused, naming it.
  write_bytes(st, safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"shape":[1]}})",
                                    std::string(reinterpret_cast<const char*>(&one), 4)));
  CHECK_THROWS_WITH_AS((void)xj::load_safetensors(st), doctest::Contains("the header names \"shape\" in 'x' twice"), xj::Error);
  // Many tensors: saved and loaded back by name (the header was an ordered_json object searched
  // on every insertion: quadratic in the tensor count).
  std::map<std::string, xj::Array> many;
  for (int i = 0; i < 3000; ++i) many.emplace("t" + std::to_string(i), xj::full({1}, i, xj::i32));
  xj::save_safetensors(st, many);
  const auto many_back = xj::load_safetensors(st);
  REQUIRE(many_back.size() == many.size());
  for (const auto& [name, a] : many) CHECK(many_back.at(name).to_vector<std::int32_t>() == a.to_vector<std::int32_t>());
  // A valid file name of 249 bytes: the temporary name beside it (".tmp.XXXXXX" appended) passed
  // NAME_MAX and could not be created.
  const std::string long_name = (dir / (std::string(245, 'n') + ".npy")).string();
  xj::save_npy(long_name, ramp({3}, xj::f32, 0));
  CHECK(xj::load_npy(long_name).to_vector<float>() == ramp({3}, xj::f32, 0).to_vector<float>());
  xj::save_safetensors(long_name, many);
  CHECK(xj::load_safetensors(long_name).size() == many.size());
  // The saved entries keep the reference writer's field order (dtype, shape, data_offsets).
  xj::save_safetensors(st, std::map<std::string, xj::Array>{{"x", xj::full({2}, 1.0, xj::f32)}});
  {
    std::ifstream in(st, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(bytes.substr(8, 56) == R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}  )");
  }
  // A name past NAME_MAX is refused before the data is written (it failed at the rename).
  CHECK_THROWS_WITH_AS(xj::save_npy((dir / std::string(256, 'n')).string(), ramp({3}, xj::f32, 0)),
                       doctest::Contains("File name too long"), xj::Error);
  // A .npy header with tabs and newlines between its tokens: np.load reads it (a Python literal)
  {
    std::string h = "{'descr':\t'<f4',\n 'fortran_order': False,\t'shape': (2,), }";
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h.push_back('\n');
    const auto n = static_cast<std::uint16_t>(h.size());
    const float data[2] = {1.5f, -2.0f};
    const std::string np = (dir / "tabs.npy").string();
    write_bytes(np, std::string("\x93NUMPY\x01\x00", 8) + std::string(reinterpret_cast<const char*>(&n), 2) + h +
                        std::string(reinterpret_cast<const char*>(data), sizeof data));
    CHECK(xj::load_npy(np).to_vector<float>() == std::vector<float>{1.5f, -2.0f});
    fs::remove(np);
  }
  // An empty file name is refused before anything is written (the data had gone to
  // ./.tmp.XXXXXX first).
  CHECK_THROWS_WITH_AS(xj::save_npy("", ramp({3}, xj::f32, 0)), doctest::Contains("empty name"), xj::Error);
  CHECK_THROWS_WITH_AS(xj::save_safetensors("", many), doctest::Contains("empty name"), xj::Error);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  CHECK(files == 2);  // h.safetensors and the long name: no temporaries left
  fs::remove_all(dir);
}

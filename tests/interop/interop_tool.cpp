// interop_tool.cpp: the xjax side of tests/interop/numpy_interop.py. `write DIR` saves arrays with
// known values as .npy and safetensors for numpy to read; `check DIR` loads the files numpy wrote
// there and exits nonzero (saying why) unless their values are the ones the script wrote.
#include <cmath>
#include <cstdio>
#include <string>

#include <xjax/xjax.hpp>

namespace xj = xjax;

namespace {

// i * scale + offset for i = 0..n-1, in `dtype`.
xj::Array ramp(xj::Shape shape, xj::DType dtype, double scale, double offset) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * scale + offset;
  return xj::astype(xj::array<double>(v, shape), dtype);
}

int expect_equal(const char* what, const xj::Array& got, const xj::Array& want) {
  if (got.aval() != want.aval()) {
    std::fprintf(stderr, "%s: got %s, want %s\n", what, got.aval().str().c_str(), want.aval().str().c_str());
    return 1;
  }
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i]) {
      std::fprintf(stderr, "%s: element %zu is %.17g, want %.17g\n", what, i, g[i], w[i]);
      return 1;
    }
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::fprintf(stderr, "usage: interop_tool write|check DIR\n");
    return 2;
  }
  const std::string mode = argv[1], dir = argv[2];
  if (mode == "write") {
    xj::save_npy(dir + "/a.npy", ramp({2, 3}, xj::f32, 0.5, 0));
    xj::save_npy(dir + "/b.npy", ramp({4}, xj::i64, -3, 7));
    const std::map<std::string, xj::Array> tree{{"w", ramp({2, 2}, xj::f64, 0.25, -1)},
                                                {"b", ramp({3}, xj::f32, 2, 1)},
                                                {"n", ramp({2}, xj::i32, 5, -4)}};
    xj::save_safetensors(dir + "/m.safetensors", tree);
    return 0;
  }
  if (mode == "check") {
    int bad = expect_equal("p.npy", xj::load_npy(dir + "/p.npy"), ramp({3, 4}, xj::f64, 1.0 / 3.0, 0));
    bad += expect_equal("q.npy", xj::load_npy(dir + "/q.npy"), ramp({5}, xj::u32, 3, 1));
    const auto st = xj::load_safetensors(dir + "/p.safetensors");
    bad += expect_equal("p.safetensors x", st.at("x"), ramp({2, 3}, xj::f32, 1.5, -2));
    bad += expect_equal("p.safetensors y", st.at("y"), ramp({4}, xj::i64, 1000000007, 0));
    return bad ? 1 : 0;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "interop_tool: %s\n", e.what());
  return 1;
}

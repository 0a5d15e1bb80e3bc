// The kernel sets (src/kernels/kernel_sets.hpp) checked against each other and against plain loops
// in double: every set this CPU runs computes the same battery (elementwise math, reductions,
// small and large products in every layout, convolutions, pooling, a jitted fused chain); values
// must agree to rounding. The whole kernel and convolution suites also run once per set
// (tests/meson.build: kernels_<set>, conv_<set>, with XJAX_KERNELS).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "internal.hpp"
#include "kernels/kernel_sets.hpp"
#include "xjax/xjax.hpp"

namespace {

namespace xj = xjax;
namespace kernels = xjax::detail::kernels;
using xjax::Array;
using xjax::DType;

/// Makes `name` the active set while alive; the set active before afterwards.
struct UsingSet {
  std::string before = kernels::active_kernel_set().name;
  explicit UsingSet(const std::string& name) { kernels::use_kernel_set(name); }
  ~UsingSet() { kernels::use_kernel_set(before); }
};

/// Deterministic values in [lo, hi) (a fixed linear congruential sequence: no dependence on the
/// kernels under test).
template <class T> Array values(std::int64_t n, double lo, double hi, std::uint32_t seed, xj::Shape shape = {}) {
  std::vector<T> v(static_cast<std::size_t>(n));
  std::uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<T>(lo + (hi - lo) * (s >> 8) / double(1u << 24));
  }
  return xj::array<T>(v, shape.empty() ? xj::Shape{n} : shape);
}

struct Result {
  std::string what;
  bool f32;
  std::vector<double> v;
};

/// C = A B of row-major A [m, k] and B [k, n], in double.
std::vector<double> product_in_double(const std::vector<double>& a, const std::vector<double>& b, std::int64_t m,
                                      std::int64_t n, std::int64_t k) {
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p) c[static_cast<std::size_t>(i * n + j)] += a[static_cast<std::size_t>(i * k + p)] * b[static_cast<std::size_t>(p * n + j)];
  return c;
}

template <class T> void add_battery(std::vector<Result>& out) {
  constexpr bool f32 = std::is_same_v<T, float>;
  const std::int64_t n = 1037;  // not a multiple of any batch width: every tail path runs
  const Array x = values<T>(n, -3.0, 3.0, 1), y = values<T>(n, 0.1, 4.0, 2);
  auto add = [&](std::string what, const Array& a) { out.push_back({std::move(what), f32, a.to_vector<double>()}); };
  add("exp", xj::exp(x));
  add("log", xj::log(y));
  add("tanh", xj::tanh(x));
  add("sin", xj::sin(x));
  add("logistic", xj::logistic(x));
  add("erf", xj::erf(x));
  add("lgamma", xj::lgamma(y));
  add("sqrt", xj::sqrt(y));
  add("atan2", xj::atan2(x, y));
  add("pow", xj::pow(y, x));
  add("add mul div", xj::div(xj::add(xj::mul(x, y), x), y));
  add("maximum", xj::maximum(x, xj::neg(y)));
  add("where", xj::where(xj::lt(x, y), x, y));
  const Array m = values<T>(37 * 29, -2.0, 2.0, 3, {37, 29});
  add("sum rows", xj::sum(m, {1}));
  add("sum cols", xj::sum(m, {0}));
  add("max", xj::max(m, {1}));
  add("argmax", xj::argmax(m, 0));
  // Products: small ones (the register-blocked loops where the set has them) and one past their
  // 128^3 limit (BLAS in every set),
  // each checked against the product in double here as well as against the other sets.
  for (auto [pm, pn, pk] : {std::array<std::int64_t, 3>{16, 32, 32}, {13, 48, 7}, {6, 16, 5}, {5, 8, 3}, {9, 64, 17},
                            {136, 128, 128}}) {
    const Array a = values<T>(pm * pk, -1.0, 1.0, 4, {pm, pk}), b = values<T>(pk * pn, -1.0, 1.0, 5, {pk, pn});
    const auto expected = product_in_double(a.to_vector<double>(), b.to_vector<double>(), pm, pn, pk);
    const std::string name = "matmul " + std::to_string(pm) + "x" + std::to_string(pk) + "x" + std::to_string(pn);
    for (int layout = 0; layout < 4; ++layout) {
      const bool ta = layout & 1, tb = layout & 2;
      const Array lhs = ta ? xj::transpose(a, {1, 0}) : a, rhs = tb ? xj::transpose(b, {1, 0}) : b;
      // Eager transposes are materialized: the product reads each stored layout (GEMM flags).
      const Array c = xj::dot_general(lhs, rhs, {ta ? 0 : 1}, {tb ? 1 : 0});
      const auto got = c.to_vector<double>();
      const double tol = f32 ? 1e-5 * static_cast<double>(pk) : 1e-13 * static_cast<double>(pk);
      for (std::size_t i = 0; i < got.size(); ++i) REQUIRE_MESSAGE(std::abs(got[i] - expected[i]) <= tol, name, " layout ", layout);
      add(name + " layout " + std::to_string(layout), c);
    }
  }
  const Array image = values<T>(2 * 9 * 11 * 8, -1.0, 1.0, 6, {2, 9, 11, 8});
  const Array kernel = values<T>(3 * 3 * 8 * 16, -1.0, 1.0, 7, {3, 3, 8, 16});
  add("conv NHWC", xj::conv_general_dilated(image, kernel, {1, 1}, "SAME", {}, {}, {"NHWC", "HWIO", "NHWC"}));
  const Array depthwise = values<T>(3 * 3 * 1 * 8, -1.0, 1.0, 8, {3, 3, 1, 8});
  add("conv depthwise", xj::conv_general_dilated(image, depthwise, {2, 1}, "SAME", {}, {}, {"NHWC", "HWIO", "NHWC"}, 8));
  add("max_pool", xj::max_pool(image, {3, 3}, {2, 2}, "SAME"));
  add("avg_pool", xj::avg_pool(image, {2, 2}));
  // A jitted chain: one fused elementwise step after a GEMM (a new jit: a plan of this set).
  auto layer = xj::jit([](const Array& h, const Array& w, const Array& b) { return xj::tanh(xj::matmul(h, w) + b) * 0.5; });
  const Array h = values<T>(16 * 32, -1.0, 1.0, 9, {16, 32}), w = values<T>(32 * 32, -0.3, 0.3, 10, {32, 32});
  add("jit layer", layer(h, w, values<T>(32, -0.1, 0.1, 11, {32})));
}

std::vector<Result> battery() {
  std::vector<Result> out;
  add_battery<float>(out);
  add_battery<double>(out);
  return out;
}

}  // namespace

TEST_CASE("kernel sets: build_info names the sets, and an unknown or unrunnable set is an error naming them") {
  const auto info = xj::build_info();
  REQUIRE(!info.kernel_sets.empty());
  REQUIRE(!info.runnable_sets.empty());
  CHECK(info.kernel_set == kernels::active_kernel_set().name);
  bool listed = false;
  for (const auto& s : info.runnable_sets) listed = listed || s == info.kernel_set;
  CHECK(listed);
  try {
    kernels::use_kernel_set("sse1");
    FAIL("no error");
  } catch (const xj::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("'sse1'") != std::string::npos);
    CHECK(what.find(info.kernel_sets.front()) != std::string::npos);
  }
  CHECK(xj::build_info().kernel_set == info.kernel_set);  // unchanged by the failed call
#if defined(XJAX_KERNEL_DISPATCH)
  CHECK(info.kernel_sets == std::vector<std::string>{"avx512", "avx2", "baseline"});
#endif
  // OpenBLAS's kernels are named and their width known for the cores of Debian's OpenBLAS; they
  // are narrower than the CPU where the CPU's widest vectors are wider, and xjax's loops take the
  // large products where the active set's batches are wider than them
  CHECK(!info.blas_core.empty());
  const std::string blas = info.blas_core + " (" + std::to_string(info.blas_vector_bytes) + "-byte vectors" +
                           (info.blas_below_cpu_width ? ", narrower than this CPU's" : "") +
                           (info.own_large_products ? "; xjax's loops run the large products" : "") + ")";
  MESSAGE("OpenBLAS kernels: ", blas);
#if defined(__x86_64__)
  if (info.blas_core == "SkylakeX" || info.blas_core == "Cooperlake" || info.blas_core == "SapphireRapids")
    CHECK(info.blas_vector_bytes == 64);
  if (info.blas_core == "Haswell" || info.blas_core == "Zen" || info.blas_core == "Sandybridge")
    CHECK(info.blas_vector_bytes == 32);
  // the SSE cores, and AMD's AVX ones whose OpenBLAS kernels use 16-byte registers
  for (const char* sse : {"Prescott", "Nehalem", "Opteron_SSE3", "Bulldozer", "Piledriver", "Steamroller", "Excavator"})
    if (info.blas_core == sse) CHECK(info.blas_vector_bytes == 16);
  // a core not known (0) is taken to be as wide as any set: BLAS keeps the products
  const bool known = info.blas_vector_bytes > 0;
  const int cpu_bytes = __builtin_cpu_supports("avx512f") ? 64 : __builtin_cpu_supports("avx") ? 32 : 16;
  CHECK(info.cpu_vector_bytes == cpu_bytes);
  CHECK(info.blas_below_cpu_width == (known && info.blas_vector_bytes < cpu_bytes));
  const int set_bytes = info.kernel_set == "avx512" ? 64 : info.kernel_set == "avx2" ? 32 : 0;  // baseline: no product loops
  if (info.kernel_set != "native") CHECK(info.own_large_products == (known && set_bytes > info.blas_vector_bytes));
#else
  CHECK(info.cpu_vector_bytes == 16);   // NEON
  CHECK(info.blas_vector_bytes == 0);  // not read off x86-64
  CHECK(!info.blas_below_cpu_width);
  CHECK(!info.own_large_products);
#endif
}

TEST_CASE("kernel sets: every set this CPU runs computes what the others compute, to rounding") {
  const auto runnable = xj::build_info().runnable_sets;
  MESSAGE("kernel sets run here: ", runnable.size());
  std::vector<Result> reference;
  std::string reference_set;
  for (const auto& name : runnable) {
    UsingSet using_set(name);
    CHECK(xj::build_info().kernel_set == name);
    auto results = battery();
    if (reference.empty()) {
      reference = std::move(results);
      reference_set = name;
      continue;
    }
    REQUIRE(results.size() == reference.size());
    for (std::size_t r = 0; r < results.size(); ++r) {
      const auto& a = reference[r];
      const auto& b = results[r];
      REQUIRE(a.v.size() == b.v.size());
      // Sets differ in FMA contraction and in the batch width of reductions' partial sums; the
      // math functions are the same algorithms.
      const double tol = a.f32 ? 4e-6 : 1e-14;
      std::size_t worst = 0;
      double worst_err = 0;
      for (std::size_t i = 0; i < a.v.size(); ++i) {
        const double err = std::abs(a.v[i] - b.v[i]) / (1.0 + std::abs(a.v[i]));
        if (!(err <= worst_err)) {
          worst_err = err;
          worst = i;
        }
      }
      CHECK_MESSAGE(worst_err <= tol, a.what, (a.f32 ? " f32" : " f64"), ": set ", name, " differs from ",
                    reference_set, " at ", worst, ": ", b.v[worst], " vs ", a.v[worst]);
    }
  }
}

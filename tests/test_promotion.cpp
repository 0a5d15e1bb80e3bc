// test_promotion.cpp: JAX's type promotion (issue 27): promote_types and result_type against
// JAX's table (jnp.promote_types with x64 enabled, as JAX's "Type promotion semantics" page
// prints it), binary operations that promote (convert_element_type in the jaxpr where JAX puts
// it, values against plain loops in double), weakly typed C++ numbers, strict mode, and
// gradients that come back in the primal's dtype.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <xjax/xjax.hpp>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

// JAX's table restricted to xjax's dtypes; "i*" and "f*" are weakly typed Python scalars (here C++
// numbers), which resolve to xjax's defaults i32 and f32 when nothing strong is present.
struct Row {
  const char* a;
  const char* b;
  const char* want;
};
const Row kTable[] = {
    {"bool", "bool", "bool"}, {"bool", "i32", "i32"}, {"bool", "i64", "i64"}, {"bool", "u32", "u32"},
    {"bool", "f32", "f32"},   {"bool", "f64", "f64"}, {"bool", "i*", "i32"},  {"bool", "f*", "f32"},
    {"i32", "i32", "i32"},    {"i32", "i64", "i64"},  {"i32", "u32", "i64"},  {"i32", "f32", "f32"},
    {"i32", "f64", "f64"},    {"i32", "i*", "i32"},   {"i32", "f*", "f32"},   {"i64", "i64", "i64"},
    {"i64", "u32", "i64"},    {"i64", "f32", "f32"},  {"i64", "f64", "f64"},  {"i64", "i*", "i64"},
    {"i64", "f*", "f32"},     {"u32", "u32", "u32"},  {"u32", "f32", "f32"},  {"u32", "f64", "f64"},
    {"u32", "i*", "u32"},     {"u32", "f*", "f32"},   {"f32", "f32", "f32"},  {"f32", "f64", "f64"},
    {"f32", "i*", "f32"},     {"f32", "f*", "f32"},   {"f64", "f64", "f64"},  {"f64", "i*", "f64"},
    {"f64", "f*", "f64"},     {"i*", "i*", "i32"},    {"i*", "f*", "f32"},    {"f*", "f*", "f32"},
    // the narrow dtypes and u64 (JAX's table; its f* between two strong types is x64's f64)
    {"bool", "u8", "u8"},     {"bool", "u16", "u16"}, {"bool", "u64", "u64"}, {"bool", "i8", "i8"},
    {"bool", "i16", "i16"},   {"bool", "bf16", "bf16"}, {"bool", "f16", "f16"},
    {"u8", "u8", "u8"},       {"u8", "u16", "u16"},   {"u8", "u32", "u32"},   {"u8", "u64", "u64"},
    {"u8", "i8", "i16"},      {"u8", "i16", "i16"},   {"u8", "i32", "i32"},   {"u8", "i64", "i64"},
    {"u8", "bf16", "bf16"},   {"u8", "f16", "f16"},   {"u8", "f32", "f32"},   {"u8", "f64", "f64"},
    {"u8", "i*", "u8"},       {"u8", "f*", "f32"},
    {"u16", "u16", "u16"},    {"u16", "u32", "u32"},  {"u16", "u64", "u64"},  {"u16", "i8", "i32"},
    {"u16", "i16", "i32"},    {"u16", "i32", "i32"},  {"u16", "i64", "i64"},  {"u16", "bf16", "bf16"},
    {"u16", "f16", "f16"},    {"u16", "f32", "f32"},  {"u16", "i*", "u16"},   {"u16", "f*", "f32"},
    {"u32", "u64", "u64"},    {"u32", "i8", "i64"},   {"u32", "i16", "i64"},  {"u32", "bf16", "bf16"},
    {"u32", "f16", "f16"},
    {"u64", "u64", "u64"},    {"u64", "i8", "f64"},   {"u64", "i16", "f64"},  {"u64", "i32", "f64"},
    {"u64", "i64", "f64"},    {"u64", "bf16", "bf16"}, {"u64", "f16", "f16"}, {"u64", "f32", "f32"},
    {"u64", "f64", "f64"},    {"u64", "i*", "u64"},   {"u64", "f*", "f32"},
    {"i8", "i8", "i8"},       {"i8", "i16", "i16"},   {"i8", "i32", "i32"},   {"i8", "i64", "i64"},
    {"i8", "bf16", "bf16"},   {"i8", "f16", "f16"},   {"i8", "f32", "f32"},   {"i8", "i*", "i8"},
    {"i8", "f*", "f32"},
    {"i16", "i16", "i16"},    {"i16", "i32", "i32"},  {"i16", "i64", "i64"},  {"i16", "bf16", "bf16"},
    {"i16", "f16", "f16"},    {"i16", "i*", "i16"},   {"i16", "f*", "f32"},
    {"i32", "bf16", "bf16"},  {"i32", "f16", "f16"},  {"i64", "bf16", "bf16"}, {"i64", "f16", "f16"},
    {"bf16", "bf16", "bf16"}, {"bf16", "f16", "f32"}, {"bf16", "f32", "f32"}, {"bf16", "f64", "f64"},
    {"bf16", "i*", "bf16"},   {"bf16", "f*", "bf16"},
    {"f16", "f16", "f16"},    {"f16", "f32", "f32"},  {"f16", "f64", "f64"},  {"f16", "i*", "f16"},
    {"f16", "f*", "f16"},
};

xj::detail::TypeOperand operand(const std::string& name) {
  if (name == "i*") return {xj::i32, true, true};  // as type_operand gives a C++ integer
  if (name == "f*") return {xj::f32, true, false};
  for (xj::DType d : xj::kAllDtypes)
    if (name == xj::dtype_name(d)) return {d};
  FAIL("unknown dtype " << name);
  return {};
}

xj::Array bools(const std::vector<std::int32_t>& v) {
  return xj::astype(xj::array<std::int32_t>(v, {static_cast<std::int64_t>(v.size())}), xj::bool_);
}

std::vector<std::int32_t> ints(const xj::Array& x) { return xj::astype(x, xj::i32).to_vector<std::int32_t>(); }

}  // namespace

TEST_CASE("promotion: every pair of dtypes and weak scalars promotes as JAX's table, both ways") {
  for (const auto& r : kTable) {
    CAPTURE(std::string(r.a) + " + " + r.b);
    const xj::detail::TypeOperand ab[] = {operand(r.a), operand(r.b)}, ba[] = {operand(r.b), operand(r.a)};
    CHECK(std::string(xj::dtype_name(xj::detail::result_type_of(ab))) == r.want);
    CHECK(std::string(xj::dtype_name(xj::detail::result_type_of(ba))) == r.want);
    if (!ab[0].weak && !ab[1].weak) {
      CHECK(std::string(xj::dtype_name(xj::promote_types(ab[0].dtype, ab[1].dtype))) == r.want);
      CHECK(std::string(xj::dtype_name(xj::promote_types(ab[1].dtype, ab[0].dtype))) == r.want);
    }
  }
  // result_type over arrays, dtypes and C++ numbers.
  xj::Array i = xj::array<std::int32_t>({1, 2}, {2});
  CHECK(xj::result_type(i, 2) == xj::i32);
  CHECK(xj::result_type(i, 2.0) == xj::f32);
  CHECK(xj::result_type(i, xj::u32) == xj::i64);
  CHECK(xj::result_type(xj::f32, i, xj::f64) == xj::f64);
  CHECK(xj::result_type(2, 2.5) == xj::f32);
}

TEST_CASE("promotion: mixed binary operations insert convert_element_type where JAX does and compute in the promoted type") {
  xj::Array x = xj::array<float>({0.1f, 0.2f, 0.3f}, {3});
  xj::Array y = xj::array<double>({1.0 / 3.0, 2.0 / 3.0, 1.0}, {3});
  auto j = xj::make_jaxpr([](const xj::Array& a, const xj::Array& b) { return a + b; })(x, y);
  CHECK(str(j) ==
        "{ lambda ; a:f32[3] b:f64[3]. let\n"
        "    c:f64[3] = convert_element_type[new_dtype=float64 weak_type=False] a\n"
        "    d:f64[3] = add c b\n"
        "  in (d,) }");
  xj::Array z = x + y;
  REQUIRE(z.dtype() == xj::f64);
  const auto xs = x.to_vector<float>();
  const auto ys = y.to_vector<double>();
  const auto zs = z.to_vector<double>();
  for (std::size_t k = 0; k < 3; ++k) CHECK(zs[k] == static_cast<double>(xs[k]) + ys[k]);  // exact in f64
  // The repro: an f32 scalar times an f64 array.
  CHECK((xj::scalar(0.7) * y).dtype() == xj::f64);
  // i32 + u32 -> i64 (values beyond i32 and u32 ranges kept).
  xj::Array a = xj::array<std::int32_t>({-5, 7}, {2});
  xj::Array b = xj::array<std::uint32_t>({4000000000u, 1u}, {2});
  xj::Array s = a + b;
  REQUIRE(s.dtype() == xj::i64);
  CHECK(s.to_vector<std::int64_t>() == std::vector<std::int64_t>{3999999995LL, 8});
  // where, concatenate and dot_general promote too.
  xj::Array w = xj::where(bools({1, 0, 1}), x, y);
  REQUIRE(w.dtype() == xj::f64);
  CHECK(w.to_vector<double>() == std::vector<double>{static_cast<double>(xs[0]), ys[1], static_cast<double>(xs[2])});
  xj::Array c = xj::concatenate({x, y});
  REQUIRE(c.dtype() == xj::f64);
  CHECK(c.shape() == xj::Shape{6});
  xj::Array d = xj::dot(x, y);
  REQUIRE(d.dtype() == xj::f64);
  double want = 0;
  for (std::size_t k = 0; k < 3; ++k) want += static_cast<double>(xs[k]) * ys[k];
  CHECK(d.item<double>() == doctest::Approx(want).epsilon(1e-15));
}

TEST_CASE("promotion: C++ numbers are weakly typed: integers adopt the array's dtype, floats make integer operations float") {
  xj::Array i = xj::array<std::int32_t>({1, 2, 3}, {3});
  xj::Array half = i * 0.5;  // was truncated to i32 zeros before promotion
  REQUIRE(half.dtype() == xj::f32);
  CHECK(half.to_vector<float>() == std::vector<float>{0.5f, 1.0f, 1.5f});
  xj::Array next = i + 1;
  REQUIRE(next.dtype() == xj::i32);
  CHECK(next.to_vector<std::int32_t>() == std::vector<std::int32_t>{2, 3, 4});
  xj::Array u = xj::array<std::uint32_t>({1u, 2u}, {2});
  CHECK((u * 2).dtype() == xj::u32);
  xj::Array flags = bools({1, 0});
  xj::Array counted = flags + 1;
  REQUIRE(counted.dtype() == xj::i32);
  CHECK(counted.to_vector<std::int32_t>() == std::vector<std::int32_t>{2, 1});
  xj::Array f64s = xj::array<double>({1.5, 2.5}, {2});
  CHECK((f64s * 2.0f).dtype() == xj::f64);  // a float scalar adopts a float array's dtype
  CHECK((2 - f64s).dtype() == xj::f64);
  CHECK(ints(i < 1.5) == std::vector<std::int32_t>{1, 0, 0});  // compared as floats
  CHECK(xj::pow(i, 0.5).dtype() == xj::f32);
  // A traced C++ number adopts the array's dtype; astype makes it strongly typed, even to its own
  // dtype (JAX's rule: a convert_element_type with weak_type=False in the jaxpr, so the same jit
  // called alone or inside an enclosing trace agrees).
  xj::Array f32s = xj::array<float>({1.5f, 2.5f}, {2});
  auto by_weak = [](const xj::Array& a, const xj::Array& k) { return a * k; };
  CHECK(xj::jit(by_weak)(f32s, 2.0).dtype() == xj::f32);
  auto by_f64 = [](const xj::Array& a, const xj::Array& k) { return a * xj::astype(k, xj::f64); };
  CHECK(xj::jit(by_f64)(f32s, 2.0).to_vector<double>() == std::vector<double>{3.0, 5.0});  // f64, the same-dtype conversion run
  CHECK(xj::jit([&](const xj::Array& a) { return a * xj::jit(by_f64)(f32s, 2.0); })(f32s).dtype() == xj::f64);
  // A traced integer converted by promotion to meet a double stays weak, in the jaxpr too: an f16
  // array times it is f16 called alone and inside an enclosing jit (it had been f32 there).
  const xj::Array h = xj::astype(f32s, xj::f16);
  auto twice = xj::jit([](const xj::Array& k) { return k * 2.0; });
  CHECK((h * twice(3)).dtype() == xj::f16);
  CHECK(xj::jit([&](const xj::Array& a) { return a * twice(3); })(h).dtype() == xj::f16);
  // where's cases decide its weak type, not the (strong bool) selector (JAX's select_n rule).
  auto chosen = xj::jit([](const xj::Array& k) { return xj::where(k > 1, k, 2.5); });
  CHECK((h * chosen(3)).dtype() == xj::f16);
  CHECK(xj::jit([&](const xj::Array& a) { return a * chosen(3); })(h).dtype() == xj::f16);
  CHECK(xj::astype(h * chosen(3), xj::f64).to_vector<double>() == std::vector<double>{4.5, 7.5});
}

TEST_CASE("promotion: strict mode (a scope) gives the TypeError naming both dtypes, and ends with its scope") {
  xj::Array x = xj::ones({2}, xj::f32), y = xj::ones({2}, xj::f64);
  {
    xj::DtypePromotion strict;
    CHECK(xj::promotion_mode() == xj::PromotionMode::strict);
    std::string m;
    try {
      (void)(x + y);
    } catch (const xj::TypeError& e) {
      m = e.what();
    }
    CHECK(m.find("operands of dtypes f32 and f64") != std::string::npos);  // said "f32 and f32" (review finding)
    CHECK(m.find("strict") != std::string::npos);
    CHECK_THROWS_AS((void)xj::concatenate({x, y}), xj::TypeError);
    CHECK((x * 2.0).dtype() == xj::f32);  // a C++ number still adopts the array's dtype
    {
      xj::DtypePromotion standard(xj::PromotionMode::standard);
      CHECK((x + y).dtype() == xj::f64);
    }
    CHECK_THROWS_AS((void)(x + y), xj::TypeError);
  }
  CHECK(xj::promotion_mode() == xj::PromotionMode::standard);
  CHECK((x + y).dtype() == xj::f64);
}

TEST_CASE("promotion: gradients come back in the primal's dtype") {
  xj::Array w = xj::array<double>({0.25, -1.5, 2.0}, {3});
  auto loss = [&](const xj::Array& x) { return xj::sum(xj::sin(x) * w); };  // f32 x promoted to f64
  xj::Array x = xj::array<float>({0.5f, 1.0f, -2.0f}, {3});
  xj::Array g = xj::grad(loss)(x);
  REQUIRE(g.dtype() == xj::f32);
  const auto xs = x.to_vector<float>();
  const auto ws = w.to_vector<double>();
  const auto gs = g.to_vector<float>();
  for (std::size_t k = 0; k < 3; ++k)  // d/dx sum(sin(x) w) = cos(x) w, rounded once to f32
    CHECK(gs[k] == doctest::Approx(std::cos(static_cast<double>(xs[k])) * ws[k]).epsilon(1e-6));
  // Under vmap and jit too.
  xj::Array batch = xj::stack({x, x * 2.0f});
  xj::Array gb = xj::jit(xj::vmap(xj::grad(loss)))(batch);
  REQUIRE(gb.dtype() == xj::f32);
  check_close(gb[0], g, 1e-6);
}

// Regression (fuzz seed 1921608): CSE merged the strong zero of an unused input's gradient with a
// weakly typed zero of the same value (logaddexp's where(..., 0.0)), so the gradient came back
// weakly typed, and a C++ number multiplying it under jit made it f64.
TEST_CASE("promotion: an unused input's zero gradient stays strongly typed beside a weak zero of the same value") {
  xj::Array x = xj::array<float>({0.5f, 0.25f}, {1, 2});
  auto loss = [](const std::vector<xj::Array>& a) { return xj::sum(xj::logaddexp(a[1], a[1])); };
  auto scaled_grad = [&](const xj::Array& a, const xj::Array& k) {
    return xj::grad(loss)(std::vector<xj::Array>{a, a}).at(0) * k;
  };
  xj::Array g = xj::jit(scaled_grad)(x, 2.0);  // 2.0: a weakly typed f64, adopting f32
  CHECK(g.dtype() == xj::f32);
  CHECK(xj::max(xj::abs(g)).item<double>() == 0.0);
  CHECK(xj::grad(loss)(std::vector<xj::Array>{x, x}).at(0).dtype() == xj::f32);
}

TEST_CASE("promotion regressions from the twenty-seventh session's review: jnp's float functions, true division, powers and bools") {
  const xj::Array i = xj::array<std::int32_t>({-2, 0, 3}, {3});
  // exp / sqrt / sin ... of integers and bools compute in f64 (jnp); they raised a TypeError
  const xj::Array e = xj::exp(i);
  CHECK(e.dtype() == xj::f64);
  const auto ev = e.to_vector<double>();
  CHECK(ev[0] == std::exp(-2.0));
  CHECK(ev[2] == std::exp(3.0));
  CHECK(xj::sqrt(xj::array<std::uint8_t>({4, 9}, {2})).to_vector<double>() == std::vector<double>{2.0, 3.0});
  CHECK(xj::floor(i).dtype() == xj::i32);  // floor / ceil of integers: the integers themselves
  CHECK(xj::reciprocal(xj::array<std::int32_t>({2, 4}, {2})).to_vector<double>() == std::vector<double>{0.5, 0.25});
  // pow by a C++ integer: integer_pow in the base's dtype (3037000499^2 exact in i64; it went through f32)
  const xj::Array big = xj::array<std::int64_t>({3037000499LL}, {1});
  CHECK(xj::pow(big, 2).dtype() == xj::i64);
  CHECK(xj::pow(big, 2).to_vector<std::int64_t>() == std::vector<std::int64_t>{3037000499LL * 3037000499LL});
  CHECK_THROWS_AS((void)xj::pow(big, -1), xj::TypeError);  // as JAX's integer_pow
  CHECK(xj::pow(xj::astype(i, xj::f32), 2).dtype() == xj::f32);
  // pow of two integer arrays: integer powers (they raised); checked against a loop
  const xj::Array ex = xj::array<std::int64_t>({3, 5, -1}, {3});
  const auto pv = xj::pow(xj::astype(i, xj::i64), ex).to_vector<std::int64_t>();
  CHECK(pv == std::vector<std::int64_t>{-8, 0, 0});
  CHECK(xj::jit([](const xj::Array& a, const xj::Array& b) { return xj::pow(a, b); })(xj::astype(i, xj::i64), ex)
            .to_vector<std::int64_t>() == pv);
  // bool + bool is logical or, bool * bool logical and (jnp)
  const xj::Array t = xj::astype(xj::array<std::uint8_t>({0, 0, 1, 1}, {4}), xj::bool_);
  const xj::Array u = xj::astype(xj::array<std::uint8_t>({0, 1, 0, 1}, {4}), xj::bool_);
  CHECK((t + u).dtype() == xj::bool_);
  CHECK(xj::astype(t + u, xj::i32).to_vector<int>() == std::vector<int>{0, 1, 1, 1});
  CHECK(xj::astype(t * u, xj::i32).to_vector<int>() == std::vector<int>{0, 0, 0, 1});
  // strict mode: a C++ float with an integer array, or an integer with a bool array, has no join
  // (0.5 times an i32 array was truncated to 0)
  {
    const xj::DtypePromotion strict;
    CHECK_THROWS_AS((void)(i * 0.5), xj::TypeError);
    CHECK_THROWS_AS((void)(t + 1), xj::TypeError);
    CHECK((i * 2).dtype() == xj::i32);
    CHECK((xj::astype(i, xj::f32) * 2).dtype() == xj::f32);  // an integer joins a float array
  }
}

TEST_CASE("promotion: three or more operands join at once (JAX's promote_dtypes), in any order") {
  // i64 and u64 meet at the weak float f*, which f32 absorbs: f32 (folding pairwise gave f64 when
  // i64 and u64 came first)
  const xj::Array i = xj::array<std::int64_t>({1}, {1});
  const xj::Array u = xj::array<std::uint64_t>({2}, {1});
  const xj::Array f = xj::array<float>({3.f}, {1});
  CHECK(xj::result_type(i, u, f) == xj::f32);
  CHECK(xj::concatenate({i, u, f}).dtype() == xj::f32);
  CHECK(xj::concatenate({f, i, u}).dtype() == xj::f32);
  CHECK(xj::concatenate({u, f, i}).to_vector<float>() == std::vector<float>{2, 3, 1});
  CHECK(xj::stack({i, u, xj::astype(f, xj::bf16)}).dtype() == xj::bf16);
  CHECK(xj::concatenate({i, u}).dtype() == xj::f64);  // the two alone: JAX's canonical float
}

TEST_CASE("promotion regressions from the twenty-seventh session's diff review: C++ bools, gelu / rms_norm of integers, exact integer exponents") {
  const xj::Array b = xj::array<std::int32_t>({1, 0}, {2}) > 0;
  // a C++ bool is a strong bool, as a Python bool in JAX (it converted through double: f32 [2, 1])
  CHECK((b + true).dtype() == xj::bool_);
  CHECK(xj::astype(b + true, xj::i32).to_vector<int>() == std::vector<int>{1, 1});
  CHECK((xj::astype(b, xj::i8) + true).dtype() == xj::i8);
  CHECK(xj::where(b, b, true).dtype() == xj::bool_);
  CHECK((xj::array<float>({2.0f}, {1}) * true).dtype() == xj::f32);
  CHECK(xj::result_type(b, true) == xj::bool_);
  {
    const xj::DtypePromotion strict;
    CHECK(xj::astype(b == true, xj::i32).to_vector<int>() == std::vector<int>{1, 0});
  }
  // gelu of integers in f64 (its constants rounded to the integer dtype gave zeros)
  const xj::Array i = xj::array<std::int32_t>({-2, 0, 3}, {3});
  const auto exact = xj::gelu(i, false).to_vector<double>();
  for (std::size_t k = 0; k < 3; ++k) {
    const double v = std::vector<double>{-2, 0, 3}[k];
    CHECK(exact[k] == doctest::Approx(v * 0.5 * std::erfc(-v / std::sqrt(2.0))));
  }
  CHECK(xj::gelu(i).to_vector<double>()[2] == doctest::Approx(3.0 * 0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * (3.0 + 0.044715 * 27.0)))));
  // rms_norm of integers in f64 (x^2 wrapped in i8: [25, -25])
  const auto rn = xj::rms_norm(xj::astype(xj::array<std::int32_t>({100, -100}, {2}), xj::i8)).to_vector<double>();
  CHECK(rn[0] == doctest::Approx(1.0));
  CHECK(rn[1] == doctest::Approx(-1.0));
  // a float base with an integer exponent array: the exponent stays exact (257 became 256 in bf16)
  const xj::Array base = xj::astype(xj::array<float>({-1.0f, 1.0078125f}, {2}), xj::bf16);
  const xj::Array p = xj::pow(base, xj::array<std::int32_t>({257, 257}, {2}));
  CHECK(p.dtype() == xj::bf16);
  const auto pv = xj::astype(p, xj::f64).to_vector<double>();
  CHECK(pv[0] == -1.0);
  CHECK(pv[1] == doctest::Approx(std::pow(1.0078125, 257.0)).epsilon(0.01));
  CHECK(xj::pow(xj::array<float>({-1.0f}, {1}), xj::array<std::int32_t>({16777217}, {1})).to_vector<float>()[0] == -1.0f);
  // pow of a bool array by a C++ integer: the bools as integers, in strict mode too, big exponents too
  CHECK(xj::astype(xj::pow(b, std::int64_t{1} << 40), xj::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  {
    const xj::DtypePromotion strict;
    CHECK(xj::astype(xj::pow(b, 2), xj::i64).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  }
}

TEST_CASE("promotion: C++ bools in clamp and pow are bools, and pointers, long doubles and enums do not become bools (late review)") {
  const xj::Array i = xj::array<std::int32_t>({-1, 0, 2}, {3});
  const xj::Array b = xj::astype(xj::array<std::uint8_t>({1, 0, 1}, {3}), xj::bool_);
  CHECK(xj::clamp(false, i, true).dtype() == xj::i32);  // a strong bool joins the array's dtype (it made f32)
  CHECK(xj::clamp(false, i, true).to_vector<int>() == std::vector<int>{0, 0, 1});
  CHECK(xj::clamp(0, i, true).dtype() == xj::i32);
  CHECK(xj::pow(i, true).dtype() == xj::i32);  // jnp.power takes operator.index(True) = 1
  CHECK(xj::pow(i, true).to_vector<int>() == std::vector<int>{-1, 0, 2});
  CHECK(xj::astype(xj::pow(b, false), xj::i32).to_vector<int>() == std::vector<int>{1, 1, 1});
  static_assert(!std::is_convertible_v<const char*, xj::detail::Scalar>);
  static_assert(!std::is_convertible_v<int*, xj::detail::Scalar>);
  enum Level { kLow = 2, kHigh = 5 };
  const xj::Array f = xj::array<float>({1.0f, 2.0f}, {2});
  CHECK((f * kHigh).to_vector<float>() == std::vector<float>{5.0f, 10.0f});
  const long double k = 2.5L;
  CHECK((f * k).to_vector<float>() == std::vector<float>{2.5f, 5.0f});
  // pad's bounds cancel in either order (the transpose pads the other way); past 2^61 an error
  constexpr std::int64_t big = std::int64_t{1} << 61;
  const xj::Array x = xj::arange(5, xj::f32);
  CHECK(xj::pad(x, xj::scalar(0.0f), {big}, {-big}).to_vector<float>() == std::vector<float>(5, 0.0f));
  CHECK(xj::pad(x, xj::scalar(0.0f), {-big}, {big}).to_vector<float>() == std::vector<float>(5, 0.0f));
  CHECK_THROWS_AS((void)xj::pad(x, xj::scalar(0.0f), {-std::numeric_limits<std::int64_t>::max()}, {std::numeric_limits<std::int64_t>::max()}), xj::ShapeError);
}

TEST_CASE("C++ numbers in integer arrays, twenty-eighth session's hunt: INT64_MAX keeps its sign, a float fill saturates as astype, an integer fill is exact and wraps") {
  constexpr std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const xj::Array i = xj::array<std::int64_t>({-5, 7});
  // INT64_MAX rounds to 2^63 as a double; it converted to INT64_MIN (the comparison flipped)
  CHECK((i < big).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{1, 1});
  CHECK(xj::jit([](const xj::Array& x) { return x < std::numeric_limits<std::int64_t>::max(); })(i).to_vector<std::uint8_t>() ==
        std::vector<std::uint8_t>{1, 1});
  CHECK(xj::clamp(0, i, big).to_vector<std::int64_t>() == std::vector<std::int64_t>{0, 7});
  CHECK(xj::where(i > 0, i, big).to_vector<std::int64_t>() == std::vector<std::int64_t>{big, 7});
  // a C++ integer fill is exact (past 2^53 too) and wraps to the dtype's width (numpy's astype of an int)
  CHECK(xj::full({1}, big, xj::i64).item<std::int64_t>() == big);
  CHECK(xj::full({1}, big - 1, xj::i64).item<std::int64_t>() == big - 1);
  CHECK(xj::full({1}, std::numeric_limits<std::uint64_t>::max(), xj::u64).item<std::uint64_t>() ==
        std::numeric_limits<std::uint64_t>::max());
  CHECK(xj::full({1}, -1, xj::u32).item<std::uint32_t>() == 4294967295u);
  CHECK(xj::scalar(300, xj::u8).item<std::uint8_t>() == 44);
  CHECK(xj::scalar(2, xj::bool_).item<std::uint8_t>() == 1);
  CHECK(xj::scalar(-3, xj::f16).item<double>() == -3.0);
  CHECK(xj::arange(300, xj::u8).to_vector<std::uint8_t>()[299] == 43);  // iota wraps
  // a floating-point fill converts as astype: truncated, saturated, NaN to 0 (it wrapped: 300.7 -> 44)
  for (double v : {-1.5, 300.7, 3e9, -3e9, 1e19, -1e19, std::nan("")}) {
    for (xj::DType d : {xj::u8, xj::i8, xj::i32, xj::u32, xj::i64, xj::u64}) {
      CAPTURE(v);
      CAPTURE(xj::dtype_name(d));
      const xj::Array expected = xj::astype(xj::scalar(v, xj::f64), d);
      CHECK(xj::full({1}, v, d).to_vector<double>() == expected.to_vector<double>());
    }
  }
  CHECK(xj::full({1}, -1.5, xj::u8).item<std::uint8_t>() == 0);
  CHECK(xj::full({1}, 300.7, xj::u8).item<std::uint8_t>() == 255);
  // at().set / max / min with a C++ float on an integer array: converted as astype (JAX's scatter)
  const xj::Array x = xj::array<std::int32_t>({1, 2});
  CHECK(xj::at(x, 0).set(3e9).to_vector<std::int32_t>() == std::vector<std::int32_t>{2147483647, 2});
  CHECK(xj::at(x, 0).max(3e9).to_vector<std::int32_t>() == std::vector<std::int32_t>{2147483647, 2});
  const xj::Array u = xj::array<std::uint8_t>({1, 2});
  CHECK(xj::at(u, 0).set(-2.7).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 2});
  CHECK(xj::at(u, 0).min(-1.0).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{0, 2});
  // with a C++ integer: exact, wrapping as jnp converts its int array (diff review: it saturated)
  const xj::Array i8 = xj::array<std::int8_t>({-128, 127});
  CHECK(xj::at(i8, 0).set(1000).to_vector<std::int8_t>() == std::vector<std::int8_t>{-24, 127});
  const xj::Array u2 = xj::array<std::uint8_t>({250, 5});
  CHECK(xj::at(u2, 0).set(-1).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{255, 5});
  CHECK(xj::at(u2, 0).add(300).to_vector<std::uint8_t>() == std::vector<std::uint8_t>{38, 5});
  CHECK(xj::at(x, 0).set(3000000000LL).to_vector<std::int32_t>() == std::vector<std::int32_t>{-1294967296, 2});
  CHECK(xj::at(xj::array<std::int64_t>({0}), 0).set(big).item<std::int64_t>() == big);
  CHECK(xj::at(xj::array<float>({0.f}), 0).add(3).item<float>() == 3.f);
}

TEST_CASE("weak types, thirty-second session's sweep: reductions are strong, a weak kind lift stays weak, result_type and make_jaxpr read weak arrays, fori_loop's counter") {
  const xj::Array h = xj::astype(xj::array<float>({1.0f, 2.0f}, {2}), xj::f16);
  const xj::Array b8 = xj::astype(xj::array<float>({1.0f, 2.0f}, {2}), xj::i8);
  // jnp's reductions convert their operand to its own dtype first: sum / prod / max / min of a
  // traced C++ number are strong, so they do not adopt an f16 or i8 array's dtype (they did)
  auto sum_plus = [&](const xj::Array& k) { return xj::sum(k) + h; };
  CHECK(xj::jit(sum_plus)(3.0).dtype() == xj::f64);
  CHECK(xj::jit([&](const xj::Array& k) { return xj::prod(k) + h; })(3.0).dtype() == xj::f64);
  CHECK(xj::jit([&](const xj::Array& k) { return xj::max(k) + b8; })(3).dtype() == xj::i64);
  CHECK(xj::jit([&](const xj::Array& k) { return xj::min(k) + b8; })(3).dtype() == xj::i64);
  CHECK(xj::jit([&](const xj::Array& k) { return k + h; })(3.0).dtype() == xj::f16);  // the value itself stays weak
  CHECK(xj::jit(sum_plus)(3.0).to_vector<double>() == std::vector<double>{4.0, 5.0});
  // A weak operand that lifts the strong ones' kind (an integer or bool array times a C++ double,
  // a bool array plus a C++ integer) gives a weak result (JAX's lattice: the join is its weak
  // float or integer), which then adopts an f16 or i8 array's dtype (it was strong f32 / i32)
  const xj::Array n = xj::array<std::int32_t>({1, 3}, {2});
  const xj::Array flags = xj::array<float>({1.0f, 0.0f}, {2}) > 0.5f;
  CHECK((n * 0.5).dtype() == xj::f32);
  CHECK(((n * 0.5) + h).dtype() == xj::f16);
  CHECK(((n * 0.5) + h).to_vector<float>() == std::vector<float>{1.5f, 3.5f});
  CHECK(((flags * 0.5) + h).dtype() == xj::f16);
  CHECK(((flags + 3) + b8).dtype() == xj::i8);
  CHECK(((flags + 3) + b8).to_vector<std::int8_t>() == std::vector<std::int8_t>{5, 5});
  CHECK(((n + 3) + b8).dtype() == xj::i32);  // no lift: an i32 array plus 3 stays strong i32
  CHECK(xj::jit([](const xj::Array& a, const xj::Array& c) { return a * 0.5 + c; })(n, h).dtype() == xj::f16);
  // A call's outputs take its body's weak types (JAX's), not the standard rule over its operands:
  // a reduction in the body is strong, so checkpoint(max(x) * 100) of a weak i32 stays i32 beside
  // an i8 array (it became i8 and wrapped 200 to -56), and the composites whose JAX versions are
  // strong (gelu's constants, softmax's and the norms' strong max / mean) stay strong beside bf16
  const xj::Array mask = xj::full({200}, 1.0) > 0.5f;
  const xj::Array i8_zero = xj::astype(xj::zeros({1}), xj::i8);
  auto peak = [](const xj::Array& x) { return xj::max(x) * 100; };
  const xj::Array peaked = xj::checkpoint(peak)(mask + 1) + i8_zero;
  CHECK(peaked.dtype() == xj::i32);
  CHECK(peaked.to_vector<std::int32_t>() == std::vector<std::int32_t>{200});
  CHECK(xj::jit([&](const xj::Array& m) { return xj::checkpoint(peak)(m + 1) + i8_zero; })(mask).dtype() == xj::i32);
  const xj::Array bf = xj::astype(xj::array<float>({1.0f, 2.0f}, {2}), xj::bf16);
  auto sum_all = [](const xj::Array& x) { return xj::sum(x); };
  CHECK((xj::checkpoint(sum_all)(n * 0.5) + bf).dtype() == xj::f32);
  const auto summed = xj::custom_jvp(sum_all, [](const std::tuple<xj::Array>& p, const std::tuple<xj::Array>& t) {
    return std::pair{xj::sum(std::get<0>(p)), xj::sum(std::get<0>(t))};
  });
  CHECK(xj::jit([&](const xj::Array& m) { return summed(m * 0.5) + bf; })(n).dtype() == xj::f32);
  auto [carry, ys] = xj::scan([](const xj::Array& c, const xj::Array& x) { return std::pair{c + xj::sum(x), x}; }, xj::sum(n) * 0.5,
                              xj::reshape(n, {2, 1}) * 0.5);
  CHECK((carry + bf).dtype() == xj::f32);
  CHECK((xj::gelu(n * 0.5) + bf).dtype() == xj::f32);
  CHECK((xj::gelu(n * 0.5, false) + bf).dtype() == xj::f32);
  for (const auto& composite : std::vector<std::function<xj::Array(const xj::Array&)>>{
           [](const xj::Array& x) { return xj::softmax(x); }, [](const xj::Array& x) { return xj::log_softmax(x); },
           [](const xj::Array& x) { return xj::standardize(x); }, [](const xj::Array& x) { return xj::layer_norm(x); },
           [](const xj::Array& x) { return xj::rms_norm(x); }, [](const xj::Array& x) { return xj::gelu(x); }}) {
    CHECK(xj::jit([&](const xj::Array& m) { return composite(m * 0.5) + bf; })(n).dtype() == xj::f32);
    CHECK((composite(n * 0.5) + bf).dtype() == xj::f32);
  }
  // and a body computing from its weak operands alone stays weak, as JAX's
  CHECK(xj::jit([&](const xj::Array& k) { return xj::checkpoint([](const xj::Array& x) { return x * 2; })(k) + b8; })(3).dtype() == xj::i8);
  // result_type reads an array's weak type, as the operation it describes does
  const xj::Array w = xj::jit([](const xj::Array& k) { return k * 2.0; })(0.25);  // weak f64
  const xj::Array wi = xj::jit([](const xj::Array& k) { return k * 2; })(3);      // weak i64
  CHECK(xj::result_type(h, w) == (h + w).dtype());
  CHECK((h + w).dtype() == xj::f16);
  CHECK(xj::result_type(b8, wi) == xj::i8);
  CHECK(xj::result_type(w) == xj::f64);
  CHECK(xj::result_type(w, wi) == (w + wi).dtype());
  xj::jit([](const xj::Array& a, const xj::Array& k) {
    CHECK(xj::result_type(a, k) == xj::f16);
    return a * k;
  })(h, 0.5);
  // make_jaxpr traces a weak argument weak, as jit does: the bf16 program jit runs, not an f64 one
  auto mul = [](const xj::Array& a, const xj::Array& s) { return a * s; };
  const xj::Array x = xj::astype(xj::array<float>({1.0f, 2.0f}, {2}), xj::bf16);
  const std::string text = xj::make_jaxpr(mul)(x, w).str();
  CHECK(text.find("convert_element_type[new_dtype=bfloat16 weak_type=False]") != std::string::npos);
  CHECK(text.find("f64[2]") == std::string::npos);
  CHECK(xj::jit(mul)(x, w).dtype() == xj::bf16);
  // fori_loop's counter is weak as JAX's (always with bounds known at the call: JAX counts from the
  // Python int int(lower)): `carry + i` keeps an i8 or bf16 carry (a TypeError: the body returned
  // i32 / f32 for the carry)
  auto add_i = [](const xj::Array& i, const xj::Array& c) { return c + i; };
  const xj::Array c8 = xj::astype(xj::zeros({3}), xj::i8);
  const xj::Array r8 = xj::fori_loop(0, 4, add_i, c8);
  CHECK(r8.dtype() == xj::i8);
  CHECK(r8.to_vector<std::int8_t>() == std::vector<std::int8_t>{6, 6, 6});  // 0 + 1 + 2 + 3
  const xj::Array rb = xj::fori_loop(0, 3, [](const xj::Array& i, const xj::Array& c) { return c + i * 0.5; },
                                     xj::astype(xj::zeros({2}), xj::bf16));
  CHECK(rb.dtype() == xj::bf16);
  CHECK(xj::astype(rb, xj::f64).to_vector<double>() == std::vector<double>{1.5, 1.5});
  const xj::Array traced = xj::jit([&](const xj::Array& hi) { return xj::fori_loop(0, hi, add_i, c8); })(4);  // while_loop
  CHECK(traced.dtype() == xj::i8);
  CHECK(traced.to_vector<std::int8_t>() == std::vector<std::int8_t>{6, 6, 6});
  // a strong i32 bound beside a weak (traced C++) one: the weak takes i32, the counter is strong i32
  const xj::Array c32 = xj::astype(xj::zeros({2}), xj::i32);
  const xj::Array r32 = xj::jit([&](const xj::Array& hi) { return xj::fori_loop(xj::scalar(1, xj::i32), hi, add_i, c32); })(4);
  CHECK(r32.dtype() == xj::i32);
  CHECK(r32.to_vector<std::int32_t>() == std::vector<std::int32_t>{6, 6});  // 1 + 2 + 3
  // concrete i32 Array bounds: still JAX's Python-int counter, weak
  const xj::Array by_arrays = xj::fori_loop(xj::scalar(0, xj::i32), xj::scalar(3, xj::i32), add_i, c8);
  CHECK(by_arrays.dtype() == xj::i8);
  CHECK(by_arrays.to_vector<std::int8_t>() == std::vector<std::int8_t>{3, 3, 3});
  // traced: the counter is the lower bound, weak when it is (a C++ 0 beside a traced i64 bound)
  const xj::Array lo_number = xj::jit([&](const xj::Array& hi) { return xj::fori_loop(0, hi, add_i, c8); })(xj::scalar(3, xj::i64));
  CHECK(lo_number.dtype() == xj::i8);
  // and strong when a strong i32 Array is: the body returns i32 for the i8 carry, a TypeError as JAX's
  CHECK_THROWS_AS(xj::jit([&](const xj::Array& lo, const xj::Array& hi) { return xj::fori_loop(lo, hi, add_i, c8); })(
                      xj::scalar(0, xj::i32), xj::scalar(3, xj::i32)),
                  xj::TypeError);
  // traced i8 / u8 / i16 / u16 bounds: the counter has their dtype, as lax.fori_loop's (it was
  // i32, so `x + i` turned the i8 carry into i32, a TypeError JAX does not raise; a helper's hunt
  // of the thirty-seventh session); an i8 and a u8 bound count in their result type, i16 (JAX
  // raises a TypeError for unequal strong bounds; xjax promotes them, docs/status.md)
  for (xj::DType t : {xj::i8, xj::u8, xj::i16, xj::u16}) {
    CAPTURE(xj::dtype_name(t));
    const xj::Array c = xj::astype(xj::zeros({2}), t);
    const xj::Array r = xj::jit([&](const xj::Array& lo, const xj::Array& hi) { return xj::fori_loop(lo, hi, add_i, c); })(
        xj::astype(xj::scalar(1, xj::i32), t), xj::astype(xj::scalar(5, xj::i32), t));
    CHECK(r.dtype() == t);
    CHECK(xj::astype(r, xj::f64).to_vector<double>() == std::vector<double>{10, 10});  // 1 + 2 + 3 + 4
  }
  const xj::Array mixed = xj::jit([&](const xj::Array& lo, const xj::Array& hi) {
    return xj::fori_loop(lo, hi, [](const xj::Array& i, const xj::Array& c) { return c + xj::astype(i, xj::f64) + 0.0 * c; },
                         xj::zeros({1}, xj::f64));
  })(xj::astype(xj::scalar(-2, xj::i32), xj::i8), xj::astype(xj::scalar(200, xj::i32), xj::u8));
  CHECK(mixed.item<double>() == 19897.0);  // -2 + -1 + ... + 199: u8 200 does not fit i8, i16 counts it
}

TEST_CASE("weak types, thirty-second session's second review: a call's result is weak exactly as its body says, eagerly and under jit alike") {
  using A = xj::Array;
  const A w = xj::jit([](const A& a) { return a * 2; })(3.0);  // a weak f64
  const A s64 = xj::scalar(0.0, xj::f64);                       // a strong f64
  const A h = xj::astype(xj::ones({2}), xj::bf16);
  // A loop that runs no step returns its init, whose weak type the body's strong result does not
  // keep (JAX promotes such an init): strong f64 eagerly and under jit (eagerly it stayed weak, bf16)
  const auto scan0 = [&](const A& c) {
    return xj::scan([&](const A& k, const xj::None&) { return std::pair{k + s64, xj::None{}}; }, c, xj::None{}, {.length = 0}).first;
  };
  const auto while0 = [&](const A& c) {
    return xj::while_loop([](const A& k) { return xj::lt(k, xj::scalar(0.0, xj::f64)); }, [&](const A& k) { return k + s64; }, c);
  };
  for (const auto& loop : std::vector<std::function<A(const A&)>>{scan0, while0}) {
    CHECK((h + loop(w)).dtype() == xj::f64);
    CHECK(xj::jit([&](const A& c) { return h + loop(c); })(3.0).dtype() == xj::f64);
    CHECK((h + xj::jit(loop)(3.0)).dtype() == xj::f64);
  }
  // cond's outputs are branch 0's (the false branch, JAX's branches[0]), also when the taken branch
  // forwards its weak operand
  const auto chosen = [&](const A& p, const A& x) { return xj::cond(p, [](const A& u) { return u; }, [&](const A& u) { return u + s64; }, x); };
  const A yes = xj::scalar(1.0, xj::bool_);
  CHECK((h + chosen(yes, w)).dtype() == xj::f64);
  CHECK((h + xj::jit(chosen)(yes, 3.0)).dtype() == xj::f64);
  CHECK(xj::jit([&](const A& p, const A& x) { return h + chosen(p, x); })(yes, 3.0).dtype() == xj::f64);
  // value_and_grad's value has the function's dtype with checkpointed loops too (the revolve loops'
  // outputs were weak by the operands' rule while the plain loops' are their bodies')
  const A one = xj::astype(xj::ones({1}), xj::bf16);
  const auto binomial = [](const A& s) {
    return xj::scan([](const A& c, const xj::None&) { return std::pair{xj::sum(xj::sin(c) + c), xj::None{}}; }, s, xj::None{},
                    {.length = 3, .checkpoints = xj::scan_checkpoints::binomial(2)}).first;
  };
  const auto online = [](const A& s) {
    return xj::while_loop([](const A& c) { return xj::lt(c, xj::scalar(3.0, xj::f64)); }, [](const A& c) { return xj::sum(xj::sin(c) + c); },
                          s, {.checkpoints = xj::scan_checkpoints::online(2)});
  };
  for (const auto& f : std::vector<std::function<A(const A&)>>{binomial, online}) {
    const A plain = xj::jit([&](const A& s) { return one + f(s); })(0.5);
    const A valued = xj::jit([&](const A& s) { return one + xj::value_and_grad(f)(s).first; })(0.5);
    CHECK(plain.dtype() == xj::f64);
    CHECK(valued.dtype() == xj::f64);
    CHECK(valued.item<double>() == plain.item<double>());
  }
  // as_inexact's weak conversion is recorded in the jaxpr: exp of a traced C++ integer stays weak
  // through nested jits, checkpoint and custom_jvp (they read it strong: f64 beside an f32 array)
  const A f32s = xj::ones({2});
  const A wi = xj::jit([](const A& a) { return a * 2; })(3);  // a weak i64
  const auto ex = [](const A& x) { return xj::exp(x); };
  CHECK((f32s + ex(wi)).dtype() == xj::f32);
  CHECK((f32s + xj::jit(ex)(3)).dtype() == xj::f32);
  CHECK((f32s + xj::jit([&](const A& c) { return xj::jit(ex)(c); })(3)).dtype() == xj::f32);
  CHECK((f32s + xj::checkpoint(ex)(wi)).dtype() == xj::f32);
  const auto guarded = xj::custom_jvp(ex, [](const std::tuple<A>& p, const std::tuple<A>& t) {
    return std::pair{xj::exp(std::get<0>(p)), xj::exp(std::get<0>(p)) * std::get<0>(t)};
  });
  CHECK((f32s + guarded(wi)).dtype() == xj::f32);
  CHECK(xj::jit([&](const A& x) { return f32s + guarded(x); })(3).dtype() == xj::f32);
}

TEST_CASE("weak types, thirty-third session's review: u64 with a signed integer array stays a strong f64, so joining another integer array keeps f64") {
  // Made weak (JAX's f*), the f64 of u64 + i64 took xjax's rule for a weak float beside an integer
  // array (f32, the default float of C++ doubles) when it met another integer or bool array, and
  // rounded 2^24 + 1 to 2^24. It stays strong (the documented difference from JAX's weak f64).
  const xj::Array u = xj::array<std::uint64_t>({16777217}, {1}), s = xj::array<std::int64_t>({0}, {1});
  const xj::Array t = xj::array<std::int64_t>({16777216}, {1}), small = xj::array<std::int8_t>({0}, {1});
  CHECK((u + s).dtype() == xj::f64);
  CHECK(((u + s) + s).dtype() == xj::f64);
  CHECK(((u + s) + small).to_vector<double>() == std::vector<double>{16777217.0});
  CHECK(((u + s) - t).to_vector<double>() == std::vector<double>{1.0});
  CHECK(xj::concatenate({u + s, xj::astype(small, xj::i8)}, 0).dtype() == xj::f64);
  CHECK(xj::jit([](const xj::Array& a, const xj::Array& b, const xj::Array& c) { return (a + b) + c; })(u, s, small).dtype() == xj::f64);
}

TEST_CASE("weak types, thirty-fourth session's review: a weakly typed loop carry stays as wide as JAX keeps it") {
  using A = xj::Array;
  // Tracing the carry weak (JAX's rule) let xjax's own weak rules narrow it: an f64 accumulator
  // of bool counts became f32 (16777216.5 rounded), a weak i64 carry plus a bool i32 (wrapped).
  const A mask = xj::array<bool>({true, true, false}, {3});
  const A counted = xj::jit([&](const A& k) {
    return xj::fori_loop(0, 3, [&](const A&, const A& acc) { return acc + xj::sum(mask); }, k);
  })(16777216.5);
  CHECK(counted.dtype() == xj::f64);
  CHECK(counted.item<double>() == 16777222.5);
  const A timed = xj::jit([](const A& lo, const A& hi, const A& t0) {
    return xj::fori_loop(lo, hi, [](const A& i, const A& t) { return t + i; }, t0);
  })(xj::scalar(0, xj::i32), xj::scalar(3, xj::i32), 16777216.5);
  CHECK(timed.dtype() == xj::f64);
  CHECK(timed.item<double>() == 16777219.5);
  const A yes = xj::scalar(1.0, xj::bool_);
  const A big = xj::jit([&](const A& n) { return xj::fori_loop(0, 2, [&](const A&, const A& c) { return c + yes; }, n); })(3000000000LL);
  CHECK(big.dtype() == xj::i64);
  CHECK(big.item<std::int64_t>() == 3000000002LL);
}

TEST_CASE("weak types, thirty-fifth session: a weak value keeps its own width where only bools or integers stand beside it") {
  using A = xj::Array;
  // A traced C++ long long beside a bool array was converted to i32 (xjax's default integer) and
  // wrapped: jit(n + bools)(3e9) gave -1294967295. JAX with x64 gives its default integer, i64.
  const A bools = xj::array<bool>({true, false}, {2});
  const A summed = xj::jit([&](const A& n) { return n + bools; })(3000000000LL);
  CHECK(summed.dtype() == xj::i64);
  CHECK(summed.to_vector<std::int64_t>() == std::vector<std::int64_t>{3000000001LL, 3000000000LL});
  CHECK(xj::jit([&](const A& n) { return xj::where(bools, n, bools); })(5000000000LL).to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{5000000000LL, 0});
  // A traced double beside an integer array: f64, as the same function given xj::scalar(dt, f64)
  // (it was f32, xjax's default float, and rounded 2^24 + 0.5).
  const A ints = xj::array<std::int32_t>({1, 2}, {2});
  const A stepped = xj::jit([&](const A& dt) { return ints + dt; })(16777216.5);
  CHECK(stepped.dtype() == xj::f64);
  CHECK(stepped.to_vector<double>() == std::vector<double>{16777217.5, 16777218.5});
  CHECK(stepped.dtype() == (ints + xj::scalar(16777216.5, xj::f64)).dtype());
  // A traced C++ float stays f32; a C++ number written in the expression keeps xjax's defaults.
  CHECK(xj::jit([&](const A& dt) { return ints * dt; })(0.5f).dtype() == xj::f32);
  CHECK((ints * 0.5).dtype() == xj::f32);
  CHECK((bools + 3).dtype() == xj::i32);
  // A weak unsigned value widens the signed join i*: a weak u64 beside bools is i64 (promote_types'
  // f64 turned `weak u64 & bools` into an error; the first review), a weak u8 beside bools i32.
  const A weak_u64 = xj::scalar_like(3.0, xj::array<std::uint64_t>({1}, {1}));
  CHECK((weak_u64 + bools).dtype() == xj::i64);
  CHECK((weak_u64 & bools).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  CHECK((xj::scalar_like(3.0, xj::array<std::uint8_t>({1}, {1})) + bools).dtype() == xj::i32);
  CHECK((xj::scalar_like(3.0, xj::array<std::uint32_t>({1}, {1})) + bools).dtype() == xj::i64);
  // result_type reads a weak array's own width the same way.
  const A weak_f64 = xj::jit([](const A& k) { return k * 2; })(1.5);
  CHECK(xj::result_type(weak_f64, ints) == xj::f64);
  CHECK(xj::result_type(weak_f64, xj::f16) == xj::f16);  // a strong float still decides
}

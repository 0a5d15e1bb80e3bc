// test_printer.cpp: golden-text tests of printed jaxprs (JAX's text form).
#include <doctest/doctest.h>

#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include <xjax/xjax.hpp>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

namespace {

xj::ClosedJaxprPtr ptr(xj::ClosedJaxpr j) { return std::make_shared<const xj::ClosedJaxpr>(std::move(j)); }

struct Policy : xj::ParamObject {
  std::string repr() const override { return "<policy dots_saveable>"; }
};

}  // namespace

TEST_CASE("printer: one equation prints on one line") {
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::sin(x); })(xj::zeros({3}));
  CHECK(str(j) == "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }");
  CHECK(j.str() == str(j));
  CHECK(str(*j.jaxpr) == str(j));
}

TEST_CASE("printer: several equations print one per line, indented like JAX") {
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::cos(xj::sin(x)); })(xj::zeros({3}));
  CHECK(str(j) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = sin a\n"
        "    c:f32[3] = cos b\n"
        "  in (c,) }");
}

TEST_CASE("printer: several inputs and outputs, dtypes and rank 0") {
  auto f = [](const xj::Array& x, const xj::Array& n) {
    xj::Array a = xj::neg(x);  // sequenced: function-argument order is unspecified
    xj::Array b = xj::neg(n);
    return std::make_tuple(a, b);
  };
  auto j = xj::make_jaxpr(f)(xj::zeros({2, 3}, xj::f64), xj::scalar(1, xj::i32));
  CHECK(str(j) ==
        "{ lambda ; a:f64[2,3] b:i32[]. let\n"
        "    c:f64[2,3] = neg a\n"
        "    d:i32[] = neg b\n"
        "  in (c, d) }");
}

TEST_CASE("printer: bool and unsigned dtypes, comparisons") {
  auto j = xj::make_jaxpr([](const xj::Array& x, const xj::Array& y) { return xj::lt(x, y); })(
      xj::zeros({4}, xj::u32), xj::zeros({4}, xj::u32));
  CHECK(str(j) == "{ lambda ; a:u32[4] b:u32[4]. let c:bool[4] = lt a b in (c,) }");
}

TEST_CASE("printer: params sorted by name, int tuples like Python tuples") {
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::broadcast_in_dim(x, {3, 4}, {0}); })(
      xj::zeros({3}));
  CHECK(str(j) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3,4] = broadcast_in_dim[broadcast_dimensions=(0,) shape=(3, 4)] a\n"
        "  in (b,) }");
}

TEST_CASE("printer: implicit broadcasting shows as broadcast_in_dim") {
  auto j = xj::make_jaxpr([](const xj::Array& x, const xj::Array& y) { return x + y; })(
      xj::zeros({4}), xj::zeros({3, 4}));
  CHECK(str(j) ==
        "{ lambda ; a:f32[4] b:f32[3,4]. let\n"
        "    c:f32[3,4] = broadcast_in_dim[broadcast_dimensions=(1,) shape=(3, 4)] a\n"
        "    d:f32[3,4] = add c b\n"
        "  in (d,) }");
}

TEST_CASE("printer: int, dtype and empty-list params") {
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::astype(xj::integer_pow(x, 3), xj::f64); })(
      xj::zeros({2}));
  CHECK(str(j) ==
        "{ lambda ; a:f32[2]. let\n"
        "    b:f32[2] = integer_pow[y=3] a\n"
        "    c:f64[2] = convert_element_type[new_dtype=float64 weak_type=False] b\n"
        "  in (c,) }");

  auto k = xj::make_jaxpr([](const xj::Array& x) { return xj::sum(x, {0, 1}); })(xj::zeros({2, 5}));
  CHECK(str(k) == "{ lambda ; a:f32[2,5]. let b:f32[] = reduce_sum[axes=(0, 1)] a in (b,) }");

  auto s = xj::make_jaxpr([](const xj::Array& x) { return xj::slice(x, {1}, {3}); })(xj::zeros({4}));
  CHECK(str(s) ==
        "{ lambda ; a:f32[4]. let\n"
        "    b:f32[2] = slice[limit_indices=(3,) start_indices=(1,) strides=()] a\n"
        "  in (b,) }");
}

TEST_CASE("printer: scalar literals carry their type") {
  auto j = xj::make_jaxpr([](const xj::Array& x) { return x * 2.0; })(xj::scalar(1.0, xj::f32));
  CHECK(str(j) == "{ lambda ; a:f32[]. let b:f32[] = mul a 2.0:f32[] in (b,) }");

  auto h = xj::make_jaxpr([](const xj::Array& x) { return x + 0.5; })(xj::scalar(1.0, xj::f64));
  CHECK(str(h) == "{ lambda ; a:f64[]. let b:f64[] = add a 0.5:f64[] in (b,) }");

  auto t = xj::make_jaxpr([](const xj::Array& x) { return x * 0.1; })(xj::scalar(1.0, xj::f32));
  CHECK(str(t) == "{ lambda ; a:f32[]. let b:f32[] = mul a 0.1:f32[] in (b,) }");

  auto i = xj::make_jaxpr([](const xj::Array& x) { return x - 7; })(xj::scalar(1, xj::i32));
  CHECK(str(i) == "{ lambda ; a:i32[]. let b:i32[] = sub a 7:i32[] in (b,) }");
  // A float scalar makes an integer operation a float one, converting the array first (JAX), to a
  // weakly typed float: the join of i32 and a weak float is JAX's weak float.
  auto fi = xj::make_jaxpr([](const xj::Array& x) { return x - 7.5; })(xj::scalar(1, xj::i32));
  CHECK(str(fi) ==
        "{ lambda ; a:i32[]. let\n"
        "    b:f32[] = convert_element_type[new_dtype=float32 weak_type=True] a\n"
        "    c:f32[] = sub b 7.5:f32[]\n"
        "  in (c,) }");

  auto b = xj::make_jaxpr([](const xj::Array& x, const xj::Array& y) {
    return xj::where(xj::scalar(1, xj::bool_), x, y);
  })(xj::scalar(0.0), xj::scalar(0.0));
  CHECK(str(b) == "{ lambda ; a:f32[] b:f32[]. let c:f32[] = select_n True:bool[] b a in (c,) }");

  auto inf = xj::make_jaxpr([](const xj::Array& x) {
    return xj::minimum(x, xj::scalar(-std::numeric_limits<double>::infinity()));
  })(xj::scalar(0.0));
  CHECK(str(inf) == "{ lambda ; a:f32[]. let b:f32[] = min a -inf:f32[] in (b,) }");
}

namespace {
// How a scalar literal c of dtype d prints inside an equation.
std::string literal_text(double c, xj::DType d) {
  auto j = xj::make_jaxpr([c, d](const xj::Array& x) {
    return xj::is_integer(d) ? x * static_cast<std::int64_t>(c) : x * c;  // an integer literal for integer arrays
  })(xj::scalar(1.0, d));
  std::string s = str(j);
  auto start = s.find("mul a ") + 6;
  return s.substr(start, s.find(" in (") - start);
}
}  // namespace

TEST_CASE("printer: float literals print like Python's repr of the numpy scalar") {
  CHECK(literal_text(0.044715, xj::f32) == "0.044715:f32[]");  // shortest round trip in f32
  CHECK(literal_text(1.0 / 3.0, xj::f32) == "0.33333334:f32[]");
  CHECK(literal_text(1.0 / 3.0, xj::f64) == "0.3333333333333333:f64[]");
  CHECK(literal_text(0.1 + 0.2, xj::f64) == "0.30000000000000004:f64[]");
  CHECK(literal_text(0.1 + 0.2, xj::f32) == "0.3:f32[]");
  CHECK(literal_text(123456.0, xj::f32) == "123456.0:f32[]");
  CHECK(literal_text(1e15, xj::f64) == "1000000000000000.0:f64[]");
  CHECK(literal_text(1e16, xj::f64) == "1e+16:f64[]");
  CHECK(literal_text(1e20, xj::f32) == "1e+20:f32[]");
  CHECK(literal_text(0.0001, xj::f32) == "0.0001:f32[]");
  CHECK(literal_text(1e-5, xj::f32) == "1e-05:f32[]");
  CHECK(literal_text(2.5e-7, xj::f64) == "2.5e-07:f64[]");
  CHECK(literal_text(1.5e-300, xj::f64) == "1.5e-300:f64[]");
  CHECK(literal_text(-0.0, xj::f32) == "-0.0:f32[]");
  CHECK(literal_text(-12.5, xj::f64) == "-12.5:f64[]");
  CHECK(literal_text(3.0, xj::i64) == "3:i64[]");
  CHECK(literal_text(7.0, xj::u32) == "7:u32[]");
}

TEST_CASE("printer: a literal broadcast to an array") {
  auto j = xj::make_jaxpr([](const xj::Array& x) { return x * 2.0f; })(xj::zeros({3}));
  CHECK(str(j) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = broadcast_in_dim[broadcast_dimensions=() shape=(3,)] 2.0:f32[]\n"
        "    c:f32[3] = mul a b\n"
        "  in (c,) }");
}

TEST_CASE("printer: a literal output") {
  auto j = xj::make_jaxpr([](const xj::Array&) { return xj::scalar(3.0); })(xj::zeros({2}));
  CHECK(str(j) == "{ lambda ; a:f32[2]. let  in (3.0:f32[],) }");
}

TEST_CASE("printer: captured non-scalar arrays become constvars before the ';'") {
  xj::Array w = xj::array<float>({1, 2, 3}, {3});
  auto j = xj::make_jaxpr([w](const xj::Array& x) { return x * w; })(xj::zeros({3}));
  CHECK(str(j) == "{ lambda a:f32[3]; b:f32[3]. let c:f32[3] = mul b a in (c,) }");
  REQUIRE(j.consts.size() == 1);
  CHECK(j.consts[0].raw_data() == w.raw_data());  // the same buffer, through a handle of the jaxpr's own

  xj::Array m = xj::ones({2, 3}, xj::f64);
  auto k = xj::make_jaxpr([w, m](const xj::Array& x) { return std::make_pair(x * w, m); })(xj::zeros({3}));
  CHECK(str(k) == "{ lambda a:f32[3] b:f64[2,3]; c:f32[3]. let d:f32[3] = mul c a in (d, b) }");
  CHECK(k.consts.size() == 2);
}

TEST_CASE("printer: variable names continue after z with ba, bb, ...") {
  auto j = xj::make_jaxpr([](xj::Array x) {
    for (int i = 0; i < 28; ++i) x = xj::sin(x);
    return x;
  })(xj::zeros({1}));
  std::string s = str(j);
  CHECK(s.find("    z:f32[1] = sin y\n") != std::string::npos);
  CHECK(s.find("    ba:f32[1] = sin z\n") != std::string::npos);
  CHECK(s.find("    bb:f32[1] = sin ba\n") != std::string::npos);
  CHECK(s.find("    bc:f32[1] = sin bb\n") != std::string::npos);
  CHECK(s.substr(s.size() - 13) == "\n  in (bc,) }");
}

namespace {

// An outer jaxpr `b = copy[params] a` built by hand: printing does not validate params.
xj::Jaxpr outer_with(xj::Params params) {
  xj::Jaxpr j;
  xj::Var a(xj::ShapedArray{{3}, xj::f32});
  xj::Var b(xj::ShapedArray{{3}, xj::f32});
  j.invars = {a};
  j.eqns.push_back(xj::Eqn{xj::Primitive::copy, {a}, {b}, std::move(params), std::source_location::current()});
  j.outvars = {b};
  return j;
}

}  // namespace

namespace {
// The params of a checkpoint around `body` (printed on `copy`: the printer does not validate).
xj::params::Checkpoint checkpoint_of(const xj::ClosedJaxpr& body) {
  return {.jaxpr = ptr(body), .policy = nullptr, .prevent_cse = true, .differentiated = false};
}
}  // namespace

TEST_CASE("printer: a nested one-line sub-jaxpr, params sorted by name") {
  auto inner = xj::make_jaxpr([](const xj::Array& x) { return xj::sin(x); })(xj::zeros({3}));
  // Declared jaxpr, length, reverse, unroll, num_consts, num_carry, snapshots; printed sorted.
  auto j = outer_with(xj::params::Scan{.jaxpr = ptr(inner),
                                       .length = 3,
                                       .reverse = false,
                                       .unroll = 1,
                                       .num_consts = 0,
                                       .num_carry = 0,
                                       .snapshots = 0});
  CHECK(str(j) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = copy[\n"
        "      jaxpr={ lambda ; c:f32[3]. let d:f32[3] = sin c in (d,) }\n"
        "      length=3\n"
        "      num_carry=0\n"
        "      num_consts=0\n"
        "      reverse=False\n"
        "      snapshots=0\n"
        "      unroll=1\n"
        "    ] a\n"
        "  in (b,) }");
  // The inner jaxpr printed alone names its variables from 'a'.
  CHECK(str(inner) == "{ lambda ; a:f32[3]. let b:f32[3] = sin a in (b,) }");
}

TEST_CASE("printer: a nested multi-line sub-jaxpr is indented under its parameter") {
  auto inner = xj::make_jaxpr([](const xj::Array& x) { return xj::cos(xj::sin(x)); })(xj::zeros({3}));
  auto j = outer_with(checkpoint_of(inner));
  CHECK(str(j) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = copy[\n"
        "      differentiated=False\n"
        "      jaxpr={ lambda ; c:f32[3]. let\n"
        "          d:f32[3] = sin c\n"
        "          e:f32[3] = cos d\n"
        "        in (e,) }\n"
        "      policy=None\n"
        "      prevent_cse=True\n"
        "    ] a\n"
        "  in (b,) }");
}

TEST_CASE("printer: a nested sub-jaxpr with constvars") {
  xj::Array w = xj::ones({3});
  auto inner = xj::make_jaxpr([w](const xj::Array& x) { return x * w; })(xj::zeros({3}));
  auto j = outer_with(checkpoint_of(inner));
  CHECK(str(j) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = copy[\n"
        "      differentiated=False\n"
        "      jaxpr={ lambda c:f32[3]; d:f32[3]. let e:f32[3] = mul d c in (e,) }\n"
        "      policy=None\n"
        "      prevent_cse=True\n"
        "    ] a\n"
        "  in (b,) }");
}

TEST_CASE("printer: a list of sub-jaxprs (branches) like JAX's cond") {
  auto b0 = xj::make_jaxpr([](const xj::Array& x) { return xj::sin(x); })(xj::zeros({3}));
  auto b1 = xj::make_jaxpr([](const xj::Array& x) { return xj::cos(x); })(xj::zeros({3}));
  auto j = outer_with(xj::params::Cond{.branches = {ptr(b0), ptr(b1)}});
  CHECK(str(j) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = copy[\n"
        "      branches=(\n"
        "        { lambda ; c:f32[3]. let d:f32[3] = sin c in (d,) }\n"
        "        { lambda ; e:f32[3]. let f:f32[3] = cos e in (f,) }\n"
        "      )\n"
        "    ] a\n"
        "  in (b,) }");
}

TEST_CASE("printer: two levels of nesting") {
  auto leaf = xj::make_jaxpr([](const xj::Array& x) { return xj::sin(x); })(xj::zeros({3}));
  xj::Jaxpr mid = outer_with(xj::params::Cond{.branches = {ptr(leaf)}});
  auto j = outer_with(xj::params::Cond{.branches = {ptr(xj::ClosedJaxpr{std::make_shared<const xj::Jaxpr>(mid), {}})}});
  CHECK(str(j) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = copy[\n"
        "      branches=(\n"
        "        { lambda ; c:f32[3]. let\n"
        "            d:f32[3] = copy[\n"
        "              branches=(\n"
        "                { lambda ; e:f32[3]. let f:f32[3] = sin e in (f,) }\n"
        "              )\n"
        "            ] c\n"
        "          in (d,) }\n"
        "      )\n"
        "    ] a\n"
        "  in (b,) }");
}

TEST_CASE("printer: string, object, dtype and empty-list parameters") {
  CHECK(str(outer_with(xj::params::Name{.name = "layer1"})) ==
        "{ lambda ; a:f32[3]. let b:f32[3] = copy[name=layer1] a in (b,) }");
  CHECK(str(outer_with(xj::params::CustomLin{.bwd = std::make_shared<Policy>()})) ==
        "{ lambda ; a:f32[3]. let b:f32[3] = copy[bwd=<policy dots_saveable>] a in (b,) }");
  CHECK(str(outer_with(xj::params::Iota{.dtype = xj::i32, .shape = {3}, .dimension = 0})) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = copy[dimension=0 dtype=int32 shape=(3,)] a\n"
        "  in (b,) }");
  CHECK(str(outer_with(xj::params::Slice{.start_indices = {}, .limit_indices = {}, .strides = {}})) ==
        "{ lambda ; a:f32[3]. let\n"
        "    b:f32[3] = copy[limit_indices=() start_indices=() strides=()] a\n"
        "  in (b,) }");
}

TEST_CASE("printer: an equation without outputs prints without a left-hand side") {
  xj::Jaxpr j;
  xj::Var a(xj::ShapedArray{{3}, xj::f32});
  j.invars = {a};
  j.eqns.push_back(xj::Eqn{xj::Primitive::copy, {a}, {}, {}, std::source_location::current()});
  j.outvars = {a};
  // JAX prints effectful equations without outputs as just the right-hand side.
  CHECK(str(j) == "{ lambda ; a:f32[3]. let copy a in (a,) }");
}

TEST_CASE("printer: ShapedArray and DType print like JAX") {
  std::ostringstream os;
  os << xj::ShapedArray{{3, 4}, xj::f32} << " " << xj::ShapedArray{{}, xj::bool_} << " "
     << xj::ShapedArray{{0, 2}, xj::i64} << " " << xj::f64;
  CHECK(os.str() == "f32[3,4] bool[] i64[0,2] f64");
  CHECK(xj::zeros({2, 2}).aval().str() == "f32[2,2]");
}

TEST_CASE("printer: a Primitive streams as its jaxpr name") {
  std::ostringstream os;
  os << xj::Primitive::dot_general << " " << xj::Primitive::while_;
  CHECK(os.str() == "dot_general while");
}

TEST_CASE("printer regressions from the twenty-sixth session: i64 literals exactly; arrays print floats in their shortest round-trip form") {
  const xj::Array big = xj::array<std::int64_t>(std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::max()}, xj::Shape{});
  const xj::Array odd = xj::array<std::int64_t>(std::vector<std::int64_t>{(std::int64_t{1} << 53) + 1}, xj::Shape{});
  const std::string text = test_util::str(xj::make_jaxpr([&](const xj::Array& a) { return std::make_tuple(a + big, a + odd); })(xj::zeros({}, xj::i64)));
  CHECK(test_util::contains(text, "9223372036854775807:i64[]"));
  CHECK(test_util::contains(text, "9007199254740993:i64[]"));
  std::ostringstream os;
  os << xj::array<double>({1.0000001, 123456789.0, std::nan("")}, {3});
  CHECK(os.str() == "f64[3] [1.0000001, 123456789, nan]");
  std::ostringstream os32;
  os32 << xj::array<float>({0.1f, -2.5f}, {2});
  CHECK(os32.str() == "f32[2] [0.1, -2.5]");
  std::ostringstream os16;
  os16 << xj::astype(xj::array<float>({0.1f, 3.0f}, {2}), xj::bf16);
  CHECK(os16.str() == "bf16[2] [0.1, 3]");
}

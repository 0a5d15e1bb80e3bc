// einsum against a plain loop in double: implicit outputs, ellipses, size-1 broadcasting, three
// and more operands, bools, mixed dtypes, gradients (finite differences) and vmap.

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "xjax/xjax.hpp"

namespace xj = xjax;
using test_util::check_values;
using test_util::randn;
using test_util::vec;

namespace {

xj::Array bool_array(const std::vector<std::uint8_t>& v, const xj::Shape& shape) { return xj::astype(xj::array<std::uint8_t>(v, shape), xj::bool_); }

struct Operand {
  std::string labels;  // letters only: the test spells each ellipsis axis with a capital
  xj::Array x;
};

// Every assignment of the labels (each label's size the largest among its axes; an axis of size
// 1 reads index 0), the product of the operands' entries added to the output's entry.
std::vector<double> loop_einsum(const std::vector<Operand>& ops, const std::string& out) {
  std::map<char, std::int64_t> size;
  for (const Operand& op : ops)
    for (std::size_t a = 0; a < op.labels.size(); ++a) size[op.labels[a]] = std::max(size[op.labels[a]], op.x.shape()[a]);
  std::vector<char> names;
  for (const auto& [c, n] : size) names.push_back(c);
  std::int64_t out_size = 1;
  for (char c : out) out_size *= size[c];
  std::vector<double> result(static_cast<std::size_t>(out_size), 0.0);
  std::vector<std::vector<double>> values;
  for (const Operand& op : ops) values.push_back(vec(op.x));
  std::map<char, std::int64_t> at;
  for (char c : names) at[c] = 0;
  const auto flat = [&](const std::string& labels, const xj::Shape& shape) {
    std::int64_t f = 0;
    for (std::size_t a = 0; a < labels.size(); ++a) f = f * shape[a] + (shape[a] == 1 ? 0 : at[labels[a]]);
    return static_cast<std::size_t>(f);
  };
  xj::Shape out_shape;
  for (char c : out) out_shape.push_back(size[c]);
  while (true) {
    double term = 1.0;
    for (std::size_t i = 0; i < ops.size(); ++i) term *= values[i][flat(ops[i].labels, ops[i].x.shape())];
    result[flat(out, out_shape)] += term;
    std::size_t k = names.size();
    while (k > 0 && ++at[names[k - 1]] == size[names[k - 1]]) at[names[--k]] = 0;
    if (k == 0) break;
  }
  return result;
}

void check_against_loop(const std::string& spec, const std::vector<Operand>& ops, const std::string& out, const xj::Shape& shape) {
  CAPTURE(spec);
  std::vector<xj::Array> xs;
  for (const Operand& op : ops) xs.push_back(op.x);
  const xj::Array got = xj::einsum(spec, xs);
  CHECK(got.shape() == shape);
  check_values(got, loop_einsum(ops, out), 1e-12);
}

}  // namespace

TEST_CASE("einsum: implicit outputs, ellipses, size-1 broadcasting and several operands agree with a plain loop") {
  const xj::Array a = randn({2, 3}, 1), b = randn({3, 4}, 2), sq = randn({3, 3}, 3);
  // implicit output: the letters named once, sorted
  check_against_loop("ij,jk", {{"ij", a}, {"jk", b}}, "ik", {2, 4});
  check_against_loop("ba", {{"ba", a}}, "ab", {3, 2});
  check_against_loop("ii", {{"ii", sq}}, "", {});
  check_against_loop("ij,ij", {{"ij", a}, {"ij", a}}, "", {});
  // ellipses: right-aligned, broadcast, implicit output leading with them
  const xj::Array e1 = randn({2, 1, 2, 3}, 4), e2 = randn({3, 3, 4}, 5);
  check_against_loop("...ij,...jk->...ik", {{"PQij", e1}, {"Qjk", e2}}, "PQik", {2, 3, 2, 4});
  check_against_loop("i...,...j", {{"iQ", a}, {"Qj", randn({1, 4}, 6)}}, "Qij", {3, 2, 4});
  check_against_loop("...", {{"PQ", a}}, "PQ", {2, 3});
  check_against_loop("...ij->ij", {{"Pij", randn({4, 2, 3}, 7)}}, "ij", {2, 3});  // summed, as opt_einsum
  check_against_loop("...ij->...ij", {{"ij", a}}, "ij", {2, 3});                   // an empty ellipsis
  check_against_loop("i...j,j->i...", {{"iPQj", randn({2, 3, 1, 4}, 8)}, {"j", randn({4}, 9)}}, "iPQ", {2, 3, 1});
  // a size-1 axis broadcasts against its letter's size
  check_against_loop("ij,ij->i", {{"ij", randn({2, 1}, 10)}, {"ij", randn({2, 5}, 11)}}, "i", {2});
  check_against_loop("ij,jk->ik", {{"ij", randn({2, 1}, 12)}, {"jk", b}}, "ik", {2, 4});
  // three and four operands, contracted left to right
  const xj::Array c = randn({4, 2}, 13);
  check_against_loop("ij,jk,kl->il", {{"ij", a}, {"jk", b}, {"kl", c}}, "il", {2, 2});
  check_against_loop("ab,bc,ca->", {{"ab", a}, {"bc", b}, {"ca", c}}, "", {});
  check_against_loop("i,j,k->ijk", {{"i", randn({2}, 14)}, {"j", randn({3}, 15)}, {"k", randn({4}, 16)}}, "ijk", {2, 3, 4});
  check_against_loop("ij,jk,kl,lm", {{"ij", a}, {"jk", b}, {"kl", c}, {"lm", randn({2, 3}, 17)}}, "im", {2, 3});
  check_against_loop("bi,bj,bk->bk", {{"bi", a}, {"bj", a}, {"bk", randn({2, 5}, 18)}}, "bk", {2, 5});
  check_against_loop("ij,kl,jk->il", {{"ij", a}, {"kl", c}, {"jk", b}}, "il", {2, 2});
}

TEST_CASE("einsum: bools give the OR of ANDs, mixed dtypes promote (strict mode refuses)") {
  const xj::Array p = bool_array({1, 0, 0, 0, 1, 0}, {2, 3});
  const xj::Array q = bool_array({0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1}, {3, 4});
  const xj::Array r = xj::einsum("ij,jk->ik", p, q);
  CHECK(r.dtype() == xj::bool_);
  // row 0 of p picks q's row 0, row 1 picks q's row 1
  check_values(r, {0, 1, 1, 0, 0, 0, 1, 1});
  CHECK(xj::einsum("ij->", p).item<double>() == 1.0);
  CHECK(xj::einsum("ij->ji", p).dtype() == xj::bool_);
  // outer of two bool arrays is their AND (jnp.multiply of bools); mul refused them
  const xj::Array o = xj::outer(bool_array({1, 0, 1}, {3}), bool_array({1, 1}, {2}));
  CHECK(o.dtype() == xj::bool_);
  check_values(o, {1, 1, 0, 0, 1, 1});
  const xj::Array a = randn({2, 3}, 20, xj::f32), b = randn({3, 4}, 21);
  CHECK(xj::einsum("ij,jk->ik", a, b).dtype() == xj::f64);
  // a bool mask summed on its own axis, then contracted with f32: f32, the mask's counts
  const xj::Array mask = bool_array({1, 1, 0, 1, 0, 0}, {2, 3, 1});
  const xj::Array w = xj::array<float>({1.0f, 10.0f, 100.0f}, {3});
  const xj::Array got = xj::einsum("ijk,j->i", mask, w);
  CHECK(got.dtype() == xj::f32);
  check_values(got, {11.0, 1.0});
  // the sums of letters one operand names alone run in the promoted dtype (they ran in the
  // operand's own: u8 wrapped to 44, a bf16 sum of 257 ones stopped at 256)
  const xj::Array narrow = xj::array<std::uint8_t>({200, 100}, {2});
  check_values(xj::einsum("i,j->j", narrow, xj::array<std::int32_t>({1, 2, 3}, {3})), {300, 600, 900});
  check_values(xj::einsum("i,j->", narrow, xj::array<float>({1.5f}, {1})), {450});
  check_values(xj::einsum("i,j->j", xj::ones({257}, xj::bf16), xj::ones({1}, xj::f32)), {257});
  // a weakly typed operand (a C++ number under jit) adopts the others' dtype, as in a product
  const auto scaled = xj::jit([](const xj::Array& s, const xj::Array& v) { return xj::einsum(",i->i", s, v); })(2.0, xj::ones({3}, xj::bf16));
  CHECK(scaled.dtype() == xj::bf16);
  check_values(xj::astype(scaled, xj::f64), {2, 2, 2});
  xj::DtypePromotion strict;
  CHECK_THROWS_AS((void)xj::einsum("ij,jk->ik", a, b), xj::TypeError);
}

TEST_CASE("einsum: several operands contract in a greedy order, not left to right") {
  // "ij,kl,jk->il" left to right made [n,n,n,n] from two n x n matrices first; the greedy order
  // contracts the chain, each product n x n
  const std::int64_t n = 40;
  const xj::Array a = randn({n, n}, 40), b = randn({n, n}, 41), c = randn({n, n}, 42);
  const std::string text = test_util::str(xj::make_jaxpr([](const xj::Array& x, const xj::Array& y, const xj::Array& z) {
    return xj::einsum("ij,kl,jk->il", {x, y, z});
  })(a, b, c));
  CHECK(!test_util::contains(text, "[40,40,40"));
  check_values(xj::einsum("ij,kl,jk->il", {a, b, c}), vec(xj::matmul(xj::matmul(a, c), b)), 1e-9);
}

TEST_CASE("einsum: errors name the spec and the disagreeing axes") {
  const xj::Array a = xj::zeros({2, 3}, xj::f64), b = xj::zeros({4, 5}, xj::f64);
  const std::string mismatch = test_util::message_of<xj::ShapeError>([&] { (void)xj::einsum("ij,jk", a, b); });
  CHECK(test_util::contains(mismatch, "'j'"));
  CHECK(test_util::contains(mismatch, "sizes 3 and 4"));
  CHECK(test_util::contains(test_util::message_of<xj::ShapeError>([&] { (void)xj::einsum("...i,...i", xj::zeros({2, 3}), xj::zeros({4, 3})); }),
                            "under the ellipsis"));
  for (const char* spec : {"i...j...->ij", "i.j->ij", "ij->..j", "ij->i->j"})
    CHECK(test_util::contains(test_util::message_of<xj::Error>([&] { (void)xj::einsum(spec, a); }), spec));
  CHECK_THROWS_AS((void)xj::einsum("ijk...", a), xj::ShapeError);  // more letters than axes
  CHECK_THROWS_AS((void)xj::einsum("ij,jk", {a}), xj::Error);
  CHECK_THROWS_AS((void)xj::einsum("", std::vector<xj::Array>{}), xj::Error);
}

TEST_CASE("einsum: gradients of ellipsis, broadcast and three-operand specs match finite differences; vmap matches a loop") {
  // y's ellipsis axis of size 1 broadcasts against x's: its gradient sums over x's
  const xj::Array x0 = randn({2, 2, 3}, 30), y0 = randn({1, 3, 4}, 31), z0 = randn({4, 2}, 32);
  const auto f = [](const xj::Array& x, const xj::Array& y, const xj::Array& z) {
    return xj::sum(xj::square(xj::einsum("...ij,...jk,kl->...il", {x, y, z})));
  };
  const auto [gx, gy, gz] = xj::grad(f, xj::argnums<0, 1, 2>)(x0, y0, z0);
  const auto fd_of = [&](int which) {
    const xj::Array& at = which == 0 ? x0 : which == 1 ? y0 : z0;
    return test_util::fd_grad(
        [&](const std::vector<double>& v) {
          const xj::Array moved = xj::array<double>(v, at.shape());
          return f(which == 0 ? moved : x0, which == 1 ? moved : y0, which == 2 ? moved : z0).item<double>();
        },
        vec(at));
  };
  check_values(gx, fd_of(0), 1e-6);
  check_values(gy, fd_of(1), 1e-6);
  check_values(gz, fd_of(2), 1e-6);
  // vmap over the ellipsis operand's leading axis against a loop over its members
  const xj::Array batch = randn({3, 2, 2, 3}, 33), w = randn({3, 4}, 34);
  const auto h = [&](const xj::Array& x) { return xj::einsum("...ij,jk->...ik", x, w); };
  const xj::Array mapped = xj::vmap(h)(batch);
  for (std::int64_t i = 0; i < 3; ++i) check_values(mapped[i], vec(h(batch[i])), 1e-12);
}

// A user's program built with strict warnings (-Wshadow, -Wconversion, -Wsign-conversion, ...
// and -Werror; tests/compile_fail/meson.build): xjax's public headers must not warn where the
// user's templates instantiate them (a header hunt found -Wshadow and -Wsign-conversion errors).
#include <xjax/xjax.hpp>

#include <tuple>
#include <utility>
#include <vector>

namespace xj = xjax;

struct Params {
  BOOST_HANA_DEFINE_STRUCT(Params, (xj::Array, w), (xj::Array, b));
};

int main() {
  const xj::Array x = xj::ones({3});
  auto f = [](const xj::Array& a, double k) { return xj::sum(xj::sin(a) * k); };
  auto loss = [](const Params& p, const xj::Array& a) { return xj::sum(xj::tanh(a * p.w + p.b)); };
  Params p;
  p.w = xj::ones({3});
  p.b = xj::zeros({3});
  auto g1 = xj::grad([](const xj::Array& a) { return xj::sum(xj::sin(a) * 2.0); })(x);
  auto g2 = xj::grad(loss, xj::argnums_tuple<0, 1>)(p, x);
  auto v = xj::value_and_grad(loss)(p, x);
  auto j = xj::jit(f, {.static_argnums = {1}})(x, 3.0);
  auto jt = xj::jit([](const std::tuple<xj::Array, xj::Array>& t, double s) { return std::get<0>(t) * s; })(std::tuple{x, x}, 0.5);
  auto vm = xj::vmap([](const xj::Array& a) { return xj::sum(a * a); })(xj::ones({2, 3}));
  auto [c, ys] = xj::scan([](const xj::Array& carry, const xj::Array& xi) { return std::pair{carry + xi, carry}; }, x,
                          xj::ones({4, 3}));
  auto [out, f_vjp] = xj::vjp([](const xj::Array& a) { return xj::exp(a); }, x);
  auto [primal, tangent] = xj::jvp([](const xj::Array& a) { return xj::cos(a); }, std::tuple{x}, std::tuple{x});
  auto d = xj::dot_general(xj::ones({2, 3}), xj::ones({3, 2}), {{1}, {0}});
  auto tm = xj::tree_map([](const xj::Array& a) { return a * 2; }, p);
  auto ck = xj::checkpoint([](const xj::Array& a) { return xj::sin(xj::sin(a)); })(x);
  auto clipped = xj::custom_vjp([](const xj::Array& a) { return a; },
                                [](const xj::Array& a) { return std::pair{a, xj::None{}}; },
                                [](const xj::None&, const xj::Array& ct) { return std::tuple{xj::clamp(-1.0, ct, 1.0)}; });
  auto gc = xj::grad([&](const xj::Array& a) { return xj::sum(clipped(a)); })(x);
  (void)gc, (void)g1, (void)g2, (void)v, (void)j, (void)jt, (void)vm, (void)c, (void)ys, (void)out, (void)f_vjp;
  (void)primal, (void)tangent, (void)d, (void)tm, (void)ck;
  return 0;
}

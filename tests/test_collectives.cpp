// test_collectives.cpp: the collectives in a run of one process (no mpirun): an error before
// xj::distributed::initialize, and after it the identities they reduce to, with their
// derivatives. Several processes: tests/test_distributed.cpp (under mpirun).
#include <doctest/doctest.h>

#include <xjax/xjax.hpp>

#include "test_util.hpp"

namespace xj = xjax;
using namespace test_util;

TEST_CASE("collectives: an error before initialize; in one process, the identities they reduce to") {
  xj::Array x = randn({2, 3}, 1);
  REQUIRE_FALSE(xj::distributed::is_initialized());
  CHECK(xj::distributed::process_count() == 1);
  std::string msg = message_of<xj::Error>([&] { (void)xj::psum(x); });
  CHECK(contains(msg, "initialize"));
  CHECK(contains(msg, "psum"));

  xj::distributed::initialize();
  CHECK(xj::distributed::is_initialized());
  CHECK(xj::distributed::process_index() == 0);
  check_close(xj::psum(x), x, 1e-15);
  check_close(xj::pmean(x), x, 1e-15);
  check_close(xj::pmax(x), x, 1e-15);
  check_close(xj::all_gather(x, 1), xj::expand_dims(x, 1), 1e-15);
  check_close(xj::psum_scatter(xj::expand_dims(x, 0), 0), x, 1e-15);
  check_close(xj::ppermute(x, {{0, 0}}), x, 1e-15);
  check_close(xj::ppermute(x, {}), xj::zeros({2, 3}, xj::f64), 1e-15);  // nobody sends here
  CHECK_THROWS_AS(xj::ppermute(x, {{0, 1}}), xj::Error);                 // process 1 does not exist
  CHECK_THROWS_AS(xj::psum_scatter(x, 0), xj::ShapeError);               // axis 0 is not of size 1
  CHECK_THROWS_AS(xj::all_gather(x, 3), xj::ShapeError);                 // new axis beyond rank + 1
  const xj::Array counted = xj::psum(xj::ones({2}, xj::bool_));           // bools count in i32, as JAX's psum
  CHECK(counted.dtype() == xj::i32);
  check_close(xj::astype(counted, xj::f64), xj::ones({2}, xj::f64), 1e-15);
  check_close(xj::all_gather(x, -1), xj::expand_dims(x, 2), 1e-15);      // negative: from the end
  // tiled: one process's concatenation is x itself; the checks see the tiled shape rules.
  check_close(xj::all_gather(x, 1, {.tiled = true}), x, 1e-15);
  check_close(xj::psum_scatter(x, 0, {.tiled = true}), x, 1e-15);
  CHECK_THROWS_AS(xj::all_gather(x, 2, {.tiled = true}), xj::ShapeError);  // tiled: an existing axis
  check_close(xj::grad([](const xj::Array& y) { return xj::sum(xj::sin(xj::all_gather(y, 0, {.tiled = true}))); })(x),
              xj::cos(x), 1e-14);
  // Derivatives: d sum(psum(x) * x) = 2x here; jvp and grad agree, and so does jit.
  auto f = [](const xj::Array& y) { return xj::sum(xj::psum(y) * y); };
  check_close(xj::grad(f)(x), x * 2.0, 1e-14);
  check_close(xj::jit(xj::grad(f))(x), x * 2.0, 1e-14);
  CHECK_NOTHROW(xj::check_grads(f, std::tuple{x}, {.order = 2, .modes = {xj::fwd, xj::rev}}));
  std::string printed = str(xj::make_jaxpr([](const xj::Array& y) { return xj::all_gather(xj::psum(y), 0); })(x));
  INFO(printed);
  CHECK(contains(printed, "b:f64[2,3] = psum a"));
  CHECK(contains(printed, "all_gather[axis=0 axis_size=1 tiled=False]"));

  xj::distributed::finalize();
  CHECK_FALSE(xj::distributed::is_initialized());
  CHECK_THROWS_AS(xj::psum(x), xj::Error);
}

// test_xtensor.cpp: <xjax/xtensor.hpp> (issue 12): every dtype both ways, copies of views and lazy
// expressions, zero-copy adapt / as_xtensor proven by pointer equality, ownership and lifetime,
// memory accounting of external buffers, kernels on unaligned external memory, gradients through
// adapted arrays, and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include <xtensor/xbroadcast.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xview.hpp>

#include <xjax/xjax.hpp>
#include <xjax/xtensor.hpp>

#include "internal.hpp"  // detail::buffer_view
#include "test_util.hpp"

namespace xj = xjax;

namespace {

// from_xtensor -> to_xarray / as_xtensor round trip of one value type, with the expected dtype.
template <class T> void round_trip(const xt::xarray<T>& x, xj::DType want) {
  xj::Array a = xj::from_xtensor(x);
  CHECK(a.dtype() == want);
  CHECK(a.shape() == xj::Shape(x.shape().begin(), x.shape().end()));
  CHECK(a.raw_data() != static_cast<const void*>(x.data()));  // a copy
  xt::xarray<T> back = xj::to_xarray<T>(a);
  CHECK(back == x);
  CHECK(back.data() != a.data<T>());  // a copy
  auto view = xj::as_xtensor<T>(a);
  CHECK(view.data() == a.data<T>());  // no copy
  CHECK(view == x);
  xj::Array shared = xj::adapt(back);
  CHECK(shared.dtype() == want);
  CHECK(shared.raw_data() == static_cast<const void*>(back.data()));
}

}  // namespace

TEST_CASE("xtensor: every dtype round-trips (from_xtensor, to_xarray, as_xtensor, adapt)") {
  round_trip<float>({{1.5f, -2.f, 3.f}, {4.f, 5.f, 6.25f}}, xj::f32);
  round_trip<double>({{1e-300, -2.0}, {3.5, 4.0}}, xj::f64);
  round_trip<std::int32_t>({-7, 0, 2147483647}, xj::i32);
  round_trip<std::int64_t>({std::int64_t{-1} << 40, 3}, xj::i64);
  round_trip<std::uint32_t>({0u, 4000000000u, 7u}, xj::u32);
  round_trip<bool>({{true, false}, {false, true}}, xj::bool_);
  // Values agree with xjax's own readers too (bool is stored as bytes 0/1).
  CHECK(xj::from_xtensor(xt::xarray<bool>{true, false, true}).to_vector<int>() == std::vector<int>{1, 0, 1});
  CHECK(xj::from_xtensor(xt::xarray<std::uint32_t>{4000000000u}).item<std::uint32_t>() == 4000000000u);
  // xt::xtensor (fixed rank) and rank 0.
  xt::xtensor<double, 2> t = {{1, 2}, {3, 4}};
  CHECK(xj::from_xtensor(t).shape() == xj::Shape{2, 2});
  xj::Array s = xj::from_xtensor(xt::xarray<float>(2.5f));
  CHECK(s.ndim() == 0);
  CHECK(s.item<float>() == 2.5f);
  CHECK(xj::to_xarray<float>(s)() == 2.5f);
  // Empty.
  xj::Array e = xj::from_xtensor(xt::xarray<float>::from_shape({0, 3}));
  CHECK(e.shape() == xj::Shape{0, 3});
  CHECK(xj::to_xarray<float>(e).shape(1) == 3);
}

TEST_CASE("xtensor: arrays computed by xjax read back through as_xtensor and to_xarray") {
  xj::Array y = xj::reshape(xj::arange(6, xj::f32), {2, 3}) * 2.0f;  // [[0 2 4] [6 8 10]]
  auto v = xj::as_xtensor<float>(y);
  CHECK(v.dimension() == 2);
  CHECK(v.shape(0) == 2);
  CHECK(v.shape(1) == 3);
  CHECK(v(1, 2) == 10.f);
  CHECK(xt::sum(v)() == 30.f);
  CHECK(xt::argmax(xt::view(v, 0, xt::all()))() == 2);
  xt::xarray<float> want = {{0.f, 2.f, 4.f}, {6.f, 8.f, 10.f}};
  CHECK(xj::to_xarray<float>(y) == want);
  // A view of a row of y (buffer_view: an offset into y's buffer) is viewed at that offset.
  xj::Array row = y[1];
  CHECK(xj::as_xtensor<float>(row).data() == row.data<float>());
  CHECK(xj::as_xtensor<float>(row) == xt::xarray<float>{6.f, 8.f, 10.f});
}

TEST_CASE("xtensor: as_xtensor is read-only and keeps the array's buffer alive") {
  using View = decltype(xj::as_xtensor<float>(xj::Array()));
  static_assert(std::is_const_v<std::remove_reference_t<decltype(std::declval<View&>()(0))>>,
                "as_xtensor must not hand out writable elements");
  auto make = [] { return xj::as_xtensor<float>(xj::array({1.f, 2.f, 3.f}) + 1.0f); };
  auto v = make();  // the array is gone; the view holds its buffer
  CHECK(v == xt::xarray<float>{2.f, 3.f, 4.f});
  xj::Array a = xj::array({7.f, 8.f});
  const auto before = xj::memory_stats().live_bytes;
  {
    auto view = xj::as_xtensor<float>(a);
    CHECK(xj::memory_stats().live_bytes == before);  // no copy
    a = xj::Array();
    CHECK(view(1) == 8.f);
  }
  CHECK(xj::memory_stats().live_bytes == before - 8);  // freed with the view
}

TEST_CASE("xtensor: from_xtensor copies views, non-contiguous and lazy expressions row-major") {
  xt::xarray<double> a = xt::reshape_view(xt::arange<double>(12), {3, 4});  // a(i, j) = 4i + j
  xt::xarray<double> b = xt::ones<double>({3, 4}) * 0.5;

  SUBCASE("xt::view with a range and a step") {
    auto v = xt::view(a, xt::range(0, 3, 2), xt::range(1, 4));  // rows 0, 2; columns 1..3
    xj::Array x = xj::from_xtensor(v);
    CHECK(x.shape() == xj::Shape{2, 3});
    CHECK(test_util::vec(x) == std::vector<double>{1, 2, 3, 9, 10, 11});
  }
  SUBCASE("strided view with a negative step") {
    auto v = xt::strided_view(a, {xt::all(), xt::range(xt::placeholders::_, xt::placeholders::_, -2)});
    xj::Array x = xj::from_xtensor(v);
    CHECK(x.shape() == xj::Shape{3, 2});
    CHECK(test_util::vec(x) == std::vector<double>{3, 1, 7, 5, 11, 9});
  }
  SUBCASE("transposed") {
    xj::Array x = xj::from_xtensor(xt::transpose(a));
    CHECK(x.shape() == xj::Shape{4, 3});
    CHECK(test_util::vec(x) == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
    // The same as xjax's own transpose of the copied array.
    CHECK(test_util::vec(xj::transpose(xj::from_xtensor(a))) == test_util::vec(x));
  }
  SUBCASE("broadcast") {
    xt::xarray<float> r = {1.f, 2.f, 3.f};
    xj::Array x = xj::from_xtensor(xt::broadcast(r, {2, 3}));
    CHECK(x.shape() == xj::Shape{2, 3});
    CHECK(test_util::vec(x) == std::vector<double>{1, 2, 3, 1, 2, 3});
  }
  SUBCASE("lazy expression a + 2 * b, value type from the expression") {
    xj::Array x = xj::from_xtensor(a + 2.0 * b);
    CHECK(x.dtype() == xj::f64);
    std::vector<double> want;
    for (int i = 0; i < 12; ++i) want.push_back(i + 1.0);
    CHECK(test_util::vec(x) == want);
    // float + int promotes to float; a comparison gives bools.
    xt::xarray<float> f = {1.f, 2.f};
    CHECK(xj::from_xtensor(f + 1).dtype() == xj::f32);
    xj::Array mask = xj::from_xtensor(a > 5.0);
    CHECK(mask.dtype() == xj::bool_);
    CHECK(xj::sum(xj::astype(mask, xj::i32)).item<int>() == 6);
  }
  SUBCASE("column-major container") {
    xt::xarray<double, xt::layout_type::column_major> c = {{1, 2, 3}, {4, 5, 6}};
    CHECK(test_util::vec(xj::from_xtensor(c)) == std::vector<double>{1, 2, 3, 4, 5, 6});
  }
}

TEST_CASE("xtensor: adapt shares a row-major buffer (pointer equality) and computes on it") {
  xt::xarray<float> x = {{1.f, 2.f}, {3.f, 4.f}};
  const auto before = xj::memory_stats();
  xj::Array a = xj::adapt(x);
  CHECK(a.raw_data() == static_cast<const void*>(x.data()));
  CHECK(a.shape() == xj::Shape{2, 2});
  // External memory is not xjax's allocation.
  CHECK(xj::memory_stats().live_bytes == before.live_bytes);
  CHECK(xj::memory_stats().allocations == before.allocations);
  // A computation reads it; xjax never writes into it.
  xj::Array y = xj::exp(a) + a;
  CHECK(y.raw_data() != static_cast<const void*>(x.data()));
  CHECK(x == xt::xarray<float>{{1.f, 2.f}, {3.f, 4.f}});
  auto yv = xj::as_xtensor<float>(y);
  CHECK(yv(1, 1) == doctest::Approx(std::exp(4.f) + 4.f));
  // as_xtensor of the adapted array is the xarray's own memory.
  CHECK(xj::as_xtensor<float>(a).data() == x.data());
  // Views of an adapted array's buffer (as the runtime makes them) keep pointing into it.
  CHECK(xj::detail::buffer_view(a, 8, {{2}, xj::f32}).raw_data() == static_cast<const void*>(x.data() + 2));
  // Dropping the arrays does not free the xarray's memory nor touch the counters.
  a = xj::Array();
  CHECK(xj::memory_stats().live_bytes == before.live_bytes + 16);  // y only
  CHECK(x(1, 0) == 3.f);

  // xt::xtensor<T, N> too.
  xt::xtensor<std::int64_t, 1> t = {5, 6, 7};
  xj::Array ti = xj::adapt(t);
  CHECK(ti.dtype() == xj::i64);
  CHECK(ti.raw_data() == static_cast<const void*>(t.data()));
  CHECK(xj::sum(ti).item<std::int64_t>() == 18);
}

TEST_CASE("xtensor: adapt of a column-major container copies into row-major order") {
  xt::xarray<float, xt::layout_type::column_major> c = {{1.f, 2.f, 3.f}, {4.f, 5.f, 6.f}};
  xj::Array a = xj::adapt(c);
  CHECK(a.raw_data() != static_cast<const void*>(c.data()));
  CHECK(test_util::vec(a) == std::vector<double>{1, 2, 3, 4, 5, 6});
  xt::xtensor<double, 2, xt::layout_type::column_major> ct = {{1, 2}, {3, 4}};
  xj::Array b = xj::adapt(std::move(ct));
  CHECK(test_util::vec(b) == std::vector<double>{1, 2, 3, 4});
  // A dynamic-layout container that is row-major is shared.
  xt::xarray<float, xt::layout_type::dynamic> d(std::vector<std::size_t>{2, 2}, 1.f, xt::layout_type::row_major);
  CHECK(xj::adapt(d).raw_data() == static_cast<const void*>(d.data()));
  xt::xarray<float, xt::layout_type::dynamic> dc(std::vector<std::size_t>{2, 2}, 1.f, xt::layout_type::column_major);
  dc(0, 1) = 2.f;
  xj::Array ac = xj::adapt(dc);
  CHECK(ac.raw_data() != static_cast<const void*>(dc.data()));
  CHECK(test_util::vec(ac) == std::vector<double>{1, 2, 1, 1});
}

TEST_CASE("xtensor: adapt(std::move(x)) owns the container without copying") {
  xt::xarray<double> x = xt::linspace<double>(0.0, 1.0, 5);
  const double* p = x.data();
  xj::Array a = xj::adapt(std::move(x));
  CHECK(a.raw_data() == static_cast<const void*>(p));  // same buffer, moved not copied
  xj::Array tail = xj::detail::buffer_view(a, 32, {{}, xj::f64});  // shares the buffer
  a = xj::Array();
  CHECK(tail.raw_data() == static_cast<const void*>(p + 4));
  CHECK(tail.item<double>() == 1.0);  // still alive: the buffer owns the moved container

  // The owner is released with the last array using the buffer (observed through a weak_ptr).
  auto owner = std::make_shared<std::vector<float>>(std::vector<float>{1.f, 2.f, 3.f});
  std::weak_ptr<std::vector<float>> watch = owner;
  xj::Array e = xj::detail::external_array(owner->data(), {{3}, xj::f32}, owner);
  owner.reset();
  CHECK(!watch.expired());
  xj::Array e1 = xj::detail::buffer_view(e, 4, {{}, xj::f32});
  e = xj::Array();
  CHECK(!watch.expired());
  CHECK(e1.item<float>() == 2.f);
  e1 = xj::Array();
  CHECK(watch.expired());
}

TEST_CASE("xtensor: kernels run on external memory that is not 64-byte aligned") {
  // Offsets of one element into a 64-byte aligned block: every kernel must load unaligned.
  std::vector<double> storage(1 + 37 * 5 + 37 * 3);
  for (std::size_t i = 0; i < storage.size(); ++i) storage[i] = std::sin(0.37 * static_cast<double>(i));
  const double* p = storage.data() + 1;
  xj::Array x = xj::detail::external_array(p, {{37, 5}, xj::f64}, nullptr);
  xj::Array w = xj::detail::external_array(p + 37 * 5 - 2, {{5, 3}, xj::f64}, nullptr);
  xj::Array xc = xj::array<double>(std::vector<double>(p, p + 37 * 5), {37, 5});
  xj::Array wc = xj::array<double>(std::vector<double>(p + 37 * 5 - 2, p + 37 * 5 + 13), {5, 3});
  auto f = [](const xj::Array& a, const xj::Array& b) {
    return xj::sum(xj::tanh(xj::matmul(a, b)) * 2.0 + xj::exp(a[0][0])) + xj::sum(xj::exp(a) * a, {0})[1];
  };
  // (BLAS may pick other code paths for other alignments: equal up to rounding.)
  const double want = f(xc, wc).item<double>();
  CHECK(f(x, w).item<double>() == doctest::Approx(want).epsilon(1e-12));
  auto jf = xj::jit(f);
  CHECK(jf(x, w).item<double>() == doctest::Approx(want).epsilon(1e-12));
  // Elementwise chains long enough for the simd body and a tail (37 * 5 = 185 elements).
  CHECK(test_util::vec(xj::sin(x) * x + 1.0) == test_util::vec(xj::sin(xc) * xc + 1.0));
  CHECK(storage[1] == std::sin(0.37));  // untouched
}

TEST_CASE("xtensor: gradients through adapted arrays match finite differences") {
  // loss(w) = sum((X w - y)^2) on xtensor data; d/dw = 2 X^T (X w - y).
  xt::xarray<double> X = {{1.0, 2.0}, {3.0, -1.0}, {0.5, 0.25}};
  xt::xarray<double> y = {1.0, 2.0, 3.0};
  xt::xarray<double> w0 = {0.3, -0.7};
  xj::Array Xa = xj::adapt(X);
  xj::Array ya = xj::adapt(y);
  auto loss = [&](const xj::Array& w) {
    xj::Array r = xj::matmul(Xa, w) - ya;
    return xj::sum(r * r);
  };
  xj::Array g = xj::grad(loss)(xj::adapt(w0));
  CHECK(g.shape() == xj::Shape{2});
  auto gv = xj::as_xtensor<double>(g);
  const double h = 1e-6;
  for (std::size_t i = 0; i < 2; ++i) {
    xt::xarray<double> wp = w0, wm = w0;
    wp(i) += h;
    wm(i) -= h;
    auto loss_of = [&](const xt::xarray<double>& w) {
      xt::xarray<double> r = xt::sum(X * xt::view(w, xt::newaxis(), xt::all()), {1}) - y;
      return xt::sum(r * r)();
    };
    const double fd = (loss_of(wp) - loss_of(wm)) / (2 * h);
    CHECK(gv(i) == doctest::Approx(fd).epsilon(1e-6));
  }
  // Inside a traced function: from_xtensor gives a constant; as_xtensor of a tracer throws.
  auto traced = [&](const xj::Array& w) {
    CHECK_THROWS_AS((void)xj::as_xtensor<double>(w), xj::TracerError);
    CHECK_THROWS_AS((void)xj::to_xarray<double>(w), xj::TracerError);
    return xj::sum(w * xj::from_xtensor(xt::xarray<double>{2.0, 3.0}));
  };
  CHECK(test_util::vec(xj::grad(traced)(xj::adapt(w0))) == std::vector<double>{2.0, 3.0});
}

TEST_CASE("xtensor: errors") {
  xj::Array f = xj::array({1.f, 2.f});
  CHECK_THROWS_AS((void)xj::as_xtensor<double>(f), xj::TypeError);
  CHECK_THROWS_AS((void)xj::to_xarray<std::int32_t>(f), xj::TypeError);
  CHECK_THROWS_AS((void)xj::as_xtensor<bool>(f), xj::TypeError);
  CHECK_THROWS_AS((void)xj::as_xtensor<float>(xj::Array()), xj::Error);
  try {
    (void)xj::to_xarray<double>(f);
    FAIL("expected a TypeError");
  } catch (const xj::TypeError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("xj::to_xarray") != std::string::npos);
    CHECK(msg.find("f32[2]") != std::string::npos);
    CHECK(msg.find("astype") != std::string::npos);
  }
  // Misaligned external pointers are rejected (kernels need element alignment).
  alignas(8) unsigned char bytes[16] = {};
  CHECK_THROWS_AS((void)xj::detail::external_array(bytes + 1, {{2}, xj::f32}, nullptr), xj::Error);
  CHECK_THROWS_AS((void)xj::detail::external_array(nullptr, {{2}, xj::f32}, nullptr), xj::Error);
  CHECK(xj::detail::external_array(nullptr, {{0}, xj::f32}, nullptr).size() == 0);
}

TEST_CASE("xtensor: an as_xtensor view keeps its elements when the array is donated to jit (review finding: it read freed memory)") {
  auto f = xj::jit([](const xj::Array& x) { return x * 2.0f + 1.0f; }, {.donate_argnums = {0}});
  xj::Array x = xj::full({1024}, 3.0, xj::f32);
  const auto view = xj::as_xtensor<float>(x);
  {
    const xj::Array y = f(x);  // may not write into the buffer the view reads
    CHECK(y.to_vector<float>()[0] == 7.0f);
  }
  const xj::Array z = xj::full({1024}, 42.0, xj::f32);  // the arena may hand out a freed block
  for (std::size_t i = 0; i < 1024; i += 111) CHECK(view(i) == 3.0f);
}

// test_runtime.cpp: the counting allocator (live/peak bytes, liveness of the interpreter:
// Acceptance 4 of issue 2) and the per-primitive execution counters, from several threads.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include <xjax/xjax.hpp>

#include "small_blocks.hpp"
#include "test_util.hpp"

namespace xj = xjax;

namespace {

constexpr std::int64_t kN = 1'000'000;
constexpr std::int64_t kBytes = kN * 4;  // one f32 buffer of the chain
constexpr int kChain = 100;

// Step i of the chain: unary elementwise primitives only (a literal would add a broadcast buffer).
xj::Array step(int i, const xj::Array& y) {
  switch (i % 7) {
    case 0: return xj::sin(y);
    case 1: return xj::cos(y);
    case 2: return xj::neg(y);
    case 3: return xj::tanh(y);
    case 4: return xj::exp(y);
    case 5: return xj::logistic(y);
    default: return xj::abs(y);
  }
}

float step_ref(int i, float y) {
  switch (i % 7) {
    case 0: return std::sin(y);
    case 1: return std::cos(y);
    case 2: return -y;
    case 3: return std::tanh(y);
    case 4: return std::exp(y);
    case 5: return 1.0f / (1.0f + std::exp(-y));
    default: return std::abs(y);
  }
}

xj::Array chain(xj::Array y) {
  for (int i = 0; i < kChain; ++i) y = step(i, y);
  return y;
}

xj::Array chain_input() {
  std::vector<float> v(static_cast<std::size_t>(kN));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.004f - 2.0f;
  return xj::array<float>(v, {kN});
}

void check_chain_values(const xj::Array& x, const xj::Array& y) {
  REQUIRE(y.aval() == xj::ShapedArray{{kN}, xj::f32});
  const float* xs = x.data<float>();
  const float* ys = y.data<float>();
  for (std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{499}, std::size_t{500}, std::size_t{999},
                        std::size_t{123456}, static_cast<std::size_t>(kN - 1)}) {
    float r = xs[k];
    for (int i = 0; i < kChain; ++i) r = step_ref(i, r);
    CHECK(ys[k] == doctest::Approx(r).epsilon(1e-4));
  }
}

// Live buffers of the chain's size at the peak, counting the input (alive throughout).
double peak_buffers(std::int64_t live_before, std::int64_t peak) {
  return static_cast<double>(peak - live_before + kBytes) / static_cast<double>(kBytes);
}

}  // namespace

TEST_CASE("runtime: memory_stats counts live bytes, allocations and the peak") {
  auto s0 = xj::memory_stats();
  xj::reset_peak_memory();
  CHECK(xj::memory_stats().peak_bytes == s0.live_bytes);
  {
    xj::Array a = xj::zeros({1000});  // 4000 bytes
    auto s1 = xj::memory_stats();
    CHECK(s1.live_bytes == s0.live_bytes + 4000);
    CHECK(s1.allocations == s0.allocations + 1);
    CHECK(s1.peak_bytes >= s1.live_bytes);
    {
      xj::Array b = xj::zeros({10, 100}, xj::f64);  // 8000 bytes
      CHECK(xj::memory_stats().live_bytes == s0.live_bytes + 12000);
      xj::Array c = b;  // a handle copy shares the buffer
      CHECK(xj::memory_stats().live_bytes == s0.live_bytes + 12000);
    }
    auto s2 = xj::memory_stats();
    CHECK(s2.live_bytes == s0.live_bytes + 4000);
    CHECK(s2.peak_bytes == s0.live_bytes + 12000);
    xj::reset_peak_memory();
    CHECK(xj::memory_stats().peak_bytes == s0.live_bytes + 4000);
  }
  CHECK(xj::memory_stats().live_bytes == s0.live_bytes);
  // Each dtype's itemsize is counted.
  {
    xj::Array u = xj::zeros({3}, xj::bool_), v = xj::zeros({3}, xj::i64), w = xj::zeros({3}, xj::u32);
    CHECK(xj::memory_stats().live_bytes == s0.live_bytes + 3 + 24 + 12);
  }
  CHECK(xj::memory_stats().live_bytes == s0.live_bytes);
}

TEST_CASE("runtime: tracing allocates no buffers") {
  auto before = xj::memory_stats();
  auto j = xj::make_jaxpr([](const xj::Array& x) { return xj::sin(xj::matmul(x, x)); })(xj::zeros({64, 64}));
  // Only the argument used to trace (16 KiB) was ever allocated; nothing else stays alive.
  CHECK(xj::memory_stats().allocations == before.allocations + 1);
  CHECK(xj::memory_stats().live_bytes == before.live_bytes);
  CHECK(j->eqns.size() == 2);
}

TEST_CASE("runtime: a chain of 100 elementwise primitives peaks at <= 3 live buffers (eager)") {
  xj::Array x = chain_input();
  xj::Array y;
  const std::int64_t live_before = xj::memory_stats().live_bytes;  // includes x
  xj::reset_peak_memory();
  y = chain(x);
  auto s = xj::memory_stats();
  double buffers = peak_buffers(live_before, s.peak_bytes);
  INFO("peak buffers (incl. the input): " << buffers);
  CHECK(buffers <= 3.0 + 1e-3);
  CHECK(buffers >= 2.0);  // the measurement is real: at least one result alongside the input
  CHECK(s.live_bytes == live_before + kBytes);  // only y is left besides x
  check_chain_values(x, y);
}

TEST_CASE("runtime: a chain of 100 elementwise primitives peaks at <= 3 live buffers (eval_jaxpr)") {
  xj::Array x = chain_input();
  auto j = xj::make_jaxpr(chain)(x);
  REQUIRE(j->eqns.size() == static_cast<std::size_t>(kChain));
  xj::reset_eval_counts();
  const std::int64_t live_before = xj::memory_stats().live_bytes;  // includes x
  xj::reset_peak_memory();
  std::vector<xj::Array> outs;
  {
    std::vector<xj::Array> args{x};
    outs = xj::eval_jaxpr(j, args);
  }
  auto s = xj::memory_stats();
  double buffers = peak_buffers(live_before, s.peak_bytes);
  INFO("peak buffers (incl. the input): " << buffers);
  CHECK(buffers <= 3.0 + 1e-3);
  CHECK(buffers >= 2.0);
  REQUIRE(outs.size() == 1);
  CHECK(s.live_bytes == live_before + kBytes);
  check_chain_values(x, outs[0]);
  // Each equation ran exactly once.
  std::int64_t total = 0;
  for (const auto& [name, n] : xj::eval_counts()) total += n;
  CHECK(total == kChain);
  CHECK(xj::eval_counts().at("sin") == (kChain + 6) / 7);
}

TEST_CASE("runtime: the interpreter frees a value after its last use, not at the end") {
  // y = sin(x); z = cos(y); w = exp(z) + ... : with a value used late (x at the end) the peak is
  // x, the two live values of a step, nothing more.
  xj::Array x = chain_input();
  auto f = [](const xj::Array& a) {
    xj::Array y = a;
    for (int i = 0; i < 20; ++i) y = xj::sin(y);
    return xj::add(y, a);  // a is used again at the end: it must stay, the others must not
  };
  auto j = xj::make_jaxpr(f)(x);
  const std::int64_t live_before = xj::memory_stats().live_bytes;
  xj::reset_peak_memory();
  std::vector<xj::Array> args{x};
  auto outs = xj::eval_jaxpr(j, args);
  args.clear();
  double buffers = peak_buffers(live_before, xj::memory_stats().peak_bytes);
  INFO("peak buffers (incl. the input): " << buffers);
  CHECK(buffers <= 3.0 + 1e-3);
}

TEST_CASE("runtime: eval_counts counts executions per primitive") {
  xj::reset_eval_counts();
  CHECK(xj::eval_counts().empty());
  xj::Array x = xj::array<float>({1, 2, 3}, {3});
  (void)xj::sin(x);
  (void)xj::sin(xj::cos(x));
  (void)(x * 2.0f);  // broadcast of the scalar, then mul
  auto c = xj::eval_counts();
  CHECK(c.size() == 4);
  CHECK(c["sin"] == 2);
  CHECK(c["cos"] == 1);
  CHECK(c["mul"] == 1);
  CHECK(c["broadcast_in_dim"] == 1);

  // Tracing executes nothing; evaluating the jaxpr executes each equation once per call.
  xj::reset_eval_counts();
  auto j = xj::make_jaxpr([](const xj::Array& a) { return xj::exp(xj::sin(a)) + xj::sin(a); })(x);
  CHECK(xj::eval_counts().empty());
  std::vector<xj::Array> args{x};
  for (int i = 0; i < 3; ++i) (void)xj::eval_jaxpr(j, args);
  c = xj::eval_counts();
  CHECK(c.size() == 3);
  CHECK(c["sin"] == 6);
  CHECK(c["exp"] == 3);
  CHECK(c["add"] == 3);

  xj::reset_eval_counts();
  CHECK(xj::eval_counts().empty());
}

TEST_CASE("runtime: counters and the allocator are exact under two threads") {
  constexpr int iters = 2000;
  xj::reset_eval_counts();
  const std::int64_t live_before = xj::memory_stats().live_bytes;
  const std::int64_t allocs_before = xj::memory_stats().allocations;
  std::atomic<int> wrong{0};
  auto worker = [&](bool use_sin) {
    xj::Array x = xj::array<float>({0.5f, 1.0f}, {2});  // 1 allocation
    for (int i = 0; i < iters; ++i) {
      xj::Array y = use_sin ? xj::sin(x) : xj::cos(x);  // 1 allocation each
      float want = use_sin ? std::sin(0.5f) : std::cos(0.5f);
      if (std::abs(y.to_vector<float>()[0] - want) > 1e-6f) ++wrong;
      (void)xj::memory_stats();
      (void)xj::eval_counts();
    }
  };
  std::thread t0(worker, true), t1(worker, false);
  t0.join();
  t1.join();
  CHECK(wrong.load() == 0);
  auto c = xj::eval_counts();
  CHECK(c["sin"] == iters);
  CHECK(c["cos"] == iters);
  CHECK(xj::memory_stats().live_bytes == live_before);
  CHECK(xj::memory_stats().allocations == allocs_before + 2 * (iters + 1));
}

TEST_CASE("runtime: eval_jaxpr of one jaxpr on two threads at once") {
  xj::Array w = xj::array<float>({1, 2, 3, 4}, {2, 2});
  auto j = xj::make_jaxpr([w](const xj::Array& x) { return xj::tanh(xj::matmul(x, w)); })(xj::zeros({3, 2}));
  xj::reset_eval_counts();
  constexpr int iters = 300;
  std::atomic<int> wrong{0};
  auto worker = [&](float k) {
    std::vector<xj::Array> args{xj::full({3, 2}, k)};
    for (int i = 0; i < iters; ++i) {
      auto out = xj::eval_jaxpr(j, args).at(0).to_vector<float>();
      // row [k, k] @ w = [4k, 6k]
      if (std::abs(out[0] - std::tanh(4 * k)) > 1e-6f || std::abs(out[5] - std::tanh(6 * k)) > 1e-6f) ++wrong;
    }
  };
  std::thread t0(worker, 0.1f), t1(worker, -0.2f);
  t0.join();
  t1.join();
  CHECK(wrong.load() == 0);
  auto c = xj::eval_counts();
  CHECK(c["dot_general"] == 2 * iters);
  CHECK(c["tanh"] == 2 * iters);
}

// Each thread keeps a cache of its freed blocks in front of the shared arena (runtime.cpp).
TEST_CASE("runtime: a thread's cached blocks are counted, reused, and released") {
  const bool arena_off = test_util::arena_off();
  xj::release_arena_memory();
  REQUIRE(xj::memory_stats().arena_bytes == 0);
  constexpr std::int64_t n = 1 << 14;  // 64 KiB of f32
  // Freed on a worker: held by its cache while it runs, and by the shared arena once it ended.
  std::atomic<std::int64_t> seen_by_worker{-1};
  std::thread worker([&] {
    { xj::Array a = xj::zeros({n}); }
    seen_by_worker = xj::memory_stats().arena_bytes;
  });
  worker.join();
  if (arena_off) {
    CHECK(seen_by_worker.load() == 0);
    CHECK(xj::memory_stats().arena_bytes == 0);
    return;
  }
  CHECK(seen_by_worker.load() >= n * 4);
  CHECK(xj::memory_stats().arena_bytes >= n * 4);
  // The block is reused by this thread without asking the system.
  const auto fresh = xj::memory_stats().system_allocations;
  { xj::Array b = xj::zeros({n}); }
  CHECK(xj::memory_stats().system_allocations == fresh);
  CHECK(xj::memory_stats().peak_reserved_bytes >= xj::memory_stats().peak_bytes);
  xj::release_arena_memory();
  CHECK(xj::memory_stats().arena_bytes == 0);
  // A worker that holds cached blocks while another thread releases the arena empties its cache
  // at its next allocation.
  std::atomic<int> phase{0};
  std::atomic<std::int64_t> after_release{-1};
  std::thread holder([&] {
    { xj::Array a = xj::zeros({n}); }  // now in the holder's cache
    phase = 1;
    while (phase.load() != 2) std::this_thread::yield();
    xj::Array tiny = xj::zeros({1});  // next allocation: the cache releases its blocks first
    after_release = xj::memory_stats().arena_bytes;
  });
  while (phase.load() != 1) std::this_thread::yield();
  CHECK(xj::memory_stats().arena_bytes >= n * 4);  // the holder's cache, counted from here
  xj::release_arena_memory();
  phase = 2;
  holder.join();
  CHECK(after_release.load() == 0);  // the holder's 64 KiB block went back to the system
  CHECK(xj::memory_stats().arena_bytes < n * 4);  // only `tiny`, freed as the holder ended
  xj::release_arena_memory();
  CHECK(xj::memory_stats().arena_bytes == 0);
}

// Array handles come from a per-thread cache of small blocks (src/small_blocks.hpp).
TEST_CASE("runtime: small freed blocks are reused by size class, across threads without loss") {
  using xjax::detail::SmallBlocks;
  const bool cache_off = test_util::arena_off();
  void* p = SmallBlocks::take(40);
  SmallBlocks::give(p, 40);
  void* q = SmallBlocks::take(48);  // same 16-byte class (33..48)
  CHECK((q == p) != cache_off);
  SmallBlocks::give(q, 48);
  void* big = SmallBlocks::take(SmallBlocks::kMaxBytes + 1);  // beyond the cache: plain new/delete
  CHECK(big != nullptr);
  SmallBlocks::give(big, SmallBlocks::kMaxBytes + 1);
  // Blocks taken here and freed on a thread that then ends: the thread's lists release them
  // (LeakSanitizer in the sanitizer stage would report a loss).
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i) blocks.push_back(SmallBlocks::take(64));
  std::thread t([&] {
    for (void* b : blocks) SmallBlocks::give(b, 64);
  });
  t.join();
  // Arrays made and dropped on many threads keep the counters exact.
  const auto live = xj::memory_stats().live_bytes;
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k)
    ts.emplace_back([] {
      for (int i = 0; i < 200; ++i) (void)(xj::zeros({8}) + 1.0);
    });
  for (auto& th : ts) th.join();
  CHECK(xj::memory_stats().live_bytes == live);
}

TEST_CASE("arena: a block freed when the arena is full takes the place of a size no longer used") {
  // Issue 26's P3 rows: the blocks an earlier computation left filled the arena, so every block
  // the running one freed went back to the system and came back as fresh pages the next call.
  if (std::getenv("XJAX_ARENA_BYTES")) {
    MESSAGE("skipped: XJAX_ARENA_BYTES set (the test fills the default 512 MiB)");
    return;
  }
  xj::release_arena_memory();
  {
    std::vector<xj::Array> old;  // 8 x 64 MiB: the whole arena once freed
    for (int i = 0; i < 8; ++i) old.push_back(xjax::detail::alloc_array(xj::ShapedArray{{std::int64_t{16} << 20}, xj::f32}));
  }
  REQUIRE(xj::memory_stats().arena_bytes == std::int64_t{512} << 20);
  const xj::ShapedArray now{{std::int64_t{8} << 20}, xj::f32};  // 32 MiB: past a thread's own cache
  { const xj::Array a = xjax::detail::alloc_array(now); }  // a new size: from the system, then freed into the full arena
  const std::int64_t before = xj::memory_stats().system_allocations;
  { const xj::Array b = xjax::detail::alloc_array(now); }  // the block just freed, kept
  CHECK(xj::memory_stats().system_allocations == before);
  CHECK(xj::memory_stats().arena_bytes <= std::int64_t{512} << 20);
  xj::release_arena_memory();
}

TEST_CASE("an empty batch allocates nothing sized by its other dimensions (qr, svd, lu, top_k, reduce_window, conv)") {
  // Each output is empty; the kernels had sized their scratch by the matrices / lines / windows
  // first (2^40 elements here: std::bad_alloc; at 20000 x 20000, 1.5 GiB and 0.7 s for nothing).
  const std::int64_t huge = std::int64_t{1} << 40, side = std::int64_t{1} << 31;  // side^2: 2^62 elements
  const xj::Array matrices = xj::zeros({0, side, side}, xj::f64);
  CHECK(xj::linalg::qr(matrices).first.shape() == xj::Shape{0, side, side});
  CHECK(xj::linalg::svdvals(matrices).shape() == xj::Shape{0, side});
  CHECK(xj::linalg::det(matrices).shape() == xj::Shape{0});
  // matrices of more than 2^63 - 1 elements each, in an empty batch: the diagonal's flattened
  // matrices overflowed (UBSan: signed overflow in diagonal)
  CHECK(xj::diagonal(xj::zeros({0, huge, huge}, xj::f64), 0, -2, -1).shape() == xj::Shape{0, huge});
  CHECK(xj::top_k(xj::zeros({0, huge}, xj::f32), 2).first.shape() == xj::Shape{0, 2});
  CHECK(xj::max_pool(xj::zeros({0, huge, 1}, xj::f32), {2}).shape()[0] == 0);
  CHECK(xj::reduce_window(xj::zeros({huge, 0}, xj::f32), 0.0, xj::WindowOp::add, {2, 1}, {1, 1}, "VALID").shape() == xj::Shape{huge - 1, 0});
  const xj::Array images = xj::zeros({0, 1, huge}, xj::f32), kernel = xj::ones({1, 1, 3}, xj::f32);
  CHECK(xj::conv(images, kernel, {1}, "SAME").shape() == xj::Shape{0, 1, huge});
  // the kernel's gradient from an empty batch: zeros of the kernel's shape
  const xj::Array small_images = xj::zeros({0, 1, 5}, xj::f32);
  const xj::Array g = xj::grad([&](const xj::Array& w) { return xj::sum(xj::conv(small_images, w, {1}, "SAME")); })(kernel);
  CHECK(g.to_vector<float>() == std::vector<float>(3, 0.0f));
}

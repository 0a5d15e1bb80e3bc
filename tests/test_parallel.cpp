// test_parallel.cpp: the workers behind xjax's own kernel loops (src/kernels/parallel.hpp): every
// index in exactly one chunk, chunks run at the same time, the thread count follows OpenBLAS's,
// exceptions reach the caller, nested and concurrent loops stay correct; each for xjax's own
// workers and for OpenBLAS's (loops whose chunks call no BLAS; run again with
// XJAX_LOOP_THREADS=own, the test 'parallel_own_threads').
#include <cblas.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "kernels/parallel.hpp"
#include "test_util.hpp"
#include "xjax/xjax.hpp"

namespace xj = xjax;

// A child of fork() inherits the thread-local blocks of the parent's other threads (OpenBLAS's
// workers, which ran lent chunks, among them) with nothing in the child referring to them:
// LeakSanitizer, checking at the child's exit, would report them. The children of these tests
// turn it off (the hook LeakSanitizer asks at exit).
namespace {
bool g_forked_test_child = false;
}  // namespace
#if defined(__SANITIZE_ADDRESS__)
extern "C" int __lsan_is_turned_off() { return g_forked_test_child ? 1 : 0; }
#endif

namespace {

using xjax::detail::ChunkCalls;
using xjax::detail::parallel_for;

constexpr ChunkCalls kBothKinds[] = {ChunkCalls::may_call_blas, ChunkCalls::no_blas};

const char* kind_name(ChunkCalls calls) { return calls == ChunkCalls::no_blas ? "no_blas" : "may_call_blas"; }

/// Sets OpenBLAS's (and so xjax's) thread count for a scope.
struct Threads {
  int before = openblas_get_num_threads();
  explicit Threads(int n) { openblas_set_num_threads(n); }
  ~Threads() { openblas_set_num_threads(before); }
};

// Whether a counter other threads advance grows by `by` within 10 s (a stuck thread's does not).
bool grows(const std::atomic<std::int64_t>& counter, std::int64_t by) {
  const std::int64_t before = counter;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (counter < before + by && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return counter >= before + by;
}

// A thread stuck after a fork cannot be joined: fail, and end the process before the suite hangs.
void end_if_stuck(bool progressed, const char* what) {
  if (progressed) return;
  FAIL_CHECK(what);
  std::fflush(nullptr);
  std::_Exit(3);
}

}  // namespace

TEST_CASE("parallel_for: every index once, at most kernel_threads() chunks, none below the grain") {
  for (int threads : {1, 2, 3, 4}) {
    Threads t(threads);
    CHECK(xjax::detail::kernel_threads() == threads);
    for (ChunkCalls calls : kBothKinds)
    for (std::int64_t n : {0, 1, 7, 1000})
      for (std::int64_t grain : {1, 10, 400}) {
        INFO("threads " << threads << " n " << n << " grain " << grain << " " << kind_name(calls));
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        std::atomic<int> chunks{0};
        std::mutex m;
        std::set<std::thread::id> ids;
        parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
          CHECK(begin < end);
          ++chunks;
          {
            std::lock_guard lock(m);
            ids.insert(std::this_thread::get_id());
          }
          for (std::int64_t i = begin; i < end; ++i) ++hits[static_cast<std::size_t>(i)];
        }, calls);
        for (const auto& h : hits) CHECK(h == 1);
        const std::int64_t most = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n / grain));
        CHECK(chunks <= std::max<std::int64_t>(most, n > 0 ? 1 : 0));
        if (n < 2 * grain) {  // one chunk, on the calling thread
          CHECK(chunks == (n > 0 ? 1 : 0));
          CHECK((ids.empty() || *ids.begin() == std::this_thread::get_id()));
        }
      }
  }
}

TEST_CASE("parallel_for: every chunk runs at the same time, on workers made for this very loop") {
  // Six chunks need five workers; the tests above made at most three, so two start in this loop
  // and must take part in it (review finding: a new worker slept through the loop that made it).
  // OpenBLAS makes its five workers when its thread count is raised to six.
  Threads t(6);
  for (ChunkCalls calls : kBothKinds) {
    INFO(kind_name(calls));
    const std::int64_t before = xjax::detail::split_loops();
    std::atomic<int> arrived{0};
    std::atomic<bool> met{true};
    parallel_for(6, 1, [&](std::int64_t, std::int64_t) {
      ++arrived;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (arrived < 6)  // a chunk run after another on the same thread never sees all six
        if (std::chrono::steady_clock::now() > deadline) {
          met = false;
          return;
        }
    }, calls);
    CHECK(met);
    CHECK(xjax::detail::split_loops() == before + 1);
  }
}

TEST_CASE("parallel_for: loops whose chunks call no BLAS run on OpenBLAS's workers where it lends them") {
  // OpenBLAS's pthreads build exports gotoblas_pthread; XJAX_LOOP_THREADS=own keeps xjax's own.
  const char* env = std::getenv("XJAX_LOOP_THREADS");
  const bool own_asked = env && std::string(env) == "own";
  const bool lends = openblas_get_parallel() == 1 && !own_asked;
  CHECK(std::string(xjax::detail::loop_threads()) == (lends ? "openblas" : "own"));
  CHECK(xjax::build_info().loop_threads == xjax::detail::loop_threads());
  Threads t(2);
  const std::int64_t before = xjax::detail::loops_on_blas_threads();
  const auto caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  parallel_for(2, 1, [&](std::int64_t, std::int64_t) { elsewhere += std::this_thread::get_id() != caller; }, ChunkCalls::no_blas);
  if (lends) CHECK(elsewhere == 1);  // job 1 is a worker's (xjax's own pool lets the caller take both when it is first)
  CHECK(xjax::detail::loops_on_blas_threads() == before + (lends ? 1 : 0));
  parallel_for(2, 1, [&](std::int64_t, std::int64_t) {}, ChunkCalls::may_call_blas);  // never there
  CHECK(xjax::detail::loops_on_blas_threads() == before + (lends ? 1 : 0));
  // a product right after, at two threads, on the workers that just ran the chunks
  const xjax::Array a = test_util::randn({200, 300}, 3), b = test_util::randn({300, 100}, 4);
  const auto got = xjax::matmul(xjax::astype(a, xjax::f32), xjax::astype(b, xjax::f32)).to_vector<float>();
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < 200; ++i)
    for (std::int64_t j = 0; j < 100; ++j) {
      double want = 0;
      for (std::int64_t k = 0; k < 300; ++k) want += av[static_cast<std::size_t>(i * 300 + k)] * bv[static_cast<std::size_t>(k * 100 + j)];
      wrong += std::abs(got[static_cast<std::size_t>(i * 100 + j)] - want) > 1e-4 * (1 + std::abs(want));
    }
  CHECK(wrong == 0);
}

TEST_CASE("parallel_elements: the smaller grain only while OpenBLAS's workers are lent and known to spin") {
  // (The warm grain lasts 5 ms: a thread descheduled longer between the loop and the check sees
  // the cold one, so each warm check gets a few tries; the cold ones cannot flake.)
  const bool lends = std::string(xjax::detail::loop_threads()) == "openblas";
  const std::int64_t big = 2 * xjax::detail::kParallelElementsWarm;  // a loop the grain can split
  const std::int64_t warm = lends ? xjax::detail::kParallelElementsWarm : xjax::detail::kParallelElements;
  auto warm_after = [&](const auto& use_workers) {
    bool seen = false;
    for (int attempt = 0; attempt < 20 && !seen; ++attempt) {
      use_workers();
      seen = xjax::detail::parallel_elements(big) == warm;
    }
    return seen;
  };
  Threads t(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // nothing ran on them for longer than the window
  CHECK(xjax::detail::parallel_elements(big) == xjax::detail::kParallelElements);
  CHECK(warm_after([] { parallel_for(2, 1, [](std::int64_t, std::int64_t) {}, ChunkCalls::no_blas); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(xjax::detail::parallel_elements(big) == xjax::detail::kParallelElements);
  CHECK(warm_after([] { xjax::detail::note_blas_product((std::int64_t{1} << 18) + 1); }));  // a product OpenBLAS threads
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  xjax::detail::note_blas_product(std::int64_t{1} << 18);  // one it runs on the caller (at most 2^18)
  CHECK(xjax::detail::parallel_elements(big) == xjax::detail::kParallelElements);
  // A loop too short to split at either grain gets the cold one, spinning workers or not.
  CHECK(warm_after([] { xjax::detail::note_blas_product((std::int64_t{1} << 18) + 1); }));
  CHECK(xjax::detail::parallel_elements(big - 1) == xjax::detail::kParallelElements);
}

TEST_CASE("parallel_for: a BLAS call from a chunk of a no_blas loop is an InternalError, not a hang") {
  {  // review finding: a nested loop that split cleared the outer chunk's mark
    Threads t(2);
    bool caught_after_nested = false;
    parallel_for(1, 1, [&](std::int64_t, std::int64_t) {
      parallel_for(2, 1, [](std::int64_t, std::int64_t) {}, ChunkCalls::no_blas);
      try {
        xjax::detail::check_blas_allowed("test");
      } catch (const xjax::InternalError&) {
        caught_after_nested = true;
      }
    }, ChunkCalls::no_blas);
    CHECK(caught_after_nested);
  }
  // On OpenBLAS's workers such a call would wait for the very worker running it. (101 columns: no
  // multiple of any SIMD width, so xjax's own product loops never take it; it goes to BLAS.)
  Threads t(2);
  const xjax::Array a = xjax::astype(test_util::randn({200, 300}, 5), xjax::f32), b = xjax::astype(test_util::randn({300, 101}, 6), xjax::f32);
  for (std::int64_t n : {1, 2}) {  // serial (one chunk) and split
    INFO("chunks " << n);
    CHECK_THROWS_AS(parallel_for(n, 1, [&](std::int64_t, std::int64_t) { (void)xjax::matmul(a, b).to_vector<float>(); }, ChunkCalls::no_blas),
                    xjax::InternalError);
    std::atomic<int> done{0};
    parallel_for(n, 1, [&](std::int64_t, std::int64_t) {
      (void)xjax::matmul(a, b).to_vector<float>();
      ++done;
    }, ChunkCalls::may_call_blas);
    CHECK(done == n);
  }
  CHECK(xjax::matmul(a, b).shape() == xjax::Shape{200, 101});  // and outside any loop
}

namespace {

// Waits up to `limit` for the child to end: true when it exited with status 0; a child still
// running then is killed (and false).
bool exited_normally(pid_t child, std::chrono::milliseconds limit) {
  int status = 0;
  bool ended = false;
  for (auto waited = std::chrono::milliseconds(0); waited < limit && !ended; waited += std::chrono::milliseconds(10)) {
    ended = waitpid(child, &status, WNOHANG) == child;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!ended) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  return ended && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

TEST_CASE("parallel_for: a child of fork() runs its loops and exits normally") {
  Threads t(2);
  std::atomic<std::int64_t> sum{0};
  for (ChunkCalls calls : kBothKinds) parallel_for(100, 1, [&](std::int64_t begin, std::int64_t end) { sum += end - begin; }, calls);
  REQUIRE(sum == 200);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the parent's workers do not exist here
    g_forked_test_child = true;
    std::atomic<std::int64_t> s{0};
    for (ChunkCalls calls : kBothKinds) parallel_for(1000, 1, [&](std::int64_t begin, std::int64_t end) { s += end - begin; }, calls);
    std::exit(s == 2000 ? 0 : 1);  // static destructors run: they must not wait for the parent's workers
  }
  CHECK(exited_normally(child, std::chrono::seconds(20)));
}

TEST_CASE("parallel_for: fork() while another thread runs loops: neither the parent's loops nor the child hang") {
  // Review finding: OpenBLAS's fork handler joins its workers; a loop on them at that moment
  // waited forever for a free worker. A stuck loop shows as no progress for 10 s.
  Threads t(2);
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> loops{0};
  std::thread looping([&] {
    while (!stop) {
      std::atomic<std::int64_t> s{0};
      parallel_for(4096, 1, [&](std::int64_t begin, std::int64_t end) { s += end - begin; }, ChunkCalls::no_blas);
      if (s == 4096) ++loops;
    }
  });
  bool children_ok = true, parent_progressed = true;
  for (int fork_number = 0; fork_number < 40 && children_ok && parent_progressed; ++fork_number) {
    const pid_t child = fork();
    if (child == 0) {
      g_forked_test_child = true;
      std::atomic<std::int64_t> s{0};
      for (ChunkCalls calls : kBothKinds) parallel_for(1000, 1, [&](std::int64_t begin, std::int64_t end) { s += end - begin; }, calls);
      std::_Exit(s == 2000 ? 0 : 1);
    }
    children_ok = exited_normally(child, std::chrono::seconds(10));
    parent_progressed = grows(loops, 1);
  }
  CHECK(children_ok);
  end_if_stuck(parent_progressed, "the looping thread made no progress after a fork");
  stop = true;
  looping.join();
}

TEST_CASE("BlasCall: fork() while other threads run threaded products: neither the parent nor the child hangs") {
  // A hunt of the thirty-fifth session: OpenBLAS's fork handler shuts its workers down, so a
  // threaded product in flight at a fork waited forever for them in the parent, and the child
  // inherited OpenBLAS's held level-3 lock (its first product hung). A fork waits for xjax's
  // products in flight now. A stuck thread shows as no progress for 10 s.
  Threads t(2);
  const std::int64_t n = 192;
  const xj::Array a = xj::full({n, n}, 1.0, xj::f64);
  const double want = static_cast<double>(n);  // every entry of a a
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> products{0}, wrong{0};
  std::vector<std::thread> multiplying;
  for (int k = 0; k < 2; ++k)
    multiplying.emplace_back([&] {
      while (!stop) {
        if (xj::matmul(a, a).to_vector<double>()[0] != want) ++wrong;
        ++products;
      }
    });
  bool children_ok = true, parents_progressed = true;
  for (int fork_number = 0; fork_number < 20 && children_ok && parents_progressed; ++fork_number) {
    const pid_t child = fork();
    if (child == 0) {
      g_forked_test_child = true;
      const bool ok = xj::matmul(a, a).to_vector<double>()[static_cast<std::size_t>(n * n - 1)] == want;
      std::_Exit(ok ? 0 : 1);
    }
    children_ok = exited_normally(child, std::chrono::seconds(20));
    parents_progressed = grows(products, 2);
  }
  CHECK(children_ok);
  end_if_stuck(parents_progressed, "the multiplying threads made no progress after a fork");
  stop = true;
  for (auto& th : multiplying) th.join();
  CHECK(wrong == 0);
}

TEST_CASE("parallel_for: every chunk computes under the caller's rounding mode") {
  // Review finding: OpenBLAS's workers kept the float control they started with (a -ffast-math
  // program's flush-to-zero, or fesetround in the caller, reached only the caller's chunk).
  Threads t(2);
  const int before = std::fegetround();
  for (ChunkCalls calls : kBothKinds)
    for (int mode : {FE_UPWARD, FE_DOWNWARD}) {
      INFO(kind_name(calls) << " mode " << mode);
      REQUIRE(std::fesetround(mode) == 0);
      std::vector<float> thirds(2, 0.0f);
      std::vector<int> modes(2, -1);
      volatile float one = 1.0f, three = 3.0f;
      parallel_for(2, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
          thirds[static_cast<std::size_t>(i)] = one / three;
          modes[static_cast<std::size_t>(i)] = std::fegetround();
        }
      }, calls);
      const float want = one / three;
      std::fesetround(before);
      CHECK(modes[0] == mode);
      CHECK(modes[1] == mode);
      CHECK(thirds[0] == want);
      CHECK(thirds[1] == want);
    }
  std::fesetround(before);
}

#if defined(__SSE__)
TEST_CASE("parallel_for: every chunk computes under the caller's flush-to-zero and denormals-are-zero") {
  // docs/guide.md tells a program that wants JAX's flushed subnormals to set these MXCSR bits in
  // the calling thread: every chunk, on any thread, must then flush, and must not once they are
  // cleared again.
  Threads t(2);
  const unsigned before = _mm_getcsr();
  constexpr unsigned kFlush = 0x8040;  // FTZ (bit 15) and DAZ (bit 6)
  for (ChunkCalls calls : kBothKinds)
    for (bool flush : {true, false}) {
      INFO(kind_name(calls) << (flush ? ", flushing" : ", IEEE"));
      _mm_setcsr(flush ? (before | kFlush) : (before & ~kFlush));
      volatile float a = 1e-30f, b = 1e-10f;  // a b = 1e-40: subnormal
      std::vector<float> products(2, 1.0f);
      parallel_for(2, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) products[static_cast<std::size_t>(i)] = a * b;
      }, calls);
      _mm_setcsr(before);
      for (float p : products) {
        if (flush) CHECK(p == 0.0f);
        else CHECK(std::fpclassify(p) == FP_SUBNORMAL);
      }
    }
}
#endif

TEST_CASE("parallel_for: float exceptions a worker's chunk raises are raised on the caller after the loop") {
  // Review finding: a NaN made in the caller's chunk left FE_INVALID set, one made on a worker did not.
  Threads t(2);
  for (ChunkCalls calls : kBothKinds) {
    INFO(kind_name(calls));
    std::feclearexcept(FE_ALL_EXCEPT);
    volatile double zero = 0.0;
    std::vector<double> out(2, 0.0);
    parallel_for(2, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) out[static_cast<std::size_t>(i)] = i == 1 ? zero / zero : 1.0;
    }, calls);
    CHECK(std::isnan(out[1]));
    CHECK(std::fetestexcept(FE_INVALID) != 0);
    std::feclearexcept(FE_ALL_EXCEPT);
  }
}

TEST_CASE("parallel_for: a chunk's exception reaches the caller; the workers stay usable") {
  Threads t(3);
  for (ChunkCalls calls : kBothKinds) {
    INFO(kind_name(calls));
    CHECK_THROWS_WITH_AS(parallel_for(300, 1, [](std::int64_t begin, std::int64_t) {
                           if (begin > 0) throw std::runtime_error("chunk failed");
                         }, calls),
                         "chunk failed", std::runtime_error);
    std::atomic<std::int64_t> sum{0};
    parallel_for(300, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) sum += i;
    }, calls);
    CHECK(sum == 300 * 299 / 2);
  }
}

TEST_CASE("parallel_for: nested loops and loops from several threads at once") {
  Threads t(2);
  for (ChunkCalls calls : kBothKinds) {
  INFO(kind_name(calls));
  // nested: the inner loop runs on its chunk's thread
  std::vector<std::atomic<int>> grid(64 * 64);
  parallel_for(64, 1, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r)
      parallel_for(64, 1, [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t c = c0; c < c1; ++c) ++grid[static_cast<std::size_t>(r * 64 + c)];
      }, calls);
  }, calls);
  for (const auto& g : grid) CHECK(g == 1);
  // concurrent callers: one holds the workers, the others run alone; every sum is right
  std::vector<std::int64_t> sums(4, 0);
  std::vector<std::thread> callers;
  for (std::size_t k = 0; k < sums.size(); ++k)
    callers.emplace_back([&, k] {
      for (int rep = 0; rep < 200; ++rep) {
        std::vector<std::int64_t> part(1000, 0);
        parallel_for(1000, 50, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) part[static_cast<std::size_t>(i)] = i * static_cast<std::int64_t>(k + 1);
        }, calls);
        for (auto v : part) sums[k] += v;
      }
    });
  for (auto& c : callers) c.join();
  for (std::size_t k = 0; k < sums.size(); ++k) CHECK(sums[k] == 200 * 499500 * static_cast<std::int64_t>(k + 1));
  }
}

TEST_CASE("large strided copies split across threads: a transpose and a slice against index loops") {
  Threads t(3);
  const std::int64_t a = 37, b = 300, c = 70;  // 3 MB of f32: above the split threshold
  std::vector<float> v(static_cast<std::size_t>(a * b * c));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  const xjax::Array x = xjax::array<float>(v, {a, b, c});
  const std::int64_t splits = xjax::detail::split_loops();
  const auto tr = xjax::transpose(x, {2, 0, 1}).to_vector<float>();  // (c, a, b)
  CHECK(xjax::detail::split_loops() > splits);
  std::int64_t wrong = 0;
  for (std::int64_t k = 0; k < c; ++k)
    for (std::int64_t i = 0; i < a; ++i)
      for (std::int64_t j = 0; j < b; ++j)
        wrong += tr[static_cast<std::size_t>((k * a + i) * b + j)] != v[static_cast<std::size_t>((i * b + j) * c + k)];
  CHECK(wrong == 0);
  const auto sl = xjax::slice(x, {1, 2, 3}, {a, b, c}, {2, 1, 3}).to_vector<float>();
  std::size_t at = 0;
  wrong = 0;
  for (std::int64_t i = 1; i < a; i += 2)
    for (std::int64_t j = 2; j < b; ++j)
      for (std::int64_t k = 3; k < c; k += 3) wrong += sl.at(at++) != v[static_cast<std::size_t>((i * b + j) * c + k)];
  CHECK(at == sl.size());
  CHECK(wrong == 0);
}

TEST_CASE("elementwise ops and fused chains split across threads: values against plain loops, same bits at any thread count") {
  // 400 x 1000 elements: three chunks of blocks at three threads (chunks of at least
  // kParallelElements). A broadcast row, a scalar, a bool output and (in bf16) the narrow path's
  // widened rows; the f32 chain once more with its input handed over, so the output is written in
  // place of it block by block.
  const std::int64_t rows = 400, cols = 1000;
  static_assert(400 * 1000 >= 3 * xjax::detail::kParallelElements, "three chunks at three threads");
  const xjax::Array x64 = test_util::randn({rows, cols}, 71), b64 = test_util::randn({cols}, 72);
  auto chain = [](const xjax::Array& x, const xjax::Array& b) {
    const xjax::Array y = xjax::tanh(x) * 2.0 + b;
    return std::tuple{y, y > x};
  };
  for (xjax::DType dtype : {xjax::f32, xjax::bf16}) {
    INFO(xjax::dtype_name(dtype));
    const xjax::Array x = xjax::astype(x64, dtype), b = xjax::astype(b64, dtype);
    const auto run = [&](int threads) {
      Threads t(threads);
      const auto [y, above] = xjax::jit(chain)(x, b);
      return std::pair{xjax::astype(y, xjax::f32).to_vector<float>(), above.to_vector<bool>()};
    };
    const std::int64_t splits = xjax::detail::split_loops();
    const auto [y3, above3] = run(3);
    CHECK(xjax::detail::split_loops() > splits);
    const auto [y1, above1] = run(1);
    CHECK(y1 == y3);
    CHECK(above1 == above3);
    const std::vector<double> xr = xjax::astype(x, xjax::f64).to_vector<double>(), br = xjax::astype(b, xjax::f64).to_vector<double>();
    std::int64_t wrong = 0;
    const double tol = dtype == xjax::bf16 ? 2e-2 : 1e-5;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        const auto k = static_cast<std::size_t>(i * cols + j);
        const double want = std::tanh(xr[k]) * 2.0 + br[static_cast<std::size_t>(j)];
        wrong += std::abs(y3[k] - want) > tol * (1.0 + std::abs(want));
      }
    CHECK(wrong == 0);
  }
  Threads t(3);
  {  // eager single ops (one kernel each: unary, binary, comparison, conversion)
    const xjax::Array x = xjax::astype(x64, xjax::f32), y = xjax::astype(test_util::randn({rows, cols}, 73), xjax::f32);
    const std::int64_t splits = xjax::detail::split_loops();
    const auto th = xjax::tanh(x).to_vector<float>(), diff = (x - y).to_vector<float>();
    const auto less = (x < y).to_vector<bool>();
    const auto wide = xjax::astype(x, xjax::f64).to_vector<double>();
    CHECK(xjax::detail::split_loops() >= splits + 4);
    const auto xs = x.to_vector<float>(), ys = y.to_vector<float>();
    std::int64_t wrong = 0;
    for (std::size_t k = 0; k < xs.size(); ++k)
      wrong += std::abs(th[k] - std::tanh(static_cast<double>(xs[k]))) > 1e-6 || diff[k] != xs[k] - ys[k] ||
               less[k] != (xs[k] < ys[k]) || wide[k] != static_cast<double>(xs[k]);
    CHECK(wrong == 0);
  }
  auto in_place = xjax::jit([](xjax::Array x) { return xjax::tanh(x) * 2.0 + 1.0; }, {.donate_argnums = {0}});
  xjax::Array x = xjax::astype(x64, xjax::f32);
  const std::vector<float> before = x.to_vector<float>();
  const std::vector<float> y = in_place(std::move(x)).to_vector<float>();
  std::int64_t wrong = 0;
  for (std::size_t k = 0; k < y.size(); ++k)
    wrong += std::abs(y[k] - (std::tanh(static_cast<double>(before[k])) * 2.0 + 1.0)) > 1e-5;
  CHECK(wrong == 0);
}

TEST_CASE("parallel_for: what chunks free on the workers is released by release_arena_memory while they sleep") {
  // Review finding: a worker's thread cache held the blocks its chunks freed until the worker
  // next allocated, out of reach of release_arena_memory (and of every other thread) meanwhile.
  Threads t(4);
  const auto caller = std::this_thread::get_id();
  for (ChunkCalls calls : kBothKinds) {
    INFO(kind_name(calls));
    std::atomic<int> on_workers{0};
    for (int round = 0; round < 20 && on_workers == 0; ++round)
      parallel_for(4, 1, [&](std::int64_t, std::int64_t) {
        if (std::this_thread::get_id() != caller) ++on_workers;
        const xjax::Array scratch = xjax::detail::alloc_array(xjax::ShapedArray{{4096}, xjax::f32});  // freed here
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // so that every chunk is taken by its own thread
      }, calls);
    REQUIRE(on_workers > 0);
    xjax::release_arena_memory();
    CHECK(xjax::memory_stats().arena_bytes == 0);
  }
}

TEST_CASE("kernels: sin / cos / tan give the same bits at any thread count and under jit (review finding: a batch's largest lane picks xsimd's reduction)") {
  // One large element every 97 among 2.96 rad values: eager halves split at n / 2 grouped the
  // lanes differently from one thread and from a fused chain's 512-element blocks.
  std::vector<float> v(148835, 0x1.8b852p+1f);
  for (std::size_t i = 0; i < v.size(); i += 97) v[i] = 1000.0f;
  const xj::Array x = xj::array<float>(v, {static_cast<std::int64_t>(v.size())});
  for (auto op : {+[](const xj::Array& a) { return xj::sin(a); }, +[](const xj::Array& a) { return xj::tan(a); }}) {
    xj::Array two_threads, one_thread;
    {
      Threads two(2);
      two_threads = op(x);
    }
    {
      Threads one(1);
      one_thread = op(x);
    }
    CHECK(one_thread.to_vector<float>() == two_threads.to_vector<float>());
    CHECK(xj::jit([op](const xj::Array& a) { return op(a) * 1.0f; })(x).to_vector<float>() == two_threads.to_vector<float>());
  }
}

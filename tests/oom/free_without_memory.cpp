// free_without_memory: an array freed on a thread where memory runs out (operator new throwing
// std::bad_alloc) is returned without aborting. Freeing runs in noexcept destructors, and on a
// new thread its first free makes the thread's buffer cache (PerThread, src/per_thread.hpp) and
// the cache its bins: each allocation on that path failed once aborted the program
// (std::terminate). Here the k-th operator new on a fresh thread throws, for every k up to the
// last one the free makes, and the thread then computes normally.
#include <cstdio>
#include <cstdlib>
#include <new>
#include <thread>

#include <xjax/xjax.hpp>

namespace xj = xjax;

namespace {
thread_local long t_fail_at = -1;  // the t_fail_at-th operator new on this thread throws (-1: none)
thread_local long t_news = 0;      // operator new calls on this thread while t_fail_at is set
}  // namespace

void* operator new(std::size_t n) {
  if (t_fail_at > 0) {
    ++t_news;
    if (--t_fail_at == 0) throw std::bad_alloc();
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

int main() {
  // how many allocations the first free on a new thread makes (none fail)
  long news_of_free = 0;
  {
    xj::Array a = xj::ones({1000}, xj::f32) * 2.0f;
    std::thread([&news_of_free, a = std::move(a)]() mutable {
      t_fail_at = 1L << 40;
      a = xj::Array();
      news_of_free = t_news;
      t_fail_at = -1;
    }).join();
  }
  if (news_of_free == 0) {
    std::fprintf(stderr, "FAIL: the first free on a new thread made no allocation; the test checks nothing\n");
    return 1;
  }
  for (long k = 1; k <= news_of_free; ++k) {
    xj::Array a = xj::ones({1000}, xj::f32) * 2.0f;
    bool computed = false;
    std::thread([k, &computed, a = std::move(a)]() mutable {
      t_fail_at = k;
      a = xj::Array();  // the free: allocation k fails
      t_fail_at = -1;
      const xj::Array b = xj::jit([](const xj::Array& x) { return xj::sum(x * x); })(xj::full({8}, 0.5f, xj::f32));
      computed = b.item<float>() == 2.0f;
    }).join();
    if (!computed) {
      std::fprintf(stderr, "FAIL: after allocation %ld of the free failed, the thread computed a wrong value\n", k);
      return 1;
    }
  }
  std::printf("a free survived each of its %ld allocations failing\n", news_of_free);
  return 0;
}

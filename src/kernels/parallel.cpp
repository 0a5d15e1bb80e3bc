// parallel.cpp: the worker threads behind parallel_for (parallel.hpp).
//
// One pool per process, grown on demand to kernel_threads() - 1 workers that sleep on a condition
// variable between loops (a loop of k chunks wakes k - 1 of them; where the system refuses a new
// thread, the workers there are take the chunks, the caller included). A loop is installed under
// the pool's mutex; every chunk index is taken under that mutex too (a loop has at most
// kernel_threads() chunks), together with the loop's body, so a worker can never run a chunk of
// one loop with another loop's body. The caller works on chunks like the workers, then waits
// until every chunk taken has finished. One loop at a time: a second caller, or a chunk calling
// parallel_for again, runs its loop serially.
#include "kernels/parallel.hpp"
#include "per_thread.hpp"

#include <cblas.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace xjax::detail {
namespace {

thread_local bool t_inside_chunk XJAX_INITIAL_EXEC_TLS = false;  // this thread runs a chunk (a worker, or a caller at work)
thread_local bool t_pool_worker XJAX_INITIAL_EXEC_TLS = false;   // this thread is one of the pool's workers
std::atomic<std::int64_t> g_split_loops{0};

class Pool {
 public:
  /// Runs the loop on the calling thread and the workers; false if another loop holds the pool.
  bool run(std::int64_t n, std::int64_t chunks, void (*chunk)(void*, std::int64_t, std::int64_t), void* context) {
    std::unique_lock owner(one_loop_, std::try_to_lock);
    if (!owner.owns_lock()) return false;
    {
      std::lock_guard lock(mutex_);
      // a new worker starts from the generation before this loop's, so it takes part in it
      try {
        while (static_cast<std::int64_t>(workers_.size()) < chunks - 1)
          workers_.emplace_back([this, seen = generation_] { work_loop(seen); });
      } catch (const std::system_error&) {  // no more threads now: run with those there are
      }
      loop_ = Loop{n, chunks, chunk, context};
      next_ = 0;
      unfinished_ = chunks;
      error_ = nullptr;
      ++generation_;
    }
    for (std::int64_t i = 1; i < chunks; ++i) wake_.notify_one();  // as many workers as chunks left
    g_split_loops.fetch_add(1, std::memory_order_relaxed);
    std::unique_lock lock(mutex_);
    run_chunks(lock, generation_);
    done_.wait(lock, [&] { return unfinished_ == 0; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return true;
  }

 private:
  struct Loop {
    std::int64_t n = 0, chunks = 0;
    void (*chunk)(void*, std::int64_t, std::int64_t) = nullptr;
    void* context = nullptr;
  };

  // Takes chunks of loop `generation` until none is left (lock held between chunks).
  void run_chunks(std::unique_lock<std::mutex>& lock, std::uint64_t generation) {
    while (generation == generation_ && next_ < loop_.chunks) {
      const Loop loop = loop_;
      const std::int64_t i = next_++;
      lock.unlock();
      std::exception_ptr error;
      t_inside_chunk = true;
      try {
        loop.chunk(loop.context, loop.n * i / loop.chunks, loop.n * (i + 1) / loop.chunks);
      } catch (...) {
        error = std::current_exception();
      }
      t_inside_chunk = false;
      if (t_pool_worker) flush_thread_cache();  // before the loop counts the chunk done
      lock.lock();
      if (error && !error_) error_ = error;
      if (--unfinished_ == 0) done_.notify_all();
    }
  }

  void work_loop(std::uint64_t seen) {
    t_pool_worker = true;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      run_chunks(lock, seen);
    }
  }

  std::mutex one_loop_;  // held by the thread whose loop the pool runs
  std::mutex mutex_;     // guards everything below
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  Loop loop_;
  std::int64_t next_ = 0, unfinished_ = 0;
  std::uint64_t generation_ = 0;
  std::exception_ptr error_;
};

// The pool is never destroyed: its workers sleep through static destructors and exit, and a
// kernel called from a static destructor still finds it. A child of fork() has none of its
// parent's workers (and may have copied a held mutex): it starts with a fresh pool, which keeps
// the old one reachable (`before`), so leak checkers see nothing lost.
struct PoolAndBefore {
  Pool pool;
  PoolAndBefore* before = nullptr;
};
std::atomic<PoolAndBefore*> g_pool{nullptr};

Pool& pool() {
  static const bool made = [] {
    g_pool.store(new PoolAndBefore);
    pthread_atfork(nullptr, nullptr, [] {
      auto* fresh = new PoolAndBefore;
      fresh->before = g_pool.load();
      g_pool.store(fresh);
    });
    return true;
  }();
  (void)made;
  return g_pool.load()->pool;
}

}  // namespace

std::int64_t split_loops() { return g_split_loops.load(std::memory_order_relaxed); }

int kernel_threads() { return std::max(1, openblas_get_num_threads()); }

void parallel_chunks(std::int64_t n, std::int64_t grain, void (*chunk)(void*, std::int64_t, std::int64_t), void* context) {
  if (n <= 0) return;
  const std::int64_t most = n / std::max<std::int64_t>(grain, 1);  // chunks of at least grain
  if (most < 2) return chunk(context, 0, n);  // one chunk: no thread count asked (a call to BLAS)
  const std::int64_t chunks = std::min<std::int64_t>(kernel_threads(), most);
  if (chunks < 2 || t_inside_chunk || !pool().run(n, chunks, chunk, context)) chunk(context, 0, n);
}

}  // namespace xjax::detail

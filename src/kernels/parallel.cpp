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
#include "xjax/errors.hpp"

#include <cblas.h>

#include <dlfcn.h>
#include <pthread.h>
#include <cfenv>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace xjax::detail {
namespace {

thread_local bool t_inside_chunk XJAX_INITIAL_EXEC_TLS = false;  // this thread runs a chunk (a worker, or a caller at work)
thread_local bool t_pool_worker XJAX_INITIAL_EXEC_TLS = false;   // this thread is one of the pool's workers
thread_local bool t_no_blas_chunk XJAX_INITIAL_EXEC_TLS = false;  // this thread runs a chunk of a ChunkCalls::no_blas loop
std::atomic<std::int64_t> g_split_loops{0};
std::atomic<std::int64_t> g_loops_on_blas_threads{0};

/// A thread's floating-point environment (rounding mode, and on x86 also the whole MXCSR, whose
/// flush-to-zero / denormals-are-zero bits a -ffast-math program's startup sets). A worker runs
/// each chunk under its caller's, so a loop computes as its caller does on any thread (workers
/// keep whatever they started with: OpenBLAS's, from when the library loaded).
class FloatControl {
 public:
  static FloatControl current() {
    FloatControl c;
    std::fegetenv(&c.env_);
#if defined(__SSE__)
    c.csr_ = _mm_getcsr();
#endif
    return c;
  }
  void apply() const {
    std::fesetenv(&env_);
#if defined(__SSE__)
    _mm_setcsr(csr_);
#endif
  }

 private:
  std::fenv_t env_{};
#if defined(__SSE__)
  unsigned csr_ = 0;
#endif
};

/// Runs a scope (a worker's chunk) under the caller's float control, then adds the exception
/// flags it raised to `raised` (the caller raises them after the loop, as if it had run the chunk)
/// and restores this thread's own control.
class UnderFloatControl {
 public:
  UnderFloatControl(const FloatControl& caller, std::atomic<int>& raised) : own_(FloatControl::current()), raised_(raised) {
    caller.apply();
  }
  ~UnderFloatControl() {
    raised_.fetch_or(std::fetestexcept(FE_ALL_EXCEPT), std::memory_order_relaxed);
    own_.apply();
  }
  UnderFloatControl(const UnderFloatControl&) = delete;
  UnderFloatControl& operator=(const UnderFloatControl&) = delete;

 private:
  FloatControl own_;
  std::atomic<int>& raised_;
};

class Pool {
 public:
  /// Runs the loop on the calling thread and the workers; false if another loop holds the pool.
  bool run(std::int64_t n, std::int64_t chunks, void (*chunk)(void*, std::int64_t, std::int64_t), void* context) {
    std::unique_lock owner(one_loop_, std::try_to_lock);
    if (!owner.owns_lock()) return false;
    std::atomic<int> raised{0};  // the float exceptions the workers' chunks raised
    {
      std::lock_guard lock(mutex_);
      // a new worker starts from the generation before this loop's, so it takes part in it
      try {
        while (static_cast<std::int64_t>(workers_.size()) < chunks - 1)
          workers_.emplace_back([this, seen = generation_] { work_loop(seen); });
      } catch (const std::system_error&) {  // no more threads now: run with those there are
      }
      loop_ = Loop{n, chunks, chunk, context, FloatControl::current(), &raised};
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
    if (const int flags = raised.load(std::memory_order_relaxed)) std::feraiseexcept(flags);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return true;
  }

 private:
  struct Loop {
    std::int64_t n = 0, chunks = 0;
    void (*chunk)(void*, std::int64_t, std::int64_t) = nullptr;
    void* context = nullptr;
    FloatControl caller_control;  // the caller's, for the chunks the workers run
    std::atomic<int>* raised = nullptr;  // where they add the float exceptions they raised
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
        std::optional<UnderFloatControl> as_caller;
        if (t_pool_worker) as_caller.emplace(loop.caller_control, *loop.raised);
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

// Made on first use without a function-local static: a fork() while another thread ran such an
// initializer left its guard held in the child, whose first loop then waited forever (the test of
// fork() while another thread loops, run alone). Threads racing here each make a pool (no threads
// yet: workers start with a loop); one is kept.
Pool& pool() {
  PoolAndBefore* current = g_pool.load(std::memory_order_acquire);
  if (!current) {
    auto* fresh = new PoolAndBefore;
    if (g_pool.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) current = fresh;
    else delete fresh;
  }
  return current->pool;
}

// In a child of fork(): a fresh pool, if the parent had one.
void fresh_pool_after_fork() {
  if (PoolAndBefore* old = g_pool.load()) {
    auto* fresh = new PoolAndBefore;
    fresh->before = old;
    g_pool.store(fresh);
  }
}

// ---- loops on OpenBLAS's workers ------------------------------------------------------------
// OpenBLAS's pthreads server keeps each worker spinning (sched_yield) for 2^28 cycles after the
// last job it ran before sleeping. A program that runs products between its other loops keeps them
// spinning: one of xjax's own workers, woken for an elementwise loop, then waits for a core behind
// the caller (no core is idle) and runs its chunk only once the caller's is done. Measured on
// T1 small at two threads (AMD EPYC VM, CPU family 25 model 17: Zen 4, 2 vCPUs, 2026-12-06):
// gelu's chain of 524288 floats took 1.56 ms split in two and 1.61 ms on one thread; with
// OPENBLAS_THREAD_TIMEOUT=4 (workers that sleep at once) 0.76 ms. OpenBLAS exports
// gotoblas_pthread(threads, function, args, stride), which runs function(args + i stride) for
// i < threads, the first on the caller and the others as jobs of its workers (mode BLAS_PTHREAD),
// and returns when all are done: a spinning worker takes its job within microseconds.

/// Held by the thread whose loop OpenBLAS's workers run (one at a time; others run alone), and
/// by a thread calling fork() (prepare_fork).
std::mutex g_blas_loop;
thread_local bool t_holds_blas_loop XJAX_INITIAL_EXEC_TLS = false;   // this thread's loop is on OpenBLAS's workers
thread_local bool t_locked_for_fork XJAX_INITIAL_EXEC_TLS = false;   // this thread took g_blas_calls and g_blas_loop in prepare_fork
thread_local bool t_in_lent_job XJAX_INITIAL_EXEC_TLS = false;       // this thread runs a chunk of a lent loop
std::atomic<bool> g_forked_child{false};  // this process is a child of fork(): loops stay on xjax's workers
/// Read-held by each BLAS / LAPACK call xjax makes (BlasCall), write-held by a thread calling
/// fork(); writers first, so a stream of products cannot keep a fork waiting (no BlasCall nests).
pthread_rwlock_t g_blas_calls = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;

/// Until when (steady clock, ns) OpenBLAS's workers are known to spin: a few milliseconds after
/// the last lent loop or threaded product, well inside their 2^28 cycles.
std::atomic<std::int64_t> g_workers_spin_until{0};
constexpr std::int64_t kSpinKnownNs = 5'000'000;

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
void workers_just_ran() { g_workers_spin_until.store(steady_ns() + kSpinKnownNs, std::memory_order_relaxed); }

// fork() and OpenBLAS: its own prepare handler (blas_thread_shutdown) joins its workers, and a
// loop on them at that moment would wait forever for a free worker (review finding: a thread
// looping while another forked hung). These handlers, registered after OpenBLAS's (so run before
// it), wait for the loop in flight and keep new ones off OpenBLAS's workers until the fork is
// done; a child never lends them again (a worker busy in the parent at the fork leaves a state
// its first loop could wait on). A chunk must not fork (OpenBLAS's handler would wait forever for
// the worker running the loop: an abort with a message instead of a hang) and must not wait for
// a lock that a forking thread may hold (the usual pthread_atfork contract; xjax's chunks take
// none of the caller's).
void prepare_fork() {
  if (t_in_lent_job || t_holds_blas_loop) {
    std::fputs("xjax: fork() called from a chunk of a parallel loop running on OpenBLAS's workers; OpenBLAS's fork "
               "handler would wait forever for them. Aborting.\n", stderr);
    std::abort();
  }
  pthread_rwlock_wrlock(&g_blas_calls);  // the products in flight end first (BlasCall)
  g_blas_loop.lock();
  t_locked_for_fork = true;
}
void parent_after_fork() {
  if (std::exchange(t_locked_for_fork, false)) {
    g_blas_loop.unlock();
    pthread_rwlock_unlock(&g_blas_calls);
  }
}
void child_after_fork() {
  g_forked_child.store(true);
  if (std::exchange(t_locked_for_fork, false)) {
    g_blas_loop.unlock();
    // A fresh lock, not an unlock: glibc's rwlock knows its writer by thread id, and the child's
    // thread has another (unlocked, it stayed write-locked and the child's first product hung).
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&g_blas_calls, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  fresh_pool_after_fork();
}

// The fork handlers are registered when the library loads: after OpenBLAS's constructor
// registered its own (so these run before it), and not inside a lazy initializer, where
// pthread_atfork waited for the lock a forking thread holds while it runs the handlers.
[[maybe_unused]] const bool g_fork_handlers_registered = [] {
  return pthread_atfork(prepare_fork, parent_after_fork, child_after_fork) == 0;
}();

/// gotoblas_pthread's signature (OpenBLAS's driver/others/blas_server.c, exported since GotoBLAS2).
using BlasThreadsRun = int (*)(int threads, void* function, void* args, int stride);

/// OpenBLAS's gotoblas_pthread where its own pthreads server runs the threaded calls and the
/// environment does not ask for xjax's own workers; else nullptr.
BlasThreadsRun look_up_blas_threads_run() {
  const char* wanted = std::getenv("XJAX_LOOP_THREADS");
  if (wanted && std::strcmp(wanted, "own") == 0) return nullptr;
  if (openblas_get_parallel() != 1) return nullptr;  // 0: sequential build, 2: OpenMP (no such server)
  void* symbol = dlsym(RTLD_DEFAULT, "gotoblas_pthread");
  BlasThreadsRun f = nullptr;
  static_assert(sizeof f == sizeof symbol);
  std::memcpy(&f, &symbol, sizeof f);
  return f;
}

std::atomic<BlasThreadsRun> g_blas_threads_run{nullptr};
std::atomic<bool> g_blas_threads_run_known{false};

/// look_up_blas_threads_run's answer, looked up on first use (threads racing there find the same
/// answer; no function-local static: see pool()); nullptr in a child of fork().
BlasThreadsRun blas_threads_run() {
  if (g_forked_child.load(std::memory_order_relaxed)) return nullptr;
  if (!g_blas_threads_run_known.load(std::memory_order_acquire)) {
    g_blas_threads_run.store(look_up_blas_threads_run(), std::memory_order_relaxed);
    g_blas_threads_run_known.store(true, std::memory_order_release);
  }
  return g_blas_threads_run.load(std::memory_order_relaxed);
}

/// One loop handed to OpenBLAS's workers: the chunks, the caller's float control, and the first
/// exception a chunk threw.
struct BlasLoop {
  std::int64_t n = 0, chunks = 0;
  void (*chunk)(void*, std::int64_t, std::int64_t) = nullptr;
  void* context = nullptr;
  FloatControl caller_control = FloatControl::current();
  std::atomic<int> raised{0};  // the float exceptions the workers' chunks raised
  std::mutex error_mutex;
  std::exception_ptr error;
};

/// The argument of one job: its loop and chunk index (job 0 runs on the caller).
struct BlasJob {
  BlasLoop* loop;
  std::int64_t index;
};

// A job's function: runs its chunk under the caller's float control (job 0 is the caller's own),
// keeping exceptions out of OpenBLAS's C frames, the thread's marks restored after.
void run_blas_job(void* arg) noexcept {
  const BlasJob& job = *static_cast<const BlasJob*>(arg);
  BlasLoop& loop = *job.loop;
  const bool was_inside = std::exchange(t_inside_chunk, true), was_no_blas = std::exchange(t_no_blas_chunk, true);
  const bool was_lent = std::exchange(t_in_lent_job, true);
  try {
    std::optional<UnderFloatControl> as_caller;
    if (job.index != 0) as_caller.emplace(loop.caller_control, loop.raised);
    loop.chunk(loop.context, loop.n * job.index / loop.chunks, loop.n * (job.index + 1) / loop.chunks);
  } catch (...) {
    std::lock_guard lock(loop.error_mutex);
    if (!loop.error) loop.error = std::current_exception();
  }
  t_inside_chunk = was_inside;
  t_no_blas_chunk = was_no_blas;
  t_in_lent_job = was_lent;
  if (job.index != 0) flush_thread_cache();  // an OpenBLAS worker: what it freed stays reachable while it sleeps
}


/// Runs the loop's chunks on the caller and OpenBLAS's workers; false if another loop holds them.
bool run_on_blas_threads(BlasThreadsRun run, std::int64_t n, std::int64_t chunks,
                         void (*chunk)(void*, std::int64_t, std::int64_t), void* context) {
  std::unique_lock owner(g_blas_loop, std::try_to_lock);
  if (!owner.owns_lock()) return false;
  t_holds_blas_loop = true;
  struct Release {
    ~Release() { t_holds_blas_loop = false; }
  } release;
  BlasLoop loop;
  loop.n = n;
  loop.chunks = chunks;
  loop.chunk = chunk;
  loop.context = context;
  // The jobs' arguments: on the stack for the thread counts machines have, else on the heap.
  constexpr std::int64_t kStackJobs = 64;
  std::array<BlasJob, kStackJobs> stack_jobs;
  std::vector<BlasJob> heap_jobs(chunks > kStackJobs ? static_cast<std::size_t>(chunks) : 0);
  BlasJob* jobs = chunks > kStackJobs ? heap_jobs.data() : stack_jobs.data();
  for (std::int64_t i = 0; i < chunks; ++i) jobs[i] = {&loop, i};
  void (*function)(void*) noexcept = run_blas_job;
  void* function_pointer = nullptr;
  std::memcpy(&function_pointer, &function, sizeof function);
  g_split_loops.fetch_add(1, std::memory_order_relaxed);
  g_loops_on_blas_threads.fetch_add(1, std::memory_order_relaxed);
  run(static_cast<int>(chunks), function_pointer, jobs, static_cast<int>(sizeof(BlasJob)));
  workers_just_ran();
  if (const int flags = loop.raised.load(std::memory_order_relaxed)) std::feraiseexcept(flags);
  if (loop.error) std::rethrow_exception(loop.error);
  return true;
}

// A ChunkCalls::no_blas loop: on OpenBLAS's workers where it lends them, else on xjax's; every
// chunk (the serial ones too) marked, so that check_blas_allowed sees a BLAS call from any of them.
void no_blas_loop(std::int64_t n, std::int64_t chunks, void (*chunk)(void*, std::int64_t, std::int64_t), void* context) {
  const BlasThreadsRun run = blas_threads_run();
  if (chunks >= 2 && !t_inside_chunk && run && run_on_blas_threads(run, n, chunks, chunk, context)) return;
  struct Marked {
    void (*chunk)(void*, std::int64_t, std::int64_t);
    void* context;
  } marked{chunk, context};
  auto mark = [](void* m, std::int64_t begin, std::int64_t end) {
    const auto& mk = *static_cast<const Marked*>(m);
    const bool was = std::exchange(t_no_blas_chunk, true);
    struct Restore {
      bool was;
      ~Restore() { t_no_blas_chunk = was; }
    } restore{was};
    mk.chunk(mk.context, begin, end);
  };
  if (chunks < 2 || t_inside_chunk || !pool().run(n, chunks, mark, &marked)) mark(&marked, 0, n);
}

}  // namespace

const char* loop_threads() { return blas_threads_run() ? "openblas" : "own"; }

std::int64_t parallel_elements(std::int64_t n) {
  if (n < 2 * kParallelElementsWarm || g_workers_spin_until.load(std::memory_order_relaxed) < steady_ns() || !blas_threads_run()) return kParallelElements;
  return kParallelElementsWarm;
}

void note_blas_product(std::int64_t multiply_adds) {
  if (multiply_adds > (std::int64_t{1} << 18) && openblas_get_num_threads() > 1) workers_just_ran();
}

void check_blas_allowed(const char* who) {
  if (t_no_blas_chunk)
    throw InternalError(who, "a BLAS call from a chunk of a loop declared ChunkCalls::no_blas (it may run on OpenBLAS's workers)");
}

BlasCall::BlasCall(const char* who) {
  check_blas_allowed(who);
  pthread_rwlock_rdlock(&g_blas_calls);
}
BlasCall::~BlasCall() { pthread_rwlock_unlock(&g_blas_calls); }

std::int64_t split_loops() { return g_split_loops.load(std::memory_order_relaxed); }
std::int64_t loops_on_blas_threads() { return g_loops_on_blas_threads.load(std::memory_order_relaxed); }

int kernel_threads() { return std::max(1, openblas_get_num_threads()); }

void parallel_chunks(std::int64_t n, std::int64_t grain, void (*chunk)(void*, std::int64_t, std::int64_t), void* context,
                     ChunkCalls calls) {
  if (n <= 0) return;
  // chunks of at least grain; one chunk asks no thread count (a call to BLAS)
  const std::int64_t most = n / std::max<std::int64_t>(grain, 1);
  const std::int64_t chunks = most < 2 ? 1 : std::min<std::int64_t>(kernel_threads(), most);
  if (calls == ChunkCalls::no_blas) return no_blas_loop(n, chunks, chunk, context);
  if (chunks < 2 || t_inside_chunk || !pool().run(n, chunks, chunk, context)) chunk(context, 0, n);
}

}  // namespace xjax::detail

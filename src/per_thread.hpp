// per_thread.hpp: PerThread<T>, a thread's own T reached without a call to __tls_get_addr
// (not installed).
//
// In a shared library every access to a thread_local calls __tls_get_addr (general-dynamic
// model); the runtime's per-thread caches are reached once or twice per buffer, which showed as
// 3-4% of an overhead-bound loop. PerThread keeps only a pointer and a flag in the initial TLS
// block (initial-exec model: one instruction to read) and builds the T itself on first use with
// an ordinary thread_local. Initial-exec marks the library STATIC_TLS: its whole TLS segment
// (2.5 KiB, most of it those ordinary thread_locals) must fit the static TLS block, so dlopen
// (Python's ctypes) needs GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096 (glibc keeps 512
// bytes spare by default); linked programs are unaffected (docs/status.md, known gaps). The small thread_locals read on every operation (the trace stack, the promotion
// mode, the raw-plan switch, the pool's flags) take XJAX_INITIAL_EXEC_TLS themselves.
#pragma once

#if defined(__GNUC__)
#define XJAX_INITIAL_EXEC_TLS __attribute__((tls_model("initial-exec")))
#else
#define XJAX_INITIAL_EXEC_TLS
#endif

namespace xjax::detail {

/// The calling thread's T (default-constructed on first use, destroyed when the thread ends), or
/// nullptr once it is destroyed: code running after that during the thread's exit (a static
/// array freed late) must take a path without it.
template <class T> class PerThread {
 public:
  static T* get() {
    if (T* p = ptr_) return p;
    return make();
  }
  /// The calling thread's T if it has one already (nothing is made: no thread_local destructor
  /// is registered for a thread that never used it), else nullptr.
  static T* existing() { return ptr_; }

 private:
  struct Owner {
    T value;
    Owner() { ptr_ = &value; }
    ~Owner() {
      ptr_ = nullptr;
      ended_ = true;  // value is destroyed next; get() from its destructor returns nullptr
    }
    Owner(const Owner&) = delete;
    Owner& operator=(const Owner&) = delete;
  };
  static T* make() {
    if (ended_) return nullptr;
    thread_local Owner owner;
    return ptr_;
  }
  static inline thread_local T* ptr_ XJAX_INITIAL_EXEC_TLS = nullptr;
  static inline thread_local bool ended_ XJAX_INITIAL_EXEC_TLS = false;
};

/// The calling thread's T as PerThread gives it, and, once the thread's thread_locals are
/// destroyed (a static object's destructor that runs xjax at exit: C++ destroys the main thread's
/// thread_locals before static objects), a T of its own that is never freed: a thread that runs
/// xjax from its own thread_local destructors leaks that T (small state only: the trace stack,
/// the user-exception marker; never a scratch buffer). T a type of its own, as for PerThread.
template <class T> T& per_thread_always() {
  if (T* p = PerThread<T>::get()) return *p;
  static thread_local T* late XJAX_INITIAL_EXEC_TLS = nullptr;  // trivially destructible: outlives the rest
  if (!late) late = new T();
  return *late;
}

}  // namespace xjax::detail

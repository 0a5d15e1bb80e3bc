// per_thread.hpp: PerThread<T>, a thread's own T reached without a call to __tls_get_addr
// (not installed).
//
// In a shared library every access to a thread_local calls __tls_get_addr (general-dynamic
// model); the runtime's per-thread caches are reached once or twice per buffer, which showed as
// 3-4% of an overhead-bound loop. PerThread keeps only a pointer and a flag per T in the initial
// TLS block (initial-exec model: one instruction to read) and makes the T itself on the heap on
// first use; one ordinary thread_local (own_until_thread_end, per_thread.cpp) destroys a
// thread's Ts when it ends. Initial-exec marks the library STATIC_TLS: its whole TLS segment
// must fit the spare static TLS glibc keeps for libraries loaded with dlopen (Python's ctypes;
// 512 bytes by default), so nothing large may be a thread_local in libxjax:
// tests/dlopen/dlopen_library.cpp loads it that way. The small thread_locals read on every
// operation (the trace stack, the promotion mode, the raw-plan switch, the pool's flags) take
// XJAX_INITIAL_EXEC_TLS themselves.
#pragma once

#include <memory>
#include <new>

#if defined(__GNUC__)
#define XJAX_INITIAL_EXEC_TLS __attribute__((tls_model("initial-exec")))
#else
#define XJAX_INITIAL_EXEC_TLS
#endif

namespace xjax::detail {

/// Hands `object` to the calling thread: `destroy(object)` runs when the thread ends, objects
/// handed over later first (as C++ destroys thread_locals). False, and nothing is taken, once the
/// thread's objects are destroyed (a static destructor at exit).
bool own_until_thread_end(void* object, void (*destroy)(void*));

/// The calling thread's T (default-constructed on first use, destroyed when the thread ends), or
/// nullptr once it is destroyed: code running after that during the thread's exit (a static
/// array freed late) must take a path without it.
template <class T> class PerThread {
 public:
  static T* get() {
    if (T* p = ptr_) return p;
    return make();
  }
  /// The calling thread's T if it has one already (nothing is made: nothing is handed to a
  /// thread that never used it), else nullptr.
  static T* existing() { return ptr_; }

 private:
  static void destroy(void* object) {
    ptr_ = nullptr;
    ended_ = true;  // the T is destroyed next; get() from its destructor returns nullptr
    delete static_cast<T*>(object);
  }
  // Out of memory, nullptr too (without ending: a later call tries again): the callers' path
  // without a T, taken in noexcept code as well (an array's buffer freed by its destructor).
  static T* make() noexcept {
    if (ended_) return nullptr;
    try {
      std::unique_ptr<T> made = std::make_unique<T>();
      if (!own_until_thread_end(made.get(), &destroy)) {
        ended_ = true;
        return nullptr;
      }
      ptr_ = made.release();
      return ptr_;
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
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

// small_blocks.hpp: a per-thread cache of small freed blocks, and the allocator that lets
// std::allocate_shared use it (not installed).
//
// A plan step makes an array handle (ArrayImpl and Buffer, each with its shared_ptr control
// block) per output; in an overhead-bound loop (xjax-bench P2: a few microseconds per layer)
// malloc and free of those blocks were a tenth of the time. Freed blocks of up to kMaxBytes are
// kept per thread by 16-byte size class (at most kKeep per class) and handed to the next request
// of that class; larger blocks go to operator new/delete. XJAX_ARENA_BYTES=0 (the sanitizer CI
// stage) turns the cache off, as it does the buffer arena, so ASan sees every use after free.
#pragma once
#include <cstddef>

namespace xjax::detail {

/// XJAX_ARENA_BYTES: the buffer arena's cap in bytes (digits only; 0 turns the arena and the
/// small-block cache off), 512 MiB when unset. Any other value ("64MiB", "-1") is reported once on
/// stderr and the default used (strtoll read "64MiB" as a 64-byte cap: the arena was off in effect).
long long arena_cap_from_env();

class SmallBlocks {
 public:
  static constexpr std::size_t kMaxBytes = 256, kClassBytes = 16, kKeep = 256;
  /// A block of at least `bytes` bytes, aligned for any object up to alignof(std::max_align_t).
  static void* take(std::size_t bytes);
  /// Returns a block taken with the same `bytes`.
  static void give(void* p, std::size_t bytes) noexcept;
};

/// An allocator for std::allocate_shared drawing from SmallBlocks.
template <class T> struct SmallBlockAllocator {
  using value_type = T;
  SmallBlockAllocator() = default;
  template <class U> SmallBlockAllocator(const SmallBlockAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(SmallBlocks::take(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { SmallBlocks::give(p, n * sizeof(T)); }
  template <class U> bool operator==(const SmallBlockAllocator<U>&) const noexcept { return true; }
};

}  // namespace xjax::detail

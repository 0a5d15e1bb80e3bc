// runtime.cpp: the counting buffer allocator (with its arena of reusable blocks) and the
// per-primitive execution counters.
#include "xjax/runtime.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "counters.hpp"
#include "kernels/parallel.hpp"
#include "per_thread.hpp"
#include "small_blocks.hpp"
#include "internal.hpp"

namespace xjax {
namespace {

using detail::counters::Slot;
using detail::counters::Table;
std::atomic<std::int64_t> g_peak{0};
std::atomic<std::int64_t> g_fresh{0};
std::atomic<std::int64_t> g_reserved_peak{0};
std::atomic<std::int64_t> g_system_bytes{0};  // held from the system: live buffers + the arena

std::int64_t live_bytes() {
  return Table::get().total([](const Slot& s) { return s.live.load(std::memory_order_relaxed); });
}
std::int64_t buffers_created() {
  return Table::get().total([](const Slot& s) { return s.allocs.load(std::memory_order_relaxed); });
}

void raise(std::atomic<std::int64_t>& peak_counter, std::int64_t value) {
  std::int64_t peak = peak_counter.load(std::memory_order_relaxed);
  while (value > peak && !peak_counter.compare_exchange_weak(peak, value, std::memory_order_relaxed)) {
  }
}

constexpr std::size_t kAlign = 64;
/// Blocks of at least this many bytes are mapped from the system and unmapped when freed, never
/// taken from malloc's heap: glibc's adaptive mmap threshold (raised to the size of the largest
/// buffer freed, up to 32 MiB) otherwise puts multi-MiB buffers in the brk heap, whose free space
/// fragments between small allocations: a process running buffers of varying sizes grew by about
/// 34 kB of RSS per request (1.8 GB after 12000 requests holding 7 MB; a leak hunt, thirty-fourth
/// session) and release_arena_memory() returned none of it.
/// Under AddressSanitizer every block stays a heap block: the sanitizer checks their bounds, not
/// those of mapped memory.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kMappedBytes = std::numeric_limits<std::size_t>::max();
#else
constexpr std::size_t kMappedBytes = std::size_t{256} << 10;
#endif
/// Whether a block of this (rounded) size is mapped rather than taken from the heap.
constexpr bool is_mapped(std::size_t size) { return size >= kMappedBytes; }

/// A buffer's block size: whole 64-byte lines, and a mapped block's in classes of an eighth of its
/// power of two (at most 12.5% more; the pages past the buffer are never touched, so never
/// resident), so that buffers of nearby sizes share the arena's blocks: with every size its own,
/// a process running ever-changing sizes mapped and faulted in a new block for almost every
/// buffer (3x slower than malloc's reused heap pages; the second review).
std::size_t rounded(std::size_t n) {
  if (n > std::numeric_limits<std::size_t>::max() / 2) throw std::bad_alloc();  // no wrapping below
  const std::size_t size = (n + kAlign - 1) / kAlign * kAlign;
  if (!is_mapped(size)) return size;
  const std::size_t step = std::bit_floor(size) / 8;
  return (size + step - 1) / step * step;
}

/// The shared arena: freed blocks kept by rounded size and handed to the next buffer of that
/// size, so a plan that runs again (a scan body, a jitted step) allocates nothing from the system.
/// It keeps at most `cap` bytes (XJAX_ARENA_BYTES, default 512 MiB): a block freed when it is
/// full takes the place of the blocks of the size least recently taken or freed (what an earlier
/// computation left, which the running one does not use), and goes to the system only when
/// those do not make room. release_arena_memory() empties it. Each thread keeps a small cache of
/// its own in front of it (ThreadCache below).
class Arena {
 public:
  /// A block of `size` bytes: a cached one, or one from the system.
  void* take(std::size_t size) {
    if (void* p = reuse(size)) return p;
    return system_alloc(size);
  }
  /// A cached block of `size` bytes, or nullptr.
  void* reuse(std::size_t size) {
    std::lock_guard lock(mutex_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.blocks.empty()) return nullptr;
    it->second.last_use = ++tick_;
    void* p = it->second.blocks.back();
    it->second.blocks.pop_back();
    cached_.fetch_sub(static_cast<std::int64_t>(size), std::memory_order_relaxed);
    return p;
  }
  /// Keeps p for reuse, making room under the cap by returning the least recently used sizes'
  /// blocks to the system; p itself goes there when that does not make room.
  void give(void* p, std::size_t size) {
    std::vector<std::pair<void*, std::size_t>> evicted;  // freed after the lock
    try {  // out of memory for the bookkeeping: p (and what was evicted) go back to the system
      std::lock_guard lock(mutex_);
      SizeClass& mine = free_[size];
      mine.last_use = ++tick_;
      const auto bytes = static_cast<std::int64_t>(size);
      while (cached_.load(std::memory_order_relaxed) + bytes > cap_) {
        SizeClass* oldest = nullptr;
        std::size_t oldest_size = 0;
        for (auto& [s, c] : free_)
          if (s != size && !c.blocks.empty() && (!oldest || c.last_use < oldest->last_use)) oldest = &c, oldest_size = s;
        if (!oldest) break;
        while (!oldest->blocks.empty() && cached_.load(std::memory_order_relaxed) + bytes > cap_) {
          evicted.emplace_back(oldest->blocks.back(), oldest_size);
          oldest->blocks.pop_back();
          cached_.fetch_sub(static_cast<std::int64_t>(oldest_size), std::memory_order_relaxed);
        }
      }
      if (cached_.load(std::memory_order_relaxed) + bytes <= cap_) {
        mine.blocks.push_back(p);
        cached_.fetch_add(bytes, std::memory_order_relaxed);
        p = nullptr;
      }
    } catch (const std::bad_alloc&) {
    }
    for (auto [q, s] : evicted) system_free(q, s);
    if (p) system_free(p, size);
  }
  void release() {
    std::lock_guard lock(mutex_);
    for (auto& [size, c] : free_)
      for (void* p : c.blocks) system_free(p, size);
    free_.clear();
    cached_.store(0);
  }
  std::int64_t cached() const { return cached_.load(std::memory_order_relaxed); }
  std::int64_t cap() const { return cap_; }

  static void* system_alloc(std::size_t size) {
    void* p = nullptr;
    if (is_mapped(size)) {  // page-aligned, so kAlign-aligned
      p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) p = nullptr;
    } else {
      p = std::aligned_alloc(kAlign, size);
    }
    if (!p) throw std::bad_alloc();
    g_fresh.fetch_add(1, std::memory_order_relaxed);  // counted once it succeeded
    raise(g_reserved_peak, g_system_bytes.fetch_add(static_cast<std::int64_t>(size)) + static_cast<std::int64_t>(size));
    return p;
  }
  static void system_free(void* p, std::size_t size) {
    if (is_mapped(size)) munmap(p, size);
    else std::free(p);
    g_system_bytes.fetch_sub(static_cast<std::int64_t>(size));
  }

 private:
  static std::int64_t cap_from_env() { return detail::arena_cap_from_env(); }
  /// The cached blocks of one size, and when that size was last taken or freed (tick_).
  struct SizeClass {
    std::vector<void*> blocks;
    std::uint64_t last_use = 0;
  };
  std::mutex mutex_;
  std::unordered_map<std::size_t, SizeClass> free_;
  std::uint64_t tick_ = 0;
  std::atomic<std::int64_t> cached_{0};
  const std::int64_t cap_ = cap_from_env();
};

// Never destroyed: buffers held by static arrays may be freed after main returns.
Arena& arena() {
  static Arena* a = new Arena;
  return *a;
}

/// A thread's own cache of freed blocks in front of the shared arena: a buffer freed and
/// allocated again on one thread (a plan's steady state) takes no lock and no atomic
/// read-modify-write. It holds at most min(cap, 16 MiB) (XJAX_ARENA_BYTES = 0 turns it off too)
/// and a few blocks per size; the rest goes to the shared arena. Its bytes count in arena_bytes.
/// release_arena_memory() returns the calling thread's cached blocks to the system and asks the
/// other threads' caches to do so at their next allocation or free; a thread's cache goes to the
/// shared arena when the thread ends.
class ThreadCache {
 public:
  ThreadCache() : cap_(std::min<std::int64_t>(arena().cap(), std::int64_t{16} << 20)) {
    std::lock_guard lock(registry_mutex());
    registry().push_back(this);
  }
  ~ThreadCache() {
    flush();
    std::lock_guard lock(registry_mutex());
    std::erase(registry(), this);
  }
  ThreadCache(const ThreadCache&) = delete;
  ThreadCache& operator=(const ThreadCache&) = delete;

  void* take(std::size_t size) {
    if (flush_requested_.load(std::memory_order_relaxed)) release();
    for (auto& bin : bins_)
      if (bin.size == size && !bin.blocks.empty()) {
        void* p = bin.blocks.back();
        bin.blocks.pop_back();
        set_bytes(bytes_ - static_cast<std::int64_t>(size));
        return p;
      }
    return arena().take(size);
  }
  void give(void* p, std::size_t size) {
    if (flush_requested_.load(std::memory_order_relaxed)) release();
    if (bytes_ + static_cast<std::int64_t>(size) <= cap_) {
      try {  // out of memory for the bins: p goes to the shared arena
        Bin* bin = nullptr;
        for (auto& b : bins_)
          if (b.size == size) bin = &b;
        if (!bin && bins_.size() < kMaxBins) bin = &bins_.emplace_back(Bin{size, {}});
        if (bin && bin->blocks.size() < kMaxBlocksPerSize) {
          bin->blocks.push_back(p);
          set_bytes(bytes_ + static_cast<std::int64_t>(size));
          return;
        }
      } catch (const std::bad_alloc&) {
      }
    }
    arena().give(p, size);
  }
  /// Returns every block to the system.
  void release() {
    flush_requested_.store(false, std::memory_order_relaxed);
    for (auto& bin : bins_)
      for (void* p : bin.blocks) Arena::system_free(p, bin.size);
    bins_.clear();
    set_bytes(0);
  }

  /// The calling thread's cache; nullptr while the thread is ending (its cache is gone, and a
  /// static array freed after it goes to the shared arena directly).
  static ThreadCache* mine();
  /// Bytes held by every thread's cache.
  static std::int64_t cached_everywhere() {
    std::lock_guard lock(registry_mutex());
    std::int64_t n = 0;
    for (const ThreadCache* c : registry()) n += c->published_.load(std::memory_order_relaxed);
    return n;
  }
  /// Hands every cached block to the shared arena (to the system if a release was asked for).
  void hand_back() {
    if (flush_requested_.load(std::memory_order_relaxed)) release();
    else if (bytes_ > 0) flush();
  }
  /// Releases the calling thread's cache; the others release theirs at their next use.
  static void release_everywhere() {
    ThreadCache* own = mine();
    std::lock_guard lock(registry_mutex());
    for (ThreadCache* c : registry())
      if (c != own) c->flush_requested_.store(true, std::memory_order_relaxed);
    if (own) own->release();
  }

 private:
  static constexpr std::size_t kMaxBins = 32, kMaxBlocksPerSize = 8;
  struct Bin {
    std::size_t size;
    std::vector<void*> blocks;
  };
  void flush() {
    flush_requested_.store(false, std::memory_order_relaxed);
    for (auto& bin : bins_)
      for (void* p : bin.blocks) arena().give(p, bin.size);
    bins_.clear();
    set_bytes(0);
  }
  void set_bytes(std::int64_t n) {
    bytes_ = n;
    published_.store(n, std::memory_order_relaxed);  // a plain store: read by memory_stats()
  }
  static std::vector<ThreadCache*>& registry() {
    static auto* r = new std::vector<ThreadCache*>;
    return *r;
  }
  static std::mutex& registry_mutex() {
    static auto* m = new std::mutex;
    return *m;
  }
  std::vector<Bin> bins_;
  std::int64_t bytes_ = 0;
  std::atomic<std::int64_t> published_{0};
  std::atomic<bool> flush_requested_{false};
  const std::int64_t cap_;
};

ThreadCache* ThreadCache::mine() { return detail::PerThread<ThreadCache>::get(); }

std::int64_t arena_bytes() { return arena().cached() + ThreadCache::cached_everywhere(); }

}  // namespace

namespace detail {

Buffer::Buffer(std::size_t n) : nbytes(n) {
  const std::size_t size = rounded(n);
  if (size) {
    ThreadCache* cache = ThreadCache::mine();
    data = cache ? cache->take(size) : arena().take(size);
  }
  const Table::Mine counters = Table::mine();
  Table::add(counters, &Slot::live, static_cast<std::int64_t>(n));
  Table::add(counters, &Slot::allocs, 1);
  raise(g_peak, live_bytes());
}

// External memory is the caller's: no arena block, no counters (it is not xjax's allocation).
Buffer::Buffer(const void* external_data, std::size_t n, std::shared_ptr<const void> owner)
    : data(const_cast<void*>(external_data)), nbytes(n), external(true), keep_alive(std::move(owner)) {}

Buffer::~Buffer() {
  if (external) return;
  if (data) {
    ThreadCache* cache = ThreadCache::mine();
    if (cache) cache->give(data, rounded(nbytes));
    else arena().give(data, rounded(nbytes));
  }
  Table::add(&Slot::live, -static_cast<std::int64_t>(nbytes));
}

void count_eval(Primitive p) {
  Table::count_eval(static_cast<std::size_t>(p));
}

void count_evals(std::span<const EvalCount> counts) {
  Table::count_evals(counts);
}

void flush_thread_cache() {
  // A worker that never allocated has no cache, and gets none (a thread_local destructor
  // registered for nothing: a child of fork() inherits the record and LeakSanitizer reports it).
  if (ThreadCache* cache = detail::PerThread<ThreadCache>::existing()) cache->hand_back();
}

}  // namespace detail

MemoryStats memory_stats() {
  return {live_bytes(), g_peak.load(), buffers_created(), g_fresh.load(), arena_bytes(), g_reserved_peak.load()};
}

void reset_peak_memory() {
  g_peak.store(live_bytes());
  g_reserved_peak.store(g_system_bytes.load());
}

void release_arena_memory() {
  ThreadCache::release_everywhere();
  arena().release();
#if defined(__GLIBC__)
  malloc_trim(0);  // the freed small blocks' pages too, where malloc's heap can give them back
#endif
}

std::map<std::string, std::int64_t> eval_counts() {
  std::map<std::string, std::int64_t> out;
  for (int i = 0; i < num_primitives; ++i) {
    const auto k = static_cast<std::size_t>(i);
    auto n = Table::get().total([k](const Slot& s) { return s.evals[k].load(std::memory_order_relaxed); });
    if (n) out[std::string(primitive_name(static_cast<Primitive>(i)))] = n;
  }
  return out;
}

void reset_eval_counts() {
  Table::get().reset_evals();
}

}  // namespace xjax

// runtime.cpp: the counting buffer allocator (with its arena of reusable blocks) and the
// per-primitive execution counters.
#include "xjax/runtime.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "internal.hpp"

namespace xjax {
namespace {

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<std::int64_t> g_allocs{0};
std::atomic<std::int64_t> g_fresh{0};
std::atomic<std::int64_t> g_reserved_peak{0};
std::array<std::atomic<std::int64_t>, num_primitives> g_evals{};

void raise(std::atomic<std::int64_t>& peak_counter, std::int64_t value) {
  std::int64_t peak = peak_counter.load(std::memory_order_relaxed);
  while (value > peak && !peak_counter.compare_exchange_weak(peak, value, std::memory_order_relaxed)) {
  }
}

constexpr std::size_t kAlign = 64;
std::size_t rounded(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// The buffer arena: freed blocks kept by rounded size and handed to the next buffer of that size,
/// so a plan that runs again (a scan body, a jitted step) allocates nothing from the system. It
/// keeps at most `cap` bytes (XJAX_ARENA_BYTES, default 512 MiB); release_arena_memory() empties it.
class Arena {
 public:
  void* take(std::size_t size) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_.fetch_sub(static_cast<std::int64_t>(size), std::memory_order_relaxed);
        return p;
      }
    }
    g_fresh.fetch_add(1, std::memory_order_relaxed);
    void* p = std::aligned_alloc(kAlign, size);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void give(void* p, std::size_t size) {
    {
      std::lock_guard lock(mutex_);
      if (cached_.load(std::memory_order_relaxed) + static_cast<std::int64_t>(size) <= cap_) {
        free_[size].push_back(p);
        cached_.fetch_add(static_cast<std::int64_t>(size), std::memory_order_relaxed);
        return;
      }
    }
    std::free(p);
  }
  void release() {
    std::lock_guard lock(mutex_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_.store(0);
  }
  std::int64_t cached() const { return cached_.load(std::memory_order_relaxed); }

 private:
  static std::int64_t cap_from_env() {
    const char* v = std::getenv("XJAX_ARENA_BYTES");
    return v ? std::strtoll(v, nullptr, 10) : std::int64_t{512} << 20;
  }
  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::atomic<std::int64_t> cached_{0};
  const std::int64_t cap_ = cap_from_env();
};

// Never destroyed: buffers held by static arrays may be freed after main returns.
Arena& arena() {
  static Arena* a = new Arena;
  return *a;
}

}  // namespace

namespace detail {

Buffer::Buffer(std::size_t n) : nbytes(n) {
  const std::size_t size = rounded(n);
  data = size ? arena().take(size) : nullptr;
  std::int64_t live = g_live.fetch_add(static_cast<std::int64_t>(n)) + static_cast<std::int64_t>(n);
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  raise(g_peak, live);
  raise(g_reserved_peak, live + arena().cached());
}

// External memory is the caller's: no arena block, no counters (it is not xjax's allocation).
Buffer::Buffer(const void* external_data, std::size_t n, std::shared_ptr<const void> owner)
    : data(const_cast<void*>(external_data)), nbytes(n), external(true), keep_alive(std::move(owner)) {}

Buffer::~Buffer() {
  if (external) return;
  if (data) arena().give(data, rounded(nbytes));
  g_live.fetch_sub(static_cast<std::int64_t>(nbytes));
}

void count_eval(Primitive p) {
  g_evals[static_cast<std::size_t>(p)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail

MemoryStats memory_stats() {
  return {g_live.load(), g_peak.load(), g_allocs.load(), g_fresh.load(), arena().cached(), g_reserved_peak.load()};
}

void reset_peak_memory() {
  g_peak.store(g_live.load());
  g_reserved_peak.store(g_live.load() + arena().cached());
}

void release_arena_memory() { arena().release(); }

std::map<std::string, std::int64_t> eval_counts() {
  std::map<std::string, std::int64_t> out;
  for (int i = 0; i < num_primitives; ++i) {
    auto n = g_evals[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
    if (n) out[std::string(primitive_name(static_cast<Primitive>(i)))] = n;
  }
  return out;
}

void reset_eval_counts() {
  for (auto& c : g_evals) c.store(0);
}

}  // namespace xjax

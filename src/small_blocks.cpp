// small_blocks.cpp: SmallBlocks, the per-thread cache of small freed blocks (small_blocks.hpp).
#include "small_blocks.hpp"

#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string_view>
#include <system_error>
#include <vector>

#include "per_thread.hpp"

namespace xjax::detail {

long long arena_cap_from_env() {
  static const long long cap = [] {
    constexpr long long fallback = 512LL << 20;
    const char* v = std::getenv("XJAX_ARENA_BYTES");
    if (!v) return fallback;
    const std::string_view text(v);
    long long n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || n < 0) {
      std::fprintf(stderr, "xjax: XJAX_ARENA_BYTES='%s' is not a byte count (digits only, 0 turns the arena off); using %lld\n", v, fallback);
      return fallback;
    }
    return n;
  }();
  return cap;
}

namespace {

constexpr std::size_t kClasses = SmallBlocks::kMaxBytes / SmallBlocks::kClassBytes;

bool cache_enabled() {
  static const bool on = arena_cap_from_env() != 0;
  return on;
}

std::size_t class_of(std::size_t bytes) { return (bytes + SmallBlocks::kClassBytes - 1) / SmallBlocks::kClassBytes - 1; }

/// One thread's free lists; their blocks go back to the system when the thread ends.
struct FreeLists {
  std::array<std::vector<void*>, kClasses> lists;
  FreeLists() = default;
  ~FreeLists() {
    for (auto& l : lists)
      for (void* p : l) ::operator delete(p);
  }
  FreeLists(const FreeLists&) = delete;
  FreeLists& operator=(const FreeLists&) = delete;
};

/// The calling thread's lists; nullptr once they are destroyed (a static array freed after the
/// thread's end goes straight to operator delete).
FreeLists* mine() { return PerThread<FreeLists>::get(); }

}  // namespace

void* SmallBlocks::take(std::size_t bytes) {
  if (bytes == 0 || bytes > kMaxBytes || !cache_enabled()) return ::operator new(bytes);
  const std::size_t c = class_of(bytes);
  if (FreeLists* f = mine(); f && !f->lists[c].empty()) {
    void* p = f->lists[c].back();
    f->lists[c].pop_back();
    return p;
  }
  return ::operator new((c + 1) * kClassBytes);
}

void SmallBlocks::give(void* p, std::size_t bytes) noexcept {
  if (bytes == 0 || bytes > kMaxBytes || !cache_enabled()) return ::operator delete(p);
  try {
    if (FreeLists* f = mine(); f) {
      auto& list = f->lists[class_of(bytes)];
      if (list.size() < kKeep) {
        list.push_back(p);
        return;
      }
    }
  } catch (...) {  // no memory for the list itself: give the block back instead
  }
  ::operator delete(p);
}

}  // namespace xjax::detail

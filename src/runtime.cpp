// runtime.cpp: the counting buffer allocator and the per-primitive execution counters.
#include "xjax/runtime.hpp"

#include <array>
#include <atomic>
#include <cstdlib>
#include <new>

#include "internal.hpp"

namespace xjax {
namespace {

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<std::int64_t> g_allocs{0};
std::array<std::atomic<std::int64_t>, num_primitives> g_evals{};

void raise_peak(std::int64_t live) {
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

}  // namespace

namespace detail {

Buffer::Buffer(std::size_t n) : nbytes(n) {
  constexpr std::size_t align = 64;
  std::size_t rounded = (n + align - 1) / align * align;
  data = rounded ? std::aligned_alloc(align, rounded) : nullptr;
  if (rounded && !data) throw std::bad_alloc();
  std::int64_t live = g_live.fetch_add(static_cast<std::int64_t>(n)) + static_cast<std::int64_t>(n);
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  raise_peak(live);
}

Buffer::~Buffer() {
  std::free(data);
  g_live.fetch_sub(static_cast<std::int64_t>(nbytes));
}

void count_eval(Primitive p) {
  g_evals[static_cast<std::size_t>(p)].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace detail

MemoryStats memory_stats() { return {g_live.load(), g_peak.load(), g_allocs.load()}; }

void reset_peak_memory() { g_peak.store(g_live.load()); }

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

namespace {
constexpr std::string_view without_trailing_underscore(std::string_view s) {
  return s.ends_with('_') ? s.substr(0, s.size() - 1) : s;
}
}  // namespace

std::string_view primitive_name(Primitive p) {
  switch (p) {
#define XJAX_NAME(name) \
  case Primitive::name: return without_trailing_underscore(#name);
    XJAX_FOR_EACH_PRIMITIVE(XJAX_NAME)
#undef XJAX_NAME
  }
  return "?";
}

}  // namespace xjax

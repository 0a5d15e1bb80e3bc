// counters.hpp: the runtime's counters (live bytes, buffers created, executions per primitive),
// kept per thread (not installed; included by runtime.cpp only).
//
// Each thread owns a slot and updates it with a plain load and store: no locked instruction,
// which on x86 waits until the kernel's stores have drained (a measurable cost per buffer). A
// total sums the slots in use. Slots are recycled: when a thread ends, its counts move into the
// shared `retired` slot (the only one updated with atomic read-modify-writes, as are threads
// beyond kMaxSlots). Totals are exact whenever no thread is starting or ending; a total read
// while other threads count sees each slot's latest value.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "per_thread.hpp"
#include "xjax/primitives.hpp"

namespace xjax::detail::counters {

struct alignas(64) Slot {
  std::atomic<std::int64_t> live{0};    // bytes of xjax buffers alive
  std::atomic<std::int64_t> allocs{0};  // buffers created
  std::array<std::atomic<std::int64_t>, num_primitives> evals{};
};

constexpr std::size_t kMaxSlots = 64;

class Table {
 public:
  /// The calling thread's slot, and whether it is shared with other threads.
  struct Mine {
    Slot* slot;
    bool shared;
  };
  static Table& get() {
    static Table* t = new Table;  // never destroyed: threads may count after main returns
    return *t;
  }
  /// Adds d to counter c of the calling thread's slot.
  static void add(std::atomic<std::int64_t> Slot::*c, std::int64_t d) { add(mine(), c, d); }
  static void add(const Mine& m, std::atomic<std::int64_t> Slot::*c, std::int64_t d) {
    auto& x = m.slot->*c;
    if (m.shared) x.fetch_add(d, std::memory_order_relaxed);
    else x.store(x.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }
  static void count_eval(std::size_t prim) {
    Mine m = mine();
    auto& x = m.slot->evals[prim];
    if (m.shared) x.fetch_add(1, std::memory_order_relaxed);
    else x.store(x.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  template <class Counts> static void count_evals(const Counts& counts) {
    Mine m = mine();
    for (const auto& c : counts) {
      auto& x = m.slot->evals[static_cast<std::size_t>(c.prim)];
      if (m.shared) x.fetch_add(c.n, std::memory_order_relaxed);
      else x.store(x.load(std::memory_order_relaxed) + c.n, std::memory_order_relaxed);
    }
  }
  /// The sum of `read(slot)` over the slots in use and the retired counts.
  template <class Read> std::int64_t total(Read read) const {
    std::int64_t n = read(retired_);
    const std::size_t used = used_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < used; ++i) n += read(slots_[i]);
    return n;
  }
  /// Sets every slot's evals to 0 (a thread counting at the same moment may keep its count).
  void reset_evals() {
    for (auto& c : retired_.evals) c.store(0);
    const std::size_t used = used_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < used; ++i)
      for (auto& c : slots_[i].evals) c.store(0);
  }

  static Mine mine();

 private:
  friend struct SlotLease;
  Slot* claim() {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      Slot* s = free_.back();
      free_.pop_back();
      return s;
    }
    const std::size_t used = used_.load(std::memory_order_relaxed);
    if (used == kMaxSlots) return nullptr;
    used_.store(used + 1, std::memory_order_release);
    return &slots_[used];
  }
  // The thread of slot s ended: its counts move to retired_ and the slot is free again.
  void retire(Slot* s) {
    std::lock_guard lock(mutex_);
    auto move = [](std::atomic<std::int64_t>& from, std::atomic<std::int64_t>& to) {
      to.fetch_add(from.exchange(0, std::memory_order_relaxed), std::memory_order_relaxed);
    };
    move(s->live, retired_.live);
    move(s->allocs, retired_.allocs);
    for (std::size_t i = 0; i < s->evals.size(); ++i) move(s->evals[i], retired_.evals[i]);
    free_.push_back(s);
  }
  std::array<Slot, kMaxSlots> slots_{};
  std::atomic<std::size_t> used_{0};
  Slot retired_;
  std::mutex mutex_;
  std::vector<Slot*> free_;
};

/// A thread's claim on a slot, given back when the thread ends.
struct SlotLease {
  SlotLease() : slot(Table::get().claim()) {}
  ~SlotLease() {
    if (slot) Table::get().retire(slot);
  }
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  Slot* slot;
};

inline Table::Mine Table::mine() {
  if (SlotLease* lease = PerThread<SlotLease>::get(); lease && lease->slot) return {lease->slot, false};
  return {&get().retired_, true};  // a thread ending, or beyond kMaxSlots
}

}  // namespace xjax::detail::counters

// loops/schedule.cpp: the checkpoint schedules of loops/schedule.hpp, and the public pieces of
// control_flow.hpp that describe them (scan_checkpoints, scan_schedule_stats).
#include <algorithm>
#include <string>

#include "loops/loops.hpp"
#include "loops/schedule.hpp"
#include "xjax/control_flow.hpp"

namespace xjax {

struct ScanCheckpointsFactory {
  static ScanCheckpoints make(ScanCheckpoints::Kind k, std::int64_t s) { return ScanCheckpoints(k, s); }
};

namespace {
ScanCheckpoints checked(ScanCheckpoints::Kind k, std::int64_t s, const char* name) {
  if (s < 1) throw Error(std::string("scan_checkpoints::") + name + "(" + std::to_string(s) + "): at least 1 snapshot is needed");
  return ScanCheckpointsFactory::make(k, s);
}
}  // namespace

namespace scan_checkpoints {
ScanCheckpoints all() { return ScanCheckpointsFactory::make(ScanCheckpoints::Kind::all, 0); }
ScanCheckpoints binomial(std::int64_t s) { return checked(ScanCheckpoints::Kind::binomial, s, "binomial"); }
ScanCheckpoints online(std::int64_t s) { return checked(ScanCheckpoints::Kind::online, s, "online"); }
}  // namespace scan_checkpoints

namespace detail {

// ---- the binomial schedule ---------------------------------------------------------------------

std::int64_t binomial_advances(std::int64_t l, std::int64_t c) {
  if (l <= 1) return 0;
  const std::int64_t s = c + 1;
  std::int64_t r = 0, beta = 1;  // beta = C(s + r, r)
  while (beta < l) {
    ++r;
    beta = beta * (s + r) / r;
  }
  std::int64_t b = 1;  // C(s + 1 + k, k) for k = 0 .. r - 1
  for (std::int64_t k = 1; k <= r - 1; ++k) b = b * (s + 1 + k) / k;
  return r * l - b;
}

namespace {
// The cost of reversing [0, l) with c free slots when the first advance goes to m:
// m advances, then [m, l) with c - 1 slots, then [0, m) with c again.
std::int64_t split_cost(std::int64_t l, std::int64_t c, std::int64_t m) {
  return m + binomial_advances(l - m, c - 1) + binomial_advances(m, c);
}

// The best first advance for l >= 2 steps and c >= 1 free slots. split_cost is convex in m (a
// sum of convex piecewise-linear functions), so the minimum is where its slope turns >= 0.
std::int64_t best_split(std::int64_t l, std::int64_t c) {
  std::int64_t lo = 1, hi = l - 1;
  while (lo < hi) {
    std::int64_t mid = lo + (hi - lo) / 2;
    if (split_cost(l, c, mid + 1) >= split_cost(l, c, mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
}  // namespace

RevolveSchedule RevolveSchedule::binomial(std::int64_t l, std::int64_t s) {
  if (l < 1 || s < 1) throw InternalError("binomial schedule", "needs l >= 1 and s >= 1");
  RevolveSchedule sc;
  for (std::int64_t k = s - 1; k >= 1; --k) sc.free_.push_back(k);
  sc.work_.push_back({.kind = Item::Kind::segment, .start = 0, .end = l, .slot = 0});
  sc.pending_.push_back({RevolveAction::Kind::store, 0});
  return sc;
}

RevolveSchedule RevolveSchedule::segments(std::int64_t l, std::int64_t s,
                                          const std::vector<std::pair<std::int64_t, std::int64_t>>& stored) {
  using K = RevolveAction::Kind;
  RevolveSchedule sc;
  std::vector<bool> used(static_cast<std::size_t>(s), false);
  for (const auto& [pos, slot] : stored) used[static_cast<std::size_t>(slot)] = true;
  for (std::int64_t k = s - 1; k >= 0; --k)
    if (!used[static_cast<std::size_t>(k)]) sc.free_.push_back(k);
  // Each segment: restore its start, reverse it, free its slot; the first segment is done last.
  for (std::size_t j = 0; j < stored.size(); ++j) {
    const auto [start, slot] = stored[j];
    const std::int64_t end = j + 1 < stored.size() ? stored[j + 1].first : l;
    if (start >= end) continue;
    sc.work_.push_back({.kind = Item::Kind::release, .slot = slot});
    sc.work_.push_back({.kind = Item::Kind::segment, .start = start, .end = end, .slot = slot});
    sc.work_.push_back({.kind = Item::Kind::fixed, .action = {K::restore, slot}});
  }
  return sc;
}

bool RevolveSchedule::next(RevolveAction& a) {
  while (pending_.empty()) {
    if (work_.empty()) return false;
    Item it = work_.back();
    work_.pop_back();
    expand(it);
  }
  a = pending_.back();
  pending_.pop_back();
  return true;
}

// Reversing [start, end) from the carry held at start: one step is reversed at once; without free
// slots, each step e - 1 (the last first) is reached by advancing from start; otherwise advance to
// the best split m and store it, reverse [m, end) with one slot fewer, free m's slot, restore
// start and reverse [start, m).
void RevolveSchedule::expand(const Item& it) {
  using K = RevolveAction::Kind;
  std::vector<RevolveAction> acts;  // in order
  switch (it.kind) {
    case Item::Kind::fixed: acts.push_back(it.action); break;
    case Item::Kind::release:
      free_.push_back(it.slot);
      acts.push_back({K::release, it.slot});
      break;
    case Item::Kind::segment:
      if (it.end - it.start == 1) {
        acts.push_back({K::reverse, it.start});
      } else if (free_.empty()) {
        work_.push_back({.kind = Item::Kind::from_held, .start = it.start, .end = it.end, .slot = it.slot, .e = it.end});
      } else {
        const std::int64_t m = it.start + best_split(it.end - it.start, static_cast<std::int64_t>(free_.size()));
        const std::int64_t slot = free_.back();
        free_.pop_back();
        acts.push_back({K::advance, m - it.start});
        acts.push_back({K::store, slot});
        work_.push_back({.kind = Item::Kind::segment, .start = it.start, .end = m, .slot = it.slot});
        work_.push_back({.kind = Item::Kind::fixed, .action = {K::restore, it.slot}});
        work_.push_back({.kind = Item::Kind::release, .slot = slot});
        work_.push_back({.kind = Item::Kind::segment, .start = m, .end = it.end, .slot = slot});
      }
      break;
    case Item::Kind::from_held:
      if (it.e != it.end) acts.push_back({K::restore, it.slot});
      if (it.e - 1 > it.start) acts.push_back({K::advance, it.e - 1 - it.start});
      acts.push_back({K::reverse, it.e - 1});
      if (it.e - 1 > it.start) {
        Item rest = it;
        rest.e = it.e - 1;
        work_.push_back(rest);
      }
      break;
  }
  pending_.assign(acts.rbegin(), acts.rend());
}

// ---- the online placement ----------------------------------------------------------------------

OnlinePlacement::OnlinePlacement(std::int64_t s)
    : capacity_((s + 1) / 2), slot_of_(static_cast<std::size_t>((s + 1) / 2), -1) {
  for (std::int64_t k = capacity_ - 1; k >= 0; --k) free_.push_back(k);
}

std::int64_t OnlinePlacement::visit(std::int64_t pos) {
  released_.clear();
  if (pos != 0 && (capacity_ < 2 || pos % stride_ != 0)) return -1;
  if (free_.empty()) {  // full: keep the multiples of twice the stride
    stride_ *= 2;
    for (std::size_t k = 0; k < slot_of_.size(); ++k)
      if (slot_of_[k] > 0 && slot_of_[k] % stride_ != 0) {
        slot_of_[k] = -1;
        free_.push_back(static_cast<std::int64_t>(k));
        released_.push_back(static_cast<std::int64_t>(k));
      }
    if (pos % stride_ != 0) return -1;
  }
  const std::int64_t k = free_.back();
  free_.pop_back();
  slot_of_[static_cast<std::size_t>(k)] = pos;
  return k;
}

std::vector<std::pair<std::int64_t, std::int64_t>> OnlinePlacement::stored() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::size_t k = 0; k < slot_of_.size(); ++k)
    if (slot_of_[k] >= 0) out.emplace_back(slot_of_[k], static_cast<std::int64_t>(k));
  std::sort(out.begin(), out.end());
  return out;
}

// ---- options -----------------------------------------------------------------------------------

std::int64_t scan_snapshots(const ScanCheckpoints& c, std::source_location loc) {
  if (c.kind() == ScanCheckpoints::Kind::online)
    throw Error("scan: scan_checkpoints::online is for while_loop, whose length is unknown; a scan's length is known, "
                "so use scan_checkpoints::binomial(" + std::to_string(c.snapshots()) + ") (at " + format_location(loc) + ")");
  return c.snapshots();
}

std::int64_t while_snapshots(const ScanCheckpoints& c, std::source_location loc) {
  if (c.kind() == ScanCheckpoints::Kind::binomial)
    throw Error("while_loop: scan_checkpoints::binomial needs the trip count in advance; use scan_checkpoints::online(" +
                std::to_string(c.snapshots()) + ") (at " + format_location(loc) + ")");
  return c.snapshots();
}

}  // namespace detail

// ---- statistics --------------------------------------------------------------------------------

namespace {
// Counts a schedule's advances and its peak of occupied slots (`held` occupied at the start).
void tally(detail::RevolveSchedule sc, std::int64_t held, ScanScheduleStats& st) {
  using K = detail::RevolveAction::Kind;
  std::int64_t live = held;
  st.peak_snapshots = std::max(st.peak_snapshots, live);
  for (detail::RevolveAction a{}; sc.next(a);) {
    if (a.kind == K::advance) st.advances += a.n;
    if (a.kind == K::reverse) ++st.taped_steps;
    if (a.kind == K::store) st.peak_snapshots = std::max(st.peak_snapshots, ++live);
    if (a.kind == K::release) --live;
  }
}
}  // namespace

ScanScheduleStats scan_schedule_stats(std::int64_t length, ScanCheckpoints checkpoints) {
  if (length < 0) throw Error("scan_schedule_stats: negative length " + std::to_string(length));
  ScanScheduleStats st;
  const std::int64_t s = checkpoints.snapshots();
  switch (checkpoints.kind()) {
    case ScanCheckpoints::Kind::all:
      st.taped_steps = length;
      st.peak_snapshots = length;
      break;
    case ScanCheckpoints::Kind::binomial:
      if (length > 0) tally(detail::RevolveSchedule::binomial(length, std::min(s, length)), 0, st);
      break;
    case ScanCheckpoints::Kind::online: {
      // The forward sweep runs every step once (advances); the stored carries are then reversed.
      detail::OnlinePlacement place(s);
      std::int64_t live = 0;
      for (std::int64_t p = 0; p < length; ++p) {
        if (place.visit(p) >= 0) ++live;
        live -= static_cast<std::int64_t>(place.released().size());
        st.peak_snapshots = std::max(st.peak_snapshots, live);
      }
      st.advances = length;
      if (length > 0) tally(detail::RevolveSchedule::segments(length, s, place.stored()), live, st);
      break;
    }
  }
  st.forward_steps = st.advances + st.taped_steps;
  return st;
}

}  // namespace xjax

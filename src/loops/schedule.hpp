// loops/schedule.hpp: checkpoint schedules for reverse mode through loops (Griewank and Walther's
// binomial schedule, "revolve", and an online variant for while_loop), as lists of actions that
// the loop primitives of loops/revolve.cpp execute. Not installed.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace xjax::detail {

/// One step of a schedule over loop steps [0, l). A snapshot slot holds the carry entering some
/// step; the working carry is the one the next advance or reverse reads.
struct RevolveAction {
  enum class Kind : std::uint8_t {
    store,    // copy the working carry into slot `n`
    restore,  // the working carry becomes slot `n`'s (and its position)
    release,  // slot `n` is free again (bookkeeping only)
    advance,  // run the step `n` times without keeping residuals
    reverse,  // step `n` (the working position): run it keeping residuals, then its backward
  };
  Kind kind;
  std::int64_t n;
};

/// The fewest advances that reverse l steps when the carry entering the first is held and c
/// more carries can be stored: t(l, c + 1) = r l - C(c + 1 + r, c + 2), r the least integer with
/// C(c + 1 + r, r) >= l (Griewank and Walther; 0 for l <= 1, l (l - 1) / 2 for c = 0).
std::int64_t binomial_advances(std::int64_t l, std::int64_t c);

/// A schedule's actions, generated one at a time: memory O(s) whatever the length (an explicit
/// stack of pending work instead of recursion, so no depth limit either).
class RevolveSchedule {
 public:
  /// Griewank and Walther's binomial schedule of l >= 1 steps with s >= 1 slots: store(0), then
  /// the reversal of [0, l). Its advances are binomial_advances(l, s - 1).
  static RevolveSchedule binomial(std::int64_t l, std::int64_t s);
  /// The backward sweep of a loop of l steps whose forward stored the carries `stored` (position,
  /// slot, by position; position 0 among them when l > 0), with s slots in all: the segments
  /// between stored carries, the last first, each reversed binomially with the free slots.
  static RevolveSchedule segments(std::int64_t l, std::int64_t s, const std::vector<std::pair<std::int64_t, std::int64_t>>& stored);
  /// The next action into `a`; false when the schedule is done.
  bool next(RevolveAction& a);

 private:
  struct Item {
    enum class Kind : std::uint8_t { segment, fixed, release, from_held } kind;
    std::int64_t start = 0, end = 0, slot = 0;  // segment [start, end) entered at start (held in slot)
    std::int64_t e = 0;                         // from_held: the end of what is left
    RevolveAction action{};                     // fixed
  };
  void expand(const Item& it);
  std::vector<Item> work_;              // last pushed, first done
  std::vector<std::int64_t> free_;      // free slots
  std::vector<RevolveAction> pending_;  // actions of the last expanded item, last first
};

/// Where while_loop's forward sweep stores carries with online(s): in its capacity() = (s + 1) / 2
/// slots (numbered 0 ..), at the multiples of a stride that doubles (dropping every other stored
/// carry) when they are full, so the other slots stay free for the backward sweep. O(1) per step
/// but for the doublings (O(s) each, log(l) of them).
class OnlinePlacement {
 public:
  explicit OnlinePlacement(std::int64_t s);
  std::int64_t capacity() const { return capacity_; }
  /// Called with the carry entering step `pos` (pos = 0, 1, ...): the slot to store it in, or -1.
  /// Slots whose carries were dropped are reported through released().
  std::int64_t visit(std::int64_t pos);
  const std::vector<std::int64_t>& released() const { return released_; }
  /// (position, slot) of the stored carries, by position.
  std::vector<std::pair<std::int64_t, std::int64_t>> stored() const;

 private:
  std::int64_t capacity_, stride_ = 1;
  std::vector<std::int64_t> slot_of_;  // slot -> position, -1 when free
  std::vector<std::int64_t> free_;     // free slots
  std::vector<std::int64_t> released_;
};

}  // namespace xjax::detail

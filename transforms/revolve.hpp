// revolve.hpp: checkpoint schedules for reverse mode through loops (Griewank and Walther's
// binomial schedule, "revolve", and an online variant for while_loop), as lists of actions that
// the loop primitives of revolve.cpp execute. Not installed.
#pragma once
#include <cstdint>
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

/// Appends the actions reversing steps [start, end), entered with the working carry at `start`
/// and held in slot start_slot, using the slots in `free` (returned to it when done).
void reverse_segment(std::int64_t start, std::int64_t end, std::int64_t start_slot, std::vector<std::int64_t>& free,
                     std::vector<RevolveAction>& out);

/// The whole binomial schedule of l >= 1 steps with s >= 1 slots: store(0), then the reversal of
/// [0, l). Its advances are binomial_advances(l, s - 1).
std::vector<RevolveAction> binomial_schedule(std::int64_t l, std::int64_t s);

/// Where while_loop's forward sweep stores carries with online(s): at most (s + 1) / 2 slots, at
/// the multiples of a stride that doubles (dropping every other stored carry) when they are full,
/// so the other slots stay free for the backward sweep.
class OnlinePlacement {
 public:
  explicit OnlinePlacement(std::int64_t s);
  /// Called with the carry entering step `pos` (pos = 0, 1, ...): the slot to store it in, or -1.
  /// Slots whose carries were dropped are reported through released().
  std::int64_t visit(std::int64_t pos);
  const std::vector<std::int64_t>& released() const { return released_; }
  /// (position, slot) of the stored carries, by position.
  std::vector<std::pair<std::int64_t, std::int64_t>> stored() const;

 private:
  std::int64_t s_, capacity_, stride_ = 1;
  std::vector<std::int64_t> slot_of_;  // slot -> position, -1 when free
  std::vector<std::int64_t> released_;
};

/// The backward sweep of a loop of l steps whose forward stored the carries `stored` (position,
/// slot; position 0 among them), with s slots in all: the segments between stored carries, the
/// last first, each reversed binomially with the slots free at that point.
std::vector<RevolveAction> segments_schedule(std::int64_t l, std::int64_t s,
                                             const std::vector<std::pair<std::int64_t, std::int64_t>>& stored);

}  // namespace xjax::detail

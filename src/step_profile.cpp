// step_profile.cpp: xj::StepProfile (runtime.hpp), one chain of live profiles per thread.
#include "step_profile.hpp"

#include <algorithm>
#include <cstdio>

namespace xjax {
namespace {

thread_local StepProfile* t_innermost = nullptr;

}  // namespace

StepProfile* detail::active_step_profile() { return t_innermost; }

StepProfile::StepProfile() : outer_(t_innermost), head_(&t_innermost) { t_innermost = this; }

// Unlinked from its thread's chain wherever it sits in it (profiles destroyed out of order: the
// one made after it now reports to the one made before it).
StepProfile::~StepProfile() {
  for (StepProfile** link = head_; *link; link = &(*link)->outer_)
    if (*link == this) {
      *link = outer_;
      return;
    }
}

void StepProfile::record(const std::string& step, double seconds) {
  Entry& e = by_step_[step];
  e.seconds += seconds;
  ++e.count;
}

std::vector<StepProfile::Entry> StepProfile::entries() const {
  std::vector<Entry> out;
  for (const auto& [step, e] : by_step_) out.push_back({step, e.seconds, e.count});
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

std::string StepProfile::str(std::size_t lines) const {
  std::string out;
  char row[64];
  const auto all = entries();
  for (std::size_t i = 0; i < all.size() && i < lines; ++i) {
    std::snprintf(row, sizeof row, "%10.6f s %8lld  ", all[i].seconds, static_cast<long long>(all[i].count));
    out += row + all[i].step + "\n";
  }
  return out;
}

}  // namespace xjax

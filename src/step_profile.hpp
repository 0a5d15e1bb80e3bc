// step_profile.hpp: the plan runners' side of xj::StepProfile (runtime.hpp; not installed).
#pragma once
#include <chrono>
#include <string>

#include "xjax/runtime.hpp"

namespace xjax::detail {

/// The calling thread's innermost live StepProfile, or null.
StepProfile* active_step_profile();

/// Times the steps of one plan run into the thread's live StepProfile: made once per run (one
/// check), then start() / stop(label) around each step read the clock only when a profile is
/// alive. An empty label (a loop or call step, whose body's steps are timed) is not recorded.
class StepTimer {
 public:
  StepTimer() : profile_(active_step_profile()) {}
  void start() {
    if (profile_) start_ = std::chrono::steady_clock::now();
  }
  void stop(const std::string& label) {
    if (profile_ && !label.empty())
      profile_->record(label, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  StepProfile* profile_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace xjax::detail

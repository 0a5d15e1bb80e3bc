// per_thread.cpp: the one thread_local with a destructor behind PerThread (per_thread.hpp).
#include "per_thread.hpp"

#include <vector>

namespace xjax::detail {
namespace {

struct Owned {
  void* object;
  void (*destroy)(void*);
};

thread_local bool t_owned_destroyed = false;  // trivially destructible: readable after ~ThreadOwned

/// The objects handed to a thread, destroyed newest first when it ends; an object handed over
/// while they are destroyed (a destructor that makes another PerThread T) is destroyed too.
struct ThreadOwned {
  std::vector<Owned> objects;
  ThreadOwned() = default;
  ThreadOwned(const ThreadOwned&) = delete;
  ThreadOwned& operator=(const ThreadOwned&) = delete;
  ~ThreadOwned() {
    while (!objects.empty()) {
      Owned last = objects.back();
      objects.pop_back();
      last.destroy(last.object);
    }
    t_owned_destroyed = true;
  }
};

}  // namespace

bool own_until_thread_end(void* object, void (*destroy)(void*)) {
  if (t_owned_destroyed) return false;
  thread_local ThreadOwned owned;
  owned.objects.push_back({object, destroy});
  return true;
}

}  // namespace xjax::detail

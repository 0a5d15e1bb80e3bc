// plan_cache.cpp: the side table of what is derived from a jaxpr at run time: its execution plan
// and scan's unrolled bodies. The IR itself holds no runtime state (jaxpr.hpp), so a Jaxpr is a
// plain value; this table maps a shared jaxpr object to its plan.
//
// An entry is keyed by the jaxpr's address and remembers its owner (a weak_ptr) and a fingerprint
// of its contents. A lookup finds the entry only if the owner is the same live object, so a
// jaxpr freed and another allocated at the same address never sees the old plan; and only if the
// fingerprint agrees, so a Jaxpr assigned another jaxpr's contents in place (through a non-const
// alias) gets a new plan. (The fingerprint is O(1): the equation count and storage and the
// identities of the first and last variables. An edit inside one equation of a jaxpr already
// evaluated is not detected; a jaxpr is immutable once shared, as jaxpr.hpp says.) Entries whose
// jaxpr is gone are swept when the table has doubled since the last sweep. A plan is built once
// per contents (a racing builder's result is dropped) and handed out as a shared_ptr, so
// replacing an entry never frees a plan another thread is running.
#include <algorithm>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "plan.hpp"

namespace xjax::detail {
namespace {

/// What a Jaxpr's contents look like, cheaply: changes when other contents are assigned to it.
struct Fingerprint {
  const void* eqns_data = nullptr;
  std::size_t num_eqns = 0, num_invars = 0, num_outvars = 0;
  std::uint64_t first_invar = 0, first_output = 0, last_output = 0;
  friend bool operator==(const Fingerprint&, const Fingerprint&) = default;
};

std::uint64_t first_output_id(const Eqn& e) { return e.outputs.empty() ? 0 : e.outputs[0].id(); }

Fingerprint fingerprint(const Jaxpr& j) {
  Fingerprint f{j.eqns.data(), j.eqns.size(), j.invars.size(), j.outvars.size(), 0, 0, 0};
  if (!j.invars.empty()) f.first_invar = j.invars[0].id();
  if (!j.eqns.empty()) {
    f.first_output = first_output_id(j.eqns.front());
    f.last_output = first_output_id(j.eqns.back());
  }
  return f;
}

struct Entry {
  std::weak_ptr<const Jaxpr> owner;
  Fingerprint contents;
  std::shared_ptr<const EvalPlan> plan;
  std::map<DerivedKey, ClosedJaxprPtr> derived;
};

bool same_owner(const std::weak_ptr<const Jaxpr>& w, const std::shared_ptr<const Jaxpr>& s) {
  return !w.expired() && !w.owner_before(s) && !s.owner_before(w);
}

/// Whether e describes j as it is now.
bool current(const Entry& e, const std::shared_ptr<const Jaxpr>& j) {
  return same_owner(e.owner, j) && e.contents == fingerprint(*j);
}

class PlanTable {
 public:
  static PlanTable& instance() {
    static PlanTable* table = new PlanTable;  // never destroyed: plans may run during static destruction
    return *table;
  }

  std::shared_ptr<const EvalPlan> plan(const std::shared_ptr<const Jaxpr>& j) {
    {
      std::shared_lock lock(mutex_);
      auto it = entries_.find(j.get());
      if (it != entries_.end() && current(it->second, j) && it->second.plan) return it->second.plan;
    }
    std::shared_ptr<const EvalPlan> built = make_plan(*j);  // not under the lock
    std::unique_lock lock(mutex_);
    Entry& e = entry(j);
    if (!e.plan) e.plan = std::move(built);  // else a racing build won
    return e.plan;
  }

  ClosedJaxprPtr derived(const std::shared_ptr<const Jaxpr>& j, const DerivedKey& key,
                         const std::function<ClosedJaxprPtr()>& build) {
    {
      std::shared_lock lock(mutex_);
      auto it = entries_.find(j.get());
      if (it != entries_.end() && current(it->second, j)) {
        auto d = it->second.derived.find(key);
        if (d != it->second.derived.end()) return d->second;
      }
    }
    ClosedJaxprPtr built = build();  // may trace: not under the lock
    std::unique_lock lock(mutex_);
    return entry(j).derived.emplace(key, std::move(built)).first->second;
  }

  std::size_t size() {
    std::shared_lock lock(mutex_);
    return entries_.size();
  }

  void clear() {
    std::unique_lock lock(mutex_);
    entries_.clear();  // plans being run are held by their callers' shared_ptrs
    sweep_at_ = 64;
  }

 private:
  // j's entry, created (or reset, if it describes a jaxpr now gone or other contents) under the
  // unique lock.
  Entry& entry(const std::shared_ptr<const Jaxpr>& j) {
    auto [it, inserted] = entries_.try_emplace(j.get());
    if (!inserted && !current(it->second, j)) it->second = Entry{};
    if (it->second.owner.expired()) it->second = Entry{j, fingerprint(*j), nullptr, {}};  // new, or reset above
    if (inserted && entries_.size() >= sweep_at_) sweep(j.get());
    return it->second;  // erasing other entries leaves `it` valid
  }
  void sweep(const Jaxpr* keep) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->first != keep && it->second.owner.expired()) it = entries_.erase(it);
      else ++it;
    }
    sweep_at_ = std::max<std::size_t>(64, 2 * entries_.size());
  }

  std::shared_mutex mutex_;
  std::unordered_map<const Jaxpr*, Entry> entries_;
  std::size_t sweep_at_ = 64;
};

}  // namespace

std::shared_ptr<const EvalPlan> plan_of(const std::shared_ptr<const Jaxpr>& j) { return PlanTable::instance().plan(j); }

ClosedJaxprPtr derived_jaxpr(const std::shared_ptr<const Jaxpr>& j, const DerivedKey& key,
                             const std::function<ClosedJaxprPtr()>& build) {
  return PlanTable::instance().derived(j, key, build);
}

std::size_t plan_table_size() { return PlanTable::instance().size(); }

}  // namespace xjax::detail

namespace xjax {
void clear_caches() { detail::PlanTable::instance().clear(); }
}  // namespace xjax

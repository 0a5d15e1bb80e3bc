// plan_cache.cpp: the side table of what is derived from a jaxpr at run time: its execution plan
// and scan's unrolled bodies. The IR itself holds no runtime state (jaxpr.hpp), so a Jaxpr is a
// plain value; this table maps a shared jaxpr object to its plan.
//
// An entry is keyed by the jaxpr's address and remembers its owner (a weak_ptr) and a fingerprint
// of its contents. A lookup finds the entry only if the owner is the same live object, so a
// jaxpr freed and another allocated at the same address never sees the old plan; and only if the
// fingerprint agrees, so a Jaxpr changed in place (assigned other contents, or one equation
// edited, through a non-const alias) gets a new plan. Entries whose
// jaxpr is gone are swept when the table has doubled since the last sweep. A plan is built once
// per contents (a racing builder's result is dropped) and handed out as a shared_ptr, so
// replacing an entry never frees a plan another thread is running.
#include <algorithm>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "fnv_hash.hpp"
#include "param_reflect.hpp"
#include "passes.hpp"
#include "plan.hpp"

namespace xjax::detail {
namespace {

/// A hash of everything a plan depends on: the variables' identities, every equation's primitive,
/// operands (variables by identity, literals by value), outputs and parameters (numbers and
/// strings by value, jaxprs and objects by identity; a checkpoint's body also by contents). Computed on every lookup (one pass over the
/// equations), so a Jaxpr changed in place after it was evaluated gets a new plan.
class Hasher {
 public:
  void add(std::uint64_t v) { fnv_.add(v); }
  void add_bytes(const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) add(b[i]);
  }
  /// A variable's identity; an empty Var (a hand-built jaxpr's: check_before_eval refuses it
  /// after this lookup) one of its own.
  void add(const Var& v) { add(v.valid() ? v.id() : 0xe3e3e3e3ull); }
  void add(const Atom& a) {
    if (const auto* v = std::get_if<Var>(&a)) {
      add(*v);
    } else {
      const Array& x = std::get<Literal>(a).value;
      add(0x4c4954ull);  // "LIT"
      add(static_cast<std::uint64_t>(x.dtype()));
      add_bytes(x.raw_data(), x.aval().nbytes());
    }
  }
  template <class T> void add_param(const T& v) {
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::int64_t>) add(static_cast<std::uint64_t>(v));
    else if constexpr (std::is_same_v<T, DType>) add(static_cast<std::uint64_t>(v));
    else if constexpr (std::is_same_v<T, std::string>) add_bytes(v.data(), v.size());
    else if constexpr (std::is_same_v<T, params::Ints>) {
      add(v.size());
      for (auto x : v) add(static_cast<std::uint64_t>(x));
    } else if constexpr (std::is_same_v<T, std::vector<ClosedJaxprPtr>>) {
      for (const auto& x : v) add(reinterpret_cast<std::uintptr_t>(x.get()));
    } else {
      static_assert(std::is_same_v<T, ClosedJaxprPtr> || std::is_same_v<T, params::Object>);
      add(reinterpret_cast<std::uintptr_t>(v.get()));
    }
  }
  std::uint64_t value() const { return fnv_.value(); }

 private:
  Fnv1a fnv_;
};

std::uint64_t fingerprint(const Jaxpr& j) {
  Hasher h;
  for (const auto& v : j.constvars) h.add(v);
  h.add(0xc0ull);
  for (const auto& v : j.invars) h.add(v);
  h.add(0xe0ull);
  for (const Eqn& e : j.eqns) {
    h.add(static_cast<std::uint64_t>(e.prim));
    for (const auto& in : e.inputs) h.add(in);
    h.add(0x0full);
    for (const auto& out : e.outputs) h.add(out);
    h.add(e.params.index());
    for_each_param(e.params, [&](std::string_view, const auto& v) { h.add_param(v); });
    // A call's body is inlined into this plan (passes/inline_calls.cpp), or its plan held by a
    // call step: the body's jaxpr and contents are part of what this plan depends on.
    if (const ClosedJaxpr* body = called_jaxpr(e); body && body->jaxpr) {
      h.add(reinterpret_cast<std::uintptr_t>(body->jaxpr.get()));
      h.add(fingerprint(*body->jaxpr));
    }
  }
  h.add(0x0eull);
  for (const auto& o : j.outvars) h.add(o);
  return h.value();
}

struct Entry {
  std::weak_ptr<const Jaxpr> owner;
  std::uint64_t contents = 0;
  std::shared_ptr<const EvalPlan> plan;
  std::map<DerivedKey, ClosedJaxprPtr> derived;
};

bool same_owner(const std::weak_ptr<const Jaxpr>& w, const std::shared_ptr<const Jaxpr>& s) {
  return !w.expired() && !w.owner_before(s) && !s.owner_before(w);
}

/// Whether e describes j as it is now.
bool current(const Entry& e, const std::shared_ptr<const Jaxpr>& j, std::uint64_t contents) {
  return same_owner(e.owner, j) && e.contents == contents;
}

class PlanTable {
 public:
  static PlanTable& instance() {
    static PlanTable* table = new PlanTable;  // never destroyed: plans may run during static destruction
    return *table;
  }

  std::shared_ptr<const EvalPlan> plan(const std::shared_ptr<const Jaxpr>& j, bool check) {
    const std::uint64_t contents = fingerprint(*j);
    {
      std::shared_lock lock(mutex_);
      auto it = entries_.find(j.get());
      if (it != entries_.end() && current(it->second, j, contents) && it->second.plan) return it->second.plan;
    }
    // A jaxpr eval_jaxpr is given is checked once, before its first plan: one built by hand
    // (Jaxpr, Eqn and Var are public) with an output type or parameters its shape rule disagrees
    // with would run kernels past their buffers. (Traced jaxprs were checked when traced; this
    // costs about as much as the fingerprint above.)
    if (check) check_before_eval(*j);
    std::shared_ptr<const EvalPlan> built = make_plan(*j);  // not under the lock
    std::unique_lock lock(mutex_);
    Entry& e = entry(j, contents);
    if (!e.plan) e.plan = std::move(built);  // else a racing build won
    return e.plan;
  }

  ClosedJaxprPtr derived(const std::shared_ptr<const Jaxpr>& j, const DerivedKey& key,
                         const std::function<ClosedJaxprPtr()>& build) {
    const std::uint64_t contents = fingerprint(*j);
    {
      std::shared_lock lock(mutex_);
      auto it = entries_.find(j.get());
      if (it != entries_.end() && current(it->second, j, contents)) {
        auto d = it->second.derived.find(key);
        if (d != it->second.derived.end()) return d->second;
      }
    }
    ClosedJaxprPtr built = build();  // may trace: not under the lock
    // A derived value that is j itself (a dce that dropped nothing returns its argument) is not
    // kept: the entry holds its derived values strongly and j only weakly, so it would keep j, and
    // itself, alive until clear_caches().
    if (built->jaxpr == j) return built;
    std::unique_lock lock(mutex_);
    return entry(j, contents).derived.emplace(key, std::move(built)).first->second;
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
  Entry& entry(const std::shared_ptr<const Jaxpr>& j, std::uint64_t contents) {
    auto [it, inserted] = entries_.try_emplace(j.get());
    if (!inserted && !current(it->second, j, contents)) it->second = Entry{};
    if (it->second.owner.expired()) it->second = Entry{j, contents, nullptr, {}};  // new, or reset above
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

std::shared_ptr<const EvalPlan> plan_of(const std::shared_ptr<const Jaxpr>& j) { return PlanTable::instance().plan(j, false); }
std::shared_ptr<const EvalPlan> checked_plan_of(const std::shared_ptr<const Jaxpr>& j) { return PlanTable::instance().plan(j, true); }

ClosedJaxprPtr derived_jaxpr(const std::shared_ptr<const Jaxpr>& j, const DerivedKey& key,
                             const std::function<ClosedJaxprPtr()>& build) {
  return PlanTable::instance().derived(j, key, build);
}

std::size_t plan_table_size() { return PlanTable::instance().size(); }

}  // namespace xjax::detail

namespace xjax {
void clear_caches() { detail::PlanTable::instance().clear(); }
}  // namespace xjax

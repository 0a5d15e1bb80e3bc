// transform_memo.cpp: the memo of transformed programs kept by grad, value_and_grad, jacfwd,
// jacrev and hessian. They trace f on every call, because f may read state that changes between
// calls; but a loop traces the same program each time, and transforming it again (linearize,
// partial eval, transpose, vmap, DCE, simplify) and building its plan cost far more than the
// trace. The memo keys a transform's result on the *structure* of the traced program: every
// equation's primitive, parameters, operands (variables by order of definition, literals by
// dtype, shape and bytes), outputs' types and source line, nested jaxprs by the same rules. The
// traced program's consts are passed as leading inputs, so their values are never part of a
// remembered program: a captured array with new values reuses the entry and sees the new values.
// Whatever is compared only by identity (a user's custom rule or checkpoint policy, consts inside
// a nested jaxpr) makes a program unremembered: it is transformed on every call, as before. A
// parameter object with structure_words (built-in policies, the rules of the library's own
// custom_jvp composites such as relu and softmax) is compared by those words.
//
// A memo belongs to one transformed function object (and its copies), holds its last kMaxEntries
// programs, and is thread-safe.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "../src/fnv_hash.hpp"
#include "../src/param_reflect.hpp"
#include "ad.hpp"
#include "higher_order.hpp"
#include "xjax/transforms.hpp"

namespace xjax::detail {
namespace {

/// The structure of a jaxpr as a sequence of words: two programs with equal words are the same
/// program up to the names of their variables and the values of their top-level consts.
class StructureWords {
 public:
  /// Starts with `tag` (what the transform is, and its options).
  explicit StructureWords(std::vector<std::uint64_t> tag) : words_(std::move(tag)) {}
  /// False when `j` holds something compared only by identity (see the file comment).
  bool encode(const Jaxpr& j) { return jaxpr(j); }
  const std::vector<std::uint64_t>& words() const { return words_; }

 private:
  using Scope = std::unordered_map<std::uint64_t, std::uint64_t>;  // var id -> order of definition

  void put(std::uint64_t w) { words_.push_back(w); }
  void aval(const ShapedArray& a) {
    put(static_cast<std::uint64_t>(a.dtype));
    put(a.shape.size());
    for (auto d : a.shape) put(static_cast<std::uint64_t>(d));
  }
  void define(Scope& scope, const Var& v) {
    scope.emplace(v.id(), scope.size());
    aval(v.aval());
  }
  bool use(const Scope& scope, const Atom& a) {
    if (const auto* v = std::get_if<Var>(&a)) {
      auto it = scope.find(v->id());
      if (it == scope.end()) return false;  // not defined before its use: leave such a jaxpr alone
      put(0);
      put(it->second);
      return true;
    }
    const Array& x = std::get<Literal>(a).value;
    put(1);
    aval(x.aval());
    put(is_weak(x) ? 1 : 0);  // decides promotion where the program is evaluated inside a trace
    const std::size_t n = x.aval().nbytes();
    const auto* bytes = static_cast<const unsigned char*>(x.raw_data());
    for (std::size_t i = 0; i < n; i += 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, bytes + i, std::min<std::size_t>(8, n - i));
      put(w);
    }
    return true;
  }
  template <class T> bool param(const T& v) {
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::int64_t> || std::is_same_v<T, DType>) {
      put(static_cast<std::uint64_t>(v));
    } else if constexpr (std::is_same_v<T, std::string>) {
      put(v.size());
      for (unsigned char c : v) put(c);
    } else if constexpr (std::is_same_v<T, params::Ints>) {
      put(v.size());
      for (auto x : v) put(static_cast<std::uint64_t>(x));
    } else if constexpr (std::is_same_v<T, ClosedJaxprPtr>) {
      return closed(v);
    } else if constexpr (std::is_same_v<T, std::vector<ClosedJaxprPtr>>) {
      put(v.size());
      return std::all_of(v.begin(), v.end(), [&](const ClosedJaxprPtr& c) { return closed(c); });
    } else {
      static_assert(std::is_same_v<T, params::Object>);
      if (!v) {
        put(0);
        return true;
      }
      // The object's words, after a mark and their count: a sequence of objects reads back one way only.
      put(1);
      const std::size_t count_at = words_.size();
      put(0);
      if (!v->structure_words(words_)) return false;
      words_[count_at] = words_.size() - count_at - 1;
    }
    return true;
  }
  bool closed(const ClosedJaxprPtr& c) {
    if (!c) {
      put(0);
      return true;
    }
    put(1);
    return c->consts.empty() && jaxpr(*c->jaxpr);
  }
  bool jaxpr(const Jaxpr& j) {
    Scope scope;
    put(j.constvars.size());
    for (const auto& v : j.constvars) define(scope, v);
    put(j.invars.size());
    for (const auto& v : j.invars) define(scope, v);
    put(j.eqns.size());
    for (const Eqn& e : j.eqns) {
      put(static_cast<std::uint64_t>(e.prim));
      put(e.inputs.size());
      for (const auto& in : e.inputs)
        if (!use(scope, in)) return false;
      put(e.outputs.size());
      for (const auto& out : e.outputs) define(scope, out);
      put(e.params.index());
      bool ok = true;
      for_each_param(e.params, [&](std::string_view, const auto& v) { ok = ok && param(v); });
      if (!ok) return false;
      // The line an error or saved_residuals names.
      put(reinterpret_cast<std::uintptr_t>(e.loc.file_name()));
      put(e.loc.line());
      put(e.loc.column());
    }
    put(j.outvars.size());
    for (const auto& o : j.outvars)
      if (!use(scope, o)) return false;
    return true;
  }

  std::vector<std::uint64_t> words_;
};

std::uint64_t hash_words(const std::vector<std::uint64_t>& w) {
  Fnv1a h;
  for (auto x : w) h.add(x);
  return h.value();
}

}  // namespace

struct TransformMemo {
  static constexpr std::size_t kMaxEntries = 8;
  struct Entry {
    std::uint64_t hash;
    std::vector<std::uint64_t> words;  // the tag, then the structure
    ClosedJaxpr program;               // takes (consts..., args...)
  };
  std::mutex mutex;
  std::vector<Entry> entries;  // most recently used first
  std::int64_t hits = 0;
};

std::shared_ptr<TransformMemo> new_transform_memo() { return std::make_shared<TransformMemo>(); }

std::int64_t transform_memo_hits(TransformMemo& memo) {
  std::lock_guard lock(memo.mutex);
  return memo.hits;
}

MemoizedProgram memoized(TransformMemo* memo, const ClosedJaxpr& traced, std::span<const Array> args,
                         std::vector<std::uint64_t> tag, const MemoTransform& transform) {
  StructureWords s(std::move(tag));
  if (!memo || !s.encode(*traced.jaxpr)) {
    return {transform(traced, 0), std::vector<Array>(args.begin(), args.end())};
  }
  std::vector<Array> ins = traced.consts;
  ins.insert(ins.end(), args.begin(), args.end());
  const std::uint64_t h = hash_words(s.words());
  auto matches = [&](const TransformMemo::Entry& e) { return e.hash == h && e.words == s.words(); };
  {
    std::lock_guard lock(memo->mutex);
    auto it = std::find_if(memo->entries.begin(), memo->entries.end(), matches);
    if (it != memo->entries.end()) {
      std::rotate(memo->entries.begin(), it, it + 1);
      ++memo->hits;
      return {memo->entries.front().program, std::move(ins)};
    }
  }
  ClosedJaxpr program = transform(consts_as_inputs(traced), traced.consts.size());  // not under the lock
  std::lock_guard lock(memo->mutex);
  if (std::none_of(memo->entries.begin(), memo->entries.end(), matches)) {
    memo->entries.insert(memo->entries.begin(), TransformMemo::Entry{h, s.words(), program});
    if (memo->entries.size() > TransformMemo::kMaxEntries) memo->entries.pop_back();
  }
  return {std::move(program), std::move(ins)};
}

std::vector<Array> eval_grad(TransformMemo* memo, const ClosedJaxpr& traced, std::span<const Array> args,
                             const std::vector<bool>& diff, bool has_aux, bool with_value) {
  std::vector<std::uint64_t> tag{0x67726164ull /* "grad" */, has_aux, with_value, diff.size()};
  for (bool d : diff) tag.push_back(d);
  auto [program, ins] = memoized(memo, traced, args, std::move(tag), [&](const ClosedJaxpr& j, std::size_t nconsts) {
    std::vector<bool> lifted_diff(nconsts, false);
    lifted_diff.insert(lifted_diff.end(), diff.begin(), diff.end());
    return grad_jaxpr(j, lifted_diff, has_aux, with_value);
  });
  return eval_jaxpr(program, ins);
}

}  // namespace xjax::detail

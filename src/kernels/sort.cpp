// sort.cpp: the kernel of sort: each line along the dimension ordered by its first num_keys
// operands (lexicographically, stably), every operand permuted the same way. Floats are compared
// in JAX's total order: -0 equals 0 (so a stable sort keeps their order), and every NaN is
// greater than every number and equal to every other NaN (NaNs last, in their original order).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/kernels.hpp"

namespace xjax::detail::kernels {
namespace {

/// -1, 0, +1 as element i of `key` orders before, with, or after element j (strided line).
using Compare = int (*)(const void* key, std::int64_t i, std::int64_t j);

template <class T> int compare_elements(const void* key, std::int64_t i, std::int64_t j) {
  const T a = static_cast<const T*>(key)[i], b = static_cast<const T*>(key)[j];
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  }
  return a < b ? -1 : (b < a ? 1 : 0);
}

/// JAX's total order on one key type: NaN after everything (NaNs equal), -0 equal to 0.
template <class T> bool key_less(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

/// The stable order of one line of a single key, sorting (key, position) pairs in place: the
/// common case, without the type-erased comparator's indirection.
template <class T> void order_by_one_key(const unsigned char* key_bytes, std::vector<std::int64_t>& perm,
                                         std::vector<std::pair<T, std::int64_t>>& pairs) {
  const T* key = reinterpret_cast<const T*>(key_bytes);
  pairs.resize(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) pairs[i] = {key[i], static_cast<std::int64_t>(i)};
  std::stable_sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return key_less(a.first, b.first); });
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = pairs[i].second;
}

Compare comparer_of(DType d) {
  return visit_dtype(d, [](auto tag) -> Compare { return &compare_elements<typename decltype(tag)::type>; });
}

}  // namespace

std::vector<Array> sort_kernel(std::span<const Array> in, const params::Sort& ps) {
  const Shape& s = in[0].shape();
  const auto axis = static_cast<std::size_t>(ps.dimension);
  std::int64_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < axis; ++i) outer *= s[i];
  for (std::size_t i = axis + 1; i < s.size(); ++i) inner *= s[i];
  const std::int64_t n = s[axis];
  std::vector<Array> out;
  for (const Array& x : in) out.push_back(alloc_array(x.aval()));
  if (out[0].size() == 0) return out;
  const auto num_keys = static_cast<std::size_t>(ps.num_keys);
  std::vector<Compare> compare;
  for (std::size_t k = 0; k < num_keys; ++k) compare.push_back(comparer_of(in[k].dtype()));
  // One line at a time, gathered into contiguous scratch (one buffer per key) so the comparator
  // reads plain arrays; the permutation then moves every operand.
  std::vector<std::vector<unsigned char>> keys(num_keys);
  for (std::size_t k = 0; k < num_keys; ++k) keys[k].resize(static_cast<std::size_t>(n) * itemsize(in[k].dtype()));
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  // Gathers each line, orders it (perm), and moves every operand's line by perm.
  const auto for_each_line = [&](const auto& order_line) {
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t j = 0; j < inner; ++j) {
        const std::int64_t base = o * n * inner + j;
        for (std::size_t k = 0; k < num_keys; ++k) {
          const auto item = static_cast<std::int64_t>(itemsize(in[k].dtype()));
          const auto* src = static_cast<const unsigned char*>(in[k].raw_data());
          for (std::int64_t i = 0; i < n; ++i)
            std::memcpy(keys[k].data() + i * item, src + (base + i * inner) * item, static_cast<std::size_t>(item));
        }
        order_line();
        for (std::size_t x = 0; x < in.size(); ++x) {
          const auto item = static_cast<std::int64_t>(itemsize(in[x].dtype()));
          const auto* src = static_cast<const unsigned char*>(in[x].raw_data());
          auto* dst = static_cast<unsigned char*>(mutable_data(out[x]));
          for (std::int64_t i = 0; i < n; ++i)
            std::memcpy(dst + (base + i * inner) * item, src + (base + perm[static_cast<std::size_t>(i)] * inner) * item,
                        static_cast<std::size_t>(item));
        }
      }
  };
  if (num_keys == 1) {
    visit_dtype(in[0].dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<std::pair<T, std::int64_t>> pairs;  // one line's (key, position), reused line after line
      for_each_line([&] { order_by_one_key<T>(keys[0].data(), perm, pairs); });
    });
  } else {
    for_each_line([&] {
      std::iota(perm.begin(), perm.end(), std::int64_t{0});
      std::stable_sort(perm.begin(), perm.end(), [&](std::int64_t a, std::int64_t b) {
        for (std::size_t k = 0; k < num_keys; ++k)
          if (const int c = compare[k](keys[k].data(), a, b); c != 0) return c < 0;
        return false;
      });
    });
  }
  return out;
}

// Each line's k largest by a partial sort of positions (O(n log k)): position i before j when
// its value is larger in the total order, or equal with i < j.
/// The k largest of v[0, n), largest first, the lower index first among equals, or false when v
/// holds a NaN (then nothing is written): a heap of the best (value, index) pairs so far with the
/// lowest ranked on top, which each later element is compared with (one comparison on contiguous
/// values; it enters only when strictly larger, since an equal value with a later index ranks
/// below every kept one; a NaN fails the comparison too and is looked at there).
template <class T>
bool largest_k(const T* v, std::int64_t n, std::int64_t k, T* values, std::int32_t* indices) {
  using Entry = std::pair<T, std::int32_t>;
  auto ranks_before = [](const Entry& a, const Entry& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::vector<Entry> kept;
  kept.reserve(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < k; ++i) {
    if (v[i] != v[i]) return false;
    kept.emplace_back(v[i], static_cast<std::int32_t>(i));
  }
  std::make_heap(kept.begin(), kept.end(), ranks_before);  // front: the lowest ranked
  for (std::int64_t i = k; i < n; ++i) {
    if (k > 0 && v[i] <= kept.front().first) continue;
    if (v[i] != v[i]) return false;
    if (k == 0) continue;
    std::pop_heap(kept.begin(), kept.end(), ranks_before);
    kept.back() = {v[i], static_cast<std::int32_t>(i)};
    std::push_heap(kept.begin(), kept.end(), ranks_before);
  }
  std::sort_heap(kept.begin(), kept.end(), ranks_before);
  for (std::int64_t r = 0; r < k; ++r) {
    values[r] = kept[static_cast<std::size_t>(r)].first;
    indices[r] = kept[static_cast<std::size_t>(r)].second;
  }
  return true;
}

std::vector<Array> top_k_kernel(std::span<const Array> in, const params::TopK& ps) {
  const Array& x = in[0];
  const std::int64_t n = x.shape().back(), k = ps.k, lines = n == 0 ? 0 : x.size() / n;
  Shape shape = x.shape();
  shape.back() = k;
  std::vector<Array> out{alloc_array({shape, x.dtype()}), alloc_array({shape, DType::i32})};
  std::int32_t* indices = out_ptr<std::int32_t>(out[1]);
  std::vector<std::int32_t> order(static_cast<std::size_t>(lines == 0 ? 0 : n));  // nothing for an empty batch
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = in_ptr<T>(x);
    T* values = out_ptr<T>(out[0]);
    for (std::int64_t line = 0; line < lines; ++line) {
      const T* v = src + line * n;
      if (largest_k(v, n, k, values + line * k, indices + line * k)) continue;
      // A NaN in the line: JAX's total order (NaN largest), by positions.
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [v](std::int32_t i, std::int32_t j) {
        return key_less(v[j], v[i]) || (!key_less(v[i], v[j]) && i < j);
      });
      for (std::int64_t r = 0; r < k; ++r) {
        indices[line * k + r] = order[static_cast<std::size_t>(r)];
        values[line * k + r] = v[order[static_cast<std::size_t>(r)]];
      }
    }
  });
  return out;
}

}  // namespace xjax::detail::kernels

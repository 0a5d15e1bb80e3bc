// reduce.cpp: kernels of reduce_sum, reduce_max, reduce_min, reduce_prod, reduce_and, reduce_or,
// argmax and argmin.
//
// Read in order: the reduction operators (SumOp, ProdOp, MaxOp, MinOp: an identity and a combine
// that works on scalars and on xsimd batches), the layout (the input's dims collapsed into
// alternating runs of kept and reduced dims), the loop (walks the input once in row-major order;
// the innermost run is either folded into one output element or accumulated into a row of
// outputs), then argmax and the entry points.
#include <algorithm>
#include <limits>

#include "kernels/kernels.hpp"
#include "kernels/kernel_sets.hpp"
#include "kernels/simd.hpp"  // xsimd, with the GCC 12 warning workaround
#include "kernels/transpose_block.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
namespace {

template <class T> using Batch = xsimd::batch<T>;
using Bool = std::uint8_t;  // bool storage

// ---- operators ---------------------------------------------------------------------------------
// init(): the identity; apply(a, b): V is T or Batch<T> (batches only for floating T).

template <class T> struct SumOp {
  static constexpr bool order_free = false;  // a float sum's bits depend on the order: kept fixed
  static T init() { return T{0}; }
  template <class V> static V apply(const V& a, const V& b) {
    if constexpr (std::is_integral_v<V>) return wrap_add(a, b);
    else return a + b;
  }
};

template <class T> struct ProdOp {
  static constexpr bool order_free = false;
  static T init() { return T{1}; }
  template <class V> static V apply(const V& a, const V& b) {
    if constexpr (std::is_integral_v<V>) return wrap_mul(a, b);
    else return a * b;
  }
};

// max/min propagate NaN (as XLA does). For bool, max is `any` and min is `all`. Their folds may
// group the elements in any order (order_free): the value is the same, up to which NaN or which of
// two equal zeros is kept.
template <class T> struct MaxOp {
  static constexpr bool order_free = true;
  static T init() {
    if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  template <class V> static V apply(const V& a, const V& b) {
    if constexpr (std::is_integral_v<V>) return std::max(a, b);
    else if constexpr (std::is_floating_point_v<V>) return (a > b || a != a) ? a : b;
    else return xsimd::select((a > b) || xsimd::isnan(a), a, b);
  }
};

template <class T> struct MinOp {
  static constexpr bool order_free = true;
  static T init() {
    if constexpr (std::is_same_v<T, Bool>) return Bool{1};
    else if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  template <class V> static V apply(const V& a, const V& b) {
    if constexpr (std::is_integral_v<V>) return std::min(a, b);
    else if constexpr (std::is_floating_point_v<V>) return (a < b || a != a) ? a : b;
    else return xsimd::select((a < b) || xsimd::isnan(a), a, b);
  }
};

// ---- layout ------------------------------------------------------------------------------------

// A run of adjacent input dims that are all kept or all reduced, merged into one.
struct Run {
  std::int64_t size;
  bool reduced;
};

// The input's dims as runs: size-1 dims dropped, neighbours with the same role merged. Never empty.
std::vector<Run> collapse_runs(const Shape& shape, const Ints& axes) {
  std::vector<Run> runs;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<std::int64_t>(d)) != axes.end();
    if (!runs.empty() && runs.back().reduced == reduced) runs.back().size *= shape[d];
    else runs.push_back({shape[d], reduced});
  }
  if (runs.empty()) runs.push_back({1, false});
  return runs;
}

// ---- loop --------------------------------------------------------------------------------------

// The first `batches` whole batches of x folded into one. A sum folds pairwise above 128
// batches, each half apart, then the two halves: its rounding error grows with log n instead of n
// (4M copies of 1.0078125 summed in f32 lane by lane were 0.37% off; numpy's sum is pairwise
// too). A product folds linearly (pairwise, factors near 1 rounded down systematically: 1e-3 off
// at 4M, as numpy's linear product is not), and so do max and min.
template <class T, class Op> Batch<T> fold_batches(const T* x, std::int64_t batches) {
  constexpr auto width = static_cast<std::int64_t>(Batch<T>::size);
  constexpr std::int64_t leaf = 128;
  if (std::is_same_v<Op, SumOp<T>> && batches > leaf) {
    const std::int64_t half = batches / 2;
    return Op::apply(fold_batches<T, Op>(x, half), fold_batches<T, Op>(x + half * width, batches - half));
  }
  Batch<T> partial(Op::init());
  for (std::int64_t b = 0; b < batches; ++b) partial = Op::apply(partial, Batch<T>::load_unaligned(x + b * width));
  return partial;
}

// Folds x[0..n) into one value (batched for floats: several partial results, then combined).
template <class T, class Op> T fold_contiguous(const T* x, std::int64_t n) {
  T acc = Op::init();
  std::int64_t i = 0;
  if constexpr (std::is_floating_point_v<T>) {
    constexpr auto width = static_cast<std::int64_t>(Batch<T>::size);
    if (n >= width) {
      const Batch<T> partial = fold_batches<T, Op>(x, n / width);
      i = n - n % width;
      alignas(64) T lanes[width];
      partial.store_aligned(lanes);
      for (T lane : lanes) acc = Op::apply(acc, lane);
    }
  }
  for (; i < n; ++i) acc = Op::apply(acc, x[i]);
  return acc;
}

// The whole batches of a row of n >= width elements folded into one (lane l: the elements at
// l mod width), as fold_contiguous folds them.
template <class T, class Op> Batch<T> fold_into_batch(const T* x, std::int64_t n) {
  constexpr auto width = static_cast<std::int64_t>(Batch<T>::size);
  Batch<T> partial = Batch<T>::load_unaligned(x);
  for (std::int64_t i = width; i + width <= n; i += width) partial = Op::apply(partial, Batch<T>::load_unaligned(x + i));
  return partial;
}

// out[r] = op(out[r], fold of row r) for rows rows of n >= width contiguous elements, by an
// order-free op (max, min): width rows at a time, each folded into a batch, the batches
// transposed so that one more batch fold gives the width results, then each row's tail (n mod
// width elements): fold_contiguous's order, so the same bits, a zero's sign included (a tail
// folded into the lanes first kept the other zero of a row of +0 ending in -0: review finding).
// Folding each row's lanes one by one branched on every lane: softmax's max over rows of 64 took
// 6x a sum's time (110 against 19 us for 4096 rows, AVX-512 set, Zen 5; now 29 us).
template <class T, class Op> void fold_rows(T* out, const T* x, std::int64_t rows, std::int64_t n) {
  constexpr auto width = static_cast<std::int64_t>(Batch<T>::size);
  alignas(64) T partials[width * width], columns[width * width];
  std::int64_t r = 0;
  for (; r + width <= rows; r += width) {
    for (std::int64_t k = 0; k < width; ++k) fold_into_batch<T, Op>(x + (r + k) * n, n).store_aligned(partials + k * width);
    transpose_block(partials, width, columns, width, width, width);  // columns[l width + k]: row k's lane l
    Batch<T> acc = Batch<T>::load_unaligned(out + r);
    for (std::int64_t l = 0; l < width; ++l) acc = Op::apply(acc, Batch<T>::load_aligned(columns + l * width));
    acc.store_unaligned(out + r);
    for (std::int64_t k = 0; k < width; ++k)
      for (std::int64_t i = n - n % width; i < n; ++i) out[r + k] = Op::apply(out[r + k], x[(r + k) * n + i]);
  }
  for (; r < rows; ++r) out[r] = Op::apply(out[r], fold_contiguous<T, Op>(x + r * n, n));
}

// out[j] = op(out[j], x[j]) for j < n.
template <class T, class Op> void accumulate_row(T* out, const T* x, std::int64_t n) {
  std::int64_t i = 0;
  if constexpr (std::is_floating_point_v<T>) {
    constexpr auto width = static_cast<std::int64_t>(Batch<T>::size);
    for (; i + width <= n; i += width)
      Op::apply(Batch<T>::load_unaligned(out + i), Batch<T>::load_unaligned(x + i))
          .store_unaligned(out + i);
  }
  for (; i < n; ++i) out[i] = Op::apply(out[i], x[i]);
}

// Walks x once in row-major order. All runs but the last are an odometer that tracks the output
// offset; the last run is handled by fold_contiguous (reduced) or accumulate_row (kept).
template <class T, class Op> void reduce_into(T* out, const T* x, const std::vector<Run>& runs) {
  if constexpr (std::is_floating_point_v<T> && Op::order_free)
    if (runs.size() == 2 && !runs[0].reduced && runs[1].reduced && runs[1].size >= static_cast<std::int64_t>(Batch<T>::size))
      return fold_rows<T, Op>(out, x, runs[0].size, runs[1].size);
  const std::size_t outer_runs = runs.size() - 1;
  std::vector<std::int64_t> out_stride(outer_runs, 0);
  std::int64_t kept_size = runs.back().reduced ? 1 : runs.back().size;
  for (std::size_t r = outer_runs; r-- > 0;) {
    if (runs[r].reduced) continue;
    out_stride[r] = kept_size;
    kept_size *= runs[r].size;
  }
  std::int64_t outer_count = 1;
  for (std::size_t r = 0; r < outer_runs; ++r) outer_count *= runs[r].size;

  const Run inner = runs.back();
  std::vector<std::int64_t> index(outer_runs, 0);
  std::int64_t out_offset = 0;
  for (std::int64_t it = 0; it < outer_count; ++it, x += inner.size) {
    if (inner.reduced)
      out[out_offset] = Op::apply(out[out_offset], fold_contiguous<T, Op>(x, inner.size));
    else
      accumulate_row<T, Op>(out + out_offset, x, inner.size);
    for (std::size_t r = outer_runs; r-- > 0;) {  // advance the odometer
      out_offset += out_stride[r];
      if (++index[r] < runs[r].size) break;
      out_offset -= out_stride[r] * runs[r].size;
      index[r] = 0;
    }
  }
}

template <class T, class Op> void reduce_typed(const Array& x, const Ints& axes, const Array& result) {
  T* out = out_ptr<T>(result);
  std::fill(out, out + result.size(), Op::init());
  if (x.size() == 0) return;
  reduce_into<T, Op>(out, in_ptr<T>(x), collapse_runs(x.shape(), axes));
}

template <class T> void reduce_dispatch(Primitive p, const Array& x, const Ints& axes,
                                        const Array& result) {
  constexpr bool is_bool = std::is_same_v<T, Bool>;
  if (p == Primitive::reduce_max) return reduce_typed<T, MaxOp<T>>(x, axes, result);
  if (p == Primitive::reduce_min) return reduce_typed<T, MinOp<T>>(x, axes, result);
  if (p == Primitive::reduce_or || p == Primitive::reduce_and) {  // on bool: max and min
    if constexpr (is_bool) {
      if (p == Primitive::reduce_or) return reduce_typed<T, MaxOp<T>>(x, axes, result);
      return reduce_typed<T, MinOp<T>>(x, axes, result);
    }
  } else if (p == Primitive::reduce_sum) {
    if constexpr (!is_bool) return reduce_typed<T, SumOp<T>>(x, axes, result);
  } else if (p == Primitive::reduce_prod) {
    if constexpr (!is_bool) return reduce_typed<T, ProdOp<T>>(x, axes, result);
  } else {
    throw Error("reduce_kernel: not a reduction: " + std::string(primitive_name(p)));
  }
  unsupported_dtype(p, x.dtype());
}

// ---- argmax, argmin ----------------------------------------------------------------------------

// v beats the best so far: greater (smaller for argmin), or the first NaN (NaN counts as the
// maximum of argmax and the minimum of argmin, as in JAX).
template <bool Min, class T> bool beats(T v, T best) {
  if constexpr (std::is_floating_point_v<T>) {
    if (best != best) return false;
    if (v != v) return true;
  }
  if constexpr (Min) return v < best;
  else return v > best;
}

// The first k maximizing (minimizing) x[k] (k < n, n > 0): the extremum in one vectorized pass
// (NaN when the row holds one), then the first element equal to it (the first NaN when it is NaN).
template <bool Min, class T> std::int64_t arg_extremum_contiguous(const T* x, std::int64_t n) {
  using Op = std::conditional_t<Min, MinOp<T>, MaxOp<T>>;
  const T m = fold_contiguous<T, Op>(x, n);
  std::int64_t k = 0;
  if constexpr (std::is_floating_point_v<T>) {  // skip whole batches that cannot hold it
    constexpr auto width = static_cast<std::int64_t>(Batch<T>::size);
    const Batch<T> mb(m);
    const bool nan = m != m;
    for (; k + width <= n; k += width) {
      const auto v = Batch<T>::load_unaligned(x + k);
      if (xsimd::any(nan ? xsimd::isnan(v) : v == mb)) break;
    }
  }
  for (; k < n; ++k)
    if (x[k] == m || (m != m && x[k] != x[k])) return k;
  return 0;
}

// x viewed as [outer, n, inner]; out[o, j] = first k maximizing (minimizing) x[o, k, j]. An
// empty axis gives 0.
template <bool Min, class T, class I>
void arg_extremum_typed(const T* x, I* out, std::int64_t outer, std::int64_t n, std::int64_t inner) {
  if (inner == 1 && n > 0) {  // the last axis: no branch per element
    for (std::int64_t o = 0; o < outer; ++o) out[o] = static_cast<I>(arg_extremum_contiguous<Min>(x + o * n, n));
    return;
  }
  std::vector<T> best(static_cast<std::size_t>(inner));
  for (std::int64_t o = 0; o < outer; ++o) {
    const T* block = x + o * n * inner;
    I* out_row = out + o * inner;
    std::fill(out_row, out_row + inner, I{0});
    if (n == 0) continue;
    std::copy(block, block + inner, best.begin());
    for (std::int64_t k = 1; k < n; ++k) {
      for (std::int64_t j = 0; j < inner; ++j) {
        T v = block[k * inner + j];
        auto& b = best[static_cast<std::size_t>(j)];
        if (beats<Min>(v, b)) {
          b = v;
          out_row[j] = static_cast<I>(k);
        }
      }
    }
  }
}

std::int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

}  // namespace

// ---- entry points ------------------------------------------------------------------------------

Array reduce_kernel(Primitive p, const Array& x, const Ints& axes, const ShapedArray& out) {
  Array result = alloc_array(out);
  visit_dtype(x.dtype(), [&](auto tag) {
    reduce_dispatch<typename decltype(tag)::type>(p, x, axes, result);
  });
  return result;
}

Array arg_reduce_kernel(Primitive p, const Array& x, std::int64_t axis, const ShapedArray& out) {
  if (out.dtype != DType::i32 && out.dtype != DType::i64) unsupported_dtype(p, out.dtype);
  Array result = alloc_array(out);
  const Shape& s = x.shape();
  const auto a = static_cast<std::size_t>(axis);
  const std::int64_t outer = product(s, 0, a), n = s.at(a), inner = product(s, a + 1, s.size());
  if (result.size() == 0) return result;
  const bool min = p == Primitive::argmin;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto* o) {
      if (min) arg_extremum_typed<true>(in_ptr<T>(x), o, outer, n, inner);
      else arg_extremum_typed<false>(in_ptr<T>(x), o, outer, n, inner);
    };
    if (out.dtype == DType::i32) run(out_ptr<std::int32_t>(result));
    else run(out_ptr<std::int64_t>(result));
  });
  return result;
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE

// window.cpp: the kernels of the window reductions (reduce_window_sum / _max / _min) and of the
// select pair that differentiates the max and min ones (select_and_gather_add: the tangent at
// each window's selected element; select_and_scatter_add: each window's cotangent added at its
// selected element).
//
// One traversal serves all: for each output position (all dims but the last by an odometer), each
// window position of those dims that lands inside the operand gives an operand row; along the
// last dim a table says which element (or none: padding, a hole of the base dilation) window
// position k of output position o reads. Padding never enters a reduction (it holds the
// reduction's identity: 0, -inf, +inf) and is never selected.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/kernel_sets.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"
#include "windows.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
namespace {

// Output rows: the positions of every dim but the last (each row holds the last dim's out_size).
std::int64_t output_rows(const std::vector<WindowDim>& dims) {
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + 1 < dims.size(); ++i) rows *= dims[i].out_size;
  return rows;
}

// Output rows per parallel chunk: enough that a chunk reads about 32K window taps.
std::int64_t row_grain(const std::vector<WindowDim>& dims) {
  std::int64_t taps = 1;
  for (const auto& d : dims) taps *= std::max<std::int64_t>(d.window, 1);
  if (!dims.empty()) taps *= std::max<std::int64_t>(dims.back().out_size, 1);
  return std::max<std::int64_t>(1, (std::int64_t{1} << 15) / taps);
}

WindowDim last_dim(const std::vector<WindowDim>& dims) { return dims.empty() ? WindowDim{1, 1, 1, 0, 1, 1, 1} : dims.back(); }

// A kernel call's window geometry, worked out once and read by every chunk of output rows.
struct Windows {
  Windows(std::vector<WindowDim> d, const Shape& in_shape)
      : dims(std::move(d)), last(last_dim(dims)), last_table(last.index_table()), strides(row_major_strides(in_shape)) {
    for (std::size_t i = 0; i + 1 < dims.size(); ++i) {
      out_extent.push_back(dims[i].out_size);
      win_extent.push_back(dims[i].window);
      tables.push_back(dims[i].index_table());
      wins *= dims[i].window;
    }
  }
  std::vector<WindowDim> dims;
  WindowDim last;      // the last dim (a window of one over one element for a scalar operand)
  Ints last_table;     // its input_index of each (o, k)
  Ints strides;        // the operand's, row-major
  // The dims before the last: output and window extents, input_index tables (no division per
  // row), and how many window positions they span.
  Ints out_extent, win_extent;
  std::vector<Ints> tables;
  std::int64_t wins = 1;
};

// Calls window(out_row_start, operand_rows) for every output row in [begin, end) (the positions
// of the last dim, out_size of them), operand_rows being the starts of the operand rows its
// window reads along the other dims, in window order (window positions over padding left out).
template <class F> void for_each_output_row(const Windows& w, std::int64_t begin, std::int64_t end, F&& window) {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(w.wins));
  Odometer o{w.out_extent};
  o.seek(begin);
  Odometer k{w.win_extent};  // back at the first window position after each full cycle
  for (std::int64_t op = begin; op < end; ++op, o.next()) {
    std::size_t count = 0;
    for (std::int64_t kp = 0; kp < w.wins; ++kp, k.next()) {
      std::int64_t off = 0;
      bool inside = true;
      for (std::size_t i = 0; i < o.at.size() && inside; ++i) {
        const std::int64_t idx = w.tables[i][static_cast<std::size_t>(o.at[i] * w.dims[i].window + k.at[i])];
        inside = idx >= 0;
        off += idx * w.strides[i];
      }
      if (inside) rows[count++] = off;
    }
    window(op * w.last.out_size, std::span<const std::int64_t>(rows.data(), count));
  }
}

template <class T> T identity_of(Primitive p) {
  if (p == Primitive::reduce_window_sum) return T(0);
  const bool is_max = p == Primitive::reduce_window_max;
  if constexpr (std::numeric_limits<T>::has_infinity)
    return is_max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  else
    return is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
}

// The reductions, as functors so that the row loops inline them (and vectorize the plain ones).
// Max and min propagate NaN (v != v: v is NaN).
// Each also has a batch form (xsimd) for the contiguous rows of the plain case.
struct Sum {
  template <class T> T operator()(T acc, T v) const {
    if constexpr (std::is_integral_v<T>) return wrap_add(acc, v);
    else return acc + v;
  }
  template <class T> simd::Batch<T> batch(const simd::Batch<T>& acc, const simd::Batch<T>& v) const { return acc + v; }
};
// The scalar forms are written as selects (no data-dependent branch: a max of random data would
// mispredict often) and agree with the batch forms (simd.hpp's nan_max / nan_min) on every input:
// NaN from either side, and the newer value on a tie (so -0.0 and +0.0 reduce alike in a
// batch's lanes and in the scalar edges and tails).
struct Max {
  template <class T> T operator()(T acc, T v) const {
    const T m = acc > v ? acc : v;
    return acc == acc ? m : acc;
  }
  template <class T> simd::Batch<T> batch(const simd::Batch<T>& acc, const simd::Batch<T>& v) const {
    return simd::nan_max(acc, v);
  }
};
struct Min {
  template <class T> T operator()(T acc, T v) const {
    const T m = acc < v ? acc : v;
    return acc == acc ? m : acc;
  }
  template <class T> simd::Batch<T> batch(const simd::Batch<T>& acc, const simd::Batch<T>& v) const {
    return simd::nan_min(acc, v);
  }
};

// Along the last dim, output position o reads operand element o for window position 0 and no
// other: a window of 1 without stride, padding or dilation (a pool's channel dim).
bool is_plain(const WindowDim& d) {
  return d.window == 1 && d.stride == 1 && d.pad_lo == 0 && d.base_dilation == 1 && d.out_size == d.in_size;
}

// Calls f(stride) with the interior's stride as a compile-time constant where it is 1 or 2 (the
// compiler then vectorizes the strided reads with shuffles), else as it is.
template <class F> void with_stride(std::int64_t s, F&& f) {
  if (s == 1) f(std::integral_constant<std::int64_t, 1>{});
  else if (s == 2) f(std::integral_constant<std::int64_t, 2>{});
  else f(s);
}

// A batch of the elements p[0], p[stride], p[2 stride], ... (inlined, unlike xsimd 8's gather).
template <class T, class S> simd::Batch<T> load_strided(const T* p, S stride) {
  if constexpr (std::is_same_v<S, std::integral_constant<std::int64_t, 1>>) {
    return simd::Batch<T>::load_unaligned(p);
  } else {
    constexpr std::size_t width = simd::Batch<T>::size;
    alignas(64) T lanes[width];
    for (std::size_t l = 0; l < width; ++l) lanes[l] = p[static_cast<std::int64_t>(l) * stride];
    return simd::Batch<T>::load_aligned(lanes);
  }
}

// The batch of lane offsets 0, step, 2 step, ... (the flat indices a batch of outputs reads).
template <class I> xsimd::batch<I> lane_offsets(std::int64_t step) {
  constexpr std::size_t width = xsimd::batch<I>::size;
  alignas(64) I at[width];
  for (std::size_t l = 0; l < width; ++l) at[l] = static_cast<I>(static_cast<std::int64_t>(l) * step);
  return xsimd::batch<I>::load_aligned(at);
}

// Calls tap(o, at) for each output position o of a row's edges ([0, lo) and [hi, n): windows
// that reach padding or base-dilation holes) and each of its window positions, in order, that
// reads operand element `at` of the row (the last dim's index table says which).
template <class Tap> void for_each_edge_tap(const std::vector<std::int64_t>& table, std::int64_t kw, std::int64_t lo,
                                            std::int64_t hi, std::int64_t n, Tap&& tap) {
  for (const auto& [from, to] : {std::pair{std::int64_t{0}, lo}, std::pair{hi, n}})
    for (std::int64_t o = from; o < to; ++o) {
      const std::int64_t* t = table.data() + o * kw;
      for (std::int64_t k = 0; k < kw; ++k)
        if (t[k] >= 0) tap(o, t[k]);
    }
}

// Output rows [begin, end) of the reduction (each written by this call alone).
template <class T, class Op> void reduce_window_rows(Op op, T identity, const Array& x, const Windows& w, T* out,
                                                     std::int64_t begin, std::int64_t end) {
  const T* src = in_ptr<T>(x);
  const WindowDim& last = w.last;
  const Ints& table = w.last_table;
  const std::int64_t n = last.out_size, kw = last.window, s = last.stride, wd = last.window_dilation;
  const auto [lo, hi] = last.interior();
  // One operand row into the output row y: the edges through the table; the interior window
  // position by window position, its strided reads computed (no table, no test: it vectorizes).
  const auto reduce_row = [&](const T* row, T* y) {
    for_each_edge_tap(table, kw, lo, hi, n, [&](std::int64_t o, std::int64_t at) { y[o] = op(y[o], row[at]); });
    if (lo == hi) return;  // no interior
    with_stride(s, [&](auto stride) {
      for (std::int64_t k = 0; k < kw; ++k) {
        const T* first = row + (lo * s + k * wd - last.pad_lo);
        std::int64_t o = lo;
        if constexpr (std::is_floating_point_v<T>) {
          constexpr auto width = static_cast<std::int64_t>(simd::Batch<T>::size);
          for (; o + width <= hi; o += width)
            op.batch(simd::Batch<T>::load_unaligned(y + o), load_strided(first + (o - lo) * stride, stride)).store_unaligned(y + o);
        }
        for (; o < hi; ++o) y[o] = op(y[o], first[(o - lo) * stride]);
      }
    });
  };
  const bool plain = is_plain(last);
  for_each_output_row(w, begin, end, [&](std::int64_t out_row, std::span<const std::int64_t> rows) {
    T* y = out + out_row;
    if (!plain) {
      std::fill(y, y + n, identity);
      for (const std::int64_t in_row : rows) reduce_row(src + in_row, y);
      return;
    }
    // batches of outputs held in registers across the whole window: four at a time (four
    // independent chains of max or add, whose latency one chain would wait on), then one
    std::int64_t o = 0;
    if constexpr (std::is_floating_point_v<T>) {
      using B = simd::Batch<T>;
      constexpr auto width = static_cast<std::int64_t>(B::size);
      for (; o + 4 * width <= n; o += 4 * width) {
        B acc0(identity), acc1(identity), acc2(identity), acc3(identity);
        for (const std::int64_t in_row : rows) {
          const T* p = src + in_row + o;
          acc0 = op.batch(acc0, B::load_unaligned(p));
          acc1 = op.batch(acc1, B::load_unaligned(p + width));
          acc2 = op.batch(acc2, B::load_unaligned(p + 2 * width));
          acc3 = op.batch(acc3, B::load_unaligned(p + 3 * width));
        }
        acc0.store_unaligned(y + o);
        acc1.store_unaligned(y + o + width);
        acc2.store_unaligned(y + o + 2 * width);
        acc3.store_unaligned(y + o + 3 * width);
      }
      for (; o + width <= n; o += width) {
        B acc(identity);
        for (const std::int64_t in_row : rows) acc = op.batch(acc, B::load_unaligned(src + in_row + o));
        acc.store_unaligned(y + o);
      }
    }
    for (; o < n; ++o) {
      T acc = identity;
      for (const std::int64_t in_row : rows) acc = op(acc, src[in_row + o]);
      y[o] = acc;
    }
  });
}

// For each output position, the flat operand index of its window's selected element (XLA's
// select: walking the window in order, the current choice is kept while select(choice, next)
// holds, select being >= for a max, <= for a min), or -1 for a window of padding only. The
// chosen values ride along, starting as NaN, for which select is false: the first element is
// always taken, as XLA starts from it. Updates are selects, not branches. Indices are I: the
// integer of T's width where it can hold every index (so a batch of them has T's lane count and
// the plain rows update both with one mask), else int64 and the scalar loop.
// One output row at a time: use_row(out_row_start, chosen, rows) gets the row's choices (the last
// dim's out_size of them) as soon as its window is walked, while they are in cache, and the
// starts of the operand rows its window read (for_each_output_row's).
template <class T, class I, bool SelectMax, class UseRow>
void select_rows(const Array& x, const Windows& w, std::int64_t begin, std::int64_t end, UseRow&& use_row) {
  const WindowDim& last = w.last;
  std::vector<I> chosen(static_cast<std::size_t>(last.out_size), I(-1));
  std::vector<T> best(static_cast<std::size_t>(last.out_size), std::numeric_limits<T>::quiet_NaN());
  const T* src = in_ptr<T>(x);
  const Ints& table = w.last_table;
  const std::int64_t n = last.out_size, kw = last.window, s = last.stride, wd = last.window_dilation;
  const auto [lo, hi] = last.interior();
  using Bt = simd::Batch<T>;
  using Bi = xsimd::batch<I>;
  constexpr bool batched = std::is_floating_point_v<T> && sizeof(I) == sizeof(T);  // values and indices share a mask
  constexpr auto width = static_cast<std::int64_t>(Bt::size);
  const Bi lane = lane_offsets<I>(1), apart = lane_offsets<I>(s);  // computed once, not per row
  const auto visit = [](I& c, T& b, T v, std::int64_t at) {
    const bool keep = SelectMax ? b >= v : b <= v;
    c = keep ? c : static_cast<I>(at);
    b = keep ? b : v;
  };
  // One operand row (starting at flat index in_row) into the row's choices: as reduce_window_rows'
  // reduce_row; each output still sees its window in order (k ascending).
  const auto select_row = [&](std::int64_t in_row, I* c, T* b) {
    const T* row = src + in_row;
    for_each_edge_tap(table, kw, lo, hi, n, [&](std::int64_t o, std::int64_t at) { visit(c[o], b[o], row[at], in_row + at); });
    with_stride(s, [&](auto stride) {
      for (std::int64_t k = 0; k < kw; ++k) {
        const std::int64_t first = lo * s + k * wd - last.pad_lo;
        std::int64_t o = lo;
        if constexpr (batched) {
          for (; o + width <= hi; o += width) {
            const std::int64_t at = first + (o - lo) * stride;
            const Bt current = Bt::load_unaligned(b + o), next = load_strided(row + at, stride);
            const auto keep = SelectMax ? current >= next : current <= next;
            xsimd::select(keep, current, next).store_unaligned(b + o);
            const Bt kept = xsimd::select(keep, xsimd::bitwise_cast<Bt>(Bi::load_unaligned(c + o)),
                                          xsimd::bitwise_cast<Bt>(Bi(static_cast<I>(in_row + at)) + apart));
            xsimd::bitwise_cast<Bi>(kept).store_unaligned(c + o);
          }
        }
        for (; o < hi; ++o) {
          const std::int64_t at = first + (o - lo) * stride;
          visit(c[o], b[o], row[at], in_row + at);
        }
      }
    });
  };
  const bool plain = is_plain(last);
  for_each_output_row(w, begin, end, [&](std::int64_t out_row, std::span<const std::int64_t> rows) {
    I* c = chosen.data();
    T* b = best.data();
    if (!plain) {
      std::fill(c, c + n, I(-1));
      std::fill(b, b + n, std::numeric_limits<T>::quiet_NaN());
      for (const std::int64_t in_row : rows) select_row(in_row, c, b);
      use_row(out_row, c, rows);
      return;
    }
    // batches of choices and their values held in registers across the whole window: four at a
    // time (independent chains), then one
    std::int64_t o = 0;
    if constexpr (batched) {
      const auto step = [](Bt& current, Bt& choice, const T* at, std::int64_t index, const Bi& lanes) {
        const Bt next = Bt::load_unaligned(at);
        const auto keep = SelectMax ? current >= next : current <= next;
        current = xsimd::select(keep, current, next);
        choice = xsimd::select(keep, choice, xsimd::bitwise_cast<Bt>(Bi(static_cast<I>(index)) + lanes));
      };
      const Bi lane1 = lane + Bi(static_cast<I>(width)), lane2 = lane1 + Bi(static_cast<I>(width)),
               lane3 = lane2 + Bi(static_cast<I>(width));
      for (; o + 4 * width <= n; o += 4 * width) {
        const Bt nan(std::numeric_limits<T>::quiet_NaN()), none = xsimd::bitwise_cast<Bt>(Bi(I(-1)));
        Bt current0 = nan, current1 = nan, current2 = nan, current3 = nan;
        Bt choice0 = none, choice1 = none, choice2 = none, choice3 = none;
        for (const std::int64_t in_row : rows) {
          const T* at = src + in_row + o;
          step(current0, choice0, at, in_row + o, lane);
          step(current1, choice1, at + width, in_row + o, lane1);
          step(current2, choice2, at + 2 * width, in_row + o, lane2);
          step(current3, choice3, at + 3 * width, in_row + o, lane3);
        }
        xsimd::bitwise_cast<Bi>(choice0).store_unaligned(c + o);
        xsimd::bitwise_cast<Bi>(choice1).store_unaligned(c + o + width);
        xsimd::bitwise_cast<Bi>(choice2).store_unaligned(c + o + 2 * width);
        xsimd::bitwise_cast<Bi>(choice3).store_unaligned(c + o + 3 * width);
      }
      for (; o + width <= n; o += width) {
        Bt current(std::numeric_limits<T>::quiet_NaN());
        Bt choice = xsimd::bitwise_cast<Bt>(Bi(I(-1)));
        for (const std::int64_t in_row : rows) {
          const Bt next = Bt::load_unaligned(src + in_row + o);
          const auto keep = SelectMax ? current >= next : current <= next;
          current = xsimd::select(keep, current, next);
          choice = xsimd::select(keep, choice, xsimd::bitwise_cast<Bt>(Bi(static_cast<I>(in_row + o)) + lane));
        }
        xsimd::bitwise_cast<Bi>(choice).store_unaligned(c + o);
      }
    }
    for (; o < n; ++o) {
      I choice = -1;
      T value = std::numeric_limits<T>::quiet_NaN();
      for (const std::int64_t in_row : rows) visit(choice, value, src[in_row + o], in_row + o);
      c[o] = choice;
    }
    use_row(out_row, c, rows);
  });
}

// select_rows (output rows [begin, end)) with the selected elements' indices in the narrowest
// type that holds them.
template <class T, class UseRow> void with_selected(const Array& x, const Windows& w, bool select_max, std::int64_t begin,
                                                    std::int64_t end, UseRow&& use_row) {
  using Same = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  if (x.size() <= std::numeric_limits<Same>::max())
    return select_max ? select_rows<T, Same, true>(x, w, begin, end, use_row)
                      : select_rows<T, Same, false>(x, w, begin, end, use_row);
  select_max ? select_rows<T, std::int64_t, true>(x, w, begin, end, use_row)
             : select_rows<T, std::int64_t, false>(x, w, begin, end, use_row);
}

// Adds each output's cotangent at its selected operand element (y[chosen[o]] += v[o], the outputs
// in order). Where the last dim is plain, output o's choice is r + o for one of the window's
// operand row starts r (rows), so a batch of outputs at a time: for each row, the lanes that chose
// it take their cotangent (a select on the bits: no other element changes, not even a -0.0).
template <class T, class I> void scatter_row(T* y, const T* v, const I* chosen, std::int64_t n, bool plain,
                                             std::span<const std::int64_t> rows) {
  std::int64_t o = 0;
  if constexpr (std::is_floating_point_v<T> && sizeof(I) == sizeof(T)) {
    using Bt = simd::Batch<T>;
    using Bi = xsimd::batch<I>;
    constexpr auto width = static_cast<std::int64_t>(Bt::size);
    const Bi lane = lane_offsets<I>(1);
    if (plain)
      for (; o + width <= n; o += width) {
        const Bi choice = Bi::load_unaligned(chosen + o);
        const Bt add = Bt::load_unaligned(v + o);
        for (const std::int64_t r : rows) {
          T* at = y + r + o;
          const Bt old = Bt::load_unaligned(at);
          const auto hit = choice == Bi(static_cast<I>(r + o)) + lane;
          xsimd::bitwise_cast<Bt>(xsimd::select(hit, xsimd::bitwise_cast<Bi>(old + add), xsimd::bitwise_cast<Bi>(old)))
              .store_unaligned(at);
        }
      }
  }
  for (; o < n; ++o)
    if (chosen[o] >= 0) y[chosen[o]] += v[o];
}

// How many parts of the operand the output rows scatter into without overlap: the positions of
// the leading dims that no window mixes (window 1, no stride, padding or dilation: a batch or
// channel dim), each part owning the same number of consecutive output rows and operand elements.
std::int64_t disjoint_parts(const std::vector<WindowDim>& dims) {
  std::int64_t parts = 1;
  for (std::size_t i = 0; i + 1 < dims.size() && is_plain(dims[i]); ++i) parts *= dims[i].out_size;
  return parts;
}

}  // namespace

Array reduce_window_kernel(Primitive p, const Array& x, const params::ReduceWindow& w, const ShapedArray& out) {
  Array result = alloc_array(out);
  if (out.size() == 0) return result;  // before the index tables, which are sized by the other dimensions
  const Windows windows(window_dims(x.shape(), w), x.shape());
  const auto& dims = windows.dims;
  visit_dtype(x.dtype(), [&]<class T>(std::type_identity<T>) {
    if constexpr (std::is_same_v<T, std::uint8_t>) unsupported_dtype(p, x.dtype());
    T* y = out_ptr<T>(result);
    const T identity = identity_of<T>(p);
    parallel_for(output_rows(dims), row_grain(dims), [&](std::int64_t begin, std::int64_t end) {
      if (p == Primitive::reduce_window_sum) reduce_window_rows(Sum{}, identity, x, windows, y, begin, end);
      else if (p == Primitive::reduce_window_max) reduce_window_rows(Max{}, identity, x, windows, y, begin, end);
      else reduce_window_rows(Min{}, identity, x, windows, y, begin, end);
    }, ChunkCalls::no_blas);
  });
  return result;
}

Array select_window_kernel(Primitive p, const Array& values, const Array& x, const params::SelectWindow& w,
                           const ShapedArray& out) {
  Array result = alloc_array(out);
  if (out.size() == 0) return result;
  if (x.size() == 0 || values.size() == 0) {  // no windows or nothing in them: zeros, without the index tables
    std::memset(out_ptr<unsigned char>(result), 0, static_cast<std::size_t>(out.nbytes()));
    return result;
  }
  const Windows windows(window_dims(x.shape(), w), x.shape());
  const auto& dims = windows.dims;
  auto run = [&]<class T>(std::type_identity<T>) {
    const T* v = in_ptr<T>(values);
    T* y = out_ptr<T>(result);
    const std::int64_t n = windows.last.out_size, rows = output_rows(dims);
    if (p == Primitive::select_and_gather_add) {  // y: the windows' shape, each row written by one chunk
      parallel_for(rows, row_grain(dims), [&](std::int64_t begin, std::int64_t end) {
        with_selected<T>(x, windows, w.select_max, begin, end, [&](std::int64_t out_row, const auto* chosen, auto) {
          for (std::int64_t o = 0; o < n; ++o) y[out_row + o] = chosen[o] < 0 ? T(0) : v[chosen[o]];
        });
      }, ChunkCalls::no_blas);
      return;
    }
    // y: the operand's shape, v: the windows'; windows overlap, so chunks split only where their
    // scatters cannot meet
    const std::int64_t parts = rows == 0 || n == 0 ? 1 : disjoint_parts(dims);
    const bool plain = is_plain(windows.last);
    const std::int64_t rows_per_part = rows / parts, elements_per_part = x.size() / parts;
    // Parts a few at a time (about 256 KiB of y): zeroed right before their scatter, still in cache.
    const std::int64_t group = std::max<std::int64_t>(1, (std::int64_t{1} << 18) / std::max<std::int64_t>(elements_per_part * static_cast<std::int64_t>(sizeof(T)), 1));
    parallel_for(parts, std::max<std::int64_t>(1, row_grain(dims) / std::max<std::int64_t>(rows_per_part, 1)),
                 [&](std::int64_t begin, std::int64_t end) {
                   for (std::int64_t first = begin; first < end; first += group) {
                     const std::int64_t last = std::min(end, first + group);
                     std::fill(y + first * elements_per_part, y + last * elements_per_part, T(0));
                     if (n == 0) continue;
                     with_selected<T>(x, windows, w.select_max, first * rows_per_part, last * rows_per_part,
                                      [&](std::int64_t out_row, const auto* chosen, std::span<const std::int64_t> rows) {
                                        scatter_row(y, v + out_row, chosen, n, plain, rows);
                                      });
                   }
                 }, ChunkCalls::no_blas);
  };
  if (x.dtype() == DType::f32)
    run(std::type_identity<float>{});
  else if (x.dtype() == DType::f64)
    run(std::type_identity<double>{});
  else
    unsupported_dtype(p, x.dtype());
  return result;
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE

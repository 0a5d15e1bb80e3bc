// shape.cpp: kernels of the structural primitives (broadcast_in_dim, transpose, slice, pad,
// dynamic_slice, dynamic_update_slice, concatenate, gather, scatter_add, iota). reshape, squeeze
// and expand_dims share their input's buffer (kernels.cpp).
//
// Elements are moved as opaque words of their itemsize (1, 4 or 8 bytes), never per dtype; only
// scatter_add (which adds) and iota (which makes numbers) dispatch on the dtype. Read copy_box
// first: almost every kernel describes its work as one strided box copy (a shape plus source and
// destination strides) and lets copy_box do it. Then the kernels, in the order of kernels.hpp.
#include <algorithm>
#include <cstring>
#include <optional>

#include "kernels/kernel_sets.hpp"
#include "kernels/kernels.hpp"
#include "kernels/parallel.hpp"

namespace xjax::detail::kernels {
namespace {

using Byte = unsigned char;

// ---- copy_box: the strided copy every kernel uses ----------------------------------------------

// One dimension of a box: its extent and the element strides on both sides.
struct BoxDim {
  std::int64_t size, dst_stride, src_stride;
};

// Drops size-1 dims and merges neighbours that are contiguous on both sides.
std::vector<BoxDim> simplify_box(std::vector<BoxDim> dims) {
  std::vector<BoxDim> out;
  for (const BoxDim& d : dims) {
    if (d.size == 1) continue;
    if (!out.empty()) {
      BoxDim& prev = out.back();
      if (prev.dst_stride == d.dst_stride * d.size && prev.src_stride == d.src_stride * d.size) {
        prev = {prev.size * d.size, d.dst_stride, d.src_stride};
        continue;
      }
    }
    out.push_back(d);
  }
  return out;
}

// n words of type W, strided on both sides (strides in elements).
template <class W>
void copy_words(Byte* dst, std::int64_t dst_stride, const Byte* src, std::int64_t src_stride,
                std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * dst_stride * sizeof(W), src + i * src_stride * sizeof(W), sizeof(W));
}

// One element repeated along a contiguous run (a broadcast's innermost dim, a pad's padding): a
// fill. An element whose bytes are all equal (zero, mostly) is a memset; another is written once
// and then copied in doubling blocks up to kFillBlock bytes, that block then over and over (so the
// copies read from L1). Element by element, a pad's 1.5 MiB of zeros had taken 0.1-0.2 ms.
template <class W> void fill_words(Byte* dst, const Byte* src, std::int64_t n) {
  if (n <= 0) return;
  const auto bytes = static_cast<std::size_t>(n) * sizeof(W);
  if (std::all_of(src, src + sizeof(W), [&](Byte b) { return b == src[0]; })) return static_cast<void>(std::memset(dst, src[0], bytes));
  constexpr std::size_t kFillBlock = 4096;
  std::memcpy(dst, src, sizeof(W));
  std::size_t done = sizeof(W);
  for (; done < bytes && done < kFillBlock; done *= 2) std::memcpy(dst + done, dst, std::min(done, bytes - done));
  const std::size_t block = std::min(done, bytes);
  for (; done < bytes; done += block) std::memcpy(dst + done, dst, std::min(block, bytes - done));
}

void copy_run(Byte* dst, const Byte* src, const BoxDim& d, std::size_t item) {
  if (d.dst_stride == 1 && d.src_stride == 1)
    return static_cast<void>(std::memcpy(dst, src, static_cast<std::size_t>(d.size) * item));
  if (d.dst_stride == 1 && d.src_stride == 0) {
    switch (item) {
      case 1: return static_cast<void>(std::memset(dst, static_cast<int>(*src), static_cast<std::size_t>(d.size)));
      case 2: return fill_words<std::uint16_t>(dst, src, d.size);
      case 4: return fill_words<std::uint32_t>(dst, src, d.size);
      case 8: return fill_words<std::uint64_t>(dst, src, d.size);
      default: break;
    }
  }
  switch (item) {
    case 1: return copy_words<std::uint8_t>(dst, d.dst_stride, src, d.src_stride, d.size);
    case 2: return copy_words<std::uint16_t>(dst, d.dst_stride, src, d.src_stride, d.size);
    case 4: return copy_words<std::uint32_t>(dst, d.dst_stride, src, d.src_stride, d.size);
    case 8: return copy_words<std::uint64_t>(dst, d.dst_stride, src, d.src_stride, d.size);
    default: throw Error("copy_box: unsupported itemsize " + std::to_string(item));
  }
}

// A transpose-like pair of dims: `across` is contiguous in the source, `inner` in the
// destination. Copied in square tiles so both sides stay in cache.
// Where `inner` is contiguous in the destination too, a tile is a block of a matrix transposed in
// registers by the kernel set (transpose_items: 4- and 8-byte items).
void copy_tiled(Byte* dst, const Byte* src, const BoxDim& across, const BoxDim& inner,
                std::size_t item) {
  constexpr std::int64_t tile = 32;
  const auto step = static_cast<std::int64_t>(item);
  const bool blocks = across.src_stride == 1 && inner.dst_stride == 1;
  for (std::int64_t i0 = 0; i0 < across.size; i0 += tile)
    for (std::int64_t j0 = 0; j0 < inner.size; j0 += tile) {
      if (blocks && transpose_items(item, src + (i0 + j0 * inner.src_stride) * step, inner.src_stride,
                                    dst + (i0 * across.dst_stride + j0) * step, across.dst_stride,
                                    std::min(tile, inner.size - j0), std::min(tile, across.size - i0)))
        continue;
      const BoxDim row{std::min(tile, inner.size - j0), inner.dst_stride, inner.src_stride};
      for (std::int64_t i = i0; i < std::min(i0 + tile, across.size); ++i)
        copy_run(dst + (i * across.dst_stride + j0 * inner.dst_stride) * step,
                 src + (i * across.src_stride + j0 * inner.src_stride) * step, row, item);
    }
}

// The outer dim that is contiguous in the source when the innermost one is not (a transpose),
// worth tiling; dims.size() when there is none.
std::size_t find_tiling_dim(const std::vector<BoxDim>& dims) {
  constexpr std::int64_t min_size = 8;
  const BoxDim& inner = dims.back();
  if (inner.src_stride == 1 || inner.src_stride == 0 || inner.size < min_size) return dims.size();
  for (std::size_t d = 0; d + 1 < dims.size(); ++d)
    if (dims[d].src_stride == 1 && dims[d].size >= min_size) return d;
  return dims.size();
}

// copy_box of a simplified, non-empty box on the calling thread.
void copy_simple_box(Byte* dst, const Byte* src, std::vector<BoxDim> dims, std::size_t item) {
  const std::size_t tiled = find_tiling_dim(dims);
  std::optional<BoxDim> across;
  if (tiled < dims.size()) {
    across = dims[tiled];
    dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(tiled));
  }
  const BoxDim inner = dims.back();
  dims.pop_back();
  std::vector<std::int64_t> index(dims.size(), 0);
  const auto step = static_cast<std::int64_t>(item);
  while (true) {
    if (across) copy_tiled(dst, src, *across, inner, item);
    else copy_run(dst, src, inner, item);
    std::size_t r = dims.size();
    for (; r-- > 0;) {  // advance the odometer over the outer dims
      dst += dims[r].dst_stride * step;
      src += dims[r].src_stride * step;
      if (++index[r] < dims[r].size) break;
      dst -= dims[r].dst_stride * dims[r].size * step;
      src -= dims[r].src_stride * dims[r].size * step;
      index[r] = 0;
    }
    if (r == static_cast<std::size_t>(-1)) return;
  }
}

// For every index i of the box: dst[sum i*dst_stride] = src[sum i*src_stride]. The pointers point
// at the box's origin on each side; strides are in elements of `item` bytes. An odometer walks the
// outer dims; the innermost dim (with a tiled partner for transposes) is one copy_run/copy_tiled.
// A large box is split along its largest outer dim into sub-boxes copied on the kernel threads
// (kernels/parallel.hpp); the destination elements of different sub-boxes are disjoint. Large:
// 4 MiB for copies of runs, 1 MiB for tiled transposes (4x slower per byte). Zen 5 VM, two
// threads, 2026-12-05: a 1.5 MiB head transpose (runs of 32 floats) took 0.066-0.093 ms on one
// thread and 0.156-0.160 ms split, 6 MiB 0.28-0.40 against 0.21-0.24; a 2-D transpose of 1.5
// MiB 0.31-0.42 against 0.23-0.29, of 0.4 MiB 0.014 against 0.036-0.043.
void copy_box(Byte* dst, const Byte* src, std::vector<BoxDim> dims, std::size_t item) {
  for (const BoxDim& d : dims)
    if (d.size == 0) return;
  dims = simplify_box(std::move(dims));
  if (dims.empty()) return static_cast<void>(std::memcpy(dst, src, item));
  std::int64_t elements = 1;
  for (const BoxDim& d : dims) elements *= d.size;
  constexpr std::int64_t kChunkBytes = std::int64_t{1} << 17;
  const std::int64_t min_split = find_tiling_dim(dims) < dims.size() ? std::int64_t{1} << 20 : std::int64_t{4} << 20;
  if (dims.size() < 2 || elements * static_cast<std::int64_t>(item) < min_split)
    return copy_simple_box(dst, src, std::move(dims), item);
  const auto split = static_cast<std::size_t>(
      std::max_element(dims.begin(), dims.end() - 1, [](const BoxDim& a, const BoxDim& b) { return a.size < b.size; }) -
      dims.begin());
  const std::int64_t unit_bytes = elements / dims[split].size * static_cast<std::int64_t>(item);
  const auto step = static_cast<std::int64_t>(item);
  parallel_for(dims[split].size, std::max<std::int64_t>(1, kChunkBytes / unit_bytes), [&](std::int64_t begin, std::int64_t end) {
    std::vector<BoxDim> part = dims;
    part[split].size = end - begin;
    copy_simple_box(dst + begin * dims[split].dst_stride * step, src + begin * dims[split].src_stride * step, std::move(part), item);
  }, ChunkCalls::no_blas);
}

// ---- small helpers ----------------------------------------------------------------------------

const Byte* bytes_of(const Array& a) { return static_cast<const Byte*>(a.raw_data()); }
Byte* bytes_of_new(const Array& a) { return static_cast<Byte*>(mutable_data(a)); }
std::size_t item_of(const ShapedArray& a) { return itemsize(a.dtype); }

std::int64_t product(const Shape& s, std::size_t begin, std::size_t end) {
  std::int64_t p = 1;
  for (std::size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

// Fills n elements with copies of one element.
void fill_with(Byte* dst, const Byte* value, std::int64_t n, std::size_t item) {
  copy_box(dst, value, {{n, 1, 0}}, item);
}

// Copies all of `x` into `result` (same size).
void copy_all(const Array& result, const Array& x) {
  const std::size_t n = x.aval().nbytes();
  if (n > 0) std::memcpy(bytes_of_new(result), bytes_of(x), n);
}

// A box over the whole of `shape`, with the given strides on each side.
std::vector<BoxDim> make_box(const Shape& shape, const Ints& dst_strides, const Ints& src_strides) {
  std::vector<BoxDim> box;
  for (std::size_t d = 0; d < shape.size(); ++d)
    box.push_back({shape[d], dst_strides[d], src_strides[d]});
  return box;
}

// Starts of a dynamic slice/update: operand i is dimension i's start, clamped to [0, dim - size].
Ints clamped_starts(std::span<const Array> start_operands, const Shape& dims, const Shape& sizes) {
  Ints starts;
  for (std::size_t d = 0; d < dims.size(); ++d)
    starts.push_back(std::clamp<std::int64_t>(read_index_scalar(start_operands[d]), 0,
                                              std::max<std::int64_t>(dims[d] - sizes[d], 0)));
  return starts;
}

std::int64_t offset_of(const Ints& index, const Ints& strides) {
  std::int64_t off = 0;
  for (std::size_t d = 0; d < index.size(); ++d) off += index[d] * strides[d];
  return off;
}

// Gather/scatter index: negative counts from the end, then clamped to [0, n - 1].
std::int64_t normalize_index(std::int64_t i, std::int64_t n) {
  if (i < 0) i += n;
  return std::clamp<std::int64_t>(i, 0, n - 1);
}

// The same in FILL_OR_DROP mode: -1 for an index still outside [0, n) once counted from the end.
std::int64_t index_or_none(std::int64_t i, std::int64_t n) {
  if (i < 0) i += n;
  return i >= 0 && i < n ? i : -1;
}

// The indices operand of gather/scatter_add as int64 values.
std::vector<std::int64_t> read_indices(const Array& indices, Primitive p) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(indices.size()));
  if (indices.dtype() == DType::i32)
    std::copy_n(in_ptr<std::int32_t>(indices), out.size(), out.begin());
  else if (indices.dtype() == DType::i64)
    std::copy_n(in_ptr<std::int64_t>(indices), out.size(), out.begin());
  else
    unsupported_dtype(p, indices.dtype());
  return out;
}

// x viewed as [outer, axis_size, inner] around `axis`.
struct AxisView {
  std::int64_t outer, axis_size, inner;
};
AxisView view_around(const Shape& s, std::int64_t axis) {
  const auto a = static_cast<std::size_t>(axis);
  return {product(s, 0, a), s.at(a), product(s, a + 1, s.size())};
}

// How each scatter combines the element d an update u lands on with u (min and max propagate
// NaN as lax.min / lax.max do; on bool, mul is `and`, add is `or`).
struct SetTo {
  template <class T> T operator()(T, T u) const { return u; }
};
struct AddTo {
  template <class T> T operator()(T d, T u) const { return add_values(d, u); }
};
struct MulBy {
  template <class T> T operator()(T d, T u) const {
    if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<T>(d & u);
    else if constexpr (std::is_integral_v<T>) return wrap_mul(d, u);
    else return d * u;
  }
};
struct MinWith {
  template <class T> T operator()(T d, T u) const {
    if (u != u || d != d) return u != u ? u : d;  // NaN wins
    return u < d ? u : d;
  }
};
struct MaxWith {
  template <class T> T operator()(T d, T u) const {
    if (u != u || d != d) return u != u ? u : d;
    return u > d ? u : d;
  }
};

// out[o, idx[j], k] = combine(out[o, idx[j], k], updates[o, j, k]), x viewed as
// [outer, axis_size, inner]; an index of -1 (dropped) is skipped. Updates are applied in order,
// so where indices repeat, the last update set wins.
template <class T, class Combine>
void scatter_typed(T* out, const T* updates, const std::vector<std::int64_t>& idx, const AxisView& v, Combine combine) {
  const auto n = static_cast<std::int64_t>(idx.size());
  for (std::int64_t o = 0; o < v.outer; ++o)
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t i = idx[static_cast<std::size_t>(j)];
      if (i < 0) continue;
      T* dst = out + (o * v.axis_size + i) * v.inner;
      const T* src = updates + (o * n + j) * v.inner;
      for (std::int64_t k = 0; k < v.inner; ++k) dst[k] = combine(dst[k], src[k]);
    }
}

template <class T>
void scatter_with(Primitive p, T* out, const T* updates, const std::vector<std::int64_t>& idx, const AxisView& v) {
  if (p == Primitive::scatter) return scatter_typed(out, updates, idx, v, SetTo{});
  if (p == Primitive::scatter_add) return scatter_typed(out, updates, idx, v, AddTo{});
  if (p == Primitive::scatter_mul) return scatter_typed(out, updates, idx, v, MulBy{});
  if (p == Primitive::scatter_min) return scatter_typed(out, updates, idx, v, MinWith{});
  if (p == Primitive::scatter_max) return scatter_typed(out, updates, idx, v, MaxWith{});
  throw Error("scatter_kernel: " + std::string(primitive_name(p)) + " is not a scatter");
}

// ---- the copies of the box-copy primitives, from avals alone ---------------------------------------

// One strided copy that makes (part of) an output: operand `operand`'s elements from src_offset on,
// into the output from dst_offset on (offsets in elements).
struct BoxPart {
  std::size_t operand = 0;
  std::int64_t dst_offset = 0, src_offset = 0;
  std::vector<BoxDim> box;
};

// What transpose, slice, broadcast_in_dim, rev and concatenate copy: their parts, and the item size.
struct BoxCopies {
  std::vector<BoxPart> parts;
  std::size_t item = 0;
};

BoxCopies broadcast_copies(const ShapedArray& x, const Ints& broadcast_dimensions, const ShapedArray& out) {
  const Ints x_strides = row_major_strides(x.shape);
  Ints src_strides(out.shape.size(), 0);  // broadcast dims read the same element again
  for (std::size_t k = 0; k < broadcast_dimensions.size(); ++k)
    if (x.shape[k] != 1) src_strides[static_cast<std::size_t>(broadcast_dimensions[k])] = x_strides[k];
  return {{{0, 0, 0, make_box(out.shape, row_major_strides(out.shape), src_strides)}}, item_of(out)};
}

BoxCopies transpose_copies(const ShapedArray& x, std::span<const std::int64_t> perm) {
  Shape shape;
  const Ints x_strides = row_major_strides(x.shape);
  Ints src_strides;
  for (auto d : perm) {
    shape.push_back(x.shape[static_cast<std::size_t>(d)]);
    src_strides.push_back(x_strides[static_cast<std::size_t>(d)]);
  }
  return {{{0, 0, 0, make_box(shape, row_major_strides(shape), src_strides)}}, item_of(x)};
}

BoxCopies slice_copies(const ShapedArray& x, const Ints& start, const Ints& strides, const ShapedArray& out) {
  const Ints x_strides = row_major_strides(x.shape);
  Ints src_strides;
  // a dim of at most one output element never steps (its stride may be past the size: x * s wrapped)
  for (std::size_t d = 0; d < x_strides.size(); ++d)
    src_strides.push_back(out.shape[d] <= 1 ? 0 : x_strides[d] * (strides.empty() ? 1 : strides[d]));
  const std::int64_t origin = out.size() > 0 ? offset_of(start, x_strides) : 0;
  return {{{0, 0, origin, make_box(out.shape, row_major_strides(out.shape), src_strides)}}, item_of(out)};
}

// Reading starts at the last element of each reversed dim and walks it with a negated stride.
BoxCopies rev_copies(const ShapedArray& x, const Ints& dimensions, const ShapedArray& out) {
  Ints src_strides = row_major_strides(x.shape);
  std::int64_t origin = 0;
  if (out.size() > 0)
    for (auto d : dimensions) {
      const auto k = static_cast<std::size_t>(d);
      origin += (x.shape[k] - 1) * src_strides[k];
      src_strides[k] = -src_strides[k];
    }
  return {{{0, 0, origin, make_box(out.shape, row_major_strides(out.shape), src_strides)}}, item_of(out)};
}

// Each output row (the dims before `dimension`) is the inputs' rows laid end to end.
BoxCopies concatenate_copies(std::span<const ShapedArray> in, std::int64_t dimension, const ShapedArray& out) {
  BoxCopies c{{}, item_of(out)};
  if (out.size() == 0) return c;
  const std::int64_t outer = product(out.shape, 0, static_cast<std::size_t>(dimension));
  const std::int64_t out_row = out.size() / outer;
  std::int64_t column = 0;  // where the current input starts within an output row, in elements
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i].size() == 0) continue;
    const std::int64_t row = in[i].size() / outer;
    c.parts.push_back({i, column, 0, {{outer, out_row, row}, {row, 1, 1}}});
    column += row;
  }
  return c;
}

// Runs the copies from the operands' elements at ins into the output's at out.
void run_copies(const BoxCopies& c, const void* const* ins, void* out) {
  const auto step = static_cast<std::int64_t>(c.item);
  for (const BoxPart& part : c.parts)
    copy_box(static_cast<Byte*>(out) + part.dst_offset * step, static_cast<const Byte*>(ins[part.operand]) + part.src_offset * step,
             part.box, c.item);
}

// The same into a fresh array of aval `out`.
Array copied_array(const BoxCopies& c, std::span<const Array> in, const ShapedArray& out) {
  Array result = alloc_array(out);
  std::vector<const void*> ins;
  for (const Array& x : in) ins.push_back(x.raw_data());
  run_copies(c, ins.data(), mutable_data(result));
  return result;
}

}  // namespace

// ---- entry points ------------------------------------------------------------------------------

Array broadcast_in_dim_kernel(const Array& x, const Ints& broadcast_dimensions,
                              const ShapedArray& out) {
  return copied_array(broadcast_copies(x.aval(), broadcast_dimensions, out), {&x, 1}, out);
}

Array transpose_kernel(const Array& x, std::span<const std::int64_t> perm) {
  ShapedArray out{{}, x.dtype()};
  for (auto d : perm) out.shape.push_back(x.shape()[static_cast<std::size_t>(d)]);
  return copied_array(transpose_copies(x.aval(), perm), {&x, 1}, out);
}

Array slice_kernel(const Array& x, const Ints& start, const Ints& strides, const ShapedArray& out) {
  return copied_array(slice_copies(x.aval(), start, strides, out), {&x, 1}, out);
}

Array rev_kernel(const Array& x, const Ints& dimensions, const ShapedArray& out) {
  return copied_array(rev_copies(x.aval(), dimensions, out), {&x, 1}, out);
}

// Input element i of a dim lands at lo + i * (interior + 1); elements landing outside are dropped
// (negative lo/hi). So the kept elements of each dim are a range [first, first + count).
Array pad_kernel(const Array& x, const Array& padding_value, const Ints& lo, const Ints& interior,
                 const ShapedArray& out) {
  Array result = alloc_array(out);
  const std::size_t item = item_of(out);
  if (out.size() == 0) return result;
  fill_with(bytes_of_new(result), bytes_of(padding_value), out.size(), item);
  const Ints x_strides = row_major_strides(x.shape()), out_strides = row_major_strides(out.shape);
  std::vector<BoxDim> box;
  std::int64_t src_offset = 0, dst_offset = 0;
  for (std::size_t d = 0; d < x_strides.size(); ++d) {
    const std::int64_t step = interior[d] + 1, n = x.shape()[d];
    const std::int64_t first = lo[d] >= 0 ? 0 : (-lo[d] + step - 1) / step;
    const std::int64_t last_pos = out.shape[d] - 1 - lo[d];  // last i with lo + i*step <= dim-1
    const std::int64_t last = last_pos < 0 ? -1 : std::min(n - 1, last_pos / step);
    const std::int64_t count = std::max<std::int64_t>(last - first + 1, 0);
    if (count == 0) return result;  // nothing of x is kept (before first's offsets, which may lie past any size)
    box.push_back({count, count <= 1 ? 0 : out_strides[d] * step, x_strides[d]});  // one element never steps
    src_offset += first * x_strides[d];
    dst_offset += (lo[d] + first * step) * out_strides[d];
  }
  for (const BoxDim& d : box)
    if (d.size == 0) return result;
  const auto step = static_cast<std::int64_t>(item);
  copy_box(bytes_of_new(result) + dst_offset * step, bytes_of(x) + src_offset * step, box, item);
  return result;
}

Array dynamic_slice_kernel(std::span<const Array> in, const ShapedArray& out) {
  const Array& x = in[0];
  Array result = alloc_array(out);
  if (out.size() == 0) return result;
  const Ints x_strides = row_major_strides(x.shape());
  const Ints starts = clamped_starts(in.subspan(1), x.shape(), out.shape);
  const std::size_t item = item_of(out);
  copy_box(bytes_of_new(result),
           bytes_of(x) + offset_of(starts, x_strides) * static_cast<std::int64_t>(item),
           make_box(out.shape, row_major_strides(out.shape), x_strides), item);
  return result;
}

Array dynamic_update_slice_kernel(std::span<const Array> in, const ShapedArray& out) {
  const Array& x = in[0];
  const Array& update = in[1];
  Array result = alloc_array(out);
  copy_all(result, x);
  if (update.size() == 0) return result;
  const Ints out_strides = row_major_strides(out.shape);
  const Ints starts = clamped_starts(in.subspan(2), out.shape, update.shape());
  const std::size_t item = item_of(out);
  copy_box(bytes_of_new(result) + offset_of(starts, out_strides) * static_cast<std::int64_t>(item),
           bytes_of(update), make_box(update.shape(), out_strides, row_major_strides(update.shape())),
           item);
  return result;
}

Array concatenate_kernel(std::span<const Array> in, std::int64_t dimension, const ShapedArray& out) {
  std::vector<ShapedArray> avals;
  for (const Array& x : in) avals.push_back(x.aval());
  return copied_array(concatenate_copies(avals, dimension, out), in, out);
}

IntoKernel shape_into(Primitive p, const Params& ps, std::span<const ShapedArray> in, const ShapedArray& out) {
  std::optional<BoxCopies> copies;
  if (p == Primitive::broadcast_in_dim)
    copies = broadcast_copies(in[0], ps.get<params::BroadcastInDim>().broadcast_dimensions, out);
  else if (p == Primitive::transpose)
    copies = transpose_copies(in[0], ps.get<params::Transpose>().permutation);
  else if (p == Primitive::slice)
    copies = slice_copies(in[0], ps.get<params::Slice>().start_indices, ps.get<params::Slice>().strides, out);
  else if (p == Primitive::rev)
    copies = rev_copies(in[0], ps.get<params::Rev>().dimensions, out);
  else if (p == Primitive::concatenate)
    copies = concatenate_copies(in, ps.get<params::Concatenate>().dimension, out);
  else
    return {};
  IntoKernel k;
  k.ctx = std::make_shared<const BoxCopies>(std::move(*copies));
  k.fn = [](const void* ctx, const void* const* ins, void* const* outs) { run_copies(*static_cast<const BoxCopies*>(ctx), ins, outs[0]); };
  return k;
}

namespace {
// dst row j = src row idx[j] (normalized), rows of `row` bytes; rows of one element copied as
// such (a per-element memcpy call costs more than the copy).
template <class Word> void gather_words(Byte* dst, const Byte* src, const std::vector<std::int64_t>& idx, std::int64_t rows) {
  for (std::size_t j = 0; j < idx.size(); ++j) {
    Word w;
    std::memcpy(&w, src + normalize_index(idx[j], rows) * static_cast<std::int64_t>(sizeof(Word)), sizeof(Word));
    std::memcpy(dst + j * sizeof(Word), &w, sizeof(Word));
  }
}
void gather_rows(Byte* dst, const Byte* src, const std::vector<std::int64_t>& idx, std::int64_t rows, std::size_t row) {
  switch (row) {
    case 1: return gather_words<std::uint8_t>(dst, src, idx, rows);
    case 2: return gather_words<std::uint16_t>(dst, src, idx, rows);
    case 4: return gather_words<std::uint32_t>(dst, src, idx, rows);
    case 8: return gather_words<std::uint64_t>(dst, src, idx, rows);
    default:
      for (std::size_t j = 0; j < idx.size(); ++j)
        std::memcpy(dst + j * row, src + static_cast<std::size_t>(normalize_index(idx[j], rows)) * row, row);
  }
}
}  // namespace

// out[o, j, k] = x[o, idx[j], k] with x viewed as [outer, axis_size, inner]; an index outside
// the axis is clamped onto it, or (fill_or_drop) reads zeros.
Array gather_kernel(const Array& x, const Array& indices, const params::Gather& ps, const ShapedArray& out) {
  Array result = alloc_array(out);
  if (out.size() == 0) return result;
  const AxisView v = view_around(x.shape(), ps.axis);
  const std::size_t item = item_of(out);
  std::vector<std::int64_t> idx = read_indices(indices, Primitive::gather);
  if (v.axis_size == 0 || ps.fill_or_drop) std::memset(bytes_of_new(result), 0, out.nbytes());
  if (v.axis_size == 0) return result;  // nothing to take from: zeros
  const auto n = static_cast<std::int64_t>(idx.size());
  const auto step = static_cast<std::int64_t>(item);
  if (v.outer == 1 && !ps.fill_or_drop) {  // along the leading axis: each index copies one contiguous row
    gather_rows(bytes_of_new(result), bytes_of(x), idx, v.axis_size, static_cast<std::size_t>(v.inner) * item);
    return result;
  }
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t raw = idx[static_cast<std::size_t>(j)];
    const std::int64_t i = ps.fill_or_drop ? index_or_none(raw, v.axis_size) : normalize_index(raw, v.axis_size);
    if (i < 0) continue;  // filled with zeros above
    copy_box(bytes_of_new(result) + j * v.inner * step, bytes_of(x) + i * v.inner * step,
             {{v.outer, n * v.inner, v.axis_size * v.inner}, {v.inner, 1, 1}}, item);
  }
  return result;
}

// scatter, scatter_add, scatter_mul, scatter_min, scatter_max: x with the updates combined in.
Array scatter_kernel(Primitive p, const Array& x, const Array& indices, const Array& updates,
                     const params::Scatter& ps, const ShapedArray& out) {
  Array result = alloc_array(out);
  copy_all(result, x);
  const AxisView v = view_around(x.shape(), ps.axis);
  if (updates.size() == 0 || v.axis_size == 0) return result;
  std::vector<std::int64_t> idx = read_indices(indices, p);
  for (auto& i : idx) i = ps.fill_or_drop ? index_or_none(i, v.axis_size) : normalize_index(i, v.axis_size);
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scatter_with(p, out_ptr<T>(result), in_ptr<T>(updates), idx, v);
  });
  return result;
}

Array iota_kernel(std::int64_t dimension, const ShapedArray& out) {
  Array result = alloc_array(out);
  if (out.size() == 0) return result;
  const AxisView v = view_around(out.shape, dimension);
  visit_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, std::uint8_t>) {
      unsupported_dtype(Primitive::iota, DType::bool_);
    } else {
      T* o = out_ptr<T>(result);
      for (std::int64_t a = 0; a < v.outer; ++a)
        for (std::int64_t i = 0; i < v.axis_size; ++i, o += v.inner)
          std::fill(o, o + v.inner, static_cast<T>(i));
    }
  });
  return result;
}

}  // namespace xjax::detail::kernels

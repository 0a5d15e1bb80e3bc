// kernels.cpp: run_kernel, the CPU kernel of every primitive.
//
// Read `resolve_kernel_impl` first: one `case` per primitive (no `default:`, so a new primitive
// without a kernel does not compile under -Werror=switch), the elementwise families' generated
// from the table, each unpacking the params once into a closure that calls an entry point of one
// family (kernels.hpp). Execution plans keep the closure; run_kernel (eager binds) builds and
// calls it at once. Higher-order primitives have no kernel (bind runs their impl rule instead);
// their cases throw, and so do those of the factorizations (several outputs: their impl rule runs
// their kernel). The shared helpers declared in kernels.hpp follow.
#include "kernels/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kernels/narrow_float.hpp"

namespace xjax::detail {
namespace {

using namespace kernels;

// A family's kernel case, or nothing where the primitive has its own case (structural,
// collective, power); higher_order and control_flow are labels of the throw after the table.
#define XJAX_KERNEL_float_unary(name) \
  case Primitive::name: return [out](In in) { return unary_kernel(Primitive::name, in[0], out); };
#define XJAX_KERNEL_numeric_unary(name) XJAX_KERNEL_float_unary(name)
#define XJAX_KERNEL_binary(name) \
  case Primitive::name: return [out](In in) { return binary_kernel(Primitive::name, in[0], in[1], out); };
#define XJAX_KERNEL_comparison(name) \
  case Primitive::name: return [out](In in) { return compare_kernel(Primitive::name, in[0], in[1], out); };
#define XJAX_KERNEL_power(name)
#define XJAX_KERNEL_structural(name)
#define XJAX_KERNEL_collective(name)
#define XJAX_KERNEL_factorization(name) \
  case Primitive::name: several_outputs(Primitive::name);
#define XJAX_KERNEL_higher_order(name) \
  case Primitive::name: no_kernel(Primitive::name);
#define XJAX_KERNEL_control_flow(name) XJAX_KERNEL_higher_order(name)

[[noreturn]] void several_outputs(Primitive p) {
  throw Error("run_kernel: " + std::string(primitive_name(p)) + " has several outputs: its impl rule runs kernels::" +
              std::string(primitive_name(p)) + "_kernel");
}

[[noreturn]] void no_kernel(Primitive p) {
  throw Error("run_kernel: " + std::string(primitive_name(p)) + " is higher-order: it is evaluated by its impl rule, not a kernel");
}

KernelFn resolve_kernel_impl(Primitive p, const Params& ps, const ShapedArray& out) {
  using In = std::span<const Array>;
  switch (p) {
    // The elementwise families' kernels and the higher-order primitives' absence of one come from
    // the table; each structural, collective and power primitive has its case below.
#define XJAX_KERNEL_CASE(name, stem, S, family, kinds) XJAX_KERNEL_##family(name)
    XJAX_PRIMITIVES(XJAX_KERNEL_CASE)
#undef XJAX_KERNEL_CASE
    case Primitive::integer_pow:
      return [y = ps.get<params::IntegerPow>().y, out](In in) { return integer_pow_kernel(in[0], y, out); };
    case Primitive::select_n: return [out](In in) { return select_n_kernel(in, out); };
    case Primitive::convert_element_type:
      return [out](In in) { return convert_element_type_kernel(in[0], out); };
    case Primitive::copy: return [out](In in) { return copy_kernel(in[0], out); };
    case Primitive::dot_general:
      return [dn = ps.get<params::DotGeneral>(), out](In in) { return dot_general_kernel(in[0], in[1], dn, out); };
    case Primitive::conv_general_dilated:
      return [c = ps.get<params::ConvGeneralDilated>(), out](In in) { return conv_general_dilated_kernel(in[0], in[1], c, out); };
    case Primitive::reduce_sum:
    case Primitive::reduce_max:
    case Primitive::reduce_min:
    case Primitive::reduce_prod:
    case Primitive::reduce_and:
    case Primitive::reduce_or:
      return [p, axes = ps.get<params::Reduce>().axes, out](In in) { return reduce_kernel(p, in[0], axes, out); };
    case Primitive::round:
      return [even = ps.get<params::Round>().rounding_method == 1, out](In in) { return round_kernel(in[0], even, out); };
    case Primitive::bitwise_not:
    case Primitive::population_count: return [p, out](In in) { return bitwise_unary_kernel(p, in[0], out); };
    case Primitive::argmax: case Primitive::argmin:
      return [p, axis = ps.get<params::Argmax>().axes.at(0), out](In in) { return arg_reduce_kernel(p, in[0], axis, out); };
    case Primitive::is_finite: return [out](In in) { return is_finite_kernel(in[0], out); };
    case Primitive::clamp: return [out](In in) { return clamp_kernel(in[0], in[1], in[2], out); };
    case Primitive::cumsum:
    case Primitive::cumprod:
    case Primitive::cummax:
    case Primitive::cummin:
    case Primitive::cumlogsumexp:
      return [p, c = ps.get<params::Cumulative>(), out](In in) { return cumulative_kernel(p, in[0], c.axis, c.reverse, out); };
    case Primitive::reduce_window_sum:
    case Primitive::reduce_window_max:
    case Primitive::reduce_window_min:
      return [p, w = ps.get<params::ReduceWindow>(), out](In in) { return reduce_window_kernel(p, in[0], w, out); };
    case Primitive::select_and_gather_add:
    case Primitive::select_and_scatter_add:
      return [p, w = ps.get<params::SelectWindow>(), out](In in) { return select_window_kernel(p, in[0], in[1], w, out); };
    case Primitive::broadcast_in_dim:
      return [dims = ps.get<params::BroadcastInDim>().broadcast_dimensions, out](In in) {
        return broadcast_in_dim_kernel(in[0], dims, out);
      };
    case Primitive::stop_gradient:
    case Primitive::reshape:
    case Primitive::squeeze:
    case Primitive::expand_dims:
    case Primitive::name: return [out](In in) { return share_buffer(in[0], out); };
    case Primitive::transpose:
      return [perm = ps.get<params::Transpose>().permutation](In in) { return transpose_kernel(in[0], perm); };
    case Primitive::rev:
      return [dims = ps.get<params::Rev>().dimensions, out](In in) { return rev_kernel(in[0], dims, out); };
    case Primitive::slice:
      return [start = ps.get<params::Slice>().start_indices, strides = ps.get<params::Slice>().strides, out](In in) {
        return slice_kernel(in[0], start, strides, out);
      };
    case Primitive::pad:
      return [lo = ps.get<params::Pad>().lo, interior = ps.get<params::Pad>().interior, out](In in) {
        return pad_kernel(in[0], in[1], lo, interior, out);
      };
    case Primitive::dynamic_slice: return [out](In in) { return dynamic_slice_kernel(in, out); };
    case Primitive::dynamic_update_slice: return [out](In in) { return dynamic_update_slice_kernel(in, out); };
    case Primitive::concatenate:
      return [dim = ps.get<params::Concatenate>().dimension, out](In in) { return concatenate_kernel(in, dim, out); };
    case Primitive::gather:
      return [g = ps.get<params::Gather>(), out](In in) { return gather_kernel(in[0], in[1], g, out); };
    case Primitive::scatter_add: case Primitive::scatter: case Primitive::scatter_mul:
    case Primitive::scatter_min: case Primitive::scatter_max:
      return [p, s = ps.get<params::Scatter>(), out](In in) { return scatter_kernel(p, in[0], in[1], in[2], s, out); };
    case Primitive::iota:
      return [dim = ps.get<params::Iota>().dimension, out](In) { return iota_kernel(dim, out); };
    case Primitive::threefry2x32: return [out](In in) { return threefry2x32_kernel(in[0], in[1], out); };
    case Primitive::cholesky: return [out](In in) { return cholesky_kernel(in[0], out); };
    case Primitive::triangular_solve:
      return [ps = ps.get<params::TriangularSolve>(), out](In in) { return triangular_solve_kernel(in[0], in[1], ps, out); };
    case Primitive::lu_pivots_to_permutation:
      return [out](In in) { return lu_pivots_to_permutation_kernel(in[0], out); };
    case Primitive::psum:
    case Primitive::pmax: return [p, out](In in) { return allreduce_kernel(p, in[0], out); };
    case Primitive::all_gather:
      return [ps = ps.get<params::AllGather>(), out](In in) { return all_gather_kernel(in[0], ps, out); };
    case Primitive::psum_scatter:
      return [ps = ps.get<params::PsumScatter>(), out](In in) { return psum_scatter_kernel(in[0], ps, out); };
    case Primitive::ppermute:
      return [perm = ps.get<params::Ppermute>().perm, out](In in) { return ppermute_kernel(in[0], perm, out); };
  }
  throw Error("run_kernel: invalid primitive");
}

// ---- narrow dtypes: the wide kernel between two conversions ------------------------------------

// Primitives whose kernels move elements as opaque words of their itemsize (shape.cpp,
// collectives.cpp) and so
// take any dtype as it is, and convert_element_type, which converts every pair itself: no
// widening (widening would convert a whole stacked array to read one slice of it).
bool takes_narrow_as_is(Primitive p) {
  static constexpr Primitive as_is[] = {
      Primitive::convert_element_type, Primitive::copy, Primitive::stop_gradient, Primitive::reshape,
      Primitive::squeeze, Primitive::expand_dims, Primitive::name, Primitive::broadcast_in_dim,
      Primitive::transpose, Primitive::slice, Primitive::rev, Primitive::pad, Primitive::dynamic_slice,
      Primitive::dynamic_update_slice, Primitive::concatenate, Primitive::gather, Primitive::select_n,
      Primitive::all_gather, Primitive::ppermute,  // the collectives that move bytes: a bf16 gather sent f32
      Primitive::psum, Primitive::pmax, Primitive::psum_scatter};  // widened after the cross-process check (collectives.cpp)
  return std::find(std::begin(as_is), std::end(as_is), p) != std::end(as_is);
}

// The dtype a narrow operand is read as before widening: its own, except that the bit operations
// read a signed narrow integer unsigned (shift_right_logical, population_count) and
// shift_right_arithmetic reads an unsigned one signed, so that the wide result's low bits are the
// narrow one's.
DType read_as(Primitive p, DType d) {
  if ((p == Primitive::shift_right_logical || p == Primitive::population_count) && (d == DType::i8 || d == DType::i16))
    return d == DType::i8 ? DType::u8 : DType::u16;
  if (p == Primitive::shift_right_arithmetic && (d == DType::u8 || d == DType::u16))
    return d == DType::u8 ? DType::i8 : DType::i16;
  return d;
}

// dot_general of two bf16 (or two f16) operands into their dtype or f32 runs in f32 a panel at a
// time (dot.cpp), not through whole widened copies.
bool is_panel_dot(Primitive p, DType lhs, DType rhs, DType out) {
  return p == Primitive::dot_general && (lhs == DType::bf16 || lhs == DType::f16) && rhs == lhs &&
         (out == lhs || out == DType::f32);
}

bool any_narrow(std::span<const ShapedArray> in, const ShapedArray& out) {
  return is_narrow(out.dtype) || std::any_of(in.begin(), in.end(), [](const ShapedArray& a) { return is_narrow(a.dtype); });
}

// nextafter steps one value of the narrow format itself (widened, the step would be f32's).
Array nextafter_narrow_kernel(const Array& x, const Array& y, const ShapedArray& out) {
  const narrow::Format f = out.dtype == DType::bf16 ? narrow::kBf16 : narrow::kF16;
  Array result = alloc_array(out);
  const auto* a = in_ptr<std::uint16_t>(x);
  const auto* b = in_ptr<std::uint16_t>(y);
  auto* o = out_ptr<std::uint16_t>(result);
  for (std::int64_t i = 0, n = out.size(); i < n; ++i) {
    const double va = narrow::decode(a[i], f), vb = narrow::decode(b[i], f);
    if (std::isnan(va) || std::isnan(vb)) o[i] = f.quiet_nan_bits();
    else if (va == vb) o[i] = b[i];
    else if (va == 0) o[i] = vb > 0 ? 0x0001 : 0x8001;  // the least subnormal toward y
    else o[i] = static_cast<std::uint16_t>((va < vb) == (va > 0) ? a[i] + 1 : a[i] - 1);  // bits order |x|
  }
  return result;
}

// Elementwise primitives whose operands have the output's shape run a block at a time: each
// block of the operands widened into a stack buffer, the wide kernel run there, its result
// narrowed into the output. No full-size wide copy is made, and the data crosses memory once.
constexpr std::int64_t kNarrowBlock = 1024;

bool runs_blockwise(Primitive p, std::span<const Array> in, const ShapedArray& out) {
  if (!(is_unary_math(p) || is_float_binary(p) || is_comparison(p) || p == Primitive::integer_pow) || in.size() > 2)
    return false;
  for (const Array& x : in)
    if (x.shape() != out.shape || read_as(p, x.dtype()) != x.dtype()) return false;
  return read_as(p, out.dtype) == out.dtype;
}

DType wide_dtype(DType d) { return is_narrow(d) ? compute_dtype(d) : d; }

// The IntoKernels of one block of m elements: each operand's widening (empty where it is wide
// already), the wide kernel, the result's narrowing (empty where the output is wide).
struct BlockKernels {
  std::vector<IntoKernel> widen;
  IntoKernel wide, narrow;
};

BlockKernels block_kernels(Primitive p, const Params& params, std::span<const Array> in, const ShapedArray& out, std::int64_t m) {
  BlockKernels k;
  std::vector<ShapedArray> wide_in;
  for (const Array& x : in) {
    const ShapedArray from{{m}, x.dtype()}, to{{m}, wide_dtype(x.dtype())};
    k.widen.push_back(is_narrow(x.dtype()) ? elementwise_into(Primitive::convert_element_type, params, {&from, 1}, to) : IntoKernel{});
    wide_in.push_back(to);
  }
  const ShapedArray wide_out{{m}, wide_dtype(out.dtype)};
  k.wide = elementwise_into(p, params, wide_in, wide_out);
  if (is_narrow(out.dtype))
    k.narrow = elementwise_into(Primitive::convert_element_type, params, {&wide_out, 1}, ShapedArray{{m}, out.dtype});
  if (!k.wide) throw Error("run_kernel: no blockwise kernel of " + std::string(primitive_name(p)));
  return k;
}

Array blockwise_kernel(Primitive p, const Params& params, std::span<const Array> in, const ShapedArray& out) {
  Array result = alloc_array(out);
  const std::int64_t n = out.size();
  if (n == 0) return result;
  const BlockKernels full = block_kernels(p, params, in, out, std::min(n, kNarrowBlock));
  alignas(64) std::int64_t wide_in[2][kNarrowBlock];  // 8 bytes an element at most
  alignas(64) std::int64_t wide_out[kNarrowBlock];
  char* dst = static_cast<char*>(mutable_data(result));
  for (std::int64_t start = 0; start < n; start += kNarrowBlock) {
    const std::int64_t m = std::min(kNarrowBlock, n - start);
    const BlockKernels tail = m == std::min(n, kNarrowBlock) ? BlockKernels{} : block_kernels(p, params, in, out, m);
    const BlockKernels& k = tail.wide ? tail : full;
    const void* ins[2] = {nullptr, nullptr};
    for (std::size_t i = 0; i < in.size(); ++i) {
      const char* src = static_cast<const char*>(in[i].raw_data()) + start * static_cast<std::int64_t>(itemsize(in[i].dtype()));
      if (k.widen[i]) {
        const void* from[1] = {src};
        void* to[1] = {wide_in[i]};
        k.widen[i](from, to);
        ins[i] = wide_in[i];
      } else {
        ins[i] = src;
      }
    }
    char* block_out = dst + start * static_cast<std::int64_t>(itemsize(out.dtype));
    void* outs[1] = {k.narrow ? static_cast<void*>(wide_out) : static_cast<void*>(block_out)};
    k.wide(ins, outs);
    if (k.narrow) {
      const void* from[1] = {wide_out};
      void* to[1] = {block_out};
      k.narrow(from, to);
    }
  }
  return result;
}

// An empty max / min (a reduction over no elements, a window wholly in padding) holds the wide
// dtype's identity, i32's lowest / highest, which the conversion to i8 / i16 wraps (to 0 / -1):
// clamped first, it becomes the narrow dtype's (JAX's identity). Every other value is in range.
// (u8 / u16 widen to u32, whose 0 and all-ones wrap to their own 0 and all-ones.)
Array with_narrow_identities(Primitive p, Array wide, DType narrow) {
  const bool identity_possible = p == Primitive::reduce_max || p == Primitive::reduce_min ||
                                 p == Primitive::reduce_window_max || p == Primitive::reduce_window_min;
  if (!identity_possible || wide.dtype() != DType::i32 || (narrow != DType::i8 && narrow != DType::i16)) return wide;
  const std::int32_t lo = narrow == DType::i8 ? std::numeric_limits<std::int8_t>::lowest() : std::numeric_limits<std::int16_t>::lowest();
  const std::int32_t hi = narrow == DType::i8 ? std::numeric_limits<std::int8_t>::max() : std::numeric_limits<std::int16_t>::max();
  auto* v = static_cast<std::int32_t*>(mutable_data(wide));
  for (std::int64_t i = 0, n = wide.aval().size(); i < n; ++i) v[i] = std::clamp(v[i], lo, hi);
  return wide;
}

// The kernel of p on narrow operands or output: the wide kernel on widened operands (a block at a
// time for the elementwise families), its result converted once to the output's dtype.
KernelFn widened_kernel(Primitive p, const Params& params, const ShapedArray& out) {
  if (p == Primitive::nextafter)
    return [out](std::span<const Array> in) { return nextafter_narrow_kernel(in[0], in[1], out); };
  const ShapedArray wide_out{out.shape, is_narrow(out.dtype) ? compute_dtype(read_as(p, out.dtype)) : out.dtype};
  return [p, params, out, wide = resolve_kernel_impl(p, params, wide_out)](std::span<const Array> in) {
    if (runs_blockwise(p, in, out)) return blockwise_kernel(p, params, in, out);
    std::vector<Array> widened;
    widened.reserve(in.size());
    for (const Array& x : in) widened.push_back(widen(p, x));
    return narrow_to(with_narrow_identities(p, wide(widened), out.dtype), out);
  };
}

}  // namespace

std::vector<Array> run_kernel(Primitive p, std::span<const Array> in, const Params& params,
                              std::span<const ShapedArray> out_avals) {
  if (out_avals.size() != 1)
    throw Error("run_kernel(" + std::string(primitive_name(p)) + "): expected one output aval, got " +
                std::to_string(out_avals.size()));
  // The dtypes first: most eager ops have no narrow operand and ask nothing else.
  const bool narrow = (is_narrow(out_avals[0].dtype) ||
                       std::any_of(in.begin(), in.end(), [](const Array& a) { return is_narrow(a.dtype()); })) &&
                      !takes_narrow_as_is(p) &&
                      !(in.size() == 2 && is_panel_dot(p, in[0].dtype(), in[1].dtype(), out_avals[0].dtype));
  if (narrow) return {widened_kernel(p, params, out_avals[0])(in)};
  // Eager dot_general is called directly: its closure would copy the four dim lists.
  if (p == Primitive::dot_general && in.size() == 2)
    return {dot_general_kernel(in[0], in[1], params.get<params::DotGeneral>(), out_avals[0])};
  // The elementwise families too, without building their closure (a std::function holding a copy
  // of the output's aval, per eager op): the entry points resolve_kernel_impl's cases call.
  switch (family_of(p)) {
    case Family::float_unary:
    case Family::numeric_unary: return {unary_kernel(p, in[0], out_avals[0])};
    case Family::binary: return {binary_kernel(p, in[0], in[1], out_avals[0])};
    case Family::comparison: return {compare_kernel(p, in[0], in[1], out_avals[0])};
    case Family::power:
    case Family::structural:
    case Family::factorization:
    case Family::collective:
    case Family::higher_order:
    case Family::control_flow: break;
  }
  return {resolve_kernel_impl(p, params, out_avals[0])(in)};
}

KernelFn resolve_kernel(Primitive p, const Params& params, std::span<const ShapedArray> in, const ShapedArray& out) {
  const bool panel_dot = in.size() == 2 && is_panel_dot(p, in[0].dtype, in[1].dtype, out.dtype);
  if (!takes_narrow_as_is(p) && !panel_dot && any_narrow(in, out)) return widened_kernel(p, params, out);
  if (p == Primitive::dot_general && in.size() == 2)
    return resolved_dot_general(params.get<params::DotGeneral>(), in[0], in[1], out);
  return resolve_kernel_impl(p, params, out);
}

namespace kernels {

bool is_narrow(DType d) {
  return d == DType::bf16 || d == DType::f16 || d == DType::i8 || d == DType::u8 || d == DType::i16 || d == DType::u16;
}

DType compute_dtype(DType d) {
  if (d == DType::bf16 || d == DType::f16) return DType::f32;
  if (d == DType::i8 || d == DType::i16) return DType::i32;
  if (d == DType::u8 || d == DType::u16) return DType::u32;
  return d;
}

Array widen(Primitive p, const Array& x) {
  if (!is_narrow(x.dtype())) return x;
  const DType as = read_as(p, x.dtype());
  const Array view = as == x.dtype() ? x : share_buffer(x, ShapedArray{x.shape(), as});
  return convert_element_type_kernel(view, ShapedArray{x.shape(), compute_dtype(as)});
}

Array narrow_to(const Array& wide, const ShapedArray& out) {
  return wide.dtype() == out.dtype ? wide : convert_element_type_kernel(wide, out);
}

std::vector<Array> run_widened(Primitive p, std::span<const Array> in,
                               const std::function<std::vector<Array>(std::span<const Array>)>& kernel) {
  if (std::none_of(in.begin(), in.end(), [](const Array& a) { return is_narrow(a.dtype()); })) return kernel(in);
  std::vector<Array> widened;
  widened.reserve(in.size());
  for (const Array& x : in) widened.push_back(widen(p, x));
  std::vector<Array> outs = kernel(widened);
  // sort: output k is operand k sorted; the others' narrowed outputs are those of operand 0's
  // widened dtype (top_k's and lu's first, all of qr's, eigh's and svd's).
  for (std::size_t k = 0; k < outs.size(); ++k) {
    const Array& source = p == Primitive::sort ? in[k] : in[0];
    const bool first_only = p == Primitive::top_k || p == Primitive::lu;
    if (is_narrow(source.dtype()) && (!first_only || k == 0) && outs[k].dtype() == compute_dtype(source.dtype()))
      outs[k] = narrow_to(outs[k], ShapedArray{outs[k].shape(), source.dtype()});
  }
  return outs;
}

void unsupported_dtype(Primitive p, DType d) {
  throw Error("kernel of " + std::string(primitive_name(p)) + " does not support dtype " +
              dtype_name(d));
}

Ints free_dims(std::int64_t rank, const Ints& contracting, const Ints& batch) {
  Ints dims;
  for (std::int64_t d = 0; d < rank; ++d)
    if (std::find(contracting.begin(), contracting.end(), d) == contracting.end() &&
        std::find(batch.begin(), batch.end(), d) == batch.end())
      dims.push_back(d);
  return dims;
}

Ints row_major_strides(const Shape& shape) {
  Ints strides(shape.size());
  std::int64_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Array share_buffer(const Array& x, const ShapedArray& aval) {
  return buffer_view(x, 0, aval);
}

std::int64_t read_index_scalar(const Array& x) {
  if (is_narrow(x.dtype()) && is_integer(x.dtype())) return x.to_vector<std::int64_t>()[0];
  return visit_dtype(x.dtype(), [&](auto tag) -> std::int64_t {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      throw Error("index operand must be an integer, got " + x.aval().str());
    } else if constexpr (std::is_same_v<T, std::uint64_t>) {  // above INT64_MAX: past any array, not negative
      return static_cast<std::int64_t>(std::min<std::uint64_t>(in_ptr<T>(x)[0], std::numeric_limits<std::int64_t>::max()));
    } else {
      return static_cast<std::int64_t>(in_ptr<T>(x)[0]);
    }
  });
}

}  // namespace kernels
}  // namespace xjax::detail

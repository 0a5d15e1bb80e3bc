// kernel_sets.hpp: the kernels compiled once per instruction set, and the choice among them at run
// time (not installed).
//
// The vectorized kernel files (kernel_set_src in meson.build: elementwise, fused, reduce, window,
// conv, dot, small_gemm) are compiled once per *kernel set*, each time with its own -march flags
// and inside its own namespace, kernels::set_<name> (XJAX_KERNEL_SET_NAMESPACE). The default build
// (-Dsimd=dispatch) on x86-64 has three: baseline (x86-64, SSE2), avx2 (x86-64-v3: AVX2, FMA) and
// avx512 (x86-64-v4); -Dsimd=native has one, `native` (-march=native), and -Dsimd=baseline one,
// `baseline`. The entry points in kernels:: (kernels.hpp) forward to the set chosen at first use
// (dispatch.cpp): the best one this CPU runs, or the one the XJAX_KERNELS environment variable
// names.
//
// Each set keeps its own copies of the inline functions and template instantiations it emits
// (renamed `....xjax_set_<name>` by isolate_kernel_set.py at build time), so no baseline code can
// call a copy built for a wider set.
//
// Adding an entry point to a vectorized file: declare it in kernels.hpp as usual and add its line
// to XJAX_KERNEL_SET_ENTRIES; the linker reports any entry point that is missing from either.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernels.hpp"
#include "kernels/small_gemm.hpp"

namespace xjax::detail::kernels {

// X(name, return type, (parameters), (arguments)): every entry point of the vectorized files.
#define XJAX_KERNEL_SET_ENTRIES(X)                                                                                  \
  X(unary_kernel, Array, (Primitive p, const Array& x, const ShapedArray& out), (p, x, out))                        \
  X(integer_pow_kernel, Array, (const Array& x, std::int64_t y, const ShapedArray& out), (x, y, out))               \
  X(binary_kernel, Array, (Primitive p, const Array& x, const Array& y, const ShapedArray& out), (p, x, y, out))    \
  X(compare_kernel, Array, (Primitive p, const Array& x, const Array& y, const ShapedArray& out), (p, x, y, out))   \
  X(select_n_kernel, Array, (std::span<const Array> in, const ShapedArray& out), (in, out))                         \
  X(convert_element_type_kernel, Array, (const Array& x, const ShapedArray& out), (x, out))                         \
  X(copy_kernel, Array, (const Array& x, const ShapedArray& out), (x, out))                                         \
  X(elementwise_into, IntoKernel,                                                                                   \
    (Primitive p, const Params& params, std::span<const ShapedArray> in, const ShapedArray& out),                   \
    (p, params, in, out))                                                                                           \
  X(bitwise_unary_kernel, Array, (Primitive p, const Array& x, const ShapedArray& out), (p, x, out))                \
  X(is_finite_kernel, Array, (const Array& x, const ShapedArray& out), (x, out))                                   \
  X(clamp_kernel, Array, (const Array& lo, const Array& x, const Array& hi, const ShapedArray& out), (lo, x, hi, out)) \
  X(round_kernel, Array, (const Array& x, bool to_nearest_even, const ShapedArray& out), (x, to_nearest_even, out)) \
  X(run_fused, void, (const FusedProgram& prog, std::span<const Array> in, std::vector<Array>& outs),               \
    (prog, in, outs))                                                                                               \
  X(fused_into, IntoKernel, (std::shared_ptr<const FusedProgram> prog), (std::move(prog)))                          \
  X(reduce_kernel, Array, (Primitive p, const Array& x, const Ints& axes, const ShapedArray& out), (p, x, axes, out)) \
  X(arg_reduce_kernel, Array, (Primitive p, const Array& x, std::int64_t axis, const ShapedArray& out), (p, x, axis, out)) \
  X(conv_general_dilated_kernel, Array,                                                                             \
    (const Array& lhs, const Array& rhs, const params::ConvGeneralDilated& p, const ShapedArray& out),               \
    (lhs, rhs, p, out))                                                                                             \
  X(reduce_window_kernel, Array,                                                                                    \
    (Primitive p, const Array& x, const params::ReduceWindow& w, const ShapedArray& out), (p, x, w, out))           \
  X(select_window_kernel, Array,                                                                                    \
    (Primitive p, const Array& values, const Array& x, const params::SelectWindow& w, const ShapedArray& out),      \
    (p, values, x, w, out))                                                                                         \
  X(dot_general_kernel, Array,                                                                                      \
    (const Array& lhs, const Array& rhs, const params::DotGeneral& dn, const ShapedArray& out), (lhs, rhs, dn, out)) \
  X(resolved_dot_general, KernelFn,                                                                                 \
    (const params::DotGeneral& dn, const ShapedArray& lhs, const ShapedArray& rhs, const ShapedArray& out),         \
    (dn, lhs, rhs, out))                                                                                            \
  X(dot_general_into, IntoKernel,                                                                                   \
    (const params::DotGeneral& dn, const ShapedArray& lhs, const ShapedArray& rhs, const ShapedArray& out),         \
    (dn, lhs, rhs, out))                                                                                            \
  X(small_gemm_f32, bool, (const SmallGemm& s, const float* a, const float* b, float* c), (s, a, b, c))             \
  X(small_gemm_f64, bool, (const SmallGemm& s, const double* a, const double* b, double* c), (s, a, b, c))             \
  X(large_products_in_loops, bool, (), ())                                                                          \
  X(transpose_items, bool,                                                                                          \
    (std::size_t item, const void* src, std::int64_t src_stride, void* dst, std::int64_t dst_stride,               \
     std::int64_t rows, std::int64_t cols),                                                                         \
    (item, src, src_stride, dst, dst_stride, rows, cols))

#define XJAX_KERNEL_SET_DECLARE(name, ret, params, args) ret name params;
XJAX_KERNEL_SET_ENTRIES(XJAX_KERNEL_SET_DECLARE)  // small_gemm_f32 / _f64, large_products_in_loops, transpose_items; the others are in kernels.hpp

/// One kernel set: its name and a pointer to each entry point compiled for it.
struct KernelSet {
  const char* name;
#define XJAX_KERNEL_SET_MEMBER(name, ret, params, args) ret(*name) params;
  XJAX_KERNEL_SET_ENTRIES(XJAX_KERNEL_SET_MEMBER)
#undef XJAX_KERNEL_SET_MEMBER
};

/// The sets this library was built with, best first (dispatch.cpp).
std::span<const KernelSet* const> built_kernel_sets();
/// Whether this CPU has every instruction `set` was compiled with.
bool runs_here(const KernelSet& set);
/// The set the entry points forward to: chosen at the first call, as the XJAX_KERNELS environment
/// variable names it (xj::Error if that set was not built or this CPU cannot run it), else the
/// first of built_kernel_sets() that runs here.
const KernelSet& active_kernel_set();
/// Makes the named set the active one (tests and benchmarks: each set checked against the
/// others). Plans built before keep the set of the kernels they resolved (their IntoKernels and
/// dot_general steps); their other steps call the entry points and follow the switch.
/// xj::Error naming the sets there are if `name` was not built or does not run here.
void use_kernel_set(const std::string& name);
/// The width in bytes of the vectors of the kernels OpenBLAS runs (its core's name, read once):
/// 16 (SSE cores: Prescott, its fallback for an Intel CPU it does not know, Nehalem ...; and
/// Bulldozer to Excavator, whose kernels use 16-byte registers), 32 (Sandybridge, Haswell, Zen),
/// 64 (SkylakeX, Cooperlake, SapphireRapids); 0 for a core not listed here (a newer OpenBLAS's
/// name, or off x86-64: then its kernels are taken to be as wide as any set's).
int blas_vector_bytes();
/// The width in bytes of this CPU's widest vectors: 64 (AVX-512F), 32 (AVX), 16 (SSE2, NEON).
int cpu_vector_bytes();
/// Whether OpenBLAS runs kernels narrower than this CPU's widest vectors (Debian's 0.3.21: its
/// Haswell kernels on AMD's AVX-512 CPUs, Prescott on Intel's newer than it). xj::build_info
/// reports it.
bool blas_below_cpu_width();

}  // namespace xjax::detail::kernels

#define XJAX_CAT2(a, b) a##b
#define XJAX_CAT(a, b) XJAX_CAT2(a, b)
/// The namespace of the set a vectorized file is being compiled for (-DXJAX_KERNEL_SET=<name>).
#define XJAX_KERNEL_SET_NAMESPACE XJAX_CAT(set_, XJAX_KERNEL_SET)

#if defined(XJAX_KERNEL_SET)
namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
XJAX_KERNEL_SET_ENTRIES(XJAX_KERNEL_SET_DECLARE)
/// small_gemm_f32 / _f64 as one template (small_gemm.cpp).
template <class T> bool small_gemm(const SmallGemm& s, const T* a, const T* b, T* c);
/// Whether small_gemm takes the product s (then it never calls BLAS).
template <class T> bool small_gemm_takes(const SmallGemm& s);
/// A product past small_gemm's sizes in the same loops, rows of C split over the kernel threads:
/// writes C (adds A B to it when `accumulate`) and returns true only where this set has the
/// register-blocked loops (AVX2, AVX-512) and its batches are wider than the vectors of the BLAS's
/// kernels (blas_vector_bytes, a known core); otherwise writes nothing and returns false (use
/// BLAS). Each element of C is one chain over k in order (from what C holds when accumulating):
/// the same bits at any thread count.
template <class T> bool blocked_gemm(const SmallGemm& s, const T* a, const T* b, T* c, bool accumulate = false);
/// Whether blocked_gemm runs the product s here (looped_gemm outruns the BLAS at any size and a
/// transposed B is small enough to copy).
template <class T> bool blocked_gemm_runs(const SmallGemm& s);
/// Rows [0, m) of a product in groups of at most 64 rows (kMaxGroupRows) over the kernel threads,
/// as blocked_gemm splits them: `tasks` shares of whole groups, decided once (row_groups reads
/// the thread count), then for_row_groups calls body(task, first_row, rows) per group, task <
/// tasks naming the share (for its scratch memory) (small_gemm.cpp). The body must not call BLAS
/// (the shares may run on OpenBLAS's workers: ChunkCalls::no_blas, parallel.hpp).
struct RowGroups {
  std::int64_t rows, group, groups, tasks;
};
RowGroups row_groups(std::int64_t m);
void for_row_groups(const RowGroups& g, const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& body);
/// The most rows m that small_gemm takes for a product of n columns and depth k with B stored
/// [k, n]: 0 when this set has no loops for such n (small_gemm.cpp).
template <class T> std::int64_t small_gemm_rows(std::int64_t n, std::int64_t k);
/// c = a b (c += a b when `accumulate`) for a (m x k) with element (i, p) at a[i a_row + p a_col],
/// row-major b (k x n) and c (m x n), of any size, in the small-product loops, the depth in
/// cache-sized chunks; only where small_gemm_rows<T>(n, 1) is positive (this set has loops for n
/// columns; small_gemm.cpp). Each element of c is one chain over k in order.
template <class T>
void looped_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, std::int64_t a_row, std::int64_t a_col, const T* b,
                 T* c, bool accumulate);
/// convert_element_type's loop on raw elements, for every pair of dtypes (elementwise.cpp); the
/// pairs with a narrow dtype go to convert_narrow (narrow_convert.cpp).
void convert_elements(DType from, DType to, const void* x, void* o, std::size_t n);
void convert_narrow(DType from, DType to, const void* x, void* o, std::size_t n);
/// This set's table (kernel_set.cpp).
const KernelSet& kernel_set();
}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE
#endif

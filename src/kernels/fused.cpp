// fused.cpp: run_fused, the executor of fused elementwise chains (FusedProgram, kernels.hpp).
//
// The output shape is cut into blocks of kBlock elements. For each block every value gets a
// pointer: dense float inputs point into their array, bool inputs are widened into a scratch row
// (or read as bytes when they only choose a select_n's case), row-broadcast inputs are copied into
// one, scalars point at a row filled once, and each op writes a scratch row (shared with values
// no longer read: FusedProgram::row_of), or straight into the output array when its value is a
// float output. The ops run in order over the block
// with the vectorized loops of simd.hpp, then the other outputs are copied out (narrowed to uint8
// for bools). Intermediates only ever occupy one block-sized row. A bf16 / f16 program
// (FusedProgram::storage) computes in f32: its dense inputs are widened into their rows as each
// block is read, its scalars and broadcast sources once, and every float output is rounded once
// as the block is stored (see run_blocks).
#include <algorithm>
#include <cstring>

#include "kernels/kernels.hpp"
#include "kernels/fused_program.hpp"
#include "kernels/kernel_sets.hpp"
#include "kernels/parallel.hpp"
#include "kernels/simd.hpp"
#include "per_thread.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {
namespace {

using namespace simd;

constexpr auto kBlock = static_cast<std::size_t>(FusedProgram::kBlock);
constexpr std::size_t kMaxPointers = 16;  // operand pointers kept on the stack (more: a vector)

// The plain loops below are vectorized by GCC when asked (-O2 does not vectorize them).
#if defined(__GNUC__) && !defined(__clang__)
#define XJAX_FUSED_VECTORIZE __attribute__((optimize("tree-vectorize")))
#else
#define XJAX_FUSED_VECTORIZE
#endif

template <class T> XJAX_FUSED_VECTORIZE void fill_row(T* dst, std::size_t n, T value) {
  for (std::size_t k = 0; k < n; ++k) dst[k] = value;
}
// bool (0/1 bytes) to 0/1 in T
template <class T> XJAX_FUSED_VECTORIZE void from_bool_bytes(const std::uint8_t* src, T* dst, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) dst[k] = static_cast<T>(src[k] & 1);
}
// 0/1 in T to bool bytes
template <class T> XJAX_FUSED_VECTORIZE void to_bool_bytes(const T* src, std::uint8_t* dst, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) dst[k] = static_cast<std::uint8_t>(src[k] != T{0});
}

// o[k] = which[k] ? case1[k] : case0[k], reading the bool bytes directly (no widened row).
template <class T>
XJAX_FUSED_VECTORIZE void select_bytes(const std::uint8_t* which, const T* case0, const T* case1, T* o, std::size_t n) {
  for (std::size_t k = 0; k < n; ++k) {
    const T a = case0[k], b = case1[k];  // both read: the loop becomes a vector blend
    o[k] = (which[k] & 1) ? b : a;
  }
}

// dst[k] = src[(start + k) % period] for k < n: the block's part of a row-broadcast input.
template <class T> void periodic_row(const T* src, std::size_t period, std::size_t start, T* dst, std::size_t n) {
  std::size_t offset = start % period;
  for (std::size_t done = 0; done < n;) {
    const std::size_t len = std::min(n - done, period - offset);
    std::memcpy(dst + done, src + offset, len * sizeof(T));
    done += len;
    offset = 0;
  }
}

// dst[k] = src[((start + k) / repeat) % period] for k < n: the block's part of a broadcast input
// whose every element covers `repeat` consecutive elements of the shape (a column).
template <class T>
void stretched_row(const T* src, std::size_t period, std::size_t repeat, std::size_t start, T* dst, std::size_t n) {
  std::size_t j = start / repeat, offset = start % repeat;
  for (std::size_t done = 0; done < n; offset = 0, ++j) {
    const std::size_t len = std::min(n - done, repeat - offset);
    fill_row(dst + done, len, src[j % period]);
    done += len;
  }
}

template <class T> void compare_block(Primitive p, const T* x, const T* y, T* o, std::size_t n) {
  using B = Batch<T>;
  const B one(T{1}), zero(T{0});
  with_comparison(p, "run_fused", [&](auto cmp) {
    map2(x, y, o, n, [=](B a, B b) { return xsimd::select(cmp(a, b), one, zero); });
  });
}

// One op over n elements of the block; v[i] is value i's row, bytes[i] the block of a bool
// input read as bytes (nullptr otherwise).
template <class T>
void run_op(const FusedProgram::Op& op, std::vector<T*>& v, const std::vector<const std::uint8_t*>& bytes, std::size_t n) {
  using B = Batch<T>;
  if (op.prim == Primitive::select_n && static_cast<std::size_t>(op.src[0]) < bytes.size() &&
      bytes[static_cast<std::size_t>(op.src[0])])
    return select_bytes(bytes[static_cast<std::size_t>(op.src[0])], v[static_cast<std::size_t>(op.src[1])],
                        v[static_cast<std::size_t>(op.src[2])], v[static_cast<std::size_t>(op.dst)], n);
  const T* a = v[static_cast<std::size_t>(op.src[0])];
  const T* b = v[static_cast<std::size_t>(op.src[1])];
  const T* c = v[static_cast<std::size_t>(op.src[2])];
  T* o = v[static_cast<std::size_t>(op.dst)];
  if (is_float_binary(op.prim)) return float_binary(op.prim, a, b, o, n);
  if (is_comparison(op.prim)) return compare_block(op.prim, a, b, o, n);
  if (op.prim == Primitive::integer_pow) return float_integer_pow(a, o, n, op.y);
  if (op.prim == Primitive::clamp)  // min(max(x, lo), hi), NaN from any operand (clamp_kernel)
    return map3(a, b, c, o, n, [](B lo, B x, B hi) {
      const B r = xsimd::select((x >= hi) || (lo >= hi), hi, xsimd::select(x <= lo, lo, x));
      return xsimd::select(xsimd::isnan(x), x, xsimd::select(xsimd::isnan(lo), lo, xsimd::select(xsimd::isnan(hi), hi, r)));
    });
  if (op.prim == Primitive::is_finite)  // x - x is 0 unless x is infinite or NaN; bools are 0 / 1 here
    return map1(a, o, n, [](B x) { return xsimd::select(x - x == B(T{0}), B(T{1}), B(T{0})); });
  if (op.prim == Primitive::select_n)  // which ? case1 : case0
    return map3(a, b, c, o, n, [](B which, B case0, B case1) { return xsimd::select(which != B(T{0}), case1, case0); });
  if (op.prim == Primitive::convert_element_type) {
    if (op.to_bool)
      // x != 0, with NaN -> true as in C++: not (x == 0)
      return map1(a, o, n, [](B x) { return xsimd::select(x == B(T{0}), B(T{0}), B(T{1})); });
    if (o != a) std::memcpy(o, a, n * sizeof(T));  // o == a: an output written in place
    return;
  }
  float_unary(op.prim, a, o, n);  // the unary families (anything else: an unsupported error)
}

// True when x's buffer has no other owner than x's one handle (the plan moved it in at its last
// use): its memory may be overwritten.
bool uniquely_owned(const Array& x) {
  const auto& impl = x.impl();
  return impl && impl.use_count() == 1 && impl->buffer && impl->buffer.use_count() == 1 && !impl->buffer->external &&
         impl->offset == 0;
}

/// The tables of one run of a program, kept per thread (the calling thread's).
template <class T> struct Scratch {
  std::vector<T> widened;                    // a narrow program's scalar and broadcast inputs in T
  std::vector<const void*> source;           // each input's elements as the loop reads them
  std::vector<char> donated;                 // input i's buffer holds an output now
  std::vector<char> shares;                  // output k shares its input's buffer
};

/// The rows a thread runs blocks in, kept per thread (each thread that runs blocks has its own).
template <class T> struct BlockRows {
  std::vector<T> rows;                       // prog.rows rows of kBlock elements
  std::vector<T*> v;                         // each value's row in the current block
  std::vector<const std::uint8_t*> bytes;    // bool inputs read as bytes: their block
};


// Runs blocks [b0, b1) of the program (see run_blocks) in this thread's rows.
template <class T>
void run_block_range(const FusedProgram& prog, const void* const* in_ptr, void* const* out_ptr, const Scratch<T>& scratch,
                     std::size_t b0, std::size_t b1) {
  BlockRows<T> own;  // only while the thread is ending (its rows are gone)
  BlockRows<T>* mine = PerThread<BlockRows<T>>::get();
  auto& [rows, v, bytes] = mine ? *mine : own;
  const auto& [widened, source, donated, shares] = scratch;
  const auto nv = static_cast<std::size_t>(prog.num_values);
  const std::size_t ni = prog.inputs.size();
  const auto total = static_cast<std::size_t>(prog.size);
  const bool narrow = prog.storage != prog.compute;
  const auto& direct = prog.direct;
  auto is_direct = [&](std::size_t value) { return !narrow && direct[value] >= 0; };  // narrow: all via rows
  const auto nr = static_cast<std::size_t>(prog.rows);
  if (rows.size() < nr * kBlock) rows.resize(nr * kBlock);
  v.resize(nv);
  auto row = [&](std::size_t value) { return rows.data() + static_cast<std::size_t>(prog.row_of[value]) * kBlock; };
  auto input_elements = [&](std::size_t i) { return static_cast<const T*>(source[i]); };
  auto input_bytes = [&](std::size_t i) { return static_cast<const std::uint8_t*>(in_ptr[i]); };
  bytes.assign(ni, nullptr);
  // A row broadcast whose period divides kBlock (a bias of 128 floats) has its row filled once,
  // like a scalar's (copied per block, it cost as much as a one-op chain's arithmetic).
  for (std::size_t i = 0; i < ni; ++i)
    if (prog.inputs[i].is_scalar) {
      const T value = prog.inputs[i].is_bool ? (input_bytes(i)[0] != 0 ? T{1} : T{0}) : input_elements(i)[0];
      fill_row(row(i), std::min(kBlock, total), value);
    } else if (prog.inputs[i].same_every_block) {
      periodic_row(input_elements(i), static_cast<std::size_t>(prog.inputs[i].period), 0, row(i), std::min(kBlock, total));
    }
  for (std::size_t i = ni; i < nv; ++i) v[i] = row(i);

  for (std::size_t start = b0 * kBlock; start < std::min(total, b1 * kBlock); start += kBlock) {
    const std::size_t n = std::min(kBlock, total - start);
    for (std::size_t i = 0; i < ni; ++i) {
      const auto& input = prog.inputs[i];
      if (input.is_scalar || input.same_every_block) {
        v[i] = row(i);
      } else if (input.period > 0) {
        if (input.repeat == 1)
          periodic_row(input_elements(i), static_cast<std::size_t>(input.period), start, row(i), n);
        else
          stretched_row(input_elements(i), static_cast<std::size_t>(input.period), static_cast<std::size_t>(input.repeat),
                        start, row(i), n);
        v[i] = row(i);
      } else if (input.read_as_bytes) {
        bytes[i] = input_bytes(i) + start;
      } else if (input.is_bool) {
        from_bool_bytes(input_bytes(i) + start, row(i), n);
        v[i] = row(i);
      } else if (narrow) {
        convert_narrow(prog.storage, prog.compute, static_cast<const char*>(in_ptr[i]) + start * itemsize(prog.storage),
                       row(i), n);
        v[i] = row(i);
      } else {
        v[i] = const_cast<T*>(input_elements(i) + start);  // written only when donated
      }
    }
    for (std::size_t value = ni; value < nv; ++value)
      if (is_direct(value)) v[value] = static_cast<T*>(out_ptr[static_cast<std::size_t>(direct[value])]) + start;
    for (const auto& op : prog.ops) run_op<T>(op, v, bytes, n);
    for (std::size_t k = 0; k < prog.outputs.size(); ++k) {
      const auto value = static_cast<std::size_t>(prog.outputs[k].value);
      if (shares[k] || (is_direct(value) && direct[value] == static_cast<std::int64_t>(k))) continue;
      const T* src = v[value];
      if (prog.outputs[k].is_bool) {
        to_bool_bytes(src, static_cast<std::uint8_t*>(out_ptr[k]) + start, n);
      } else if (narrow) {
        convert_narrow(prog.compute, prog.storage, src, static_cast<char*>(out_ptr[k]) + start * itemsize(prog.storage), n);
      } else {
        std::memcpy(static_cast<T*>(out_ptr[k]) + start, src, n * sizeof(T));
      }
    }
  }
}

// Runs the program block by block on its inputs' elements (in_ptr[i]) into its outputs'
// (out_ptr[k]). prog.direct[value] >= 0: the value is a float output computed by an op, written
// straight into that output's memory (which may be a donated input's: in place). shares[k]: output
// k renames an input whose buffer it shares, so nothing is copied into it. The blocks are split
// among the kernel threads in chunks of at least kParallelElements elements (each block's elements depend on
// that block's inputs only, so any split gives the same bits; an output in place of an input is
// written block by block after the block read it).
//
// A narrow program (storage bf16 / f16, T = float) reads its dense inputs widened into their rows
// a block at a time, its scalar and broadcast inputs widened once, computes every op in rows (no
// direct outputs) and rounds each float output once as it stores the block. An output may then
// lie on an input's memory (in place) whatever reads that input: the block's reads of it are
// from its widened row, taken before anything is stored.
template <class T>
void run_blocks(const FusedProgram& prog, const void* const* in_ptr, void* const* out_ptr, Scratch<T>& scratch) {
  auto& [widened, source, donated, shares] = scratch;
  const std::size_t ni = prog.inputs.size();
  const auto total = static_cast<std::size_t>(prog.size);
  if (total == 0) return;
  source.assign(in_ptr, in_ptr + ni);
  if (prog.storage != prog.compute) {  // scalars and broadcast sources widened once (a bias row, a column of statistics)
    // the elements of input i widened here: a scalar's one, a broadcast source's period, else none
    auto widened_length = [&](const FusedProgram::Input& input) -> std::size_t {
      if (input.is_bool) return 0;
      return input.is_scalar ? 1 : static_cast<std::size_t>(input.period);
    };
    std::size_t count = 0;
    for (const auto& input : prog.inputs) count += widened_length(input);
    widened.resize(count);
    for (std::size_t i = 0, at = 0; i < ni; ++i) {
      const std::size_t n = widened_length(prog.inputs[i]);
      if (n == 0) continue;
      convert_narrow(prog.storage, prog.compute, in_ptr[i], widened.data() + at, n);
      source[i] = widened.data() + at;
      at += n;
    }
  }
  const std::size_t blocks = (total + kBlock - 1) / kBlock;
  parallel_for(static_cast<std::int64_t>(blocks), std::max<std::int64_t>(1, parallel_elements(static_cast<std::int64_t>(total)) / static_cast<std::int64_t>(kBlock)),
               [&](std::int64_t b0, std::int64_t b1) {
                 run_block_range<T>(prog, in_ptr, out_ptr, scratch, static_cast<std::size_t>(b0), static_cast<std::size_t>(b1));
               }, ChunkCalls::no_blas);
}

template <class T> void run_typed(const FusedProgram& prog, std::span<const Array> in, std::vector<Array>& outs) {
  const ShapedArray float_aval{prog.shape, prog.storage};
  const ShapedArray bool_aval{prog.shape, DType::bool_};
  const std::size_t ni = prog.inputs.size();
  Scratch<T> own;  // only while the thread is ending (its scratch is gone)
  Scratch<T>* mine = PerThread<Scratch<T>>::get();
  Scratch<T>& scratch = mine ? *mine : own;
  auto& donated = scratch.donated;
  auto& shares = scratch.shares;
  // An output that only renames a whole input shares the input's buffer, as the unfused kernel
  // does; the others are computed.
  shares.assign(prog.outputs.size(), 0);
  for (std::size_t k = 0; k < prog.outputs.size(); ++k) shares[k] = renamed_input(prog, k) >= 0;
  // A float output computed by an op is written straight into its output array (no copy out).
  // That array is a float input's own buffer when the plan handed the input over (its last use,
  // no other owner) and no later op reads the input: the chain then works in place, as an
  // epilogue of the step that made the input (a GEMM's output becomes its relu's).
  outs.clear();
  outs.resize(prog.outputs.size());
  auto usable = [&](std::size_t i) { return in[i].aval() == float_aval && uniquely_owned(in[i]); };
  for_each_in_place_output(prog, donated, usable, [&](std::size_t i, std::size_t k) { outs[k] = in[i]; });
  for (std::size_t k = 0; k < prog.outputs.size(); ++k) {
    const auto& o = prog.outputs[k];
    if (outs[k].valid()) continue;
    outs[k] = shares[k] ? share_buffer(in[static_cast<std::size_t>(o.value)], o.is_bool ? bool_aval : float_aval)
                        : alloc_array(o.is_bool ? bool_aval : float_aval);
  }
  const void* in_ptrs[kMaxPointers];
  void* out_ptrs[kMaxPointers];
  std::vector<const void*> many_in;
  std::vector<void*> many_out;
  const void** ip = in_ptrs;
  void** op = out_ptrs;
  if (ni > kMaxPointers) ip = (many_in.resize(ni), many_in.data());
  if (outs.size() > kMaxPointers) op = (many_out.resize(outs.size()), many_out.data());
  for (std::size_t i = 0; i < ni; ++i) ip[i] = elements_of(in[i]);
  for (std::size_t k = 0; k < outs.size(); ++k) op[k] = elements_of(outs[k]);
  run_blocks<T>(prog, ip, op, scratch);
}

// The program into caller memory: every output computed or copied (none shares an input's
// memory, though a raw plan may have placed an output on an input's: in_place_outputs), except
// an output that only renames an input, given a null pointer.
template <class T> void run_into(const void* ctx, const void* const* in, void* const* out) {
  const auto& prog = *static_cast<const FusedProgram*>(ctx);
  if (prog.size == 0) return;  // nothing to write (and empty outputs have no address)
  Scratch<T> own;
  Scratch<T>* mine = PerThread<Scratch<T>>::get();
  Scratch<T>& scratch = mine ? *mine : own;
  // A null output only renames an input (a raw plan reads the input in its place): not written.
  scratch.shares.assign(prog.outputs.size(), 0);
  for (std::size_t k = 0; k < prog.outputs.size(); ++k)
    if (out[k] == nullptr) {
      if (renamed_input(prog, k) < 0) throw Error("fused_into: a null pointer for computed output " + std::to_string(k));
      scratch.shares[k] = 1;
    }
  run_blocks<T>(prog, in, out, scratch);
}

/// Throws xj::Error (naming `who`) unless finish_program completed prog.
void check_finished(const FusedProgram& prog, const char* who) {
  if (prog.direct.size() != static_cast<std::size_t>(prog.num_values) || prog.row_of.size() != static_cast<std::size_t>(prog.num_values))
    throw Error(std::string(who) + ": a FusedProgram run before finish_program");
}

}  // namespace

void run_fused(const FusedProgram& prog, std::span<const Array> in, std::vector<Array>& outs) {
  if (in.size() != prog.inputs.size())
    throw Error("run_fused: " + std::to_string(in.size()) + " inputs for a program of " +
                std::to_string(prog.inputs.size()));
  check_finished(prog, "run_fused");
  if (prog.compute == DType::f32) return run_typed<float>(prog, in, outs);
  if (prog.compute == DType::f64) return run_typed<double>(prog, in, outs);
  throw Error(std::string("run_fused: compute dtype must be f32 or f64, got ") + dtype_name(prog.compute));
}

IntoKernel fused_into(std::shared_ptr<const FusedProgram> prog) {
  check_finished(*prog, "fused_into");
  IntoKernel k;
  if (prog->compute == DType::f32) k.fn = run_into<float>;
  else if (prog->compute == DType::f64) k.fn = run_into<double>;
  else return k;
  k.ctx = std::move(prog);
  return k;
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE

// promotion.cpp: JAX's type promotion lattice (jax/_src/dtypes.py, x64 enabled), read from its
// documentation and written as a graph: each node lists the nodes directly above it, and the
// promotion of a and b is the least node above both. The weak nodes i* and f* are the types of
// C++ numbers mixed with arrays (JAX's weakly typed Python scalars).
#include <algorithm>
#include <array>
#include <bitset>
#include <optional>
#include <span>
#include <vector>

#include "xjax/errors.hpp"
#include "xjax/ops.hpp"
#include "internal.hpp"
#include "per_thread.hpp"

namespace xjax {
namespace {

enum Node : std::uint8_t { b1, u8n, u16n, u32n, u64n, wi, i8n, i16n, i32n, i64n, wf, bf16n, f16n, f32n, f64n, kNodes };

// Edges of the lattice (JAX's _type_promotion_lattice without complex types).
constexpr std::array<std::initializer_list<Node>, kNodes> kAbove = {{
    {wi},          // b1
    {i16n, u16n},  // u8
    {i32n, u32n},  // u16
    {i64n, u64n},  // u32
    {wf},          // u64
    {u8n, i8n},    // i* (a C++ integer)
    {i16n},        // i8
    {i32n},        // i16
    {i64n},        // i32
    {wf},          // i64
    {bf16n, f16n}, // f* (a C++ floating-point number)
    {f32n},        // bf16
    {f32n},        // f16
    {f64n},        // f32
    {},            // f64
}};

using Set = std::bitset<kNodes>;

// The nodes at or above n.
Set upper(Node n) {
  Set s;
  s.set(n);
  for (Node m : kAbove[n]) s |= upper(m);
  return s;
}

Node node_of(DType d) {
  switch (d) {
    case DType::f32: return f32n;
    case DType::f64: return f64n;
    case DType::i32: return i32n;
    case DType::i64: return i64n;
    case DType::u32: return u32n;
    case DType::bool_: return b1;
    case DType::bf16: return bf16n;
    case DType::f16: return f16n;
    case DType::i8: return i8n;
    case DType::u8: return u8n;
    case DType::i16: return i16n;
    case DType::u16: return u16n;
    case DType::u64: return u64n;
  }
  throw Error("promote_types: unknown dtype");
}

// The least node above a and b: the one among their common upper bounds that all others are above.
Node join(Node a, Node b) {
  const Set common = upper(a) & upper(b);
  for (std::size_t n = 0; n < kNodes; ++n)
    if (common.test(n) && (upper(static_cast<Node>(n)) & common) == common) return static_cast<Node>(n);
  throw Error("promote_types: the lattice has no least upper bound (a bug in promotion.cpp)");
}

DType dtype_at(Node n, DType a, DType b) {
  switch (n) {
    case f32n: return f32;
    case f64n: return f64;
    case i32n: return i32;
    case i64n: return i64;
    case u32n: return u32;
    case b1: return bool_;
    case bf16n: return bf16;
    case f16n: return f16;
    case i8n: return i8;
    case u8n: return u8;
    case i16n: return i16;
    case u16n: return u16;
    case u64n: return u64;
    case wi: return i32;  // only weak operands: xjax's default integer
    case wf: return f32;  // and default float
    case kNodes: break;
  }
  throw Error(std::string("promote_types(") + dtype_name(a) + ", " + dtype_name(b) + "): no dtype at the join " +
              "(a bug in promotion.cpp)");
}

thread_local PromotionMode t_mode XJAX_INITIAL_EXEC_TLS = PromotionMode::standard;

// Strong operands whose join is the weak float f* (u64 with a signed integer): JAX gives its
// canonical float, f64 with x64 enabled.
DType strong_at(Node n, DType a, DType b) { return n == wf ? f64 : dtype_at(n, a, b); }

// The signed integer dtype at least as wide as a weak integer operand's, as the join i* is
// signed (JAX's Python int): a weak u32 widens it to i64, a weak u64 too (promote_types(i32, u64)
// is f64, which turned `weak u64 & bools` into an error; the first review).
DType signed_width(DType d) {
  if (d == DType::u32 || d == DType::u64) return i64;
  if (d == DType::u8 || d == DType::u16) return i32;
  return d;
}

// The join is a weak node: no strong operand fixes the width, so the result takes xjax's default
// (i32 for i*, f32 for f*) widened to the weak operands' own dtypes of that kind. A C++ number
// written in an expression has the default's width; a traced one (jit's weak i64 or f64) keeps
// its own, as JAX with x64 (its defaults are i64 and f64): jit(n + bools)(3e9) had wrapped at i32.
DType widened_default(Node n, std::span<const detail::TypeOperand> operands) {
  const bool integer = n == wi;
  DType d = integer ? i32 : f32;
  for (const auto& o : operands)
    if (o.weak && o.integer == integer) d = promote_types(d, integer ? signed_width(o.dtype) : o.dtype);
  return d;
}

}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  return strong_at(join(node_of(a), node_of(b)), a, b);
}

PromotionMode promotion_mode() { return t_mode; }
DtypePromotion::DtypePromotion(PromotionMode mode) : previous_(t_mode) { t_mode = mode; }
DtypePromotion::~DtypePromotion() { t_mode = previous_; }

namespace detail {

DType weak_result(DType array_dtype, bool integer) {
  if (is_floating(array_dtype)) return array_dtype;
  if (!integer) return dtype_at(join(node_of(array_dtype), wf), array_dtype, array_dtype);
  return dtype_at(join(node_of(array_dtype), wi), array_dtype, array_dtype);
}

DType promote_types_of(std::span<const DType> dtypes) {
  if (dtypes.empty()) throw TypeError("promote_types: no dtypes");
  Node n = node_of(dtypes.front());
  for (DType d : dtypes.subspan(1)) n = join(n, node_of(d));
  return strong_at(n, dtypes.front(), dtypes.back());
}

Promotion promotion_of(std::span<const TypeOperand> operands) {
  if (operands.empty()) throw TypeError("result_type: no operands");
  // Only weak operands: their own dtypes join, as an operation on them promotes (a weak f64 array
  // stays f64; C++ numbers alone give xjax's default integer and float, i32 and f32).
  if (std::all_of(operands.begin(), operands.end(), [](const TypeOperand& o) { return o.weak; })) {
    std::vector<DType> dtypes;
    for (const auto& o : operands) dtypes.push_back(o.dtype);
    return {promote_types_of(dtypes), true};
  }
  Node n = operands[0].weak ? (operands[0].integer ? wi : wf) : node_of(operands[0].dtype);
  for (const auto& o : operands.subspan(1)) n = join(n, o.weak ? (o.integer ? wi : wf) : node_of(o.dtype));
  std::optional<Node> strong;  // the strong operands' join, which the result is weak above
  DType some_strong = f32;     // (for promote_types' message only)
  for (const auto& o : operands) {
    if (o.weak) continue;
    strong = strong ? join(*strong, node_of(o.dtype)) : node_of(o.dtype);
    some_strong = o.dtype;
  }
  const DType strong_dtype = strong_at(*strong, some_strong, some_strong);
  DType t = dtype_at(n, operands[0].dtype, operands.back().dtype);
  // The strong operands alone joining at f* (u64 with a signed integer) give f64, as promote_types.
  if (n == wf && strong == wf) t = f64;
  else if (n == wi || n == wf) t = widened_default(n, operands);
  return {t, t != strong_dtype};
}

DType result_type_of(std::span<const TypeOperand> operands) { return promotion_of(operands).dtype; }

}  // namespace detail
}  // namespace xjax

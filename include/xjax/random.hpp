// random.hpp: counter-based pseudo-random numbers (JAX's jax.random with the Threefry-2x32 PRNG).
//
// A key is a u32[2] array. Nothing is stateful: every function is a pure function of its key,
// built from primitives (the threefry2x32 block cipher applied to iota counters, then integer and
// float arithmetic), so it is traceable. The same key gives bit-identical numbers eagerly, in a
// jaxpr evaluated later, under grad/vjp, and when a checkpointed body is recomputed in the
// backward pass (a dropout mask drawn from a key passed in is redrawn identically). Derive new
// keys with split / fold_in; never reuse a key for two different draws.
//
// Constructions (JAX's with jax_threefry_partitionable=False; bit-identical for key, split,
// fold_in, bits and f32/f64 uniform):
// - bits(key, shape), n = size: counters 0..n-1 (plus one 0 when n is odd) are split into two
//   halves which are hashed pairwise, (c[i], c[i + n/2]) -> (y0[i], y1[i]); the result is
//   y0 ++ y1 (truncated to n) in row-major order.
// - split(key, n) = reshape(bits(key, [2n]), [n, 2]); fold_in(key, d) = threefry(key, (0, d)).
// - uniform f32: the top 23 bits of a word (w / 2^9) as the mantissa of a float in [1, 2), minus
//   1, i.e. (w / 2^9) * 2^-23 in [0, 1); f64: 52 bits from two words (hi * 2^-32 +
//   (lo / 2^12) * 2^-52). Then u * (maxval - minval) + minval, clamped below at minval.
// - normal: Box-Muller on pairs of uniforms (not JAX's erf-inverse, so the values differ from
//   JAX's): u1 = 1 - uniform in (0, 1], u2 = uniform, r = sqrt(-2 log u1),
//   z = [r cos(2 pi u2), r sin(2 pi u2)] (the cos half then the sin half, truncated to size).
//   Its tails are cut at |z| <= sqrt(2 * 23 ln 2) ~ 5.65 for f32 (~ 8.5 for f64).
// - bernoulli(key, p, shape) = uniform(key, shape, dtype of p) < p.
#pragma once
#include <cstdint>

#include "xjax/array.hpp"
#include "xjax/ops.hpp"

namespace xjax::random {

/// A PRNG key from a seed: u32[2] = (seed >> 32, seed & 0xffffffff), as jax.random.PRNGKey.
Array key(std::uint64_t seed);
/// n new keys derived from `key`: u32[n, 2].
Array split(const Array& key, std::int64_t n = 2, XJAX_LOC);
/// A new key from `key` and an integer: u32[2].
Array fold_in(const Array& key, std::uint32_t data, XJAX_LOC);
/// As above with a rank-0 integer (any width) or bool array (may be traced, e.g. a scan's layer
/// index); taken as u32 as JAX's jnp.uint32(data) (wider ones keep their low 32 bits).
Array fold_in(const Array& key, const Array& data, XJAX_LOC);
/// Uniformly random u32 words of the given shape.
Array bits(const Array& key, const Shape& shape = {}, XJAX_LOC);
/// Uniform in [minval, maxval) of a float dtype (f32, f64, bf16, f16: the last two mapped in f32
/// and rounded once); minval and maxval finite in the dtype (else an xj::Error).
Array uniform(const Array& key, const Shape& shape = {}, DType dtype = f32, double minval = 0.0,
              double maxval = 1.0, XJAX_LOC);
/// Standard normal of a float dtype (f32 or f64).
Array normal(const Array& key, const Shape& shape = {}, DType dtype = f32, XJAX_LOC);
/// bool array, true with probability p.
Array bernoulli(const Array& key, double p = 0.5, const Shape& shape = {}, XJAX_LOC);
/// bool array, true with probability p (a float array broadcast to `shape`, may be traced).
Array bernoulli(const Array& key, const Array& p, const Shape& shape, XJAX_LOC);

}  // namespace xjax::random

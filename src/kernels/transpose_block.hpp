// transpose_block.hpp: a block of a strided matrix transposed, dst[c * dst_stride + r] =
// src[r * src_stride + c], in 8x8 (4-byte) or 4x4 (8-byte) tiles held in registers where the set
// has AVX (unpack, shuffle, swap of 128-bit halves), the edges element by element. Only moves
// bits (loads, shuffles, stores; the edges by memcpy): any 4- or 8-byte type (int32, int64...) goes
// through as float / double.
// Included by the vectorized files (compiled once per kernel set, kernel_sets.hpp).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "kernels/kernel_sets.hpp"

namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE {

#if defined(__AVX__)
#if defined(__GNUC__)
#define XJAX_TILE_INLINE inline __attribute__((always_inline))
#else
#define XJAX_TILE_INLINE inline
#endif
/// One 8x8 tile of floats: d[c * ds + r] = s[r * ss + c]. The loops over the tile's rows are
/// unrolled, so the tile stays in registers.
XJAX_TILE_INLINE void transpose_tile(const float* s, std::int64_t ss, float* d, std::int64_t ds) {
  __m256 r[8], t[8], u[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + i * ss);
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 8
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(d + i * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(d + (i + 4) * ds, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}
/// One 4x4 tile of doubles, as above.
XJAX_TILE_INLINE void transpose_tile(const double* s, std::int64_t ss, double* d, std::int64_t ds) {
  __m256d r[4], t[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) r[i] = _mm256_loadu_pd(s + i * ss);
#pragma GCC unroll 4
  for (int i = 0; i < 4; i += 2) {
    t[i] = _mm256_unpacklo_pd(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_pd(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    _mm256_storeu_pd(d + i * ds, _mm256_permute2f128_pd(t[i], t[i + 2], 0x20));
    _mm256_storeu_pd(d + (i + 2) * ds, _mm256_permute2f128_pd(t[i], t[i + 2], 0x31));
  }
}
#undef XJAX_TILE_INLINE
#endif

/// Transposes rows x cols of src (row stride src_stride) into dst (row stride dst_stride):
/// whole tiles in registers (a band of tile rows at a time, its tiles left to right), then the
/// edges element by element.
template <class T>
void transpose_block(const T* src, std::int64_t src_stride, T* dst, std::int64_t dst_stride, std::int64_t rows,
                     std::int64_t cols) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  std::int64_t whole_rows = 0;  // rows done in tiles
#if defined(__AVX__)
  constexpr std::int64_t tile = sizeof(T) == 4 ? 8 : 4;
  whole_rows = rows - rows % tile;
  const std::int64_t whole_cols = cols - cols % tile;
  for (std::int64_t r0 = 0; r0 < whole_rows; r0 += tile) {
    const T* band = src + r0 * src_stride;
    for (std::int64_t c0 = 0; c0 < whole_cols; c0 += tile) transpose_tile(band + c0, src_stride, dst + c0 * dst_stride + r0, dst_stride);
  }
  if (whole_cols < cols)  // the whole-tile rows' remaining columns
    for (std::int64_t r = 0; r < whole_rows; ++r)
      for (std::int64_t c = whole_cols; c < cols; ++c)
        std::memcpy(dst + c * dst_stride + r, src + r * src_stride + c, sizeof(T));
#endif
  for (std::int64_t r = whole_rows; r < rows; ++r)  // the remaining rows
    for (std::int64_t c = 0; c < cols; ++c) std::memcpy(dst + c * dst_stride + r, src + r * src_stride + c, sizeof(T));
}

}  // namespace xjax::detail::kernels::XJAX_KERNEL_SET_NAMESPACE

// random.cpp: the threefry2x32 kernel, the Threefry-2x32 block cipher with 20 rounds
// (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", SC 2011), as in
// the Random123 reference and JAX's threefry2x32 primitive.
//
// The 2x32 variant keeps two 32-bit words. The key (k0, k1) is extended with a parity word
// k2 = C ^ k0 ^ k1 (C = 0x1BD11BDA, the Skein key-schedule constant). The words start as
// counter + key; each round is a MIX (x0 += x1; x1 = rotl(x1, r) ^ x0) with the rotation
// amounts cycling through 13 15 26 6 | 17 29 16 24; after every group of four rounds (five
// groups, the last one included) the key schedule is injected: for group s = 1..5,
// x0 += ks[s mod 3], x1 += ks[(s+1) mod 3] + s.
#include <cstdint>

#include "kernels/kernels.hpp"

namespace xjax::detail::kernels {

namespace {

constexpr std::uint32_t kParity = 0x1BD11BDAu;
constexpr int kRotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};

constexpr std::uint32_t rotl32(std::uint32_t v, int r) {
  return static_cast<std::uint32_t>((v << r) | (v >> (32 - r)));
}

struct Pair {
  std::uint32_t a, b;
};

// One 20-round Threefry-2x32 block: key (k0, k1), counter (c0, c1).
constexpr Pair threefry20(std::uint32_t k0, std::uint32_t k1, std::uint32_t c0, std::uint32_t c1) {
  const std::uint32_t ks[3] = {k0, k1, static_cast<std::uint32_t>(kParity ^ k0 ^ k1)};
  std::uint32_t x0 = c0 + ks[0];
  std::uint32_t x1 = c1 + ks[1];
  for (int group = 1; group <= 5; ++group) {
    // Groups alternate between the first and second half of the rotation table.
    const int* rot = kRotations + ((group - 1) % 2) * 4;
    for (int r = 0; r < 4; ++r) {
      x0 += x1;
      x1 = rotl32(x1, rot[r]);
      x1 ^= x0;
    }
    x0 += ks[group % 3];
    x1 += ks[(group + 1) % 3] + static_cast<std::uint32_t>(group);
  }
  return {x0, x1};
}

// Random123's known answers for threefry2x32_20 (counter, key -> output).
static_assert(threefry20(0, 0, 0, 0).a == 0x6b200159u && threefry20(0, 0, 0, 0).b == 0x99ba4efeu);
static_assert(threefry20(0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u).a == 0xc4923a9cu &&
              threefry20(0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u).b == 0x483df7a0u);

}  // namespace

// Key j (of key.size() / 2) hashes the j-th run of pairs / keys consecutive counter pairs.
Array threefry2x32_kernel(const Array& key, const Array& counters, const ShapedArray& out) {
  Array result = alloc_array(out);
  const std::uint32_t* k = in_ptr<std::uint32_t>(key);
  const std::uint32_t* c = in_ptr<std::uint32_t>(counters);
  std::uint32_t* o = out_ptr<std::uint32_t>(result);
  const std::int64_t pairs = out.size() / 2, keys = key.size() / 2;
  if (keys == 0) return result;
  const std::int64_t per_key = pairs / keys;
  for (std::int64_t j = 0; j < keys; ++j) {
    const std::uint32_t k0 = k[2 * j], k1 = k[2 * j + 1];
    for (std::int64_t i = j * per_key; i < (j + 1) * per_key; ++i) {
      const Pair y = threefry20(k0, k1, c[2 * i], c[2 * i + 1]);
      o[2 * i] = y.a;
      o[2 * i + 1] = y.b;
    }
  }
  return result;
}

}  // namespace xjax::detail::kernels

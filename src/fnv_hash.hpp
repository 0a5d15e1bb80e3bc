// fnv_hash.hpp: FNV-1a over 64-bit words (not installed), the one hash of plan fingerprints,
// memo keys and collective call signatures. Not cryptographic: every user compares the full
// key (or the processes' maxima and minima) after the hash agrees.
#pragma once
#include <cstdint>

namespace xjax::detail {

class Fnv1a {
 public:
  void add(std::uint64_t v) { h_ = (h_ ^ v) * 1099511628211ull; }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 1469598103934665603ull;
};

}  // namespace xjax::detail

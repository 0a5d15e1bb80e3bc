// oracles.hpp: the checks run on each random program (see docs/testing.md).
#pragma once
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>

namespace fuzz {

struct Stats {
  long programs = 0;
  long checks = 0;
  long failures = 0;
  long expected_errors = 0;   // documented TransformErrors (reverse mode of while, jvp of custom_vjp)
  long fd_skipped = 0;        // finite differences skipped: a kink or branch point too close
  std::map<std::string, long> coverage;  // op / wrapper variant -> programs containing it
  std::map<std::string, long> oracles;   // oracle -> checks run
};

struct Options {
  bool verbose = false;
};

/// Generates the program of `seed`, runs every oracle on it in f64 and f32, prints each failure
/// (seed, program, jaxpr, discrepancy) to `out`, and returns whether all checks passed.
bool check_program(std::uint64_t seed, Stats& stats, const Options& opts, std::ostream& out);

/// The seed and oracle being checked, for the crash handler.
const char* current_activity();

}  // namespace fuzz

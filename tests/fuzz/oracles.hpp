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
  std::map<std::string, long> primitives;  // primitive -> programs whose jaxprs (f, grad, linearize) hold it
};

/// The primitives no generated program reaches, each with the reason (tested elsewhere).
const std::map<std::string, std::string>& primitives_not_fuzzed();
/// Prints the primitives of XJAX_PRIMITIVE_TABLE that no program of the run reached and that
/// primitives_not_fuzzed() does not excuse; returns how many.
int report_unfuzzed_primitives(const Stats& stats, std::ostream& out);

struct Options {
  bool verbose = false;
  bool primitives = false;  // record which primitives the programs' jaxprs hold
};

/// Generates the program of `seed`, runs every oracle on it in f64 and f32, prints each failure
/// (seed, program, jaxpr, discrepancy) to `out`, and returns whether all checks passed.
bool check_program(std::uint64_t seed, Stats& stats, const Options& opts, std::ostream& out);

/// The seed and oracle being checked, for the crash handler.
const char* current_activity();

}  // namespace fuzz

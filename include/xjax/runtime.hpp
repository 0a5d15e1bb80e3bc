// runtime.hpp: what the runtime lets a user observe: buffer memory and primitive executions.
// All counters are atomic: safe to read and reset from any thread.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace xjax {

struct MemoryStats {
  std::int64_t live_bytes = 0;   // bytes of array buffers alive now
  std::int64_t peak_bytes = 0;   // most live bytes since the last reset_peak_memory()
  std::int64_t allocations = 0;  // buffers allocated since the process started
};

MemoryStats memory_stats();
/// Sets the peak to the current live bytes.
void reset_peak_memory();

/// Executions per primitive name since the last reset_eval_counts() (primitives never run are absent).
std::map<std::string, std::int64_t> eval_counts();
void reset_eval_counts();

}  // namespace xjax

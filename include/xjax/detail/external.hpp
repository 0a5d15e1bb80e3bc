// detail/external.hpp: concrete arrays over memory xjax does not own (the zero-copy path of
// <xjax/xtensor.hpp>; usable by any other interop layer).
#pragma once
#include <memory>

#include "xjax/array.hpp"

namespace xjax::detail {

/// A concrete array whose elements are the `aval.nbytes()` bytes at `data`, row-major, without a
/// copy. `data` must be aligned for the dtype's element type (ints and floats; bools one byte each,
/// 0 or 1); 64-byte alignment is not needed (kernels load unaligned). xjax never writes, frees or
/// pools this memory, and it is not xjax's allocation: memory_stats() does not count it (neither
/// live bytes nor allocations). `keep_alive` is held by the array's buffer (shared by every array
/// that views it) and released with the last one; when it is null the caller guarantees that
/// `data` stays valid and unchanged as long as any array, jitted function or trace cache uses it.
/// Throws xj::Error for null data of a non-empty array or a misaligned pointer.
Array external_array(const void* data, const ShapedArray& aval, std::shared_ptr<const void> keep_alive);

}  // namespace xjax::detail

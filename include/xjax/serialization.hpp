// serialization.hpp: arrays and parameter trees in files. safetensors (the Hugging Face format: an
// 8-byte little-endian header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the raw little-endian data) for trees, keyed by each leaf's dotted key path
// (`layers.W1`, `blocks[3].attn.q`); NumPy's .npy for single arrays. Writes are atomic (a
// temporary file in the same directory, renamed over the target only once complete), so a
// failure mid-write leaves any old file intact. Bad input is an xj::Error naming the file and the
// problem, never a partial load.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "xjax/pytree.hpp"

namespace xjax {

/// Writes named arrays as a safetensors file (names must be unique and non-empty).
void save_safetensors_named(const std::string& path, const std::vector<std::pair<std::string, Array>>& tensors);
/// Every tensor of a safetensors file, by name (a file written by xjax or elsewhere).
std::map<std::string, Array> load_safetensors(const std::string& path);

/// Writes a tree's leaves as a safetensors file, each under its dotted key path.
template <class T> void save_safetensors(const std::string& path, const T& tree) {
  auto [leaves, def] = tree_flatten_with_path(tree);
  std::vector<std::pair<std::string, Array>> named;
  named.reserve(leaves.size());
  for (auto& [key, leaf] : leaves) named.emplace_back(dotted_path(key), std::move(leaf));
  save_safetensors_named(path, named);
}

namespace detail {
/// The leaves of a tree of structure `def` (key paths `paths`, avals of `like`) from a file's
/// tensors: each must be there, with the leaf's shape and dtype (an Error names the key).
std::vector<Array> leaves_from_tensors(const std::string& path, std::map<std::string, Array> tensors,
                                       const std::vector<std::pair<KeyPath, Array>>& like);
}  // namespace detail

/// A tree of `like`'s structure, shapes and dtypes read from a safetensors file (extra tensors
/// in the file are ignored; a missing or mismatched one is an Error naming its key).
template <class T> T load_safetensors(const std::string& path, const T& like) {
  auto [leaves, def] = tree_flatten_with_path(like);
  return tree_unflatten<T>(def, detail::leaves_from_tensors(path, load_safetensors(path), leaves));
}

/// One array as a NumPy .npy file (format 1.0, little-endian, C order).
void save_npy(const std::string& path, const Array& a);
/// An array from a .npy file (format 1.0-3.0; little-endian or single-byte dtypes xjax has, C order).
Array load_npy(const std::string& path);

}  // namespace xjax

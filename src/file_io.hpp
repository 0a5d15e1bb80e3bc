// file_io.hpp: the file access of serialization (not installed): an atomic writer and a checked
// reader, both naming the file in every error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xjax/array.hpp"

namespace xjax::detail {

/// The shape of `dims` after checking that every dimension and the product of the nonzero ones,
/// times `itemsize`, fit in int64 (so no size computed from it overflows); else an Error naming
/// the file and `what`.
Shape checked_shape(const std::string& path, const std::string& what, const std::vector<std::uint64_t>& dims,
                    std::size_t itemsize);
/// Throws an Error "path: what" (a file's content rejected: the readers' errors name the file).
[[noreturn]] void file_error(const std::string& path, const std::string& what);
/// An Error naming the file and `what` when a bool array read from it holds a byte other than 0 or 1.
void check_bool_bytes(const std::string& path, const std::string& what, const Array& a);

/// An Error "path: what: ..." when `a` cannot be read to be saved (it was donated to a jit call),
/// before anything is written.
void check_savable(const std::string& path, const std::string& what, const Array& a);

/// Writes a file atomically: into a temporary file beside `path`, renamed over it by commit()
/// after the data reached the disk (fsync). Destroyed without commit() (an error mid-write), it
/// removes the temporary file, and whatever was at `path` stays as it was.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, std::size_t n);
  void commit();

 private:
  std::string path_;    // as the caller named it (in messages)
  std::string target_;  // the file replaced: path_, or where a symbolic link path_ leads
  std::string temp_;
  int fd_ = -1;
  bool direct_ = false;  // a character device or named pipe (/dev/null, a FIFO): written as it is
};

/// A file opened for reading, its size known; read_at throws naming the file when it ends early.
class InputFile {
 public:
  explicit InputFile(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void read_at(std::uint64_t offset, void* dst, std::size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace xjax::detail

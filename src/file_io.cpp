// file_io.cpp: AtomicFile and InputFile on POSIX file descriptors.
#include "file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "internal.hpp"
#include "xjax/errors.hpp"

namespace xjax::detail {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(path + ": " + what + (errno ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
}

}  // namespace

Shape checked_shape(const std::string& path, const std::string& what, const std::vector<std::uint64_t>& dims,
                    std::size_t itemsize) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t bytes = itemsize;
  Shape shape;
  for (std::uint64_t d : dims) {
    if (d > kMax || (d != 0 && bytes > kMax / d)) {
      errno = 0;
      fail(path, what + ": the shape's size exceeds 2^63 bytes");
    }
    if (d != 0) bytes *= d;
    shape.push_back(static_cast<std::int64_t>(d));
  }
  return shape;
}

void file_error(const std::string& path, const std::string& what) { throw Error(path + ": " + what); }

void check_bool_bytes(const std::string& path, const std::string& what, const Array& a) {
  const auto* p = static_cast<const unsigned char*>(a.raw_data());
  for (std::int64_t i = 0; i < a.size(); ++i)
    if (p[i] > 1) {
      errno = 0;
      fail(path, what + ": bool element " + std::to_string(i) + " is the byte " + std::to_string(p[i]) + " (not 0 or 1)");
    }
}

void check_savable(const std::string& path, const std::string& what, const Array& a) {
  try {
    check_not_donated(a, "saved");
  } catch (const Error& e) {
    file_error(path, what + ": " + e.what());
  }
}

// A symbolic link is written through (a latest.npy -> ckpt_100.npy layout keeps its link, as
// np.save's open() does; the rename replaced the link itself), and an existing file the caller may
// not write is refused (rename ignores the file's own permissions).
namespace {
// The temporary file beside `target`: its name with ".tmp.XXXXXX" appended, the name shortened
// where that would pass NAME_MAX (a valid 249-byte name could not be saved; a hunt of the
// thirty-sixth session).
constexpr std::size_t kNameMax = 255;  // NAME_MAX of Linux's file systems
// The length of a path's last component.
std::size_t name_length(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path.size() : path.size() - slash - 1;
}
std::string temporary_beside(const std::string& target) {
  constexpr std::size_t kSuffix = 11;  // ".tmp.XXXXXX"
  std::string stem = target;
  if (name_length(target) + kSuffix > kNameMax) stem.resize(target.size() - name_length(target) + kNameMax - kSuffix);
  return stem + ".tmp.XXXXXX";
}

std::string file_written_through(const std::string& path) {
  struct stat link {};
  if (::lstat(path.c_str(), &link) != 0 || !S_ISLNK(link.st_mode)) return path;
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (!resolved) return path;  // a dangling link: replaced, as before
  std::string target = resolved;
  std::free(resolved);
  return target;
}
}  // namespace

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), target_(file_written_through(path_)), temp_(temporary_beside(target_)) {
  errno = 0;
  if (path_.empty()) throw Error("cannot write a file of an empty name");
  // (a name past NAME_MAX: refused before the data is written, not at the rename)
  if (name_length(target_) > kNameMax) {
    errno = ENAMETOOLONG;
    fail(path_, "cannot create it");
  }
  if (::access(target_.c_str(), F_OK) == 0 && ::access(target_.c_str(), W_OK) != 0) fail(path_, "the file is not writable");
  // Only a regular file is replaced: a character device or a named pipe is written through, as
  // np.save's open() does (the rename replaced /dev/null with a regular file, as root); anything
  // else (a directory, a block device, a socket) is refused.
  struct stat existing {};
  if (::stat(target_.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode)) {
    if (!S_ISCHR(existing.st_mode) && !S_ISFIFO(existing.st_mode)) fail(path_, "not a regular file");
    errno = 0;
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail(path_, "cannot open it to write");
    direct_ = true;
    temp_.clear();
    return;
  }
  std::vector<char> name(temp_.begin(), temp_.end());
  name.push_back('\0');
  errno = 0;
  fd_ = ::mkstemp(name.data());
  if (fd_ < 0) fail(path_, "cannot create a temporary file beside it to write");
  temp_ = name.data();
  // The mode the file would get from open(): the replaced file's, else 0666 less the umask
  // (mkstemp makes it 0600).
  struct stat old {};
  mode_t mode;
  if (::stat(target_.c_str(), &old) == 0) {
    mode = old.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  ::fchmod(fd_, mode);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    errno = 0;
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(path_, "writing failed");
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void AtomicFile::commit() {
  errno = 0;
  if (direct_) {  // nothing to rename or sync (fsync of /dev/null fails with EINVAL)
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(path_, "writing failed (close)");
    return;
  }
  if (::fsync(fd_) != 0) fail(path_, "writing failed (fsync)");
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail(path_, "writing failed (close)");
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail(path_, "cannot replace it with the written file " + temp_);
  temp_.clear();
  // The rename reaches the disk with its directory's entry.
  const std::string dir = target_.find('/') == std::string::npos ? "." : target_.substr(0, target_.rfind('/') + 1);
  if (const int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    (void)::fsync(d);
    ::close(d);
  }
}

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  errno = 0;
  // O_NONBLOCK: opening a named pipe would wait for a writer before the regular-file check below
  // (review finding: a load of a FIFO hung); cleared again for the reads.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) fail(path_, "cannot open it");
  // A throwing constructor runs no destructor: the descriptor is closed here before each error
  // (review finding: every refused directory leaked one).
  const auto close_and_fail = [this](const char* what, bool keep_errno) {
    const int saved = errno;
    ::close(fd_);
    fd_ = -1;
    errno = keep_errno ? saved : 0;
    fail(path_, what);
  };
  struct stat st {};
  if (::fstat(fd_, &st) != 0) close_and_fail("cannot read its size", true);
  if (!S_ISREG(st.st_mode)) close_and_fail("not a regular file", false);
  if (const int flags = ::fcntl(fd_, F_GETFL); flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0)
    close_and_fail("cannot set it to blocking reads", true);
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(std::uint64_t offset, void* dst, std::size_t n) const {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    errno = 0;
    const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(path_, "reading failed");
    if (r == 0) {
      errno = 0;
      fail(path_, "truncated: it ends at byte " + std::to_string(offset) + ", " + std::to_string(n) + " bytes early");
    }
    p += r;
    n -= static_cast<std::size_t>(r);
    offset += static_cast<std::uint64_t>(r);
  }
}

}  // namespace xjax::detail

#pragma once
// Following a configuration file without a signal. Kubernetes updates a
// ConfigMap mounted as a directory by writing a new "..2026_…" directory and
// swapping the "..data" symlink to it: the file's path stays, the file behind
// it changes (a subPath mount never changes at all). The watch notices a new
// target, inode, size or mtime, then reads the file and reports a change
// only when its bytes differ from the last ones it reported, so a rejected
// file is reported once, not at every look. Tested in tests/unit/file_watch_test.cpp.

#include <cstdint>
#include <optional>
#include <string>

namespace scg::config {

/// What tells one version of a file from another without reading it.
struct file_signature {
  std::string target;  ///< the path with every symlink resolved
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t mtime_ns = 0;
  bool operator==(const file_signature& o) const {
    return target == o.target && device == o.device && inode == o.inode && size == o.size &&
           mtime_ns == o.mtime_ns;
  }
  bool operator!=(const file_signature& o) const { return !(*this == o); }
};

/// The signature of `path` now; nullopt when it does not resolve or stat.
std::optional<file_signature> signature_of(const std::string& path);

class file_watch {
 public:
  /// Watches `path`, taking its current bytes as seen (the file just loaded).
  explicit file_watch(std::string path);

  /// True when the file's bytes differ from the last ones seen (the
  /// constructor, rebase or a previous true). A file that is missing or
  /// unreadable for a moment (a swap in progress) is not a change.
  bool changed();

  /// Takes the current bytes as seen (after a SIGHUP reload).
  void rebase();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::optional<file_signature> sig_;
  std::size_t content_hash_ = 0;
  bool have_content_ = false;
};

}  // namespace scg::config

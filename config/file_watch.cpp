#include "config/file_watch.hpp"

#include <sys/stat.h>

#include <cstdlib>
#include <functional>
#include <memory>

#include "core/file.hpp"

namespace scg::config {

std::optional<file_signature> signature_of(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
  if (!real) return std::nullopt;
  struct stat st {};
  if (::stat(real.get(), &st) != 0) return std::nullopt;
  file_signature s;
  s.target = real.get();
  s.device = static_cast<std::uint64_t>(st.st_dev);
  s.inode = static_cast<std::uint64_t>(st.st_ino);
  s.size = static_cast<std::uint64_t>(st.st_size);
  s.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return s;
}

file_watch::file_watch(std::string path) : path_(std::move(path)) { rebase(); }

void file_watch::rebase() {
  sig_ = signature_of(path_);
  std::string why;
  auto bytes = core::read_file(path_, why);
  have_content_ = bytes.has_value();
  content_hash_ = bytes ? std::hash<std::string>{}(*bytes) : 0;
}

bool file_watch::changed() {
  auto sig = signature_of(path_);
  if (!sig || sig == sig_) return false;
  std::string why;
  auto bytes = core::read_file(path_, why);
  if (!bytes) return false;  // the next look tries again (sig_ unchanged)
  sig_ = std::move(sig);
  const auto hash = std::hash<std::string>{}(*bytes);
  if (have_content_ && hash == content_hash_) return false;
  have_content_ = true;
  content_hash_ = hash;
  return true;
}

}  // namespace scg::config

#include "core/file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace scg::core {

std::optional<std::string> read_file(const std::string& path, std::string& why, std::size_t max_bytes) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) {
    why = "cannot open \"" + path + "\": " + std::strerror(errno);
    return std::nullopt;
  }
  std::string text;
  char buf[8192];
  std::size_t n;
  while (text.size() < max_bytes && (n = std::fread(buf, 1, sizeof buf, f.get())) > 0) text.append(buf, n);
  if (std::ferror(f.get())) {
    why = "cannot read \"" + path + "\": " + std::strerror(errno);
    return std::nullopt;
  }
  return text;
}

}  // namespace scg::core

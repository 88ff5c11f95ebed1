#include "net/artifact_spool.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/protowire.hpp"
#include "net/net_stats.hpp"

namespace scg::net {

namespace fs = std::filesystem;
namespace pw = core::protowire;

namespace {

constexpr std::string_view dir_prefix = "scg-spool-";
constexpr std::uint32_t max_spooled_message = 1u << 30;

/// Removes the spools of scg processes that are gone (a crash leaves its spool behind).
void remove_dead_spools(const fs::path& parent) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const auto name = entry.path().filename().string();
    if (name.rfind(dir_prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + dir_prefix.size(), &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    fs::remove_all(entry.path(), ec);
  }
}

bool write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const auto w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

/// 1 read, 0 at the end of the file, -1 on an error or a short read.
int read_all(int fd, char* p, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const auto r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return got == 0 ? 0 : -1;
    got += static_cast<std::size_t>(r);
  }
  return 1;
}

}  // namespace

// --- the spool ---------------------------------------------------------------------

std::shared_ptr<artifact_spool> artifact_spool::open(const std::string& parent, spool_limits limits,
                                                     std::string& error) {
  fs::path base = parent;
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp && *tmp ? tmp : "/tmp";
  }
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) {
    error = "cannot create the spool's directory " + base.string() + ": " + ec.message();
    return nullptr;
  }
  remove_dead_spools(base);
  const auto dir = base / (std::string(dir_prefix) + std::to_string(::getpid()));
  fs::remove_all(dir, ec);  // a pid reused after a crash
  if (::mkdir(dir.c_str(), 0700) != 0) {
    error = "cannot create the spool " + dir.string() + ": " + std::strerror(errno);
    return nullptr;
  }
  return std::shared_ptr<artifact_spool>(new artifact_spool(dir.string(), limits));
}

artifact_spool::~artifact_spool() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::size_t artifact_spool::bytes() const {
  std::lock_guard lock{mu_};
  return bytes_;
}

std::size_t artifact_spool::session_bytes(const std::string& key) const {
  std::lock_guard lock{mu_};
  auto it = sessions_.find(key);
  return it == sessions_.end() ? 0 : it->second;
}

unreplayable artifact_spool::reserve(const std::string& key, std::size_t n) {
  std::lock_guard lock{mu_};
  auto& mine = sessions_[key];
  if (mine + n > limits_.max_session_bytes) {
    if (mine == 0) sessions_.erase(key);
    return unreplayable::artifacts_too_large;
  }
  if (bytes_ + n > limits_.max_total_bytes) {
    if (mine == 0) sessions_.erase(key);
    return unreplayable::spool_full;
  }
  mine += n;
  bytes_ += n;
  global_net_stats().spool_bytes.store(bytes_, std::memory_order_relaxed);
  return unreplayable::none;
}

void artifact_spool::release(const std::string& key, std::size_t n) {
  if (n == 0) return;
  std::lock_guard lock{mu_};
  bytes_ -= n;
  global_net_stats().spool_bytes.store(bytes_, std::memory_order_relaxed);
  auto it = sessions_.find(key);
  if (it == sessions_.end()) return;
  it->second -= n;
  if (it->second == 0) sessions_.erase(it);
}

std::string artifact_spool::next_path() {
  std::lock_guard lock{mu_};
  return dir_ + "/" + std::to_string(++files_);
}

// --- one call's file ------------------------------------------------------------------

spooled_call::spooled_call(std::shared_ptr<artifact_spool> spool, std::string key, std::string path,
                           std::size_t bytes)
    : spool_(std::move(spool)), key_(std::move(key)), path_(std::move(path)), bytes_(bytes) {}

spooled_call::~spooled_call() {
  ::unlink(path_.c_str());
  spool_->release(key_, bytes_);
}

artifact_spool::writer::writer(std::shared_ptr<artifact_spool> spool, std::string key)
    : spool_(std::move(spool)), key_(std::move(key)), path_(spool_->next_path()) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd_ < 0) failed_ = unreplayable::spool_failed;
}

artifact_spool::writer::~writer() { fail(unreplayable::spool_failed); }

void artifact_spool::writer::fail(unreplayable why) {
  if (failed_ == unreplayable::none) failed_ = why;
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!path_.empty()) {
    ::unlink(path_.c_str());
    path_.clear();
  }
  spool_->release(key_, bytes_);
  bytes_ = 0;
}

void artifact_spool::writer::append(std::string_view message) {
  if (failed_ != unreplayable::none) return;
  const auto n = message.size() + 4;
  if (auto why = spool_->reserve(key_, n); why != unreplayable::none) return fail(why);
  bytes_ += n;
  const auto len = static_cast<std::uint32_t>(message.size());
  const char prefix[4] = {static_cast<char>(len >> 24), static_cast<char>(len >> 16), static_cast<char>(len >> 8),
                          static_cast<char>(len)};
  if (!write_all(fd_, prefix, 4) || !write_all(fd_, message.data(), message.size()))
    fail(unreplayable::spool_failed);
}

std::shared_ptr<const spooled_call> artifact_spool::writer::commit() {
  if (failed_ != unreplayable::none) return nullptr;
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail(unreplayable::spool_failed);
    return nullptr;
  }
  fd_ = -1;
  auto out = std::make_shared<const spooled_call>(spool_, key_, std::move(path_), bytes_);
  path_.clear();
  bytes_ = 0;
  failed_ = unreplayable::none;
  return out;
}

// --- reading back -------------------------------------------------------------------

artifact_spool::reader::reader(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) error_ = "cannot open " + path + ": " + std::strerror(errno);
}

artifact_spool::reader::~reader() {
  if (fd_ >= 0) ::close(fd_);
}

bool artifact_spool::reader::next(std::string& out) {
  if (fd_ < 0) return false;
  unsigned char prefix[4];
  const int got = read_all(fd_, reinterpret_cast<char*>(prefix), 4);
  if (got <= 0) {
    if (got < 0) error_ = "a spooled message is cut short";
    return false;
  }
  const std::uint32_t len = (std::uint32_t{prefix[0]} << 24) | (std::uint32_t{prefix[1]} << 16) |
                            (std::uint32_t{prefix[2]} << 8) | prefix[3];
  if (len > max_spooled_message) {  // not a length scg wrote (its messages are bounded by limits.max_message_bytes)
    error_ = "a spooled message claims " + std::to_string(len) + " bytes";
    return false;
  }
  out.resize(len);
  if (len > 0 && read_all(fd_, out.data(), len) != 1) {
    error_ = "a spooled message is cut short";
    return false;
  }
  return true;
}

// --- reading the messages ---------------------------------------------------------------

std::string artifact_form(const segments& body) { return journal_form(body, 6); }

std::vector<std::string> artifact_names(std::string_view message) {
  std::vector<std::string> out;
  auto name_in = [](std::string_view m) {
    pw::field f;
    while (pw::next(m, f))
      if (f.number == 1 && f.type == 2) return std::string(f.payload);
    return std::string();
  };
  pw::field f;
  while (pw::next(message, f)) {
    if (f.type != 2) continue;
    if (f.number == 3) {  // batch: repeated SingleChunkArtifact artifacts = 1
      auto batch = f.payload;
      pw::field a;
      while (pw::next(batch, a))
        if (a.number == 1 && a.type == 2) out.push_back(name_in(a.payload));
    } else if (f.number == 4) {  // begin_chunk: BeginChunkedArtifact, its name = 1
      out.push_back(name_in(f.payload));
    }
  }
  return out;
}

}  // namespace scg::net

#pragma once
// The artifacts of replayable sessions (on_backend_lost.action: replay,
// docs/replay.md), on disk. An AddArtifacts call's request messages are
// written as they pass to a file of their own; the file joins the session's
// journal when the call succeeds and is deleted when the journal lets go of
// it (the session released, the artifact added again, the session
// unreplayable) or when the call fails. A replay sends the files' messages
// again, first of all.
//
// Bounds: bytes per session (max_artifacts_mib) and in all (max_spool_mib),
// counted as messages are written, so the spool never exceeds its cap.
// The directory is this process's own (<spool_dir>/scg-spool-<pid>), removed
// at exit; a directory left by a process that died is removed at start.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "net/session_journal.hpp"
#include "net/wire.hpp"

namespace scg::net {

struct spool_limits {
  std::size_t max_session_bytes = std::size_t{256} << 20;
  std::size_t max_total_bytes = std::size_t{2048} << 20;
};

class artifact_spool;

/// One call's messages on disk, as [4-byte big-endian length][body] records.
/// The file is deleted with the last reference.
class spooled_call {
 public:
  spooled_call(std::shared_ptr<artifact_spool> spool, std::string key, std::string path, std::size_t bytes);
  ~spooled_call();
  spooled_call(const spooled_call&) = delete;
  spooled_call& operator=(const spooled_call&) = delete;
  const std::string& path() const { return path_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<artifact_spool> spool_;
  std::string key_, path_;
  std::size_t bytes_;
};

class artifact_spool : public std::enable_shared_from_this<artifact_spool> {
 public:
  /// A spool in a directory of its own under `parent` ("" : $TMPDIR or
  /// /tmp); nullptr with `error` set when it cannot be made.
  static std::shared_ptr<artifact_spool> open(const std::string& parent, spool_limits limits, std::string& error);
  ~artifact_spool();

  /// One AddArtifacts call being written.
  class writer {
   public:
    writer(std::shared_ptr<artifact_spool> spool, std::string key);
    ~writer();  // not committed: its file goes
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;
    /// Writes one request message (its artifact_form). Once a bound is
    /// reached or the disk fails, the writer stops and `failed()` says why.
    void append(std::string_view message);
    unreplayable failed() const { return failed_; }
    /// The call succeeded: its file, or nullptr when it failed.
    std::shared_ptr<const spooled_call> commit();
    /// Stops it: its file goes, and the session is unreplayable for `why`.
    void fail(unreplayable why);

   private:
    std::shared_ptr<artifact_spool> spool_;
    std::string key_, path_;
    int fd_ = -1;
    std::size_t bytes_ = 0;
    unreplayable failed_ = unreplayable::none;
  };
  std::unique_ptr<writer> start(const std::string& key) { return std::make_unique<writer>(shared_from_this(), key); }

  const std::string& dir() const { return dir_; }
  std::size_t bytes() const;
  std::size_t session_bytes(const std::string& key) const;

  /// Reads a spooled call's messages back, one at a time.
  class reader {
   public:
    explicit reader(const std::string& path);
    ~reader();
    reader(const reader&) = delete;
    reader& operator=(const reader&) = delete;
    /// The next message into `out`: false at the end or on an error (`error()` then says which).
    bool next(std::string& out);
    const std::string& error() const { return error_; }

   private:
    int fd_ = -1;
    std::string error_;
  };

 private:
  artifact_spool(std::string dir, spool_limits limits) : dir_(std::move(dir)), limits_(limits) {}
  friend class spooled_call;
  /// Counts `n` more bytes of `key`: none, or the bound it would pass.
  unreplayable reserve(const std::string& key, std::size_t n);
  void release(const std::string& key, std::size_t n);
  std::string next_path();

  const std::string dir_;
  const spool_limits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::size_t> sessions_;
  std::size_t bytes_ = 0;
  std::uint64_t files_ = 0;
};

/// An AddArtifacts request message as it is spooled: session_id,
/// user_context, its payload and client_type (fields 1–6), without the
/// client's observed server-side id.
std::string artifact_form(const segments& body);
/// The names an AddArtifacts request message (artifact_form) adds: its
/// batch's artifacts, or the one its begin_chunk starts (a chunk adds none).
std::vector<std::string> artifact_names(std::string_view message);

}  // namespace scg::net

#pragma once
// The emulator's sessions, operations and counters: plain data behind one mutex
// and no gRPC, so the cursor rules can be read (and tested) on their own.
// Header-only because the scg-fake-spark target compiles a fixed list of .cpp files.

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace scg::fake {

/// A Spark error class and its text; the gRPC layer sends INTERNAL "[class] text".
struct spark_error {
  std::string error_class;
  std::string text;
};
using maybe_error = std::optional<spark_error>;

inline spark_error invalid_handle(const std::string& reason, const std::string& id,
                                  const std::string& what) {
  return {"INVALID_HANDLE." + reason, "The handle " + id + " is invalid. " + what};
}

/// Spark keys a session by user and session id.
struct session_key {
  std::string user_id;
  std::string session_id;
  bool operator<(const session_key& other) const {
    return std::tie(user_id, session_id) < std::tie(other.user_id, other.session_id);
  }
};

/// An operation's result: `responses` arrow batches (of `rows_per_batch`
/// rows each), with `metrics` one response carrying the execution's metrics
/// as Spark sends them, then one result_complete.
struct result_shape {
  int64_t responses = 0;
  int64_t payload_bytes = 0;
  int64_t delay_ms = 0;    // pause between two responses of a stream
  int64_t stream_max = 0;  // responses per stream before a deliberate cut; 0 = never
  int64_t rows_per_batch = 1;
  bool metrics = false;
  int64_t total() const { return responses + (metrics ? 1 : 0) + 1; }
};

/// Response ids are "<op>:<index>" so that a reattach can be mapped back to an index.
inline std::string response_id(const std::string& op_id, int64_t index) {
  return op_id + ":" + std::to_string(index);
}

inline std::optional<int64_t> response_index(const std::string& op_id, const std::string& id) {
  const auto prefix = op_id.size() + 1;
  if (id.size() <= prefix || id.compare(0, op_id.size(), op_id) != 0 || id[op_id.size()] != ':')
    return std::nullopt;
  int64_t index = 0;
  const char* last = id.data() + id.size();
  auto [end, ec] = std::from_chars(id.data() + prefix, last, index);
  if (ec != std::errc() || end != last || index < 0) return std::nullopt;
  return index;
}

/// A random version-4 UUID, the id format Spark clients use.
inline std::string random_uuid() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const unsigned long long hi = (rng() & ~0xF000ULL) | 0x4000ULL;
  const unsigned long long lo = (rng() & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;
  char text[40];
  std::snprintf(text, sizeof text, "%08llx-%04llx-%04llx-%04llx-%012llx", hi >> 32,
                (hi >> 16) & 0xFFFF, hi & 0xFFFF, lo >> 48, lo & 0xFFFFFFFFFFFFULL);
  return text;
}

struct operation_state {
  std::vector<std::string> tags;
  result_shape shape;
  int64_t released_until = 0;  // the client released every response before this index
  bool complete = false;       // result_complete went out
  bool interrupted = false;
  uint64_t attached_stream = 0;  // the newest stream; older streams are detached
  const char* status() const {
    return interrupted ? "interrupted" : complete ? "finished" : "running";
  }
};

/// Where a new result stream starts.
struct stream_cursor {
  std::string op_id;
  int64_t first_index = 0;
  uint64_t stream = 0;
  result_shape shape;
};

/// One Spark session: its operations, uploaded artifact names and released-op tombstones.
struct session_state {
  std::string server_side_id;
  std::map<std::string, operation_state> ops;
  std::set<std::string> artifacts;
  std::deque<std::string> released;  // recent release_all ids, answered OPERATION_ABANDONED

  static constexpr size_t max_ops = 1024;
  static constexpr size_t max_released = 256;

  /// Registers a new operation and attaches its first stream at index 0.
  maybe_error start(const std::string& op_id, std::vector<std::string> tags,
                    const result_shape& shape, stream_cursor& out) {
    if (ops.count(op_id))
      return invalid_handle("OPERATION_ALREADY_EXISTS", op_id, "Operation already exists.");
    // Clients that never release (non-reattachable ones) would otherwise grow this forever.
    if (ops.size() >= max_ops) {
      for (auto it = ops.begin(); it != ops.end();)
        it = it->second.complete ? ops.erase(it) : std::next(it);
    }
    forget_released(op_id);
    auto& op = ops[op_id];
    op.tags = std::move(tags);
    op.shape = shape;
    op.attached_stream = 1;
    out = {op_id, 0, op.attached_stream, shape};
    return std::nullopt;
  }

  /// Positions a new stream after last_response_id, or at the first unreleased response,
  /// and detaches any older stream of the operation, as Spark does on reattach.
  maybe_error attach(const std::string& op_id, const std::optional<std::string>& last_response_id,
                     stream_cursor& out) {
    auto it = ops.find(op_id);
    if (it == ops.end()) {
      if (std::find(released.begin(), released.end(), op_id) != released.end())
        return invalid_handle("OPERATION_ABANDONED", op_id, "Operation was released.");
      return invalid_handle("OPERATION_NOT_FOUND", op_id, "Operation not found.");
    }
    auto& op = it->second;
    int64_t first = op.released_until;
    if (last_response_id) {
      auto index = response_index(op_id, *last_response_id);
      if (!index)
        return spark_error{"INVALID_CURSOR.POSITION_NOT_FOUND",
                           "The cursor position id " + *last_response_id + " is not found."};
      first = std::min(*index + 1, op.shape.total());
      if (first < op.released_until)
        return spark_error{"INVALID_CURSOR.POSITION_NOT_AVAILABLE",
                           "The cursor position id " + *last_response_id + " has been released."};
    }
    out = {op_id, first, ++op.attached_stream, op.shape};
    return std::nullopt;
  }

  /// release_all forgets the operation; release_until drops responses up to the id.
  /// Unknown operations are fine: clients retry releases and send them asynchronously.
  void release(const std::string& op_id, bool all, const std::optional<std::string>& until) {
    auto it = ops.find(op_id);
    if (it == ops.end()) return;
    if (all) {
      ops.erase(it);
      released.push_back(op_id);
      if (released.size() > max_released) released.pop_front();
      return;
    }
    if (!until) return;
    if (auto index = response_index(op_id, *until))
      it->second.released_until = std::max(it->second.released_until, *index + 1);
  }

  /// Marks the matching, still running operations interrupted and returns their ids.
  std::vector<std::string> interrupt(
      const std::function<bool(const std::string&, const operation_state&)>& match) {
    std::vector<std::string> ids;
    for (auto& [id, op] : ops) {
      if (op.complete || op.interrupted || !match(id, op)) continue;
      op.interrupted = true;
      ids.push_back(id);
    }
    return ids;
  }

 private:
  void forget_released(const std::string& op_id) {
    auto it = std::find(released.begin(), released.end(), op_id);
    if (it != released.end()) released.erase(it);
  }
};

/// All sessions of the emulator plus the counters behind GET /fake/stats.
class fake_state {
 public:
  explicit fake_state(std::string name)
      : name_(std::move(name)), process_token_(random_uuid().substr(0, 8)) {}

  const std::string& name() const { return name_; }

  /// `--token`: every call must carry `authorization: Bearer TOKEN`, as
  /// Spark does with spark.connect.authenticate.token. Empty: no check.
  void set_required_token(std::string token) { required_token_ = std::move(token); }
  const std::string& required_token() const { return required_token_; }

  /// Runs fn on key's session under the lock, creating a missing session when `create`.
  /// A given `observed` id must equal the session's server-side id.
  maybe_error with_session(const session_key& key, const std::optional<std::string>& observed,
                           bool create, const std::function<maybe_error(session_state&)>& fn) {
    std::lock_guard lock(mu_);
    session_state* session = nullptr;
    if (auto error = resolve(key, observed, create, session)) return error;
    return fn(*session);
  }

  /// Creates session new_session_id for the same user (the source is created if missing).
  maybe_error clone_session(const session_key& key, const std::optional<std::string>& observed,
                            const std::string& new_session_id, std::string& server_side_id,
                            std::string& new_server_side_id) {
    std::lock_guard lock(mu_);
    session_state* source = nullptr;
    if (auto error = resolve(key, observed, true, source)) return error;
    server_side_id = source->server_side_id;
    session_key new_key{key.user_id, new_session_id};
    if (sessions_.count(new_key))
      return invalid_handle("SESSION_ALREADY_EXISTS", new_session_id, "Session already exists.");
    new_server_side_id = create_session(new_key).server_side_id;
    return std::nullopt;
  }

  /// Removes a session; returns its server-side id when it existed.
  std::optional<std::string> remove_session(const session_key& key) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(key);
    if (it == sessions_.end()) return std::nullopt;
    std::string id = std::move(it->second.server_side_id);
    sessions_.erase(it);
    return id;
  }

  /// Whether stream `stream` of the operation may send its next response.
  maybe_error check_stream(const session_key& key, const std::string& op_id, uint64_t stream) {
    std::lock_guard lock(mu_);
    const operation_state* op = find_op(key, op_id);
    if (!op) return invalid_handle("OPERATION_ABANDONED", op_id, "Operation was released.");
    if (op->interrupted) return spark_error{"OPERATION_CANCELED", "Operation has been canceled."};
    if (op->attached_stream != stream)
      return spark_error{"INVALID_CURSOR.DISCONNECTED",
                         "The cursor has been disconnected by the server."};
    return std::nullopt;
  }

  /// Notes that response `index` of the operation went out with `bytes` serialized bytes.
  void record_sent(const session_key& key, const std::string& op_id, int64_t index, size_t bytes) {
    std::lock_guard lock(mu_);
    ++responses_out_;
    bytes_out_ += bytes;
    operation_state* op = find_op(key, op_id);
    if (op && index + 1 == op->shape.total()) op->complete = true;
  }

  void count_rpc(const std::string& method) { bump(rpcs_, method); }
  void count_error(const std::string& error_class) { bump(errors_, error_class); }
  void count_stream_cut() {
    std::lock_guard lock(mu_);
    ++streams_cut_;
  }
  void count_stream_cancelled() {
    std::lock_guard lock(mu_);
    ++streams_cancelled_;
  }
  void count_bytes(size_t bytes) {
    std::lock_guard lock(mu_);
    bytes_out_ += bytes;
  }

  /// The counters as served by GET /fake/stats.
  nlohmann::json stats() const {
    std::lock_guard lock(mu_);
    size_t ops = 0;
    for (const auto& [key, session] : sessions_) ops += session.ops.size();
    return {{"backend", name_},
            {"rpcs", rpcs_},
            {"errors", errors_},
            {"sessions_live", sessions_.size()},
            {"sessions_created", sessions_created_},
            {"ops_live", ops},
            {"responses_out", responses_out_},
            {"bytes_out", bytes_out_},
            {"streams_cut", streams_cut_},
            {"streams_cancelled", streams_cancelled_}};
  }

 private:
  maybe_error resolve(const session_key& key, const std::optional<std::string>& observed,
                      bool create, session_state*& out) {
    auto it = sessions_.find(key);
    session_state* session = nullptr;
    if (it != sessions_.end()) {
      session = &it->second;
    } else if (create) {
      session = &create_session(key);
    } else {
      return invalid_handle("SESSION_NOT_FOUND", key.session_id, "Session not found.");
    }
    // Spark creates first and then compares: a restarted server answers SESSION_CHANGED.
    if (observed && *observed != session->server_side_id)
      return spark_error{"INVALID_HANDLE.SESSION_CHANGED",
                         "The existing Spark server driver instance has restarted."};
    out = session;
    return std::nullopt;
  }

  session_state& create_session(const session_key& key) {
    ++sessions_created_;
    auto& session = sessions_[key];
    // The process token makes ids differ after a restart, like a new Spark driver.
    session.server_side_id = name_ + "/" + process_token_ + "-" + std::to_string(sessions_created_);
    return session;
  }

  operation_state* find_op(const session_key& key, const std::string& op_id) {
    auto session = sessions_.find(key);
    if (session == sessions_.end()) return nullptr;
    auto op = session->second.ops.find(op_id);
    return op == session->second.ops.end() ? nullptr : &op->second;
  }

  void bump(std::map<std::string, uint64_t>& counters, const std::string& key) {
    std::lock_guard lock(mu_);
    ++counters[key];
  }

  const std::string name_;
  std::string required_token_;  // set once before serving
  const std::string process_token_;
  mutable std::mutex mu_;
  std::map<session_key, session_state> sessions_;
  std::map<std::string, uint64_t> rpcs_;
  std::map<std::string, uint64_t> errors_;
  uint64_t sessions_created_ = 0;
  uint64_t responses_out_ = 0;
  uint64_t bytes_out_ = 0;
  uint64_t streams_cut_ = 0;
  uint64_t streams_cancelled_ = 0;
};

}  // namespace scg::fake

#pragma once
// The emulator's sessions, operations and counters: plain data behind one mutex
// and no gRPC, so the cursor rules can be read (and tested) on their own.
// Header-only because the scg-fake-spark target compiles a fixed list of .cpp files.

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
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

/// A Spark error: its class, text, SQL state and message parameters. The gRPC
/// layer sends it as Spark does: INTERNAL "[class] text SQLSTATE: state".
struct spark_error {
  std::string error_class;
  std::string text;
  std::string sql_state;
  std::map<std::string, std::string> parameters;
};
using maybe_error = std::optional<spark_error>;

inline spark_error invalid_handle(const std::string& reason, const std::string& id,
                                  const std::string& what) {
  // Spark 4.3 gives the session errors the connection state 08003 (4.0: HY000 for all).
  const bool session = reason.rfind("SESSION_", 0) == 0;
  return {"INVALID_HANDLE." + reason, "The handle " + id + " is invalid. " + what,
          session ? "08003" : "HY000", {{"handle", id}}};
}

inline spark_error invalid_cursor(const std::string& reason, const std::string& text) {
  return {"INVALID_CURSOR." + reason, "The cursor is invalid. " + text, "HY109", {}};
}

/// Whether `id` passes java.util.UUID.fromString, which Spark uses to check
/// session and operation ids: at most 36 characters, five groups of hex digits
/// separated by dashes.
inline bool is_uuid(const std::string& id) {
  if (id.empty() || id.size() > 36) return false;
  int dashes = 0;
  bool group_empty = true;
  for (char c : id) {
    if (c == '-') {
      if (group_empty) return false;
      ++dashes;
      group_empty = true;
    } else if (std::isxdigit(static_cast<unsigned char>(c))) {
      group_empty = false;
    } else {
      return false;
    }
  }
  return dashes == 4 && !group_empty;
}

inline spark_error bad_format(const std::string& id) {
  return invalid_handle("FORMAT", id,
                        "Handle must be an UUID string of the format '00112233-4455-6677-8899-aabbccddeeff'");
}

/// Milliseconds of a steady clock, for the expiry of idle sessions and detached operations.
inline int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
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
  // Asked for with request_options.reattach_options: only such an execution is
  // cut (stream_max) and ends with result_complete, as in Spark.
  bool reattachable = true;
  int64_t total() const { return responses + (metrics ? 1 : 0) + (reattachable ? 1 : 0); }
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
  bool complete = false;       // the last response went out
  bool interrupted = false;
  uint64_t attached_stream = 0;  // the newest stream; older streams are detached
  bool streaming = false;        // a stream is attached and has not ended
  int64_t detached_ms = 0;       // when its last stream ended (steady ms)
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

/// How long the emulator keeps what clients left behind (Spark's
/// spark.connect.session.manager.defaultSessionTimeout and
/// spark.connect.execute.manager.detachedTimeout).
struct expiry {
  int64_t session_idle_ms = 60 * 60 * 1000;
  int64_t detached_op_ms = 5 * 60 * 1000;
};

/// One Spark session: its operations, uploaded artifact names and the
/// tombstones of operations that ended. As in Spark 4.3, the id of a released
/// or reaped operation cannot start a new one (OPERATION_ABANDONED); a
/// reattach to a released one answers OPERATION_NOT_FOUND, to a reaped one
/// OPERATION_ABANDONED.
struct session_state {
  std::string server_side_id;
  std::map<std::string, operation_state> ops;
  std::set<std::string> artifacts;
  std::map<std::string, std::string> conf;  // what Config set and unset leave
  std::deque<std::string> released;   // release_all ids
  std::deque<std::string> abandoned;  // reaped ids
  int64_t last_access_ms = 0;

  static constexpr size_t max_ops = 1024;
  static constexpr size_t max_tombstones = 256;

  /// Registers a new operation and attaches its first stream at index 0.
  maybe_error start(const std::string& op_id, std::vector<std::string> tags, result_shape shape,
                    stream_cursor& out) {
    if (!is_uuid(op_id)) return bad_format(op_id);
    if (ops.count(op_id))
      return invalid_handle("OPERATION_ALREADY_EXISTS", op_id, "Operation already exists.");
    if (listed(abandoned, op_id) || listed(released, op_id))
      return invalid_handle("OPERATION_ABANDONED", op_id, "Operation was abandoned.");
    // Clients that never release would otherwise grow this forever.
    if (ops.size() >= max_ops) {
      for (auto it = ops.begin(); it != ops.end();)
        it = it->second.complete && !it->second.streaming ? ops.erase(it) : std::next(it);
    }
    if (!shape.reattachable) shape.stream_max = 0;  // Spark cuts only reattachable streams
    auto& op = ops[op_id];
    op.tags = std::move(tags);
    op.shape = shape;
    op.attached_stream = 1;
    op.streaming = true;
    out = {op_id, 0, op.attached_stream, shape};
    return std::nullopt;
  }

  /// Positions a new stream after last_response_id, or at the first unreleased response,
  /// and detaches any older stream of the operation, as Spark does on reattach.
  maybe_error attach(const std::string& op_id, const std::optional<std::string>& last_response_id,
                     stream_cursor& out) {
    auto it = ops.find(op_id);
    if (it == ops.end()) {
      if (listed(abandoned, op_id)) return invalid_handle("OPERATION_ABANDONED", op_id, "Operation was abandoned.");
      return invalid_handle("OPERATION_NOT_FOUND", op_id, "Operation not found.");
    }
    auto& op = it->second;
    if (!op.shape.reattachable)
      return invalid_cursor("NOT_REATTACHABLE", "Operation " + op_id + " is not reattachable.");
    int64_t first = op.released_until;
    if (last_response_id) {
      auto index = response_index(op_id, *last_response_id);
      if (!index)
        return invalid_cursor("POSITION_NOT_FOUND",
                              "The cursor position id " + *last_response_id + " is not found.");
      first = std::min(*index + 1, op.shape.total());
      if (first < op.released_until)
        return invalid_cursor("POSITION_NOT_AVAILABLE",
                              "The cursor position id " + *last_response_id + " has been released.");
    }
    op.streaming = true;
    out = {op_id, first, ++op.attached_stream, op.shape};
    return std::nullopt;
  }

  /// A stream ended. A non-reattachable operation ends with it; a reattachable
  /// one waits, detached, for a reattach or a release.
  void stream_ended(const std::string& op_id, uint64_t stream, int64_t now_ms) {
    auto it = ops.find(op_id);
    if (it == ops.end() || it->second.attached_stream != stream) return;
    if (!it->second.shape.reattachable) {
      ops.erase(it);
      return;
    }
    it->second.streaming = false;
    it->second.detached_ms = now_ms;
  }

  /// release_all forgets the operation; release_until drops responses up to the id.
  /// Unknown operations are fine: clients retry releases and send them asynchronously.
  void release(const std::string& op_id, bool all, const std::optional<std::string>& until) {
    auto it = ops.find(op_id);
    if (it == ops.end()) return;
    if (all) {
      ops.erase(it);
      remember(released, op_id);
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

  /// Reaps operations detached for longer than the limit; a reattach then
  /// answers OPERATION_ABANDONED, as from Spark.
  void reap(int64_t now_ms, int64_t detached_limit_ms) {
    for (auto it = ops.begin(); it != ops.end();) {
      if (it->second.streaming || now_ms - it->second.detached_ms < detached_limit_ms) {
        ++it;
        continue;
      }
      remember(abandoned, it->first);
      it = ops.erase(it);
    }
  }

  bool busy() const {
    return std::any_of(ops.begin(), ops.end(), [](const auto& op) { return op.second.streaming; });
  }

 private:
  static bool listed(const std::deque<std::string>& ids, const std::string& op_id) {
    return std::find(ids.begin(), ids.end(), op_id) != ids.end();
  }
  static void remember(std::deque<std::string>& ids, const std::string& op_id) {
    ids.push_back(op_id);
    if (ids.size() > max_tombstones) ids.pop_front();
  }
};

/// All sessions of the emulator plus the counters behind GET /fake/stats.
class fake_state {
 public:
  explicit fake_state(std::string name, expiry limits = {})
      : name_(std::move(name)), limits_(limits) {}

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

  /// Creates session new_session_id for the same user from an existing source.
  maybe_error clone_session(const session_key& key, const std::optional<std::string>& observed,
                            const std::string& new_session_id, std::string& server_side_id,
                            std::string& new_server_side_id) {
    std::lock_guard lock(mu_);
    session_state* source = nullptr;
    if (auto error = resolve(key, observed, false, source)) return error;
    server_side_id = source->server_side_id;
    session_key new_key{key.user_id, new_session_id};
    auto clone_error = [&](const std::string& reason, const std::string& what) {
      return spark_error{"INVALID_CLONE_SESSION_REQUEST." + reason,
                         "Invalid session clone request. " + what, "42K04",
                         {{"targetSessionId", new_session_id}}};
    };
    if (!is_uuid(new_session_id))
      return clone_error("TARGET_SESSION_ID_FORMAT",
                         "Target session ID " + new_session_id + " must be an UUID string.");
    if (closed_.count(new_key))
      return clone_error("TARGET_SESSION_ID_ALREADY_CLOSED",
                         "Target session ID " + new_session_id + " was previously closed.");
    if (sessions_.count(new_key))
      return clone_error("TARGET_SESSION_ID_ALREADY_EXISTS",
                         "Target session ID " + new_session_id + " already exists.");
    new_server_side_id = create_session(new_key).server_side_id;
    return std::nullopt;
  }

  /// Closes a session; returns its server-side id when it existed. Unless the
  /// client allows a reconnect, the session id stays closed (Spark keeps a tombstone).
  std::optional<std::string> remove_session(const session_key& key, bool allow_reconnect) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(key);
    if (it == sessions_.end()) return std::nullopt;
    std::string id = std::move(it->second.server_side_id);
    close(it, allow_reconnect);
    return id;
  }

  /// Whether stream `stream` of the operation may send its next response.
  maybe_error check_stream(const session_key& key, const std::string& op_id, uint64_t stream) {
    std::lock_guard lock(mu_);
    // Spark ends the streams of a closed session as disconnected.
    if (closed_.count(key)) return invalid_cursor("DISCONNECTED", "The cursor has been disconnected by the server.");
    const operation_state* op = find_op(key, op_id);
    if (!op) return invalid_handle("OPERATION_ABANDONED", op_id, "Operation was abandoned.");
    if (op->interrupted) return spark_error{"OPERATION_CANCELED", "Operation has been canceled.", "HY008", {}};
    if (op->attached_stream != stream)
      return invalid_cursor("DISCONNECTED", "The cursor has been disconnected by the server.");
    return std::nullopt;
  }

  /// A result stream ended (sent all, failed, or cancelled).
  void stream_ended(const session_key& key, const std::string& op_id, uint64_t stream) {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(key);
    if (it != sessions_.end()) it->second.stream_ended(op_id, stream, steady_ms());
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
  nlohmann::json stats() {
    std::lock_guard lock(mu_);
    expire(steady_ms());
    size_t ops = 0;
    for (const auto& [key, session] : sessions_) ops += session.ops.size();
    return {{"backend", name_},
            {"rpcs", rpcs_},
            {"errors", errors_},
            {"sessions_live", sessions_.size()},
            {"sessions_created", sessions_created_},
            {"sessions_expired", sessions_expired_},
            {"ops_live", ops},
            {"responses_out", responses_out_},
            {"bytes_out", bytes_out_},
            {"streams_cut", streams_cut_},
            {"streams_cancelled", streams_cancelled_}};
  }

 private:
  maybe_error resolve(const session_key& key, const std::optional<std::string>& observed,
                      bool create, session_state*& out) {
    const int64_t now = steady_ms();
    expire(now);
    auto it = sessions_.find(key);
    session_state* session = nullptr;
    if (it != sessions_.end()) {
      session = &it->second;
    } else if (closed_.count(key)) {
      return invalid_handle("SESSION_CLOSED", key.session_id, "Session was closed.");
    } else if (!create) {
      return invalid_handle("SESSION_NOT_FOUND", key.session_id, "Session not found.");
    } else if (!is_uuid(key.session_id)) {
      return bad_format(key.session_id);
    } else {
      session = &create_session(key);
    }
    session->last_access_ms = now;
    // Spark creates first and then compares: a restarted server answers SESSION_CHANGED.
    if (observed && *observed != session->server_side_id)
      return invalid_handle("SESSION_CHANGED", key.session_id,
                            "The existing Spark server driver instance has restarted.");
    out = session;
    return std::nullopt;
  }

  session_state& create_session(const session_key& key) {
    ++sessions_created_;
    auto& session = sessions_[key];
    // A fresh UUID per session, as Spark makes: ids differ after a restart too.
    session.server_side_id = random_uuid();
    session.last_access_ms = steady_ms();
    return session;
  }

  void close(std::map<session_key, session_state>::iterator it, bool allow_reconnect) {
    if (!allow_reconnect) {
      closed_.insert(it->first);
      closed_order_.push_back(it->first);
      if (closed_order_.size() > max_closed) {  // Spark's tombstone cache is bounded too
        closed_.erase(closed_order_.front());
        closed_order_.pop_front();
      }
    }
    sessions_.erase(it);
  }

  /// Spark's maintenance: idle sessions are closed, detached operations reaped.
  /// Run on access, at most every 100 ms.
  void expire(int64_t now) {
    if (now - last_expiry_ms_ < 100) return;
    last_expiry_ms_ = now;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto next = std::next(it);
      if (!it->second.busy() && now - it->second.last_access_ms >= limits_.session_idle_ms) {
        ++sessions_expired_;
        close(it, false);
      } else {
        it->second.reap(now, limits_.detached_op_ms);
      }
      it = next;
    }
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

  static constexpr size_t max_closed = 10000;

  const std::string name_;
  const expiry limits_;
  std::string required_token_;  // set once before serving
  mutable std::mutex mu_;
  std::map<session_key, session_state> sessions_;
  std::set<session_key> closed_;         // tombstones of closed sessions
  std::deque<session_key> closed_order_;  // oldest first, to bound them
  std::map<std::string, uint64_t> rpcs_;
  std::map<std::string, uint64_t> errors_;
  uint64_t sessions_created_ = 0;
  uint64_t sessions_expired_ = 0;
  uint64_t responses_out_ = 0;
  uint64_t bytes_out_ = 0;
  uint64_t streams_cut_ = 0;
  uint64_t streams_cancelled_ = 0;
  int64_t last_expiry_ms_ = 0;
};

}  // namespace scg::fake

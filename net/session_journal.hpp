#pragma once
// Session journals, for on_backend_lost.action: replay (docs/replay.md).
// A journal is what a session did that changed its state on its Spark server.
// scg records it from the requests it already reads, so that when the server
// is lost, a new one can be given the same session (net/replayer.hpp does
// that). This file is pure: the classifier reads wire bytes, and the store
// keeps the entries.
//
//   classify_request  what a Config or ExecutePlan request means for its
//                     session's journal: it defines something, undoes
//                     something, makes the session unreplayable, or none of these
//   session_journal   one session's entries in order; a later definition of
//                     a name replaces the earlier one
//   journal_store     every session's journal on this replica, bounded, and
//                     the id translation of a session that was replayed

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "net/wire.hpp"

namespace scg::net {

/// Why a session cannot be replayed. The first reason found stays.
enum class unreplayable : std::uint8_t {
  none,
  checkpoint,   ///< localCheckpoint/checkpoint: a CachedRemoteRelation lives only on its server
  ml_model,     ///< an ML command: models live in the server's cache
  streaming,    ///< a streaming query was started
  global_view,  ///< a global temp view (shared by every session of its server)
  sql_script,   ///< a SQL script (BEGIN … END): its statements are not read
  too_large,    ///< the journal outgrew on_backend_lost.max_journal_kib
  store_full,   ///< this replica's journals reached on_backend_lost.max_journal_total_mib
  artifacts_too_large,  ///< its spooled artifacts outgrew on_backend_lost.max_artifacts_mib
  spool_full,           ///< the spool reached on_backend_lost.max_spool_mib
  spool_failed,         ///< the spool could not be written (net/artifact_spool.hpp)
};
inline constexpr std::size_t unreplayable_count = 11;
/// snake_case name of `u` (a metric label, the admin listing's reason).
std::string_view unreplayable_name(unreplayable u);
/// What `u` means, for an error a client reads.
std::string_view unreplayable_text(unreplayable u);

/// What one request means for its session's journal.
struct journal_verdict {
  enum class kind : std::uint8_t {
    none,          ///< nothing the session keeps (a query, a get)
    record,        ///< defines `names`: journaled when it succeeds
    forget,        ///< undoes `names` (one ending in ':' undoes every name with that prefix)
    unreplayable,  ///< the session cannot be replayed from now on, for `why`
  };
  kind what = kind::none;
  std::vector<std::string> names;
  unreplayable why = unreplayable::none;
  /// A failed replay of it is reported, not fatal (USE of a database the
  /// new server's catalog does not have).
  bool optional = false;
};

/// What a Config or ExecutePlan request (uncompressed body `body`) means for
/// its session; any other rpc means nothing. Never fails: bytes it cannot
/// read mean `none`.
journal_verdict classify_request(rpc kind, const segments& body);
/// What one SQL statement (spark.sql's text) means for its session.
journal_verdict classify_sql(std::string_view sql);

/// The request as it is journaled and replayed: session_id 1, user_context 2,
/// plan or operation 3 and client_type 4 (both requests number them alike);
/// no operation id, options, tags or observed server-side id. (Its
/// length-delimited fields 1 to `last_field`.)
std::string journal_form(const segments& body, std::uint32_t last_field = 4);

class spooled_call;
class artifact_spool;

struct journal_entry {
  rpc kind = rpc::unknown;
  std::vector<std::string> names;
  std::string request;  ///< journal_form; empty for AddArtifacts, whose messages are spooled
  bool optional = false;
  std::shared_ptr<const spooled_call> spooled;  ///< AddArtifacts: its messages on disk
};

/// One session's journal.
class session_journal {
 public:
  /// A request that succeeded, with its verdict (its request in journal_form
  /// for `record`). Entries that defined only names `v` defines again are
  /// dropped: the new one comes last.
  void apply(const journal_verdict& v, rpc kind, std::string request,
             std::shared_ptr<const spooled_call> spooled = nullptr);
  const std::vector<journal_entry>& entries() const { return entries_; }
  std::size_t bytes() const { return bytes_; }
  unreplayable why_not() const { return why_; }
  /// Marks it unreplayable (the first reason stays) and frees its entries.
  void refuse(unreplayable why);

 private:
  void drop_names(const std::vector<std::string>& names);
  std::vector<journal_entry> entries_;
  std::size_t bytes_ = 0;
  unreplayable why_ = unreplayable::none;
};

/// The server-side session ids of a replayed session: the one its client
/// first observed, and the one its current server gave it.
struct session_ids {
  std::string client;
  std::string server;
  std::uint32_t backend = 0;  ///< the backend (index) that gave `server`
};

/// What a replay starts from.
struct journal_snapshot {
  std::vector<journal_entry> entries;
  unreplayable why = unreplayable::none;
  std::optional<session_ids> ids;  ///< set when the session was replayed before
};

struct journal_limits {
  std::size_t max_session_bytes = std::size_t{1} << 20;
  std::size_t max_total_bytes = std::size_t{256} << 20;
};

/// Every session's journal on this replica, shared by the workers (one
/// mutex; a call touches it only for a request it journals, and a session
/// that was never replayed costs a lookup of one atomic).
class journal_store {
 public:
  /// `spool` keeps the sessions' artifacts (nullptr: it could not be made,
  /// and a session that adds artifacts is unreplayable).
  journal_store(journal_limits limits, std::shared_ptr<artifact_spool> spool)
      : limits_(limits), spool_(std::move(spool)) {}
  const std::shared_ptr<artifact_spool>& spool() const { return spool_; }

  /// A request of session `key` succeeded with verdict `v`.
  void record(const std::string& key, const journal_verdict& v, rpc kind, std::string request,
              std::shared_ptr<const spooled_call> spooled = nullptr);
  /// An ExecutePlan of session `key` that would be recorded (`v`, its
  /// `request`) ended without OK as operation `op`: its stream may have
  /// broken, and the client then reattaches. It waits for complete(op); the
  /// oldest waiting go past `max_deferred`.
  void defer(const std::string& op, const std::string& key, journal_verdict v, rpc kind, std::string request);
  /// A ReattachExecute of operation `op` of session `key` ended OK: what the
  /// ExecutePlan deferred is recorded.
  void complete(const std::string& op, const std::string& key);
  static constexpr std::size_t max_deferred = 1024;

  /// The session was released: its journal goes.
  void forget(const std::string& key);
  /// Drops the journals of sessions `bound` says are gone (not while one is
  /// replayed); returns how many. `bound` is called without the lock held.
  std::size_t sweep(const std::function<bool(const std::string& key)>& bound);
  journal_snapshot snapshot(const std::string& key) const;
  /// A replay gave the session `ids`.
  void set_ids(const std::string& key, session_ids ids);
  /// The ids of a replayed session, or nullopt (at once, when no session was).
  std::optional<session_ids> ids(const std::string& key) const;
  /// Starts a replay of `key` unless one is under way: true for the caller
  /// that runs it; otherwise false, and `waiter` is called when it ends.
  bool begin_replay(const std::string& key, std::function<void()> waiter);
  /// The replay of `key` ended: its waiters are called (outside the lock).
  void end_replay(const std::string& key);
  /// Why the session cannot be replayed (none: it can, or it has no journal).
  unreplayable why_not(const std::string& key) const;

  std::size_t bytes() const;
  std::size_t sessions() const;
  /// Sessions unreplayable for each reason (indexed by the enum).
  std::vector<std::size_t> unreplayable_sessions() const;

 private:
  void publish() const;  // the gauges, under mu_
  struct session {
    session_journal journal;
    std::optional<session_ids> ids;
  };
  const journal_limits limits_;
  const std::shared_ptr<artifact_spool> spool_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, session> sessions_;
  std::unordered_map<std::string, std::vector<std::function<void()>>> replaying_;
  struct deferred {
    std::string key;
    journal_verdict verdict;
    rpc kind;
    std::string request;
  };
  std::unordered_map<std::string, deferred> deferred_;  // by operation id
  std::deque<std::string> deferred_order_;             // oldest first (ids may be stale)
  std::size_t bytes_ = 0;
  std::atomic<std::size_t> translated_{0};  // sessions with ids
};

}  // namespace scg::net

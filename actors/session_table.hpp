#pragma once
// The routing table the data path reads: session key → backend, and
// operation id → backend. Thread-safe and sharded, so the data-plane workers
// look up bindings without an actor round trip; actors own the lifecycle (creation,
// expiry, release) and write here.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/clock.hpp"
#include "core/packed_map.hpp"
#include "core/session_key.hpp"

namespace scg::actors {

using core::session_key;  // core/session_key.hpp

using backend_index = std::uint32_t;
// The clocks live in core/clock.hpp; actors code names them unqualified.
using core::clock_ms;
using core::now_ms;
using core::steady_of;
using core::wall_now_ms;
using core::wall_of;

/// Sharded, thread-safe session and operation index.
class session_table {
 public:
  struct op_entry {
    backend_index backend;
    std::string session;  ///< session_key::str() of the session that started it
    std::int64_t started_wall_ms = 0;  ///< when it started (wall ms, any replica's); 0 unknown
  };

  explicit session_table(std::size_t backend_count);

  /// The backend bound to `key`, refreshing its last-seen time.
  std::optional<backend_index> find_session(const std::string& key, clock_ms now);

  /// Binds `key` to `backend` unless already bound; returns the binding in force.
  backend_index bind_session(const std::string& key, backend_index backend, clock_ms now);

  /// Binds `key` to `backend` whatever it was bound to (a replicated decision
  /// that won over a local one).
  void set_session(const std::string& key, backend_index backend, clock_ms now);

  /// The backend bound to `key`, without refreshing its last-seen time.
  std::optional<backend_index> session_backend(std::string_view key) const;

  /// Binds `key` to `backend` if it is bound to another one, keeping its
  /// last use; never binds a key that is not bound. True when it changed.
  bool rebind_if_bound(const std::string& key, backend_index backend);

  /// Last-seen time of `key`, nullopt when unbound.
  std::optional<clock_ms> session_last_seen(std::string_view key) const;

  /// Forgets `key`; true when it was bound.
  bool erase_session(const std::string& key);

  /// The backend that ran `op_id`, refreshing its last-seen time.
  std::optional<op_entry> find_op(const std::string& op_id, clock_ms now);

  /// Records that `op_id` runs on `backend` for session `session`, started at
  /// `started_wall_ms` (0 unknown); an existing entry keeps its backend (the
  /// first writer wins), learns a start it lacked and is refreshed.
  backend_index add_op(const std::string& op_id, backend_index backend,
                       const std::string& session, clock_ms now, std::int64_t started_wall_ms = 0);

  /// Last-seen time of `op_id`, nullopt when not indexed.
  std::optional<clock_ms> op_last_seen(std::string_view op_id) const;

  /// The backend that runs `op_id`, nullopt when not indexed (does not refresh it).
  std::optional<backend_index> op_backend(const std::string& op_id) const;

  /// True when `op_id` is indexed (does not refresh it).
  bool has_op(const std::string& op_id) const;

  /// Forgets `op_id`; true when it was known.
  bool erase_op(const std::string& op_id);

  /// Removes operations unseen for `ttl_ms`; returns how many. With
  /// `keep_learned`, those learned from a peer and never used here (last seen
  /// 0) stay: in a cluster the replicated table's ttl ends them (a tombstone),
  /// and until then a reattach through this replica must find them.
  std::size_t expire_ops(clock_ms now, clock_ms ttl_ms, bool keep_learned = false);

  std::size_t session_count() const { return sessions_.load(std::memory_order_relaxed); }
  std::size_t op_count() const { return ops_.load(std::memory_order_relaxed); }
  /// Sessions bound to each of the first `count` backends on this replica.
  std::vector<std::size_t> sessions_per_backend(std::size_t count) const;

  /// Sessions bound to `backend` on this replica.
  std::size_t sessions_on(backend_index backend) const;

  /// Sessions bound to `backend` and used on this replica at or after
  /// `since`, and the newest such use (0: none). One shared-locked pass
  /// over every shard: for the admin API and drain reports, not the data path.
  std::pair<std::size_t, clock_ms> recent_sessions(backend_index backend, clock_ms since) const;

  /// Sessions of `tenant` in the table (the whole cluster's, replicated).
  std::size_t sessions_of_tenant(const std::string& tenant) const;
  /// Sessions bound per tenant (tenants with none left out).
  std::unordered_map<std::string, std::size_t> sessions_by_tenant() const;

  /// A session binding as the admin API lists it.
  struct session_row {
    std::string key;  ///< session_key::str()
    backend_index backend;
    clock_ms last_seen;
  };
  /// An indexed operation as the admin API lists it.
  struct op_row {
    std::string key;  ///< the operation id
    op_entry op;
    clock_ms last_seen;
  };

  /// The row of session `key`, without counting it as a use; nullopt when absent.
  std::optional<session_row> session_row_of(std::string_view key) const;

  /// Up to `limit` sessions whose key sorts after `after` and that `keep`
  /// accepts, in key order (so a listing pages with the last key as cursor).
  /// Read-only; it locks one shard at a time, shared, and copies out only the
  /// rows it returns, so the data path waits at most for one shard's scan.
  std::vector<session_row> list_sessions(
      const std::string& after, std::size_t limit,
      const std::function<bool(std::string_view key, backend_index)>& keep) const;

  /// Up to `limit` operations whose id sorts after `after` and that `keep`
  /// accepts, in id order; locks as list_sessions.
  std::vector<op_row> list_ops(
      const std::string& after, std::size_t limit,
      const std::function<bool(std::string_view op_id, const op_entry&)>& keep) const;

  /// Adds to each entry of `counts` (keyed by session_key::str()) the number
  /// of indexed operations of that session: a look-up per shard and session,
  /// never a pass over the index (an admin look-up of one session costs the
  /// same at a hundred operations or a million).
  void count_ops(std::unordered_map<std::string, std::size_t>& counts) const;

 private:
  static constexpr std::size_t shard_count = 16;
  void count_tenant(const std::string& key, int delta);
  void count_new_session(const std::string& key);  // a session just inserted: the totals
  mutable std::mutex tenant_mutex_;  // new and erased sessions only: off the hot path
  std::unordered_map<std::string, long> per_tenant_;
  struct session_entry {
    backend_index backend;
    std::atomic<clock_ms> last_seen;
    session_entry(backend_index b, clock_ms t) : backend(b), last_seen(t) {}
  };
  struct op_slot {
    op_entry op;
    std::atomic<clock_ms> last_seen;
    op_slot(op_entry o, clock_ms t) : op(std::move(o)), last_seen(t) {}
  };
  template <class Map>
  struct shard {
    mutable std::shared_mutex mutex;
    Map map;
  };
  struct op_shard : shard<std::unordered_map<std::string, op_slot>> {
    std::unordered_map<std::string, std::size_t> per_session;  ///< the map's operations by session
  };
  static void forget_op(op_shard& s, std::unordered_map<std::string, op_slot>::iterator it);
  /// Moves `entry` to `backend`, and its count with it (its shard locked).
  void move_session(session_entry& entry, backend_index backend);
  static std::size_t shard_of(std::string_view key);

  // Sessions packed (one allocation each): every replica holds every session
  // binding of the cluster. Operations are fewer and carry a string.
  std::array<shard<core::packed_map<session_entry>>, shard_count> session_shards_;
  std::array<op_shard, shard_count> op_shards_;
  std::vector<std::atomic<std::size_t>> per_backend_;
  std::atomic<std::size_t> sessions_{0};
  std::atomic<std::size_t> ops_{0};
};

}  // namespace scg::actors

#pragma once
// The admin HTTP endpoint: health, readiness, backends, sessions, operations,
// events, metrics, and the live status page (admin/ui/).

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "actors/backend.hpp"
#include "actors/placement.hpp"
#include "actors/session_table.hpp"
#include "cluster/cluster_view.hpp"
#include "config/config.hpp"

namespace httplib {
class Server;
}

namespace scg::auth {
class admin_tokens;
}

namespace scg::core {
class usage_ledger;
}

namespace scg::net {
class execution_ledger;
class journal_store;
}

namespace scg::admin {

using net::execution_ledger;
class bounded_server;
class request_gate;

/// What the admin endpoint reports; owned by the gateway.
struct admin_view {
  actors::backend_list backends;
  std::shared_ptr<actors::session_table> table;
  actors::placement_policy policy;    ///< to show each backend's placement score
  std::atomic<bool> ready{false};     ///< serving and not draining
  std::atomic<bool> synced{true};     ///< the cluster's first full sync is done (or no cluster)
  std::string node_name = "standalone";
  std::shared_ptr<cluster::cluster_view> cluster;  ///< null for a single replica
  /// Drains or undrains a backend by name, cluster-wide.
  std::function<void(const std::string& name, bool on)> set_draining;
  /// This replica's executions, for the drain status (null: none counted).
  const execution_ledger* executions = nullptr;
  std::int64_t drain_idle_ms = 60'000;  ///< drain.idle_secs
  const core::usage_ledger* usage = nullptr;  ///< per-tenant accounting; null: none shown
  /// tenants.pools: backend names per tenant (admin/usage_http.hpp shows each pool's load).
  std::map<std::string, std::vector<std::string>, std::less<>> pools;
  const request_gate* heavy = nullptr;  ///< admin.max_heavy_requests in use (set by admin_http)
  /// Session journals (on_backend_lost.action: replay); null: listings show no `replayable`.
  std::shared_ptr<const net::journal_store> journal;
  /// Whether a tenant's sessions are replayed (on_backend_lost.action, or its tenants entry).
  std::function<bool(std::string_view tenant)> replays;
};

/// The admin plane: every endpoint on `addr`, and /healthz and /readyz alone
/// on `plane.probe_addr` when set. Each request is decided by
/// admin/admin_access.hpp (role from `tokens`, Origin, admin.open_metrics)
/// before it is routed; listings and metrics are bounded by
/// admin.max_heavy_requests.
class admin_http {
 public:
  /// Binds `addr` ("host:port", port 0 picks one) and the probe address;
  /// throws std::runtime_error naming the address when it cannot.
  admin_http(const std::string& addr, admin_view& view, const config::admin_plane& plane,
             const auth::admin_tokens& tokens);
  ~admin_http();
  int port() const { return port_; }
  int probe_port() const { return probe_port_; }  ///< 0 without admin.probe_addr

 private:
  std::unique_ptr<request_gate> heavy_;
  std::unique_ptr<bounded_server> server_;
  std::unique_ptr<bounded_server> probe_;
  std::thread thread_, probe_thread_;
  int port_ = 0;
  int probe_port_ = 0;
};

/// The body of GET /api/v1/backends.
std::string backends_json(const admin_view& view);

/// The "drain" object of backend `i` in GET /api/v1/backends: state
/// (serving | draining | idle), live_operations, active_sessions,
/// calls_in_flight, last_activity_secs (null: none seen), waiting_for, holders.
nlohmann::json drain_json(const admin_view& view, std::size_t i);

/// The body of GET /api/v1/backends/{name}: the backend's entry of the list.
std::string backend_json(const admin_view& view, std::size_t i);

/// The body of GET /api/v1/cluster.
std::string cluster_json(const admin_view& view);

/// One page of a listing: at most `limit` items after cursor `after` (the
/// previous page's last key), keeping those that match every non-empty filter.
struct list_query {
  static constexpr std::size_t default_limit = 100;
  static constexpr std::size_t max_limit = 1000;
  std::size_t limit = default_limit;
  std::string after;
  std::string tenant, user, session, backend;  ///< exact matches; empty: any
  /// Sessions named whole (tenant, user and session given together, or
  /// `key=TENANT/USER/SESSION` repeated): looked up one by one, not found by
  /// a scan of the table.
  std::vector<actors::session_key> named;
};

/// The body of GET /api/v1/sessions: `sessions` (session_id, user_id, tenant,
/// backend, last_seen_ms_ago, operations), `next` (cursor or null), `total`.
/// Sessions named whole are looked up (each one its own look-up), so one
/// request reads many sessions at about one moment, whatever the table's size.
std::string sessions_json(const admin_view& view, const list_query& q);

/// The body of GET /api/v1/operations: `operations` (operation_id,
/// session_id, user_id, tenant, backend, last_seen_ms_ago), `next`, `total`.
std::string operations_json(const admin_view& view, const list_query& q);

/// The body of GET /api/v1/events: the kept events with seq > `after`.
std::string events_json(std::uint64_t after);

/// The body of GET /metrics.
std::string metrics_text(const admin_view& view);

}  // namespace scg::admin

#pragma once
// The forwarder: one call type carries every Spark Connect RPC, known or not,
// from a client's HTTP/2 stream to the backend that holds its session and back.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

#include <mutex>
#include <string>
#include <unordered_map>

#include "actors/backend.hpp"
#include "actors/router.hpp"
#include "actors/session_table.hpp"
#include "auth/credentials.hpp"
#include "config/config.hpp"
#include "net/executions.hpp"

namespace scg::core {
class usage_ledger;
}  // namespace scg::core

namespace scg::auth {
class authenticator;
class rate_limiter;
}  // namespace scg::auth

namespace scg::net::h2 {
class downstream_connection;
class server_stream;
}  // namespace scg::net::h2

namespace scg::net {

class span_exporter;  // net/span_exporter.hpp
class journal_store;  // net/session_journal.hpp

/// What every forwarded call shares; outlives all calls.
struct forward_context {
  actors::backend_list backends;
  std::shared_ptr<actors::session_table> table;
  const actors::router* router = nullptr;
  std::atomic<std::uint64_t> cursor{0};  ///< spreads calls that carry no session
  std::int64_t lost_after_ms = 30000;    ///< on_backend_lost.after_secs
  config::lost_action on_lost = config::lost_action::rebind;  ///< on_backend_lost.action
  std::map<std::string, config::lost_action, std::less<>> tenant_lost;  ///< on_backend_lost.tenants
  /// The on_backend_lost action for `tenant`'s sessions.
  config::lost_action lost_action_for(std::string_view tenant) const {
    if (tenant_lost.empty()) return on_lost;
    auto it = tenant_lost.find(tenant);
    return it == tenant_lost.end() ? on_lost : it->second;
  }
  /// Session journals (on_backend_lost.action: replay); null otherwise.
  std::shared_ptr<journal_store> journal;

  // --- security and overload (docs/security.md, docs/multitenancy.md)
  const auth::authenticator* auth = nullptr;  ///< who calls, which tenant; never null in a replica
  auth::rate_limiter* limiter = nullptr;      ///< rate_limits; null: none
  auth::backend_credentials backend_tokens;   ///< authorization scg presents to backends
  bool qualify_users = true;                  ///< tenants.spark_user_id: qualified
  std::string default_tenant = "default";     ///< tenants.default
  config::limits limits;                      ///< per-tenant bulkheads
  /// tenants.pools: the backends each tenant may use (none listed: all),
  /// for calls without a session too.
  std::map<std::string, std::vector<std::string>, std::less<>> pools;
  execution_ledger executions;                ///< executions by operation (max_executions, max_execution_secs)
  /// An operation with no stream attached for this long is forgotten (Spark
  /// drops a detached execution after 5 minutes).
  std::int64_t detached_ttl_ms = 5 * 60 * 1000;
  std::atomic<std::int64_t> executions_swept_ms{0};
  /// This replica's share of cluster-wide limits: 1 / live members.
  std::atomic<double> share{1.0};
  span_exporter* tracer = nullptr;  ///< `tracing:`; null: off, traceparent passes untouched
  core::usage_ledger* usage = nullptr;  ///< per-tenant accounting (core/usage.hpp); null: off
};

/// The call for a new request stream of `down`; it lives until both its
/// client stream and its backend stream have closed.
std::shared_ptr<h2::server_stream> start_forward(forward_context& fx, h2::downstream_connection& down,
                                                 std::int32_t stream);

/// Ends a call still open at the shutdown deadline with UNAVAILABLE and `why`.
void abandon_call(h2::server_stream& call, const std::string& why);

/// The settings `fx` takes from the config file: limits, tenant pools and
/// names, and the usage ledger's bounds (core/usage.hpp), which it then
/// uses. "" when done, else what is wrong (the artifact spool of
/// on_backend_lost.action: replay cannot be made). Defined in
/// net/call_routing.cpp.
std::string configure(forward_context& fx, const config::gateway& cfg);

}  // namespace scg::net

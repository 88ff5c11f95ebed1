#pragma once
// Accounting and autoscaling on the admin endpoint: the per-tenant (and,
// opted in, per-user) Prometheus series of core/usage.hpp, the per-pool
// placement signals an HPA or KEDA scales the Spark Connect servers on, and
// GET /api/v1/usage (figures over a window) and GET /api/v1/pools.

#include <cstdint>
#include <string>
#include <variant>

#include "core/prometheus.hpp"

namespace httplib {
class Server;
}

namespace scg::admin {

struct admin_view;

/// Appends the scg_tenant_*, scg_user_* (with accounting.prometheus_users)
/// and scg_pool_* series to `out`.
void append_usage_metrics(core::prometheus_writer& w, const admin_view& view);

/// A GET /api/v1/usage request: by tenant or user, over the last `minutes`.
struct usage_query {
  static constexpr std::size_t default_limit = 100;
  static constexpr std::size_t max_limit = 1000;
  bool by_user = false;
  std::int64_t minutes = 15;
  std::size_t limit = default_limit;
  std::string tenant;  ///< only this tenant's rows; empty: all
};

/// Parses `by`, `window` ("15m", "1h"; 1 to 60 minutes), `limit` and
/// `tenant`; a message for a 400 when one is bad.
std::variant<usage_query, std::string> parse_usage_query(const std::string& by, const std::string& window,
                                                         const std::string& limit, const std::string& tenant);

/// The body of GET /api/v1/usage at wall time `now_ms`.
std::string usage_json(const admin_view& view, const usage_query& q, std::int64_t now_ms);

/// The body of GET /api/v1/pools: each pool's backends and placement figures.
std::string pools_json(const admin_view& view);

/// Adds GET /api/v1/usage and GET /api/v1/pools to `srv`.
void add_usage_routes(httplib::Server& srv, const admin_view& view);

}  // namespace scg::admin

#pragma once
// What each admin endpoint needs, and the decision for one request: the
// caller's role from its Bearer token, the request's Origin against the
// admin's own, the configured openness. Pure (no sockets); the server of
// admin/admin_http.cpp asks once per request before routing.

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>

#include "auth/admin_auth.hpp"

namespace scg::admin {

/// The kinds of endpoint, by what they need (docs/security.md has the table).
enum class admin_route {
  probe,    ///< /healthz, /readyz: always open
  page,     ///< /, /ui/*: the status page's files, no data
  metrics,  ///< /metrics: open with admin.open_metrics, else read
  read,     ///< GET /api/v1/*: users, sessions, topology: read role
  change,   ///< POST /api/v1/*: drain, undrain (and anything added later): admin role
  other,    ///< anything else: answered by the router (404, 405)
};

/// The kind of `method` `path` (path without the query).
admin_route classify(std::string_view method, std::string_view path);

/// Whether requests of kind `r` count against admin.max_heavy_requests.
bool is_heavy(admin_route r);

/// How the plane is configured (config::admin_plane, resolved).
struct access_policy {
  bool allow_unauthenticated = false;
  bool open_metrics = true;
};

/// The parts of a request the decision reads.
struct access_request {
  std::string_view method, path;
  std::string_view origin;         ///< Origin header; empty: none
  std::string_view host;           ///< Host header
  std::string_view authorization;  ///< Authorization header; empty: none
};

/// Why a request was refused: the label of scg_admin_denied_total.
enum class deny_reason {
  none,
  cross_origin,         ///< an Origin that is not the admin's own (403)
  preflight,            ///< a CORS preflight (OPTIONS): never granted (403)
  missing_credential,   ///< no Bearer token where one is needed (401)
  bad_credential,       ///< a Bearer token that matches none (401)
  read_only,            ///< a read token on a change (403)
  no_token_configured,  ///< no token file configured, allow_unauthenticated false (403)
};
inline constexpr std::size_t deny_reason_count = 7;
std::string_view to_string(deny_reason r);

/// The decision: allowed, or the status and message of the refusal.
struct access_decision {
  deny_reason denied = deny_reason::none;
  int status = 200;            ///< 401 or 403 when denied
  std::string message;         ///< what is wrong and how to fix it, for the JSON error
  auth::admin_caller caller;   ///< who (role none: no credential was needed or given)
  bool allowed() const { return denied == deny_reason::none; }
};

/// Whether `origin` is the origin a browser gives a page served from `host`
/// ("http://HOST" or "https://HOST"; "null" never is).
bool same_origin(std::string_view origin, std::string_view host);

/// Decides one request.
access_decision decide(const access_policy& policy, const auth::admin_tokens& tokens, const access_request& req);

/// A bound on requests in progress (admin.max_heavy_requests): try_enter
/// takes a slot or says there is none; leave gives it back.
class request_gate {
 public:
  explicit request_gate(int slots) : slots_(slots) {}
  bool try_enter();
  void leave() { in_use_.fetch_sub(1, std::memory_order_relaxed); }
  int in_use() const { return in_use_.load(std::memory_order_relaxed); }

 private:
  int slots_;
  std::atomic<int> in_use_{0};
};

}  // namespace scg::admin

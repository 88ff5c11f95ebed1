#include "admin/admin_access.hpp"

namespace scg::admin {
namespace {

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

access_decision deny(deny_reason why, int status, std::string message) {
  access_decision d;
  d.denied = why;
  d.status = status;
  d.message = std::move(message);
  return d;
}

}  // namespace

admin_route classify(std::string_view method, std::string_view path) {
  if (path == "/healthz" || path == "/readyz") return admin_route::probe;
  if (path == "/" || starts_with(path, "/ui/")) return admin_route::page;
  if (path == "/metrics") return admin_route::metrics;
  if (starts_with(path, "/api/")) return method == "GET" || method == "HEAD" ? admin_route::read : admin_route::change;
  return admin_route::other;
}

bool is_heavy(admin_route r) { return r == admin_route::metrics || r == admin_route::read; }

std::string_view to_string(deny_reason r) {
  switch (r) {
    case deny_reason::cross_origin: return "cross_origin";
    case deny_reason::preflight: return "preflight";
    case deny_reason::missing_credential: return "missing_credential";
    case deny_reason::bad_credential: return "bad_credential";
    case deny_reason::read_only: return "read_only";
    case deny_reason::no_token_configured: return "no_token_configured";
    default: return "none";
  }
}

bool same_origin(std::string_view origin, std::string_view host) {
  if (host.empty()) return false;
  for (std::string_view scheme : {"http://", "https://"})
    if (starts_with(origin, scheme) && origin.substr(scheme.size()) == host) return true;
  return false;
}

access_decision decide(const access_policy& policy, const auth::admin_tokens& tokens, const access_request& req) {
  // Browsers send Origin on every cross-origin request and on same-origin
  // POSTs; a form or script of another site is refused before anything else.
  if (req.method == "OPTIONS")
    return deny(deny_reason::preflight, 403, "cross-origin requests are not allowed on the admin API (CORS preflight refused)");
  if (!req.origin.empty() && !same_origin(req.origin, req.host))
    return deny(deny_reason::cross_origin, 403,
                "Origin " + std::string(req.origin) + " is not this admin endpoint's own: cross-site requests are refused");
  const auto route = classify(req.method, req.path);
  auth::admin_role needs = auth::admin_role::none;
  if (route == admin_route::read || (route == admin_route::metrics && !policy.open_metrics))
    needs = auth::admin_role::read;
  if (route == admin_route::change) needs = auth::admin_role::admin;

  access_decision ok;
  const auto token = auth::bearer_token(req.authorization.empty() ? std::nullopt
                                                                  : std::optional<std::string_view>(req.authorization));
  if (token) ok.caller = tokens.find(*token);
  if (needs == auth::admin_role::none) return ok;
  if (!tokens.configured(needs)) {
    if (policy.allow_unauthenticated && !tokens.configured(auth::admin_role::read)) return ok;
    return deny(deny_reason::no_token_configured, 403,
                needs == auth::admin_role::admin
                    ? "no admin token is configured: changes are refused (set admin.token_file, or "
                      "admin.allow_unauthenticated: true on a trusted network)"
                    : "no admin token is configured: listings are refused (set admin.read_token_file or "
                      "admin.token_file, or admin.allow_unauthenticated: true on a trusted network)");
  }
  if (!token)
    return deny(deny_reason::missing_credential, 401,
                "this endpoint needs the " + std::string(auth::to_string(needs)) +
                    " role: send Authorization: Bearer TOKEN");
  if (ok.caller.role == auth::admin_role::none)
    return deny(deny_reason::bad_credential, 401, "the Bearer token matches no configured admin token");
  if (ok.caller.role < needs) {
    auto d = deny(deny_reason::read_only, 403, "a read-only token cannot change anything: this needs the admin token");
    d.caller = ok.caller;
    return d;
  }
  return ok;
}

bool request_gate::try_enter() {
  int n = in_use_.load(std::memory_order_relaxed);
  while (n < slots_)
    if (in_use_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
  return false;
}

}  // namespace scg::admin

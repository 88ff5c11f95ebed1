#pragma once
// Who is calling, and for which tenant: checks the client's bearer token as
// `auth:` says, resolves the tenant as `tenants:` says. The verified identity
// then replaces user_context.user_id in every request (auth/rewrite.hpp) and
// keys the session.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "auth/credentials.hpp"
#include "config/security.hpp"
#include "auth/jwks.hpp"
#include "auth/jwt.hpp"

namespace scg::auth {

// The configuration it reads (config/security.hpp).
using config::auth_config;
using config::auth_type;
using config::jwt_config;
using config::oidc_config;
using config::static_token;
using config::tenant_source;
using config::tenants_config;
using config::valid_tenant_name;

/// The caller as scg established it.
struct identity {
  std::string user_id;    ///< verified user; empty with anonymous auth (the request's own stands)
  std::string tenant;     ///< resolved tenant, always set on success
  bool verified = false;  ///< true when user_id came from a checked credential
};

/// Looks up a request metadata value by lowercase key; nullopt when absent.
using header_lookup = std::function<std::optional<std::string_view>(std::string_view key)>;

/// Checks credentials and resolves tenants. authenticate() is const and
/// thread-safe; with OIDC it may block for one bounded JWKS fetch when a
/// token names an unknown kid (at most once per min_refresh_interval).
class authenticator {
 public:
  struct options {
    fetch_fn fetch;  ///< OIDC fetcher; empty: HTTP(S) with auth.oidc.fetch_timeout_ms
    std::function<std::int64_t()> unix_now = auth::unix_now;  ///< token times
    jwks_cache::now_fn steady_now = jwks_cache::clock::now;   ///< refresh pacing
  };

  /// Builds an authenticator, reading key_file and the HMAC secret now.
  /// Errors name the field (e.g. "auth.jwt.key_file").
  static std::variant<std::unique_ptr<authenticator>, config::error> create(
      const security_config& cfg, options opts);
  static std::variant<std::unique_ptr<authenticator>, config::error> create(
      const security_config& cfg);

  /// `authorization` is the request's authorization metadata value, if any.
  /// Failure reasons are short and safe for a client ("missing bearer token",
  /// "unknown token", "token expired", "signature invalid", "missing tenant", …).
  result<identity> authenticate(std::optional<std::string_view> authorization,
                                const header_lookup& headers) const;

  /// Backend names of `tenant`'s pool; nullptr means every backend.
  const std::vector<std::string>* pool(std::string_view tenant) const;

  /// OIDC: refreshes the keys when the periodic interval has passed. Call it
  /// from a timer, off the request path; no-op for other auth types.
  void tick();

  ~authenticator();

 private:
  authenticator() = default;
  /// The configured token equal to `token`, compared in constant time.
  const static_token* find_static(std::string_view token) const;
  /// Verified claims of a JWT (jwt or oidc).
  result<nlohmann::json> check_jwt(std::string_view token) const;
  /// The tenant per `tenants:`; `claimed` is the credential's tenant, if any.
  result<std::string> resolve_tenant(std::string_view claimed, const header_lookup& headers) const;

  security_config cfg_;
  options opts_;
  std::vector<std::string> token_digests_;  // SHA-256 of each static token, same order as cfg
  std::optional<key> jwt_key_;
  std::unique_ptr<jwks_cache> jwks_;
};

/// The session key of the routing table, from the verified identity (or, with
/// anonymous auth, the request's user_id). Same format as core::session_key.
std::string session_key(std::string_view tenant, std::string_view user_id,
                        std::string_view session_id);

}  // namespace scg::auth

#pragma once
// The security sections of the replica configuration: `auth:`, `tenants:`,
// `backend_token:` and `rate_limits:`: their schema and parsers, wired into
// the whole configuration by config/config.cpp. Errors name the field, as
// there. Secrets are read at startup by auth/credentials.hpp.
//
// YAML shapes (every section optional; shown with defaults where they exist):
//
//   auth:                                   # absent: type anonymous
//     type: anonymous | static | jwt | oidc
//     tokens:                               # type static only; at least one
//       - { token: "s3cret", user_id: alice, tenant: team-a }   # tenant optional
//     jwt:                                  # type jwt only
//       algorithms: [RS256]                 # required; RS256 | ES256 | HS256
//       key_file: /etc/scg/jwt.pem          # exactly one of key_file, key_pem, hmac_secret;
//       key_pem: "-----BEGIN PUBLIC KEY-----…"  #   PEM public key or certificate
//       hmac_secret: { kind: env, name: SCG_JWT_SECRET }  # a secret (below); HS256 only
//       issuer: "https://idp.example"        # optional; checked when set
//       audience: scg                        # optional; checked when set
//       leeway_secs: 60                      # clock skew on exp / nbf
//       user_claim: sub                      # the claim that becomes user_context.user_id
//     oidc:                                 # type oidc only
//       issuer: "https://idp.example/realms/x"   # required; must match discovery and iss
//       discovery_url: "<issuer>/.well-known/openid-configuration"  # default from issuer
//       audience: scg                        # required
//       algorithms: [RS256, ES256]           # RS256 | ES256
//       refresh_secs: 300                    # periodic JWKS refresh
//       min_refresh_interval_secs: 10        # floor between fetches (unknown kid)
//       fetch_timeout_ms: 5000
//       leeway_secs: 60
//       user_claim: sub
//
//   tenants:                                # absent: from claim "tenant", default "default"
//     from: claim | header | fixed          # default claim
//     claim: tenant                         # from claim: the JWT claim (static: token's tenant)
//     header: x-scg-tenant                  # from header: lowercase metadata key; required
//     value: team-a                         # from fixed: the tenant; required
//     default: default                      # the tenant "use_default" falls back to
//     on_missing: use_default | reject      # no tenant in claim / header
//     on_unknown_tenant: use_default | reject   # tenant not under pools (when pools exist)
//     pools: { team-a: [sc-1, sc-2] }       # backend names per tenant; absent: all backends
//     backend_tokens: { team-a: { kind: file, path: /run/secrets/team-a } }  # per-tenant override
//
//   backend_token: { kind: inline, value: "…" }   # or { kind: env, name: VAR }
//                                                  # or { kind: file, path: /path }
//
//   rate_limits:                            # absent: no limits
//     per_tenant: { rps: 100, burst: 200 }  # burst defaults to max(rps, 1)
//     per_user: { rps: 10, burst: 20 }      # keyed by tenant and user
//     tenants: { team-a: { rps: 500, burst: 1000 } }   # per-tenant override of per_tenant
//
// A secret (hmac_secret, backend_token, backend_tokens.*) has the backend_token shape.

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/error.hpp"

namespace YAML {
class Node;
}
namespace scg::config {
namespace yaml {
struct field;  // config/yaml_read.hpp
}

/// The JWT signature algorithms scg accepts. `none` is not one of them, ever.
enum class jwt_algorithm { rs256, es256, hs256 };

/// "RS256" → rs256; nullopt for anything else (including "none").
std::optional<jwt_algorithm> jwt_algorithm_from_name(std::string_view name);

/// The JOSE name ("RS256").
std::string_view jwt_algorithm_name(jwt_algorithm a);

/// A secret named in the configuration, read at startup.
struct secret_ref {
  enum class source { inline_value, env, file };
  source kind = source::inline_value;
  std::string value;  ///< the secret (inline), the variable name (env) or the path (file)
  std::string field;  ///< where it was configured ("backend_token"), for errors
};

enum class auth_type { anonymous, static_tokens, jwt, oidc };

struct static_token {
  std::string token;
  std::string user_id;
  std::string tenant;  ///< empty: none
};

struct jwt_config {
  std::vector<jwt_algorithm> algorithms;
  std::string key_file;  ///< one of key_file, key_pem, hmac_secret is set
  std::string key_pem;
  std::optional<secret_ref> hmac_secret;
  std::string issuer;    ///< empty: not checked
  std::string audience;  ///< empty: not checked
  int leeway_secs = 60;
  std::string user_claim = "sub";
};

struct oidc_config {
  std::string issuer;
  std::string discovery_url;
  std::string audience;
  std::vector<jwt_algorithm> algorithms{jwt_algorithm::rs256, jwt_algorithm::es256};
  int refresh_secs = 300;
  int min_refresh_interval_secs = 10;
  int fetch_timeout_ms = 5000;
  int leeway_secs = 60;
  std::string user_claim = "sub";
};

/// The `auth:` section.
struct auth_config {
  auth_type type = auth_type::anonymous;
  std::vector<static_token> tokens;  ///< static
  jwt_config jwt;                    ///< jwt
  oidc_config oidc;                  ///< oidc
};

enum class tenant_source { claim, header, fixed };

/// The `tenants:` section.
struct tenants_config {
  tenant_source from = tenant_source::claim;
  std::string claim = "tenant";
  std::string header;
  std::string value;
  std::string default_tenant = "default";
  bool reject_missing = false;  ///< on_missing: reject
  bool reject_unknown = false;  ///< on_unknown_tenant: reject
  /// spark_user_id: qualified (default): Spark sees spark_user_id(); plain: the user id as is.
  bool qualify_users = true;
  std::map<std::string, std::vector<std::string>, std::less<>> pools;
  std::map<std::string, secret_ref, std::less<>> backend_tokens;
};

struct rate {
  double rps = 0;
  double burst = 0;
};

/// The `rate_limits:` section.
struct rate_limits_config {
  std::optional<rate> per_tenant;
  std::optional<rate> per_user;
  std::map<std::string, rate, std::less<>> tenants;  ///< overrides per_tenant
};

/// All four sections together.
struct security_config {
  auth_config auth;
  tenants_config tenants;
  std::optional<secret_ref> backend_token;
  rate_limits_config rate_limits;
};

/// Each parser takes the section's node as found under the root (undefined or
/// null: defaults) and returns the section or the first bad field.
result<auth_config> parse_auth(const YAML::Node& n);
/// `backend_names` are the configured backends' names; pools may name only
/// those (an empty list skips the check).
result<tenants_config> parse_tenants(const YAML::Node& n, const std::vector<std::string>& backend_names);
result<std::optional<secret_ref>> parse_backend_token(const YAML::Node& n);
result<rate_limits_config> parse_rate_limits(const YAML::Node& n);

/// Reads root["auth"], ["tenants"], ["backend_token"], ["rate_limits"] and
/// checks them against each other (e.g. tenants from claim needs a token).
result<security_config> parse_security(const YAML::Node& root, const std::vector<std::string>& backend_names);

/// The same four keys as rows of the root's field table (config/config.cpp),
/// read into `out`; `backend_names` is read when tenants are, so it may be
/// filled by an earlier row.
std::vector<yaml::field> security_fields(security_config& out, const std::vector<std::string>& backend_names);

/// A tenant name scg accepts from config, claims or headers: 1 to 128 of
/// A-Z a-z 0-9 . _ - (tenants become metric labels and key parts).
bool valid_tenant_name(std::string_view name);

}  // namespace scg::config

#pragma once
// What the security sections resolve to at startup: secrets read from where
// the config names them, the tokens scg presents to backends, and the user
// id Spark sees for a tenant's user.

#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "config/config.hpp"

namespace scg::auth {

using config::secret_ref;
using config::security_config;

/// Reads a secret: inline as is, an environment variable, or a file with one
/// trailing newline removed. An unset variable, unreadable file or empty
/// secret is an error naming `ref.field`; the message never contains the secret.
std::variant<std::string, config::error> resolve_secret(const secret_ref& ref);

/// Credentials scg presents to backends (`authorization: Bearer …`), read at startup.
struct backend_credentials {
  std::string default_token;  ///< empty: none
  std::map<std::string, std::string, std::less<>> per_tenant;
  /// The token for calls of `tenant`: its override, else the default (may be empty).
  const std::string& for_tenant(std::string_view tenant) const;
  /// What scg's own calls (health probes, holder searches) present: the
  /// default token, else a tenant's (may be empty).
  const std::string& own_calls() const {
    return default_token.empty() && !per_tenant.empty() ? per_tenant.begin()->second : default_token;
  }
  /// Every token, the default first (what responses must never show).
  std::vector<std::string> all() const {
    std::vector<std::string> out{default_token};
    for (const auto& [tenant, token] : per_tenant) out.push_back(token);
    return out;
  }
};

/// Resolves backend_token and tenants.backend_tokens. A token must be
/// visible ASCII (it travels in a header); errors name the field, never the token.
std::variant<backend_credentials, config::error> resolve_backend_tokens(const security_config& s);

/// The user id Spark sees for `user` of `tenant`. Spark keys its sessions by
/// (user_id, session_id) only, so two tenants' users must never map to one
/// id: users of the default tenant keep their id (unless it contains ':'),
/// everyone else becomes "TENANT:USER". Tenant names hold no ':', so the
/// mapping is one-to-one.
std::string spark_user_id(std::string_view tenant, std::string_view user, std::string_view default_tenant);

}  // namespace scg::auth

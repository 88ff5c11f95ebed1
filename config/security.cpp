#include "config/security.hpp"

#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>

#include <yaml-cpp/yaml.h>

#include "config/config.hpp"
#include "config/yaml_read.hpp"

namespace scg::config {
namespace {

// The reading discipline and helpers of config/config.cpp (config/yaml_read.hpp).
using namespace config::yaml;

constexpr named<auth_type> auth_types[] = {{"anonymous", auth_type::anonymous},
                                           {"static", auth_type::static_tokens},
                                           {"jwt", auth_type::jwt},
                                           {"oidc", auth_type::oidc}};
constexpr named<tenant_source> tenant_sources[] = {
    {"claim", tenant_source::claim}, {"header", tenant_source::header}, {"fixed", tenant_source::fixed}};
constexpr named<secret_ref::source> secret_kinds[] = {
    {"inline", secret_ref::source::inline_value}, {"env", secret_ref::source::env}, {"file", secret_ref::source::file}};
/// The key that holds a secret of each kind.
constexpr named<secret_ref::source> secret_keys[] = {
    {"value", secret_ref::source::inline_value}, {"name", secret_ref::source::env}, {"path", secret_ref::source::file}};
constexpr named<bool> reject_or_default[] = {{"use_default", false}, {"reject", true}};  // true: reject
constexpr named<bool> user_id_modes[] = {{"qualified", true}, {"plain", false}};       // qualify_users

/// Like as_string, but a secret: the error never echoes the value.
std::string secret_string(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) reject(path, "expected a string");
  if (n.Scalar().empty()) reject(path, "must not be empty");
  return n.Scalar();
}

bool is_http_url(const std::string& s) {
  return (s.rfind("http://", 0) == 0 && s.size() > 7) ||
         (s.rfind("https://", 0) == 0 && s.size() > 8);
}

std::string tenant_name(const YAML::Node& n, const std::string& path) {
  std::string s = as_string(n, path);
  if (!valid_tenant_name(s))
    reject(path, in_quotes(s) + " is not a tenant name (1 to 128 of A-Z a-z 0-9 . _ -)");
  return s;
}

secret_ref parse_secret(const YAML::Node& n, const std::string& path) {
  secret_ref s;
  s.field = path;
  // Each kind has its own key (secret_keys); the others' are refused.
  auto only_with = [&s](secret_ref::source owner) -> reader {
    return [&s, owner](const YAML::Node&, const std::string& at) {
      if (s.kind != owner) reject(at, "only with kind: " + std::string(name_of(secret_kinds, owner)));
    };
  };
  read_fields(n, path,
              {{"kind", choice(s.kind, "kind", secret_kinds), "required"},
               {"value", only_with(secret_ref::source::inline_value)},
               {"name", only_with(secret_ref::source::env)},
               {"path", only_with(secret_ref::source::file)},
               {"", [&s](const YAML::Node& m, const std::string& at) {
                  const std::string key(name_of(secret_keys, s.kind));
                  if (!m[key]) reject(child(at, key), "required with kind: " + std::string(name_of(secret_kinds, s.kind)));
                  s.value = s.kind == secret_ref::source::inline_value ? secret_string(m[key], child(at, key))
                                                                       : non_empty(m[key], child(at, key));
                }}});
  return s;
}

/// Reads an algorithm list; HS256 only where a shared secret is possible.
std::vector<jwt_algorithm> parse_algorithms(const YAML::Node& n, const std::string& path,
                                        bool allow_hs256) {
  if (!n.IsSequence()) reject(path, "expected a list, got " + describe(n));
  if (n.size() == 0) reject(path, "at least one algorithm is required");
  std::vector<jwt_algorithm> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    std::string name = as_string(n[i], item(path, i));
    auto a = jwt_algorithm_from_name(name);
    if (!a)
      reject(item(path, i), "unknown algorithm " + in_quotes(name) + " (expected RS256, ES256" +
                                (allow_hs256 ? ", HS256)" : ")"));
    if (!allow_hs256 && *a == jwt_algorithm::hs256)
      reject(item(path, i), "HS256 is not available with oidc (JWKS keys are public keys)");
    out.push_back(*a);
  }
  return out;
}

reader algorithms(std::vector<jwt_algorithm>& out, bool allow_hs256) {
  return [&out, allow_hs256](const YAML::Node& n, const std::string& path) {
    out = parse_algorithms(n, path, allow_hs256);
  };
}

jwt_config parse_jwt(const YAML::Node& n, const std::string& path) {
  jwt_config j;
  read_fields(
      n, path,
      {{"algorithms", algorithms(j.algorithms, true), "required"},
       {"key_file", non_empty_text(j.key_file)},
       {"key_pem", non_empty_text(j.key_pem)},
       {"hmac_secret", [&](const YAML::Node& v, const std::string& at) { j.hmac_secret = parse_secret(v, at); }},
       {"",
        [&](const YAML::Node&, const std::string& at) {
          const int sources = !j.key_file.empty() + !j.key_pem.empty() + j.hmac_secret.has_value();
          if (sources != 1) reject(at, "exactly one of key_file, key_pem or hmac_secret is required");
          // The key kind fixes the algorithms: a public key never doubles as an HMAC secret.
          for (std::size_t i = 0; i < j.algorithms.size(); ++i) {
            bool hs = j.algorithms[i] == jwt_algorithm::hs256;
            if (hs && !j.hmac_secret)
              reject(item(child(at, "algorithms"), i), "HS256 needs hmac_secret, not a public key");
            if (!hs && j.hmac_secret)
              reject(item(child(at, "algorithms"), i), std::string(jwt_algorithm_name(j.algorithms[i])) +
                                                           " needs key_file or key_pem, not hmac_secret");
          }
        }},
       // Whether key_pem is a key is for auth::authenticator::create, at start
       // and in `scg check`: the config knows no cryptography.
       {"issuer", text(j.issuer)},
       {"audience", text(j.audience)},
       {"leeway_secs", integer(j.leeway_secs, 0, 3600)},
       {"user_claim", non_empty_text(j.user_claim)}});
  return j;
}

oidc_config parse_oidc(const YAML::Node& n, const std::string& path) {
  oidc_config o;
  read_fields(n, path,
              {{"issuer", non_empty_text(o.issuer), "required"},
               {"discovery_url", text(o.discovery_url)},
               {"",
                [&](const YAML::Node& m, const std::string& at) {
                  if (!m["discovery_url"]) {
                    std::string base = o.issuer;
                    while (!base.empty() && base.back() == '/') base.pop_back();
                    o.discovery_url = base + "/.well-known/openid-configuration";
                  }
                  if (!is_http_url(o.discovery_url))
                    reject(child(at, m["discovery_url"] ? "discovery_url" : "issuer"),
                           in_quotes(o.discovery_url) + " is not an http:// or https:// URL");
                }},
               {"audience", non_empty_text(o.audience), "required"},
               {"algorithms", algorithms(o.algorithms, false)},
               {"refresh_secs", integer(o.refresh_secs, 1)},
               {"min_refresh_interval_secs", integer(o.min_refresh_interval_secs, 1)},
               {"fetch_timeout_ms", integer(o.fetch_timeout_ms, 1, 60000)},
               {"leeway_secs", integer(o.leeway_secs, 0, 3600)},
               {"user_claim", non_empty_text(o.user_claim)}});
  return o;
}

std::vector<static_token> parse_static_tokens(const YAML::Node& tokens, const std::string& at) {
  if (!tokens.IsSequence()) reject(at, "expected a list, got " + describe(tokens));
  if (tokens.size() == 0) reject(at, "at least one token is required");
  std::vector<static_token> out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    static_token t;
    read_fields(tokens[i], item(at, i),
                {{"token", [&](const YAML::Node& v, const std::string& p) { t.token = secret_string(v, p); }, "required"},
                 {"user_id", non_empty_text(t.user_id), "required"},
                 {"tenant", [&](const YAML::Node& v, const std::string& p) { t.tenant = tenant_name(v, p); }},
                 {"",
                  [&](const YAML::Node&, const std::string& p) {
                    for (const auto& other : out)
                      if (other.token == t.token) reject(child(p, "token"), "duplicate token");
                  }}});
    out.push_back(std::move(t));
  }
  return out;
}

auth_config parse_auth_section(const YAML::Node& n, const std::string& path) {
  auth_config a;
  if (!present(n)) return a;
  read_fields(n, path,
              {{"type", choice(a.type, "type", auth_types)},
               {"",
                [&](const YAML::Node& m, const std::string& at) {
                  // Each section belongs to one type: required with it, refused with the others.
                  for (auto [section, owner] : {std::pair{"tokens", auth_type::static_tokens},
                                                std::pair{"jwt", auth_type::jwt}, std::pair{"oidc", auth_type::oidc}}) {
                    const std::string owner_name(name_of(auth_types, owner));
                    if (m[section] && owner != a.type) reject(child(at, section), "only with type: " + owner_name);
                    if (!m[section] && owner == a.type) reject(child(at, section), "required with type: " + owner_name);
                  }
                }},
               {"tokens", [&](const YAML::Node& v, const std::string& at) { a.tokens = parse_static_tokens(v, at); }},
               {"jwt", [&](const YAML::Node& v, const std::string& at) { a.jwt = parse_jwt(v, at); }},
               {"oidc", [&](const YAML::Node& v, const std::string& at) { a.oidc = parse_oidc(v, at); }}});
  return a;
}

/// Reads a map of tenant name → value at `at` (absent: nothing), each value
/// by `parse(node, path)`; tenant names are checked, duplicates refused.
template <class V, class Parse>
void read_per_tenant(const YAML::Node& n, const std::string& at, std::map<std::string, V, std::less<>>& out,
                     Parse parse) {
  if (!present(n)) return;
  if (!n.IsMap()) reject(at, "expected a map, got " + describe(n));
  for (const auto& kv : n) {
    std::string tenant = tenant_name(kv.first, at);
    if (out.count(tenant)) reject(child(at, tenant), "duplicate key");
    out.emplace(tenant, parse(kv.second, child(at, tenant)));
  }
}

std::map<std::string, std::vector<std::string>, std::less<>> parse_pools(const YAML::Node& pools, const std::string& at,
                                                                         const std::vector<std::string>& backends) {
  std::map<std::string, std::vector<std::string>, std::less<>> out;
  if (!pools.IsMap()) reject(at, "expected a map, got " + describe(pools));
  for (const auto& kv : pools) {
    std::string tenant = tenant_name(kv.first, at);
    const std::string p_at = child(at, tenant);
    if (out.count(tenant)) reject(p_at, "duplicate key");
    const YAML::Node& list = kv.second;
    if (!list.IsSequence()) reject(p_at, "expected a list, got " + describe(list));
    if (list.size() == 0) reject(p_at, "at least one backend is required");
    std::vector<std::string> names;
    for (std::size_t i = 0; i < list.size(); ++i) {
      std::string name = non_empty(list[i], item(p_at, i));
      bool known = backends.empty();
      for (const auto& b : backends) known = known || b == name;
      if (!known) reject(item(p_at, i), "unknown backend " + in_quotes(name));
      names.push_back(std::move(name));
    }
    out.emplace(std::move(tenant), std::move(names));
  }
  return out;
}

tenants_config parse_tenants_section(const YAML::Node& n, const std::string& path,
                                     const std::vector<std::string>& backends) {
  tenants_config t;
  if (!present(n)) return t;
  read_fields(
      n, path,
      {{"from", choice(t.from, "source", tenant_sources)},
       {"",
        [&](const YAML::Node& m, const std::string& at) {
          for (auto [key, owner] : {std::pair{"claim", tenant_source::claim}, std::pair{"header", tenant_source::header},
                                    std::pair{"value", tenant_source::fixed}})
            if (m[key] && t.from != owner)
              reject(child(at, key), "only with from: " + std::string(name_of(tenant_sources, owner)));
        }},
       {"claim", non_empty_text(t.claim)},
       {"header",
        [&](const YAML::Node& v, const std::string& at) {
          t.header = non_empty(v, at);
          // gRPC metadata keys are lowercase; reserved and auth keys are not tenant sources.
          bool ok = t.header.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_.") == std::string::npos;
          if (!ok) reject(at, in_quotes(t.header) + " is not a lowercase metadata key");
          if (t.header.rfind("grpc-", 0) == 0 || t.header == "authorization" || t.header.back() == '.' ||
              (t.header.size() > 4 && t.header.compare(t.header.size() - 4, 4, "-bin") == 0))
            reject(at, in_quotes(t.header) + " cannot carry a tenant");
        }},
       {"value", [&](const YAML::Node& v, const std::string& at) { t.value = tenant_name(v, at); }},
       {"",
        [&](const YAML::Node& m, const std::string& at) {
          if (t.from == tenant_source::header && !m["header"]) reject(child(at, "header"), "required with from: header");
          if (t.from == tenant_source::fixed && !m["value"]) reject(child(at, "value"), "required with from: fixed");
        }},
       {"default", [&](const YAML::Node& v, const std::string& at) { t.default_tenant = tenant_name(v, at); }},
       {"on_missing", choice(t.reject_missing, "action", reject_or_default)},
       {"spark_user_id", choice(t.qualify_users, "mode", user_id_modes)},
       {"on_unknown_tenant", choice(t.reject_unknown, "action", reject_or_default)},
       {"pools", section([&](const YAML::Node& v, const std::string& at) { t.pools = parse_pools(v, at, backends); })},
       {"backend_tokens", [&](const YAML::Node& v, const std::string& at) {
          read_per_tenant(v, at, t.backend_tokens, parse_secret);
        }}});
  return t;
}

rate parse_rate(const YAML::Node& n, const std::string& path) {
  rate r;
  read_fields(n, path,
              {{"rps",
                [&](const YAML::Node& v, const std::string& at) {
                  r.rps = as_number(v, at);
                  if (r.rps <= 0) reject(at, "must be greater than 0, got " + v.Scalar());
                  r.burst = std::max(r.rps, 1.0);
                },
                "required"},
               {"burst", [&](const YAML::Node& v, const std::string& at) {
                  r.burst = as_number(v, at);
                  if (r.burst < 1) reject(at, "must be at least 1, got " + v.Scalar());
                }}});
  return r;
}

rate_limits_config parse_rate_limits_section(const YAML::Node& n, const std::string& path) {
  rate_limits_config r;
  if (!present(n)) return r;
  read_fields(
      n, path,
      {{"per_tenant", section([&](const YAML::Node& v, const std::string& at) { r.per_tenant = parse_rate(v, at); })},
       {"per_user", section([&](const YAML::Node& v, const std::string& at) { r.per_user = parse_rate(v, at); })},
       {"tenants", [&](const YAML::Node& v, const std::string& at) { read_per_tenant(v, at, r.tenants, parse_rate); }}});
  return r;
}

/// Runs a section parser, turning the first bad field (or a yaml-cpp
/// surprise) into the error result.
template <class T, class F>
result<T> guarded(const char* section, F&& parse) {
  try {
    return parse();
  } catch (const bad_field& e) {
    return e.err;
  } catch (const std::exception& e) {
    return error{section, e.what()};
  }
}

}  // namespace

std::vector<field> security_fields(security_config& s, const std::vector<std::string>& backend_names) {
  return {
      {"auth", [&s](const YAML::Node& n, const std::string& at) { s.auth = parse_auth_section(n, at); }},
      {"tenants",
       [&s, &backend_names](const YAML::Node& n, const std::string& at) {
         s.tenants = parse_tenants_section(n, at, backend_names);
       }},
      {"backend_token",
       section([&s](const YAML::Node& n, const std::string& at) { s.backend_token = parse_secret(n, at); })},
      {"rate_limits",
       [&s](const YAML::Node& n, const std::string& at) { s.rate_limits = parse_rate_limits_section(n, at); }},
      {"",
       [&s](const YAML::Node& root, const std::string&) {
         // An explicit claim source is meaningless without tokens that carry claims.
         if (s.auth.type == auth_type::anonymous && root["tenants"] && root["tenants"]["from"] &&
             s.tenants.from == tenant_source::claim)
           reject("tenants.from", "claim needs auth type static, jwt or oidc");
       }},
  };
}

bool valid_tenant_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

result<auth_config> parse_auth(const YAML::Node& n) {
  return guarded<auth_config>("auth", [&] { return parse_auth_section(n, "auth"); });
}

result<tenants_config> parse_tenants(const YAML::Node& n, const std::vector<std::string>& backend_names) {
  return guarded<tenants_config>("tenants", [&] { return parse_tenants_section(n, "tenants", backend_names); });
}

result<std::optional<secret_ref>> parse_backend_token(const YAML::Node& n) {
  return guarded<std::optional<secret_ref>>("backend_token", [&]() -> std::optional<secret_ref> {
    if (!present(n)) return std::nullopt;
    return parse_secret(n, "backend_token");
  });
}

result<rate_limits_config> parse_rate_limits(const YAML::Node& n) {
  return guarded<rate_limits_config>("rate_limits", [&] { return parse_rate_limits_section(n, "rate_limits"); });
}

result<security_config> parse_security(const YAML::Node& root, const std::vector<std::string>& backend_names) {
  return guarded<security_config>("(root)", [&] {
    // The root's rows for these keys, without its check for unknown keys.
    security_config s;
    for (const auto& f : security_fields(s, backend_names)) {
      const std::string key(f.key);
      if (key.empty())
        f.read(root, "");
      else if (const YAML::Node n = root[key])
        f.read(n, key);
    }
    return s;
  });
}

std::optional<jwt_algorithm> jwt_algorithm_from_name(std::string_view name) {
  if (name == "RS256") return jwt_algorithm::rs256;
  if (name == "ES256") return jwt_algorithm::es256;
  if (name == "HS256") return jwt_algorithm::hs256;
  return std::nullopt;
}

std::string_view jwt_algorithm_name(jwt_algorithm a) {
  switch (a) {
    case jwt_algorithm::rs256:
      return "RS256";
    case jwt_algorithm::es256:
      return "ES256";
    case jwt_algorithm::hs256:
      return "HS256";
  }
  return "?";
}

}  // namespace scg::config

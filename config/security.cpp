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

/// One of `choices`, or an error listing them.
std::string one_of(const YAML::Node& n, const std::string& path, const char* what,
                   std::initializer_list<const char*> choices) {
  std::string s = as_string(n, path);
  std::string expected;
  std::size_t i = 0;
  for (const char* c : choices) {
    if (s == c) return s;
    expected += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(c);
    ++i;
  }
  reject(path,
         "unknown " + std::string(what) + " " + in_quotes(s) + " (expected " + expected + ")");
}

secret_ref parse_secret(const YAML::Node& n, const std::string& path) {
  // Each kind has its own key: inline → value, env → name, file → path.
  static constexpr std::pair<const char*, const char*> kinds[] = {
      {"inline", "value"}, {"env", "name"}, {"file", "path"}};
  check_keys(n, path, {"kind", "value", "name", "path"});
  if (!n["kind"]) reject(child(path, "kind"), "required");
  std::string kind = one_of(n["kind"], child(path, "kind"), "kind", {"inline", "env", "file"});
  secret_ref s;
  s.field = path;
  std::string key;
  for (auto [k, key_of_k] : kinds) {
    if (kind == k)
      key = key_of_k;
    else if (n[key_of_k])
      reject(child(path, key_of_k), "only with kind: " + std::string(k));
  }
  if (!n[key]) reject(child(path, key), "required with kind: " + kind);
  s.kind = kind == "inline" ? secret_ref::source::inline_value
           : kind == "env"  ? secret_ref::source::env
                            : secret_ref::source::file;
  s.value = s.kind == secret_ref::source::inline_value ? secret_string(n[key], child(path, key))
                                                       : non_empty(n[key], child(path, key));
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

jwt_config parse_jwt(const YAML::Node& n) {
  const std::string path = "auth.jwt";
  check_keys(n, path,
             {"algorithms", "key_file", "key_pem", "hmac_secret", "issuer", "audience",
              "leeway_secs", "user_claim"});
  jwt_config j;
  if (!n["algorithms"]) reject(child(path, "algorithms"), "required");
  j.algorithms = parse_algorithms(n["algorithms"], child(path, "algorithms"), true);
  int sources = 0;
  if (n["key_file"]) j.key_file = non_empty(n["key_file"], child(path, "key_file")), ++sources;
  if (n["key_pem"]) j.key_pem = non_empty(n["key_pem"], child(path, "key_pem")), ++sources;
  if (n["hmac_secret"])
    j.hmac_secret = parse_secret(n["hmac_secret"], child(path, "hmac_secret")), ++sources;
  if (sources != 1) reject(path, "exactly one of key_file, key_pem or hmac_secret is required");
  // The key kind fixes the algorithms: a public key never doubles as an HMAC secret.
  for (std::size_t i = 0; i < j.algorithms.size(); ++i) {
    bool hs = j.algorithms[i] == jwt_algorithm::hs256;
    if (hs && !j.hmac_secret)
      reject(item(child(path, "algorithms"), i), "HS256 needs hmac_secret, not a public key");
    if (!hs && j.hmac_secret)
      reject(item(child(path, "algorithms"), i), std::string(jwt_algorithm_name(j.algorithms[i])) +
                                                     " needs key_file or key_pem, not hmac_secret");
  }
  // Whether key_pem is a key is for auth::authenticator::create, at start
  // and in `scg check`: the config knows no cryptography.
  if (n["issuer"]) j.issuer = as_string(n["issuer"], child(path, "issuer"));
  if (n["audience"]) j.audience = as_string(n["audience"], child(path, "audience"));
  read_int(n, path, "leeway_secs", j.leeway_secs, 0, 3600);
  if (n["user_claim"]) j.user_claim = non_empty(n["user_claim"], child(path, "user_claim"));
  return j;
}

oidc_config parse_oidc(const YAML::Node& n) {
  const std::string path = "auth.oidc";
  check_keys(n, path,
             {"issuer", "discovery_url", "audience", "algorithms", "refresh_secs",
              "min_refresh_interval_secs", "fetch_timeout_ms", "leeway_secs", "user_claim"});
  oidc_config o;
  if (!n["issuer"]) reject(child(path, "issuer"), "required");
  o.issuer = non_empty(n["issuer"], child(path, "issuer"));
  if (n["discovery_url"]) {
    o.discovery_url = as_string(n["discovery_url"], child(path, "discovery_url"));
  } else {
    std::string base = o.issuer;
    while (!base.empty() && base.back() == '/') base.pop_back();
    o.discovery_url = base + "/.well-known/openid-configuration";
  }
  if (!is_http_url(o.discovery_url))
    reject(child(path, n["discovery_url"] ? "discovery_url" : "issuer"),
           in_quotes(o.discovery_url) + " is not an http:// or https:// URL");
  if (!n["audience"]) reject(child(path, "audience"), "required");
  o.audience = non_empty(n["audience"], child(path, "audience"));
  if (n["algorithms"])
    o.algorithms = parse_algorithms(n["algorithms"], child(path, "algorithms"), false);
  read_int(n, path, "refresh_secs", o.refresh_secs, 1);
  read_int(n, path, "min_refresh_interval_secs", o.min_refresh_interval_secs, 1);
  read_int(n, path, "fetch_timeout_ms", o.fetch_timeout_ms, 1, 60000);
  read_int(n, path, "leeway_secs", o.leeway_secs, 0, 3600);
  if (n["user_claim"]) o.user_claim = non_empty(n["user_claim"], child(path, "user_claim"));
  return o;
}

auth_config parse_auth_section(const YAML::Node& n) {
  auth_config a;
  if (!present(n)) return a;
  const std::string path = "auth";
  check_keys(n, path, {"type", "tokens", "jwt", "oidc"});
  std::string type = "anonymous";
  if (n["type"])
    type = one_of(n["type"], child(path, "type"), "type", {"anonymous", "static", "jwt", "oidc"});
  a.type = type == "static" ? auth_type::static_tokens
           : type == "jwt"  ? auth_type::jwt
           : type == "oidc" ? auth_type::oidc
                            : auth_type::anonymous;
  for (const char* section : {"tokens", "jwt", "oidc"}) {
    std::string owner = std::strcmp(section, "tokens") == 0 ? "static" : section;
    if (n[section] && owner != type) reject(child(path, section), "only with type: " + owner);
    if (!n[section] && owner == type) reject(child(path, section), "required with type: " + owner);
  }
  if (a.type == auth_type::static_tokens) {
    const YAML::Node& tokens = n["tokens"];
    const std::string at = child(path, "tokens");
    if (!tokens.IsSequence()) reject(at, "expected a list, got " + describe(tokens));
    if (tokens.size() == 0) reject(at, "at least one token is required");
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::string t_at = item(at, i);
      check_keys(tokens[i], t_at, {"token", "user_id", "tenant"});
      static_token t;
      if (!tokens[i]["token"]) reject(child(t_at, "token"), "required");
      t.token = secret_string(tokens[i]["token"], child(t_at, "token"));
      if (!tokens[i]["user_id"]) reject(child(t_at, "user_id"), "required");
      t.user_id = non_empty(tokens[i]["user_id"], child(t_at, "user_id"));
      if (tokens[i]["tenant"]) t.tenant = tenant_name(tokens[i]["tenant"], child(t_at, "tenant"));
      for (const auto& other : a.tokens)
        if (other.token == t.token) reject(child(t_at, "token"), "duplicate token");
      a.tokens.push_back(std::move(t));
    }
  }
  if (a.type == auth_type::jwt) a.jwt = parse_jwt(n["jwt"]);
  if (a.type == auth_type::oidc) a.oidc = parse_oidc(n["oidc"]);
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

tenants_config parse_tenants_section(const YAML::Node& n,
                                     const std::vector<std::string>& backends) {
  tenants_config t;
  if (!present(n)) return t;
  const std::string path = "tenants";
  check_keys(n, path,
             {"from", "claim", "header", "value", "default", "on_missing", "on_unknown_tenant",
              "pools", "backend_tokens", "spark_user_id"});
  std::string from = "claim";
  if (n["from"])
    from = one_of(n["from"], child(path, "from"), "source", {"claim", "header", "fixed"});
  t.from = from == "header"  ? tenant_source::header
           : from == "fixed" ? tenant_source::fixed
                             : tenant_source::claim;
  for (auto [key, owner] :
       {std::pair{"claim", "claim"}, std::pair{"header", "header"}, std::pair{"value", "fixed"}})
    if (n[key] && from != owner) reject(child(path, key), "only with from: " + std::string(owner));
  if (n["claim"]) t.claim = non_empty(n["claim"], child(path, "claim"));
  if (t.from == tenant_source::header) {
    if (!n["header"]) reject(child(path, "header"), "required with from: header");
    t.header = non_empty(n["header"], child(path, "header"));
    // gRPC metadata keys are lowercase; reserved and auth keys are not tenant sources.
    bool ok =
        t.header.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_.") == std::string::npos;
    if (!ok)
      reject(child(path, "header"), in_quotes(t.header) + " is not a lowercase metadata key");
    if (t.header.rfind("grpc-", 0) == 0 || t.header == "authorization" || t.header.back() == '.' ||
        (t.header.size() > 4 && t.header.compare(t.header.size() - 4, 4, "-bin") == 0))
      reject(child(path, "header"), in_quotes(t.header) + " cannot carry a tenant");
  }
  if (t.from == tenant_source::fixed) {
    if (!n["value"]) reject(child(path, "value"), "required with from: fixed");
    t.value = tenant_name(n["value"], child(path, "value"));
  }
  if (n["default"]) t.default_tenant = tenant_name(n["default"], child(path, "default"));
  if (n["on_missing"])
    t.reject_missing = one_of(n["on_missing"], child(path, "on_missing"), "action",
                              {"use_default", "reject"}) == "reject";
  if (n["spark_user_id"])
    t.qualify_users = one_of(n["spark_user_id"], child(path, "spark_user_id"), "mode",
                             {"qualified", "plain"}) == "qualified";
  if (n["on_unknown_tenant"])
    t.reject_unknown = one_of(n["on_unknown_tenant"], child(path, "on_unknown_tenant"), "action",
                              {"use_default", "reject"}) == "reject";
  if (const YAML::Node& pools = n["pools"]; present(pools)) {
    const std::string at = child(path, "pools");
    if (!pools.IsMap()) reject(at, "expected a map, got " + describe(pools));
    for (const auto& kv : pools) {
      std::string tenant = tenant_name(kv.first, at);
      const std::string p_at = child(at, tenant);
      if (t.pools.count(tenant)) reject(p_at, "duplicate key");
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
      t.pools.emplace(std::move(tenant), std::move(names));
    }
  }
  read_per_tenant(n["backend_tokens"], child(path, "backend_tokens"), t.backend_tokens, parse_secret);
  return t;
}

rate parse_rate(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"rps", "burst"});
  rate r;
  if (!n["rps"]) reject(child(path, "rps"), "required");
  r.rps = as_number(n["rps"], child(path, "rps"));
  if (r.rps <= 0) reject(child(path, "rps"), "must be greater than 0, got " + n["rps"].Scalar());
  r.burst = std::max(r.rps, 1.0);
  if (n["burst"]) {
    r.burst = as_number(n["burst"], child(path, "burst"));
    if (r.burst < 1) reject(child(path, "burst"), "must be at least 1, got " + n["burst"].Scalar());
  }
  return r;
}

rate_limits_config parse_rate_limits_section(const YAML::Node& n) {
  rate_limits_config r;
  if (!present(n)) return r;
  const std::string path = "rate_limits";
  check_keys(n, path, {"per_tenant", "per_user", "tenants"});
  if (present(n["per_tenant"]))
    r.per_tenant = parse_rate(n["per_tenant"], child(path, "per_tenant"));
  if (present(n["per_user"])) r.per_user = parse_rate(n["per_user"], child(path, "per_user"));
  read_per_tenant(n["tenants"], child(path, "tenants"), r.tenants, parse_rate);
  return r;
}

/// Runs a section parser, turning the first bad field (or a yaml-cpp
/// surprise) into the error result.
template <class T, class F>
std::variant<T, error> guarded(const char* section, F&& parse) {
  try {
    return parse();
  } catch (const bad_field& e) {
    return e.err;
  } catch (const std::exception& e) {
    return error{section, e.what()};
  }
}

}  // namespace

bool valid_tenant_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::variant<auth_config, error> parse_auth(const YAML::Node& n) {
  return guarded<auth_config>("auth", [&] { return parse_auth_section(n); });
}

std::variant<tenants_config, error> parse_tenants(
    const YAML::Node& n, const std::vector<std::string>& backend_names) {
  return guarded<tenants_config>("tenants",
                                 [&] { return parse_tenants_section(n, backend_names); });
}

std::variant<std::optional<secret_ref>, error> parse_backend_token(const YAML::Node& n) {
  return guarded<std::optional<secret_ref>>("backend_token", [&]() -> std::optional<secret_ref> {
    if (!present(n)) return std::nullopt;
    return parse_secret(n, "backend_token");
  });
}

std::variant<rate_limits_config, error> parse_rate_limits(const YAML::Node& n) {
  return guarded<rate_limits_config>("rate_limits", [&] { return parse_rate_limits_section(n); });
}

std::variant<security_config, error> parse_security(
    const YAML::Node& root, const std::vector<std::string>& backend_names) {
  return guarded<security_config>("(root)", [&] {
    security_config s;
    s.auth = parse_auth_section(root["auth"]);
    s.tenants = parse_tenants_section(root["tenants"], backend_names);
    if (present(root["backend_token"]))
      s.backend_token = parse_secret(root["backend_token"], "backend_token");
    s.rate_limits = parse_rate_limits_section(root["rate_limits"]);
    // An explicit claim source is meaningless without tokens that carry claims.
    if (s.auth.type == auth_type::anonymous && root["tenants"] && root["tenants"]["from"] &&
        s.tenants.from == tenant_source::claim)
      reject("tenants.from", "claim needs auth type static, jwt or oidc");
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

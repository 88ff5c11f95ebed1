#include "auth/credentials.hpp"
#include "config/security.hpp"

#include <catch2/catch.hpp>

#include <string>

#include <yaml-cpp/yaml.h>

#include "config/config.hpp"

using namespace scg::auth;
using namespace scg::config;

namespace {

const std::vector<std::string> backends{"sc-0", "sc-1"};

result<security_config> parse(const std::string& yaml) { return parse_security(YAML::Load(yaml), backends); }

security_config ok(const std::string& yaml) {
  auto r = parse(yaml);
  if (!r.ok()) FAIL(r.error().to_string());
  return r.value();
}

/// The "field: message" of a configuration that must be refused.
std::string error_of(const std::string& yaml) {
  auto r = parse(yaml);
  if (r.ok()) return "(accepted)";
  return r.error().to_string();
}

}  // namespace

TEST_CASE("absent security sections mean anonymous, default tenant, no limits", "[auth][config]") {
  auto s = ok("bind_addr: x");
  CHECK(s.auth.type == auth_type::anonymous);
  CHECK(s.tenants.from == tenant_source::claim);
  CHECK(s.tenants.default_tenant == "default");
  CHECK_FALSE(s.tenants.reject_missing);
  CHECK_FALSE(s.backend_token);
  CHECK_FALSE(s.rate_limits.per_tenant);
  CHECK_FALSE(s.rate_limits.per_user);
}

TEST_CASE("every security key parses", "[auth][config]") {
  auto s = ok(R"(
auth:
  type: static
  tokens:
    - { token: "t-alice", user_id: alice, tenant: team-a }
    - { token: "t-bob", user_id: bob }
tenants:
  from: header
  header: x-scg-tenant
  default: shared
  on_missing: reject
  on_unknown_tenant: use_default
  pools: { team-a: [sc-0], shared: [sc-0, sc-1] }
  backend_tokens:
    team-a: { kind: file, path: /run/secrets/team-a }
backend_token: { kind: env, name: SCG_BACKEND_TOKEN }
rate_limits:
  per_tenant: { rps: 100, burst: 200 }
  per_user: { rps: 2.5 }
  tenants: { team-a: { rps: 500, burst: 1000 } }
)");
  REQUIRE(s.auth.tokens.size() == 2);
  CHECK(s.auth.tokens[0].tenant == "team-a");
  CHECK(s.auth.tokens[1].tenant.empty());
  CHECK(s.tenants.from == tenant_source::header);
  CHECK(s.tenants.header == "x-scg-tenant");
  CHECK(s.tenants.reject_missing);
  CHECK_FALSE(s.tenants.reject_unknown);
  CHECK(s.tenants.pools.at("shared") == std::vector<std::string>{"sc-0", "sc-1"});
  CHECK(s.tenants.backend_tokens.at("team-a").kind == secret_ref::source::file);
  CHECK(s.tenants.backend_tokens.at("team-a").field == "tenants.backend_tokens.team-a");
  REQUIRE(s.backend_token);
  CHECK(s.backend_token->kind == secret_ref::source::env);
  CHECK(s.backend_token->value == "SCG_BACKEND_TOKEN");
  CHECK(s.rate_limits.per_tenant->burst == 200);
  CHECK(s.rate_limits.per_user->rps == 2.5);
  CHECK(s.rate_limits.per_user->burst == 2.5);  // burst defaults to rps
  CHECK(s.rate_limits.tenants.at("team-a").rps == 500);
}

TEST_CASE("jwt and oidc settings parse with their defaults", "[auth][config]") {
  auto j = ok(R"(
auth:
  type: jwt
  jwt: { algorithms: [RS256, ES256], key_file: /etc/scg/jwt.pem, issuer: https://i, audience: scg }
)");
  CHECK(j.auth.jwt.algorithms == std::vector<jwt_algorithm>{jwt_algorithm::rs256, jwt_algorithm::es256});
  CHECK(j.auth.jwt.leeway_secs == 60);
  CHECK(j.auth.jwt.user_claim == "sub");

  auto o = ok(R"(
auth:
  type: oidc
  oidc: { issuer: "https://idp.example/realms/x/", audience: scg, refresh_secs: 60 }
)");
  CHECK(o.auth.oidc.discovery_url ==
        "https://idp.example/realms/x/.well-known/openid-configuration");
  CHECK(o.auth.oidc.algorithms == std::vector<jwt_algorithm>{jwt_algorithm::rs256, jwt_algorithm::es256});
  CHECK(o.auth.oidc.refresh_secs == 60);
  CHECK(o.auth.oidc.min_refresh_interval_secs == 10);
}

TEST_CASE("auth errors name the field", "[auth][config]") {
  CHECK(error_of("auth: { type: kerberos }") ==
        "auth.type: unknown type \"kerberos\" (expected anonymous, static, jwt or oidc)");
  CHECK(error_of("auth: { type: static }") == "auth.tokens: required with type: static");
  CHECK(error_of("auth: { type: jwt }") == "auth.jwt: required with type: jwt");
  CHECK(error_of("auth: { tokens: [] }") == "auth.tokens: only with type: static");
  CHECK(error_of("auth: { type: static, tokens: [], extra: 1 }") == "auth.extra: unknown key");
  CHECK(error_of("auth: { type: static, tokens: [] }") ==
        "auth.tokens: at least one token is required");
  CHECK(error_of("auth: { type: static, tokens: [ { token: abc } ] }") ==
        "auth.tokens[0].user_id: required");
  CHECK(error_of(
            "auth: { type: static, tokens: [ { token: s3cret, user_id: a, tenant: \"a b\" } ] }") ==
        "auth.tokens[0].tenant: \"a b\" is not a tenant name (1 to 128 of A-Z a-z 0-9 . _ -)");
  // A duplicate token is reported without quoting it.
  std::string dup = error_of(
      "auth: { type: static, tokens: [ { token: s3cret, user_id: a }, { token: s3cret, user_id: b "
      "} ] }");
  CHECK(dup == "auth.tokens[1].token: duplicate token");
  CHECK(error_of("auth: { type: static, tokens: [ { token: [x], user_id: a } ] }") ==
        "auth.tokens[0].token: expected a string");
}

TEST_CASE("jwt errors name the field and refuse mixing key kinds", "[auth][config]") {
  CHECK(error_of("auth: { type: jwt, jwt: { algorithms: [RS256, none], key_file: k.pem } }") ==
        "auth.jwt.algorithms[1]: unknown algorithm \"none\" (expected RS256, ES256, HS256)");
  CHECK(error_of("auth: { type: jwt, jwt: { algorithms: [], key_file: k.pem } }") ==
        "auth.jwt.algorithms: at least one algorithm is required");
  CHECK(error_of("auth: { type: jwt, jwt: { algorithms: [RS256] } }") ==
        "auth.jwt: exactly one of key_file, key_pem or hmac_secret is required");
  CHECK(error_of("auth: { type: jwt, jwt: { algorithms: [RS256], key_file: a, key_pem: b } }") ==
        "auth.jwt: exactly one of key_file, key_pem or hmac_secret is required");
  CHECK(error_of("auth: { type: jwt, jwt: { algorithms: [RS256, HS256], key_file: k.pem } }") ==
        "auth.jwt.algorithms[1]: HS256 needs hmac_secret, not a public key");
  CHECK(error_of("auth: { type: jwt, jwt: { algorithms: [ES256], hmac_secret: { kind: env, name: S "
                 "} } }") ==
        "auth.jwt.algorithms[0]: ES256 needs key_file or key_pem, not hmac_secret");
  CHECK(
      error_of("auth: { type: jwt, jwt: { algorithms: [RS256], key_file: k, leeway_secs: -1 } }") ==
      "auth.jwt.leeway_secs: must be at least 0, got -1");
}

TEST_CASE("oidc errors name the field", "[auth][config]") {
  CHECK(error_of("auth: { type: oidc, oidc: { audience: scg } }") == "auth.oidc.issuer: required");
  CHECK(error_of("auth: { type: oidc, oidc: { issuer: https://i } }") ==
        "auth.oidc.audience: required");
  CHECK(
      error_of(
          "auth: { type: oidc, oidc: { issuer: https://i, audience: a, algorithms: [HS256] } }") ==
      "auth.oidc.algorithms[0]: HS256 is not available with oidc (JWKS keys are public keys)");
  CHECK(error_of("auth: { type: oidc, oidc: { issuer: idp, audience: a } }") ==
        "auth.oidc.issuer: \"idp/.well-known/openid-configuration\" is not an http:// or "
        "https:// URL");
  CHECK(
      error_of("auth: { type: oidc, oidc: { issuer: https://i, audience: a, refresh_secs: 0 } }") ==
      "auth.oidc.refresh_secs: must be at least 1, got 0");
}

TEST_CASE("tenant errors name the field", "[auth][config]") {
  CHECK(error_of("tenants: { from: cookie }") ==
        "tenants.from: unknown source \"cookie\" (expected claim, header or fixed)");
  CHECK(error_of("tenants: { from: header }") == "tenants.header: required with from: header");
  CHECK(error_of("tenants: { from: header, header: X-Tenant }") ==
        "tenants.header: \"X-Tenant\" is not a lowercase metadata key");
  CHECK(error_of("tenants: { from: header, header: authorization }") ==
        "tenants.header: \"authorization\" cannot carry a tenant");
  CHECK(error_of("tenants: { from: fixed }") == "tenants.value: required with from: fixed");
  CHECK(error_of("tenants: { from: fixed, value: a, header: x }") ==
        "tenants.header: only with from: header");
  CHECK(error_of("tenants: { on_missing: ignore }") ==
        "tenants.on_missing: unknown action \"ignore\" (expected use_default or reject)");
  CHECK(error_of("tenants: { pools: { team-a: [sc-9] } }") ==
        "tenants.pools.team-a[0]: unknown backend \"sc-9\"");
  CHECK(error_of("tenants: { pools: { team-a: [] } }") ==
        "tenants.pools.team-a: at least one backend is required");
  CHECK(error_of("tenants: { backend_tokens: { team-a: { kind: env } } }") ==
        "tenants.backend_tokens.team-a.name: required with kind: env");
  CHECK(error_of("auth: {}\ntenants: { from: claim }") ==
        "tenants.from: claim needs auth type static, jwt or oidc");
}

TEST_CASE("backend_token and rate limit errors name the field", "[auth][config]") {
  CHECK(error_of("backend_token: { name: X }") == "backend_token.kind: required");
  CHECK(error_of("backend_token: { kind: vault, name: X }") ==
        "backend_token.kind: unknown kind \"vault\" (expected inline, env or file)");
  CHECK(error_of("backend_token: { kind: env, path: /x }") ==
        "backend_token.path: only with kind: file");
  CHECK(error_of("backend_token: { kind: inline, value: \"\" }") ==
        "backend_token.value: must not be empty");
  CHECK(error_of("backend_token: \"tok\"") == "backend_token: expected a map, got \"tok\"");
  CHECK(error_of("rate_limits: { per_user: { burst: 3 } }") ==
        "rate_limits.per_user.rps: required");
  CHECK(error_of("rate_limits: { per_tenant: { rps: 0 } }") ==
        "rate_limits.per_tenant.rps: must be greater than 0, got 0");
  CHECK(error_of("rate_limits: { per_tenant: { rps: 5, burst: 0.5 } }") ==
        "rate_limits.per_tenant.burst: must be at least 1, got 0.5");
  CHECK(error_of("rate_limits: { per_second: 3 }") == "rate_limits.per_second: unknown key");
}

TEST_CASE("each section parses on its own", "[auth][config]") {
  auto a = parse_auth(YAML::Load("type: static\ntokens: [ { token: t, user_id: u } ]"));
  // A section parsed alone reports paths as under the root.
  CHECK(a.ok());
  auto r = parse_rate_limits(YAML::Load("per_user: { rps: 1 }"));
  REQUIRE(r.ok());
  CHECK(r.value().per_user->burst == 1);
  auto t = parse_backend_token(YAML::Node());
  REQUIRE(t.ok());
  CHECK_FALSE(t.value());
  auto bad = parse_tenants(YAML::Load("from: header"), {});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().field == "tenants.header");
}

TEST_CASE("the user id Spark sees keeps two tenants' users apart", "[auth][tenants]") {
  using scg::auth::spark_user_id;
  CHECK(spark_user_id("default", "bob", "default") == "bob");
  CHECK(spark_user_id("red", "bob", "default") == "red:bob");
  CHECK(spark_user_id("blue", "bob", "default") == "blue:bob");
  // A default-tenant user cannot pose as another tenant's user by choosing its id.
  CHECK(spark_user_id("default", "red:bob", "default") == "default:red:bob");
  CHECK(spark_user_id("red", "", "default") == "red:");
}

TEST_CASE("tenants.spark_user_id is qualified unless set to plain", "[auth][tenants][config]") {
  CHECK(ok("bind_addr: x").tenants.qualify_users);
  CHECK_FALSE(ok("tenants: { spark_user_id: plain }").tenants.qualify_users);
  CHECK(error_of("tenants: { spark_user_id: mixed }").find("tenants.spark_user_id") == 0);
}

#include "auth/authenticator.hpp"

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <cstdio>
#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

#include "config/config.hpp"
#include "tests/jwt_keys.hpp"

using namespace scg::auth;
using namespace scg::config;
using nlohmann::json;

using namespace scg_auth_test;

namespace {

constexpr std::int64_t now = 1'700'000'000;

security_config security(const std::string& yaml) {
  auto r = parse_security(YAML::Load(yaml), {"sc-0", "sc-1", "sc-2"});
  if (auto* e = std::get_if<scg::config::error>(&r)) FAIL(e->to_string());
  return std::get<security_config>(r);
}

std::unique_ptr<authenticator> make(const std::string& yaml) {
  authenticator::options o;
  o.unix_now = [] { return now; };
  auto r = authenticator::create(security(yaml), o);
  if (auto* e = std::get_if<scg::config::error>(&r)) FAIL(e->to_string());
  return std::move(std::get<std::unique_ptr<authenticator>>(r));
}

/// Authenticates with an authorization value and request metadata; returns
/// "user@tenant" (user "-" when unverified) or the failure reason.
std::string who(const authenticator& a, std::optional<std::string> authorization,
                std::map<std::string, std::string> metadata = {}) {
  header_lookup headers = [&](std::string_view k) -> std::optional<std::string_view> {
    auto it = metadata.find(std::string(k));
    if (it == metadata.end()) return std::nullopt;
    return std::string_view(it->second);
  };
  std::optional<std::string_view> auth;
  if (authorization) auth = *authorization;
  auto r = a.authenticate(auth, headers);
  if (auto* f = std::get_if<failure>(&r)) return f->reason;
  const identity& id = std::get<identity>(r);
  CHECK(id.verified == !id.user_id.empty());
  return (id.verified ? id.user_id : "-") + "@" + id.tenant;
}

const char* static_yaml = R"(
auth:
  type: static
  tokens:
    - { token: "alice-token-0123456789", user_id: alice, tenant: team-a }
    - { token: "bob-token-0123456789", user_id: bob }
)";

}  // namespace

TEST_CASE("anonymous auth lets the request's own user stand and uses the default tenant",
          "[auth][authenticator]") {
  auto a = make("{}");
  CHECK(who(*a, std::nullopt) == "-@default");
  CHECK(who(*a, "Bearer whatever") == "-@default");
}

TEST_CASE("static tokens map a bearer token to its user and tenant", "[auth][authenticator]") {
  auto a = make(static_yaml);
  CHECK(who(*a, "Bearer alice-token-0123456789") == "alice@team-a");
  CHECK(who(*a, "bearer  alice-token-0123456789 ") == "alice@team-a");
  CHECK(who(*a, "Bearer bob-token-0123456789") == "bob@default");
  CHECK(who(*a, "Bearer alice-token-012345678") == "unknown token");
  CHECK(who(*a, "Bearer alice-token-01234567890") == "unknown token");
  CHECK(who(*a, std::nullopt) == "missing bearer token");
  CHECK(who(*a, "Basic YWxpY2U6cHc=") == "missing bearer token");
  CHECK(who(*a, "Bearer ") == "missing bearer token");
}

TEST_CASE("a JWT with an HMAC secret from the environment names user and tenant by claim",
          "[auth][authenticator]") {
  ::setenv("SCG_TEST_JWT_SECRET", "an-hmac-secret-that-is-long-enough-32", 1);
  auto a = make(R"(
auth:
  type: jwt
  jwt:
    algorithms: [HS256]
    hmac_secret: { kind: env, name: SCG_TEST_JWT_SECRET }
    issuer: https://idp.test
    user_claim: email
tenants: { from: claim, claim: org }
)");
  json claims{{"email", "carol@example.com"},
              {"org", "team-b"},
              {"iss", "https://idp.test"},
              {"exp", now + 60}};
  auto token = sign_hs256({{"alg", "HS256"}}, claims, "an-hmac-secret-that-is-long-enough-32");
  CHECK(who(*a, "Bearer " + token) == "carol@example.com@team-b");
  claims.erase("org");
  CHECK(who(*a, "Bearer " + sign_hs256({{"alg", "HS256"}}, claims,
                                       "an-hmac-secret-that-is-long-enough-32")) ==
        "carol@example.com@default");
  claims.erase("email");
  CHECK(who(*a, "Bearer " + sign_hs256({{"alg", "HS256"}}, claims,
                                       "an-hmac-secret-that-is-long-enough-32")) ==
        "token has no user claim");
  std::string flipped = token;
  flipped[flipped.size() - 5] = flipped[flipped.size() - 5] == 'A' ? 'B' : 'A';
  CHECK(who(*a, "Bearer " + flipped) == "signature invalid");
  ::unsetenv("SCG_TEST_JWT_SECRET");
}

TEST_CASE("a JWT checked against an inline PEM refuses the HS256 key-confusion forgery",
          "[auth][authenticator]") {
  std::string pem = public_pem(test_key("RSA"));
  YAML::Node root;
  root["auth"]["type"] = "jwt";
  root["auth"]["jwt"]["algorithms"].push_back("RS256");
  root["auth"]["jwt"]["key_pem"] = pem;
  root["auth"]["jwt"]["audience"] = "scg";
  auto r = parse_security(root, {});
  REQUIRE(std::holds_alternative<security_config>(r));
  authenticator::options o;
  o.unix_now = [] { return now; };
  auto a = std::get<std::unique_ptr<authenticator>>(
      authenticator::create(std::get<security_config>(r), o));

  json claims{{"sub", "dave"}, {"aud", "scg"}, {"exp", now + 60}};
  CHECK(who(*a, "Bearer " + sign_jwt({{"alg", "RS256"}}, claims, test_key("RSA"))) ==
        "dave@default");
  CHECK(who(*a, "Bearer " + sign_hs256({{"alg", "HS256"}}, claims, pem)) ==
        "algorithm not allowed");
  claims["aud"] = "other";
  CHECK(who(*a, "Bearer " + sign_jwt({{"alg", "RS256"}}, claims, test_key("RSA"))) ==
        "audience mismatch");
}

TEST_CASE("a key file that cannot be read is a startup error naming the field",
          "[auth][authenticator]") {
  auto r = authenticator::create(security(R"(
auth: { type: jwt, jwt: { algorithms: [ES256], key_file: /nonexistent/scg-key.pem } }
)"));
  REQUIRE(std::holds_alternative<scg::config::error>(r));
  CHECK(std::get<scg::config::error>(r).field == "auth.jwt.key_file");
}

TEST_CASE("an inline key_pem that is no key is a startup error naming the field", "[auth][authenticator]") {
  auto r = authenticator::create(security(R"(
auth: { type: jwt, jwt: { algorithms: [RS256], key_pem: "not a key" } }
)"));
  REQUIRE(std::holds_alternative<scg::config::error>(r));
  CHECK(std::get<scg::config::error>(r).to_string() == "auth.jwt.key_pem: not a readable PEM public key or certificate");
}

TEST_CASE("tenants come from a header, with missing and unknown tenants per policy",
          "[auth][authenticator]") {
  auto a = make(std::string(static_yaml) + R"(
tenants:
  from: header
  header: x-scg-tenant
  default: shared
  on_missing: reject
  on_unknown_tenant: reject
  pools: { team-a: [sc-0], shared: [sc-1, sc-2] }
)");
  const std::string alice = "Bearer alice-token-0123456789";
  CHECK(who(*a, alice, {{"x-scg-tenant", "team-a"}}) == "alice@team-a");
  CHECK(who(*a, alice, {{"x-scg-tenant", "shared"}}) == "alice@shared");
  CHECK(who(*a, alice) == "missing tenant");
  CHECK(who(*a, alice, {{"x-scg-tenant", "team-z"}}) == "unknown tenant");
  CHECK(who(*a, alice, {{"x-scg-tenant", "team a\n"}}) == "invalid tenant");
  REQUIRE(a->pool("team-a") != nullptr);
  CHECK(*a->pool("team-a") == std::vector<std::string>{"sc-0"});
  CHECK(a->pool("team-z") == nullptr);

  auto lenient = make(std::string(static_yaml) + R"(
tenants: { from: header, header: x-scg-tenant, pools: { team-a: [sc-0] } }
)");
  CHECK(who(*lenient, alice) == "alice@default");
  CHECK(who(*lenient, alice, {{"x-scg-tenant", "team-z"}}) == "alice@default");
}

TEST_CASE("a fixed tenant ignores claims and headers", "[auth][authenticator]") {
  auto a = make(std::string(static_yaml) + "tenants: { from: fixed, value: lab }\n");
  CHECK(who(*a, "Bearer alice-token-0123456789", {{"x-scg-tenant", "team-a"}}) == "alice@lab");
}

TEST_CASE("session keys separate tenants and users that share a session id",
          "[auth][authenticator]") {
  CHECK(session_key("a", "u", "s") != session_key("b", "u", "s"));
  CHECK(session_key("a", "u", "s") != session_key("a", "v", "s"));
  CHECK(session_key("a", "bc", "s") != session_key("ab", "c", "s"));
  CHECK(session_key("a", "u", "s") == session_key("a", "u", "s"));
}

TEST_CASE("backend tokens resolve from inline, env and file, with per-tenant overrides",
          "[auth][authenticator]") {
  char path[] = "/tmp/scg-backend-token-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::FILE* f = ::fdopen(fd, "w");
  std::fputs("file-token-abc\n", f);
  std::fclose(f);
  ::setenv("SCG_TEST_BACKEND_TOKEN", "env-token-xyz", 1);

  auto s = security(std::string(R"(
backend_token: { kind: env, name: SCG_TEST_BACKEND_TOKEN }
tenants:
  backend_tokens:
    team-a: { kind: file, path: ")") +
                    path + R"(" }
    team-b: { kind: inline, value: inline-token }
)");
  auto r = resolve_backend_tokens(s);
  REQUIRE(std::holds_alternative<backend_credentials>(r));
  const auto& c = std::get<backend_credentials>(r);
  CHECK(c.for_tenant("team-a") == "file-token-abc");
  CHECK(c.for_tenant("team-b") == "inline-token");
  CHECK(c.for_tenant("team-c") == "env-token-xyz");

  ::unsetenv("SCG_TEST_BACKEND_TOKEN");
  auto missing = resolve_backend_tokens(s);
  REQUIRE(std::holds_alternative<scg::config::error>(missing));
  CHECK(std::get<scg::config::error>(missing).to_string() ==
        "backend_token: environment variable \"SCG_TEST_BACKEND_TOKEN\" is not set");

  auto spaced = resolve_backend_tokens(security(R"(
backend_token: { kind: inline, value: "two words" }
)"));
  REQUIRE(std::holds_alternative<scg::config::error>(spaced));
  CHECK(std::get<scg::config::error>(spaced).message.find("two") == std::string::npos);
  std::remove(path);
}

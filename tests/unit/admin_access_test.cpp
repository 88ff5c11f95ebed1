#include "admin/admin_access.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "auth/admin_auth.hpp"
#include "config/config.hpp"

using namespace scg;
using auth::admin_role;
using admin::deny_reason;

namespace {

/// An admin token and a read token.
struct both_tokens : auth::admin_tokens {
  both_tokens() { set({"admin-secret"}, {"read-secret"}); }
};

admin::access_decision ask(const auth::admin_tokens& t, std::string_view method, std::string_view path,
                         std::string_view authorization = "", std::string_view origin = "",
                         admin::access_policy policy = {}) {
  return admin::decide(policy, t, {method, path, origin, "127.0.0.1:9090", authorization});
}

}  // namespace

TEST_CASE("admin endpoints are classified by what they need", "[admin][access]") {
  using admin::admin_route;
  CHECK(admin::classify("GET", "/healthz") == admin_route::probe);
  CHECK(admin::classify("GET", "/readyz") == admin_route::probe);
  CHECK(admin::classify("GET", "/") == admin_route::page);
  CHECK(admin::classify("GET", "/ui/app.js") == admin_route::page);
  CHECK(admin::classify("GET", "/metrics") == admin_route::metrics);
  CHECK(admin::classify("GET", "/api/v1/sessions") == admin_route::read);
  CHECK(admin::classify("HEAD", "/api/v1/backends") == admin_route::read);
  CHECK(admin::classify("POST", "/api/v1/backends/sc-1/drain") == admin_route::change);
  CHECK(admin::classify("DELETE", "/api/v1/anything") == admin_route::change);
  CHECK(admin::classify("GET", "/nothing") == admin_route::other);
  CHECK(admin::is_heavy(admin_route::metrics));
  CHECK(admin::is_heavy(admin_route::read));
  CHECK_FALSE(admin::is_heavy(admin_route::probe));
  CHECK_FALSE(admin::is_heavy(admin_route::change));
}

TEST_CASE("a drain needs the admin token: none is 401, a read token 403, a wrong one 401", "[admin][access]") {
  const both_tokens t;
  const auto path = "/api/v1/backends/sc-1/drain";
  auto none = ask(t, "POST", path);
  CHECK(none.status == 401);
  CHECK(none.denied == deny_reason::missing_credential);
  CHECK(none.message.find("Authorization: Bearer") != std::string::npos);
  auto wrong = ask(t, "POST", path, "Bearer admin-secreT");
  CHECK(wrong.status == 401);
  CHECK(wrong.denied == deny_reason::bad_credential);
  auto read = ask(t, "POST", path, "Bearer read-secret");
  CHECK(read.status == 403);
  CHECK(read.denied == deny_reason::read_only);
  CHECK(read.caller.role == admin_role::read);
  auto admin = ask(t, "POST", path, "bearer  admin-secret ");
  CHECK(admin.allowed());
  CHECK(admin.caller.role == admin_role::admin);
  CHECK(admin.caller.id.rfind("admin:", 0) == 0);
  CHECK(admin.caller.id.size() == 6 + 8);
  CHECK(admin.caller.id.find("secret") == std::string::npos);
  CHECK(ask(t, "POST", path, "Basic YWRtaW4tc2VjcmV0").denied == deny_reason::missing_credential);
}

TEST_CASE("listings need the read or the admin token, and probes and the page are open", "[admin][access]") {
  const both_tokens t;
  CHECK(ask(t, "GET", "/api/v1/sessions").status == 401);
  CHECK(ask(t, "GET", "/api/v1/sessions", "Bearer read-secret").allowed());
  CHECK(ask(t, "GET", "/api/v1/operations", "Bearer admin-secret").allowed());
  CHECK(ask(t, "GET", "/healthz").allowed());
  CHECK(ask(t, "GET", "/readyz", "Bearer nonsense").allowed());
  CHECK(ask(t, "GET", "/ui/app.js").allowed());
  CHECK(ask(t, "GET", "/metrics").allowed());
  admin::access_policy closed;
  closed.open_metrics = false;
  CHECK(ask(t, "GET", "/metrics", "", "", closed).status == 401);
  CHECK(ask(t, "GET", "/metrics", "Bearer read-secret", "", closed).allowed());
}

TEST_CASE("without a token file the admin API refuses listings and changes unless told to be open",
          "[admin][access]") {
  const auth::admin_tokens none;
  auto drain = ask(none, "POST", "/api/v1/backends/sc-1/drain");
  CHECK(drain.status == 403);
  CHECK(drain.denied == deny_reason::no_token_configured);
  CHECK(drain.message.find("admin.token_file") != std::string::npos);
  CHECK(ask(none, "GET", "/api/v1/sessions").denied == deny_reason::no_token_configured);
  CHECK(ask(none, "GET", "/healthz").allowed());
  admin::access_policy open;
  open.allow_unauthenticated = true;
  CHECK(ask(none, "POST", "/api/v1/backends/sc-1/drain", "", "", open).allowed());
  CHECK(ask(none, "GET", "/api/v1/sessions", "", "", open).allowed());
  // Open or not, a cross-site form stays refused.
  CHECK(ask(none, "POST", "/api/v1/backends/sc-1/drain", "", "http://evil.example", open).denied ==
        deny_reason::cross_origin);

  // Only a read token: listings with it, changes refused for want of an admin token.
  auth::admin_tokens read_only;
  read_only.set({}, {"r"});
  CHECK(ask(read_only, "GET", "/api/v1/sessions", "Bearer r").allowed());
  CHECK(ask(read_only, "POST", "/api/v1/backends/sc-1/drain", "Bearer r").denied == deny_reason::no_token_configured);
}

TEST_CASE("another origin and a CORS preflight are refused even with the admin token", "[admin][access]") {
  const both_tokens t;
  auto form = ask(t, "POST", "/api/v1/backends/sc-1/drain", "", "http://evil.example");
  CHECK(form.status == 403);
  CHECK(form.denied == deny_reason::cross_origin);
  CHECK(form.message.find("http://evil.example") != std::string::npos);
  CHECK(ask(t, "POST", "/api/v1/backends/sc-1/drain", "Bearer admin-secret", "http://evil.example").denied ==
        deny_reason::cross_origin);
  CHECK(ask(t, "GET", "/api/v1/sessions", "Bearer read-secret", "null").denied == deny_reason::cross_origin);
  CHECK(ask(t, "OPTIONS", "/api/v1/backends/sc-1/drain").denied == deny_reason::preflight);
  // The page's own requests carry its origin: allowed.
  CHECK(ask(t, "POST", "/api/v1/backends/sc-1/drain", "Bearer admin-secret", "http://127.0.0.1:9090").allowed());
  CHECK(admin::same_origin("https://127.0.0.1:9090", "127.0.0.1:9090"));
  CHECK_FALSE(admin::same_origin("http://127.0.0.1:9091", "127.0.0.1:9090"));
  CHECK_FALSE(admin::same_origin("http://127.0.0.1:9090.evil.example", "127.0.0.1:9090"));
  CHECK_FALSE(admin::same_origin("http://x", ""));
}

TEST_CASE("token files hold a token a line and a rotation keeps both valid", "[admin][auth]") {
  auto tokens = auth::tokens_of_file("  old-token \r\n\nnew-token\n bad token\n\x01\n");
  REQUIRE(tokens.size() == 2);
  CHECK(tokens[0] == "old-token");
  CHECK(tokens[1] == "new-token");
  auth::admin_tokens t;
  t.set(tokens, {});
  CHECK(t.find("old-token").role == admin_role::admin);
  CHECK(t.find("new-token").role == admin_role::admin);
  CHECK(t.find("old-toke").role == admin_role::none);
  CHECK(t.configured(admin_role::read));
  CHECK(t.configured(admin_role::admin));
  t.set({}, {"r"});
  CHECK(t.find("old-token").role == admin_role::none);
  CHECK_FALSE(t.configured(admin_role::admin));
  CHECK(auth::bearer_token(std::nullopt) == std::nullopt);
  CHECK(auth::bearer_token(std::string_view("Bearer ")) == std::nullopt);
  CHECK(auth::bearer_token(std::string_view("BEARER abc")) == std::string_view("abc"));
}

TEST_CASE("admin token files load by field, and a bad one names the field and keeps the tokens", "[admin][auth]") {
  const std::string dir = "/tmp/scg-admin-tokens-" + std::to_string(::getpid());
  std::string cmd = "mkdir -p " + dir;
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ofstream(dir + "/admin") << "a-token\n";
  std::ofstream(dir + "/read") << "\n\n";
  config::admin_plane plane;
  plane.token_file = dir + "/admin";
  auth::admin_tokens t;
  REQUIRE_FALSE(auth::load_admin_tokens(plane, t).has_value());
  CHECK(t.find("a-token").role == admin_role::admin);
  plane.read_token_file = dir + "/read";
  auto empty = auth::load_admin_tokens(plane, t);
  REQUIRE(empty.has_value());
  CHECK(empty->field == "admin.read_token_file");
  CHECK(empty->message.find("holds no token") != std::string::npos);
  plane.read_token_file = dir + "/absent";
  auto absent = auth::load_admin_tokens(plane, t);
  REQUIRE(absent.has_value());
  CHECK(absent->message.find("cannot open") != std::string::npos);
  CHECK(t.find("a-token").role == admin_role::admin);  // kept
  std::remove((dir + "/admin").c_str());
  std::remove((dir + "/read").c_str());
  std::remove(dir.c_str());
}

TEST_CASE("the heavy-request gate admits its slots and no more", "[admin][access]") {
  admin::request_gate g(2);
  CHECK(g.try_enter());
  CHECK(g.try_enter());
  CHECK_FALSE(g.try_enter());
  CHECK(g.in_use() == 2);
  g.leave();
  CHECK(g.try_enter());
  CHECK_FALSE(g.try_enter());
}

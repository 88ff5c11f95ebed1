// Authentication at the front door, end to end: JWTs checked against a local
// key, and OIDC with keys discovered from a provider the test runs itself
// (cpp-httplib on loopback) and rotates. Keys are generated per run with
// OpenSSL; tokens are signed here.
#include <catch2/catch.hpp>
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <atomic>
#include <ctime>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "auth/jwt.hpp"
#include "tests/integration/harness.hpp"
#include "tests/jwt_keys.hpp"

namespace sc = spark::connect;
using namespace scg::test;
using nlohmann::json;
using scg::auth::base64url_encode;
using namespace scg_auth_test;

namespace {

// --- keys and tokens ---------------------------------------------------------

/// The JWK of an RSA key as a provider publishes it for RS256.
json rs256_jwk(EVP_PKEY* k, const std::string& kid) {
  auto j = public_jwk(k, kid);
  j["alg"] = "RS256";
  return j;
}

std::int64_t unix_now() { return static_cast<std::int64_t>(std::time(nullptr)); }

/// Claims that pass scg's checks unless `extra` overrides some.
json claims(const std::string& issuer, const std::string& sub, json extra = json::object()) {
  json c{{"sub", sub}, {"iss", issuer}, {"aud", "scg"}, {"iat", unix_now()}, {"exp", unix_now() + 600}};
  c.update(extra);
  return c;
}

// --- calls -------------------------------------------------------------------

struct call_result {
  grpc::Status status;
  std::string fake_user;  ///< x-fake-user: the user_id the backend received
};

/// One Config through scg as user "mallory", with `authorization: Bearer
/// <token>` when a token is given.
call_result config_call(int port, const std::optional<std::string>& token,
                        const std::string& session = uuid_of("auth-session")) {
  auto stub = stub_to(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  if (token) ctx.AddMetadata("authorization", "Bearer " + *token);
  sc::ConfigRequest req;
  req.set_session_id(session);
  *req.mutable_user_context() = user("mallory");
  sc::ConfigResponse resp;
  call_result r;
  r.status = stub->Config(&ctx, req, &resp);
  r.fake_user = header(ctx, "x-fake-user");
  return r;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Lines of a replica's log that are auth.failure audit events.
int audit_failures(const gateway& gw) {
  std::istringstream in(read_file(gw.proc.log_path()));
  int n = 0;
  for (std::string line; std::getline(in, line);) n += contains(line, "\"event\":\"auth.failure\"");
  return n;
}

long auth_failures(const gateway& gw) { return std::max(0L, metric_value(gw.admin_port, "scg_auth_failures_total")); }

// --- an OpenID Provider on loopback -----------------------------------------

/// Serves the discovery document and a JWKS the test can replace; counts
/// fetches. Stopped and joined at destruction.
class oidc_provider {
 public:
  oidc_provider() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    issuer_ = "http://127.0.0.1:" + std::to_string(port_);
    server_.Get("/.well-known/openid-configuration", [this](const httplib::Request&, httplib::Response& res) {
      ++discovery_fetches_;
      res.set_content(json{{"issuer", issuer_}, {"jwks_uri", issuer_ + "/jwks"}}.dump(), "application/json");
    });
    server_.Get("/jwks", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mutex_);
      ++jwks_fetches_;
      last_jwks_fetch_ = std::chrono::steady_clock::now();
      res.set_content(jwks_.dump(), "application/json");
    });
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() only acts on a running server, so wait until it runs.
    REQUIRE(eventually([this] { return server_.is_running(); }, 5s));
  }
  ~oidc_provider() {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }
  oidc_provider(const oidc_provider&) = delete;
  oidc_provider& operator=(const oidc_provider&) = delete;

  const std::string& issuer() const { return issuer_; }

  /// From now on the JWKS holds exactly `keys`.
  void serve(const std::vector<json>& keys) {
    std::lock_guard<std::mutex> lock(mutex_);
    jwks_ = json{{"keys", keys}};
  }

  int jwks_fetches() const { return jwks_fetches_.load(); }
  int discovery_fetches() const { return discovery_fetches_.load(); }

  /// Waits (bounded) until `gap` has passed since the last JWKS fetch, so
  /// scg's refresh floor (min_refresh_interval_secs) allows the next one.
  void wait_since_last_fetch(std::chrono::milliseconds gap) {
    for (int i = 0; i < 100; ++i) {
      std::chrono::steady_clock::time_point last;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        last = last_jwks_fetch_;
      }
      auto due = last + gap;
      if (std::chrono::steady_clock::now() >= due) return;
      std::this_thread::sleep_until(due);  // the refresh floor is time itself: nothing to poll
    }
    FAIL("the JWKS kept being fetched");
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
  std::string issuer_;
  std::mutex mutex_;
  json jwks_ = json{{"keys", json::array()}};
  std::chrono::steady_clock::time_point last_jwks_fetch_{};
  std::atomic<int> jwks_fetches_{0}, discovery_fetches_{0};
};

}  // namespace

TEST_CASE("JWTs are verified against a local key - the verified subject replaces user_id",
          "[integration][security][auth]") {
  temp_dir dir;
  const std::string issuer = "https://issuer.test";
  auto rsa = fresh_key("RSA");
  auto other_rsa = fresh_key("RSA");
  const std::string rsa_pem = public_pem(rsa.get());
  const std::string key_file = dir.write("jwt-rsa.pem", rsa_pem);

  auto backend = start_fake(dir, "fake-auth");
  auto gw = start_gateway(dir, gateway_yaml({&backend}, "auth: { type: jwt, jwt: { algorithms: [RS256], key_file: \"" +
                                                            key_file + "\", issuer: \"" + issuer +
                                                            "\", audience: scg } }\n"));
  const json rs256{{"alg", "RS256"}, {"typ", "JWT"}};
  const long failures_before = auth_failures(gw);

  SECTION("a valid token is accepted and its sub replaces the request's user_id") {
    auto r = config_call(gw.grpc_port, sign_jwt(rs256, claims(issuer, "alice"), rsa.get()));
    INFO(r.status.error_message());
    REQUIRE(r.status.ok());
    CHECK(r.fake_user == "alice");
    // "bearer" is case-insensitive (RFC 6750).
    auto stub = stub_to(gw.grpc_port);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    ctx.AddMetadata("authorization", "bearer " + sign_jwt(rs256, claims(issuer, "bob"), rsa.get()));
    sc::ConfigRequest req;
    req.set_session_id(uuid_of("auth-session"));
    *req.mutable_user_context() = user("mallory");
    sc::ConfigResponse resp;
    CHECK(stub->Config(&ctx, req, &resp).ok());
    CHECK(header(ctx, "x-fake-user") == "bob");
    CHECK(auth_failures(gw) == failures_before);
  }

  SECTION("bad credentials are refused UNAUTHENTICATED, without echoing the token") {
    struct refusal {
      std::string what;
      std::optional<std::string> token;
      std::string reason;  ///< expected in the message
    };
    const json none_header{{"alg", "none"}, {"typ", "JWT"}};
    const json hs256{{"alg", "HS256"}, {"typ", "JWT"}};
    const std::vector<refusal> cases = {
        {"expired", sign_jwt(rs256, claims(issuer, "alice", {{"exp", unix_now() - 3600}}), rsa.get()),
         "token expired"},
        {"alg none", signing_input(none_header, claims(issuer, "alice")) + ".", "algorithm not allowed"},
        // Key confusion: HS256 keyed with the public key's PEM bytes.
        {"HS256 keyed with the public PEM", sign_hs256(hs256, claims(issuer, "alice"), rsa_pem),
         "algorithm not allowed"},
        {"signed by another key", sign_jwt(rs256, claims(issuer, "alice"), other_rsa.get()),
         "signature invalid"},
        {"wrong audience", sign_jwt(rs256, claims(issuer, "alice", {{"aud", "not-scg"}}), rsa.get()),
         "audience mismatch"},
        {"wrong issuer", sign_jwt(rs256, claims("https://evil.test", "alice"), rsa.get()), "issuer mismatch"},
        {"garbage", std::string("garbage-not-a-jwt-0123456789"), "malformed token"},
        {"no authorization header", std::nullopt, "missing bearer token"},
    };
    for (const auto& c : cases) {
      INFO(c.what);
      auto r = config_call(gw.grpc_port, c.token);
      INFO(r.status.error_message());
      CHECK(r.status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      CHECK(r.status.error_message().rfind("scg: ", 0) == 0);
      CHECK(contains(r.status.error_message(), c.reason));
      CHECK(r.fake_user.empty());  // never reached the backend
      if (c.token) {
        CHECK_FALSE(contains(r.status.error_message(), *c.token));
        CHECK_FALSE(contains(r.status.error_details(), *c.token));
      }
    }
    const long refused = static_cast<long>(cases.size());
    CHECK(eventually([&] { return auth_failures(gw) == failures_before + refused; }, 5s));
    CHECK(auth_failures(gw) == failures_before + refused);

    // Each refusal is audited, and the log quotes no token (nor its signature).
    CHECK(eventually([&] { return audit_failures(gw) >= refused; }, 5s));
    const std::string log = read_file(gw.proc.log_path());
    for (const auto& c : cases) {
      if (!c.token) continue;
      INFO(c.what);
      CHECK_FALSE(contains(log, *c.token));
      const std::string sig = c.token->substr(c.token->rfind('.') + 1);
      if (sig.size() >= 16) CHECK_FALSE(contains(log, sig));
    }
  }
}

TEST_CASE("ES256 JWTs verify against a P-256 key - HS256 with a public key is refused at config time",
          "[integration][security][auth]") {
  temp_dir dir;
  const std::string issuer = "https://issuer.test";
  auto ec = fresh_key("EC");
  const std::string key_file = dir.write("jwt-ec.pem", public_pem(ec.get()));
  auto backend = start_fake(dir, "fake-es");
  auto gw = start_gateway(dir, gateway_yaml({&backend}, "auth: { type: jwt, jwt: { algorithms: [ES256], key_file: \"" +
                                                            key_file + "\", issuer: \"" + issuer +
                                                            "\", audience: scg } }\n"));

  auto ok = config_call(gw.grpc_port, sign_jwt({{"alg", "ES256"}, {"typ", "JWT"}}, claims(issuer, "erin"), ec.get()));
  INFO(ok.status.error_message());
  REQUIRE(ok.status.ok());
  CHECK(ok.fake_user == "erin");

  // An ES256 signature labelled RS256 does not pass for the EC key.
  auto relabelled =
      config_call(gw.grpc_port, sign_jwt({{"alg", "RS256"}, {"typ", "JWT"}}, claims(issuer, "erin"), ec.get()));
  CHECK(relabelled.status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(contains(relabelled.status.error_message(), "algorithm not allowed"));

  // The key-confusion door is also closed in the configuration itself.
  const std::string cfg = dir.write(
      "hs-with-pem.yaml", gateway_yaml({&backend}, "auth: { type: jwt, jwt: { algorithms: [RS256, HS256], key_file: \"" +
                                                       key_file + "\" } }\n"));
  process check({bin("scg"), "--check-config", cfg}, dir.file("check.log"));
  auto code = check.wait(10s);
  REQUIRE(code);
  CHECK(*code != 0);
  CHECK(contains(read_file(dir.file("check.log")), "HS256 needs hmac_secret"));
}

TEST_CASE("OIDC keys are discovered, rotated on an unknown kid, and refreshed at a bounded rate",
          "[integration][security][auth]") {
  temp_dir dir;
  oidc_provider idp;
  auto key1 = fresh_key("RSA");
  auto key2 = fresh_key("RSA");
  auto key3 = fresh_key("RSA");  // never published
  idp.serve({rs256_jwk(key1.get(), "k1")});

  auto token = [&](EVP_PKEY* k, const std::string& kid, const std::string& sub) {
    return sign_jwt({{"alg", "RS256"}, {"typ", "JWT"}, {"kid", kid}}, claims(idp.issuer(), sub), k);
  };

  auto backend = start_fake(dir, "fake-oidc");
  auto gw = start_gateway(dir, gateway_yaml({&backend}, "auth: { type: oidc, oidc: { issuer: \"" + idp.issuer() +
                                                            "\", audience: scg, min_refresh_interval_secs: 1 } }\n"));
  const long failures_before = auth_failures(gw);

  // Key 1 is published: accepted (fetched at start or on first use).
  {
    auto r = config_call(gw.grpc_port, token(key1.get(), "k1", "olivia"));
    INFO(r.status.error_message());
    REQUIRE(r.status.ok());
    CHECK(r.fake_user == "olivia");
    CHECK(idp.discovery_fetches() == 1);
    CHECK(idp.jwks_fetches() == 1);
  }

  // Rotation: only key 2 is published now. A k2 token names a kid scg has not
  // seen, which makes it refresh (once the refresh floor has passed).
  idp.serve({rs256_jwk(key2.get(), "k2")});
  idp.wait_since_last_fetch(1200ms);
  {
    const int fetches = idp.jwks_fetches();
    auto r = config_call(gw.grpc_port, token(key2.get(), "k2", "otto"));
    INFO(r.status.error_message());
    REQUIRE(r.status.ok());
    CHECK(r.fake_user == "otto");
    CHECK(idp.jwks_fetches() == fetches + 1);
  }
  // Key 1 was rotated out.
  {
    const int fetches = idp.jwks_fetches();
    auto r = config_call(gw.grpc_port, token(key1.get(), "k1", "olivia"));
    CHECK(r.status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(contains(r.status.error_message(), "unknown signing key"));
    CHECK(idp.jwks_fetches() <= fetches + 1);
  }

  // A burst of tokens with a kid nobody publishes: all refused, and the
  // refresh floor of 1 s holds the JWKS fetches down.
  idp.wait_since_last_fetch(1200ms);
  const int fetches_before_burst = idp.jwks_fetches();
  const int burst = 10;
  std::vector<call_result> results(burst);
  const auto started = std::chrono::steady_clock::now();
  {
    const std::string forged = token(key3.get(), "k3", "mallory");
    std::vector<std::thread> callers;
    for (int i = 0; i < burst; ++i)
      callers.emplace_back(
          [&, i] { results[i] = config_call(gw.grpc_port, forged, uuid_of("burst-" + std::to_string(i))); });
    for (auto& t : callers) t.join();
  }
  const auto elapsed = std::chrono::steady_clock::now() - started;
  const int burst_fetches = idp.jwks_fetches() - fetches_before_burst;
  INFO("burst took " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms, "
                     << burst_fetches << " JWKS fetches");
  for (const auto& r : results) {
    CHECK(r.status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(contains(r.status.error_message(), "unknown signing key"));
  }
  CHECK(burst_fetches >= 1);  // the unknown kid did trigger a refresh
  // Fetches are at least 1 s apart: one, plus one per full second the burst took
  // (a burst normally takes well under a second: exactly one fetch).
  CHECK(burst_fetches <= 1 + std::chrono::duration_cast<std::chrono::seconds>(elapsed).count());
  CHECK(burst_fetches <= 2);
  CHECK(idp.discovery_fetches() == 1);  // the JWKS URL is kept across refreshes

  // The key scg holds is still key 2.
  {
    auto r = config_call(gw.grpc_port, token(key2.get(), "k2", "otto"));
    INFO(r.status.error_message());
    CHECK(r.status.ok());
  }
  CHECK(eventually([&] { return auth_failures(gw) == failures_before + 1 + burst; }, 5s));
  CHECK(auth_failures(gw) == failures_before + 1 + burst);
}

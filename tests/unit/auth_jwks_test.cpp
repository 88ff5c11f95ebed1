#include "auth/jwks.hpp"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "auth/authenticator.hpp"
#include "config/config.hpp"
#include "tests/jwt_keys.hpp"

using namespace scg::auth;
using namespace scg::config;
using nlohmann::json;
using namespace std::chrono_literals;

using namespace scg_auth_test;

namespace {

const std::string issuer = "https://idp.test/realms/x";
const std::string discovery_url = issuer + "/.well-known/openid-configuration";
const std::string jwks_url = "https://idp.test/certs";

/// An identity provider in memory: serves discovery and JWKS, counts fetches.
struct fake_idp {
  json keys = json::array();
  std::string issuer_name = issuer;
  bool down = false;
  std::map<std::string, int> fetches;

  fetch_fn fetcher() {
    return [this](const std::string& url) -> std::optional<std::string> {
      ++fetches[url];
      if (down) return std::nullopt;
      if (url == discovery_url) return json{{"issuer", issuer_name}, {"jwks_uri", jwks_url}}.dump();
      if (url == jwks_url) return json{{"keys", keys}}.dump();
      return std::nullopt;
    };
  }
};

struct fake_clock {
  jwks_cache::clock::time_point t{};
  jwks_cache::now_fn fn() {
    return [this] { return t; };
  }
};

jwks_cache::options cache_options() { return {discovery_url, issuer, 300s, 10s}; }

}  // namespace

TEST_CASE("a JWKS yields its RSA and EC signing keys by kid and skips the rest", "[auth][jwks]") {
  json encryption = public_jwk(test_key("EC"), "enc-1");
  encryption["use"] = "enc";
  json doc{{"keys",
            {public_jwk(test_key("RSA"), "rsa-1"),
             public_jwk(test_key("EC"), "ec-1"),
             {{"kty", "oct"}, {"kid", "sym"}, {"k", "c2VjcmV0"}},
             encryption,
             {{"kty", "RSA"}, {"kid", "broken"}, {"n", "!!"}, {"e", "AQAB"}},
             "not an object"}}};
  auto r = parse_jwks(doc.dump());
  REQUIRE(std::holds_alternative<key_set>(r));
  const auto& keys = std::get<key_set>(r).keys;
  CHECK(keys.size() == 2);
  CHECK(keys.at("rsa-1").type() == key::kind::rsa);
  CHECK(keys.at("ec-1").type() == key::kind::ec_p256);

  CHECK(std::holds_alternative<failure>(parse_jwks("{}")));
  CHECK(std::holds_alternative<failure>(parse_jwks("{\"keys\": 3}")));
  CHECK(std::holds_alternative<failure>(parse_jwks("not json")));
}

TEST_CASE("a discovery document needs issuer and jwks_uri", "[auth][jwks]") {
  auto d = parse_discovery(R"({"issuer":"https://i","jwks_uri":"https://i/k","other":1})");
  REQUIRE(std::holds_alternative<discovery>(d));
  CHECK(std::get<discovery>(d).jwks_uri == "https://i/k");
  auto bad = parse_discovery(R"({"issuer":"https://i"})");
  REQUIRE(std::holds_alternative<failure>(bad));
  CHECK(std::get<failure>(bad).reason == "discovery document has no jwks_uri");
}

TEST_CASE("an unknown kid refreshes the keys at most once per minimum interval", "[auth][jwks]") {
  fake_idp idp;
  fake_clock clock;
  idp.keys.push_back(public_jwk(test_key("RSA"), "k1"));
  jwks_cache cache(cache_options(), idp.fetcher(), clock.fn());

  REQUIRE(cache.find(std::string("k1")) != nullptr);  // first use fetches
  CHECK(idp.fetches[discovery_url] == 1);
  CHECK(idp.fetches[jwks_url] == 1);

  // A storm of forged kids costs one fetch, then nothing until the interval passes.
  clock.t += 11s;
  for (int i = 0; i < 100; ++i) CHECK(cache.find("forged-" + std::to_string(i)) == nullptr);
  CHECK(idp.fetches[jwks_url] == 2);
  CHECK(cache.refresh_attempts() == 2);

  // The provider rotates: the new kid is found once the interval has passed.
  auto rotated = fresh_key("EC");
  idp.keys.push_back(public_jwk(rotated.get(), "k2"));
  clock.t += 5s;
  CHECK(cache.find(std::string("k2")) == nullptr);
  clock.t += 5s;
  auto k2 = cache.find(std::string("k2"));
  REQUIRE(k2 != nullptr);
  CHECK(k2->type() == key::kind::ec_p256);
  CHECK(idp.fetches[jwks_url] == 3);
  CHECK(idp.fetches[discovery_url] == 1);  // the JWKS URL is remembered
  CHECK(cache.find(std::string("k1")) != nullptr);
}

TEST_CASE("periodic refresh runs when due and keeps the old keys when the provider fails",
          "[auth][jwks]") {
  fake_idp idp;
  fake_clock clock;
  idp.keys.push_back(public_jwk(test_key("RSA"), "k1"));
  jwks_cache cache(cache_options(), idp.fetcher(), clock.fn());
  CHECK(cache.refresh_if_due());  // nothing fetched yet: due
  CHECK_FALSE(cache.refresh_if_due());
  clock.t += 299s;
  CHECK_FALSE(cache.refresh_if_due());
  clock.t += 1s;
  idp.down = true;
  CHECK_FALSE(cache.refresh_if_due());  // attempted, failed
  CHECK(idp.fetches[jwks_url] == 2);
  CHECK(cache.find(std::string("k1")) != nullptr);  // old keys still serve
  // A failed JWKS fetch makes the next refresh rediscover.
  idp.down = false;
  clock.t += 10s;
  CHECK(cache.refresh_if_due());
  CHECK(idp.fetches[discovery_url] == 2);

  // An empty key set does not replace a good one.
  idp.keys = json::array();
  clock.t += 300s;
  CHECK_FALSE(cache.refresh_if_due());
  CHECK(cache.find(std::string("k1")) != nullptr);
}

TEST_CASE("a discovery document naming another issuer yields no keys", "[auth][jwks]") {
  fake_idp idp;
  fake_clock clock;
  idp.keys.push_back(public_jwk(test_key("RSA"), "k1"));
  idp.issuer_name = "https://evil.test";
  jwks_cache cache(cache_options(), idp.fetcher(), clock.fn());
  CHECK(cache.find(std::string("k1")) == nullptr);
  CHECK(idp.fetches[jwks_url] == 0);
}

TEST_CASE("a token without kid uses the provider's only key", "[auth][jwks]") {
  fake_idp idp;
  fake_clock clock;
  idp.keys.push_back(public_jwk(test_key("RSA"), "k1"));
  jwks_cache cache(cache_options(), idp.fetcher(), clock.fn());
  CHECK(cache.find(std::nullopt) != nullptr);
  idp.keys.push_back(public_jwk(test_key("EC"), "k2"));
  clock.t += 10s;
  CHECK(cache.refresh_if_due() == false);  // not due yet
  clock.t += 300s;
  CHECK(cache.refresh_if_due());
  CHECK(cache.find(std::nullopt) == nullptr);  // two keys: ambiguous
}

TEST_CASE("concurrent lookups during refreshes see whole key sets", "[auth][jwks]") {
  fake_idp idp;
  std::atomic<long> ticks{0};
  idp.keys.push_back(public_jwk(test_key("RSA"), "k1"));
  jwks_cache cache({discovery_url, issuer, 1s, 1s}, idp.fetcher(), [&] {
    return jwks_cache::clock::time_point(std::chrono::seconds(ticks.fetch_add(1)));
  });
  REQUIRE(cache.find(std::string("k1")) != nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> misses{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (!cache.find(std::string("k1"))) ++misses;
    });
  for (int i = 0; i < 50; ++i) cache.refresh_if_due();
  for (auto& t : threads) t.join();
  CHECK(misses == 0);
}

TEST_CASE("OIDC authentication finds keys through discovery and refuses unknown kids",
          "[auth][jwks][authenticator]") {
  fake_idp idp;
  fake_clock clock;
  idp.keys.push_back(public_jwk(test_key("RSA"), "k1"));
  auto parsed = parse_security(YAML::Load(R"(
auth:
  type: oidc
  oidc: { issuer: "https://idp.test/realms/x", audience: scg }
)"),
                               {});
  REQUIRE(std::holds_alternative<security_config>(parsed));
  CHECK(std::get<security_config>(parsed).auth.oidc.discovery_url == discovery_url);
  authenticator::options o;
  o.fetch = idp.fetcher();
  o.steady_now = clock.fn();
  o.unix_now = [] { return std::int64_t{1'700'000'000}; };
  auto a = std::get<std::unique_ptr<authenticator>>(
      authenticator::create(std::get<security_config>(parsed), o));

  json claims{{"sub", "erin"}, {"iss", issuer}, {"aud", "scg"}, {"exp", 1'700'000'100}};
  auto check = [&](const std::string& token) {
    auto r = a->authenticate("Bearer " + token, {});
    if (auto* f = std::get_if<failure>(&r)) return f->reason;
    return std::get<identity>(r).user_id;
  };
  CHECK(check(sign_jwt({{"alg", "RS256"}, {"kid", "k1"}}, claims, test_key("RSA"))) == "erin");
  clock.t += 60s;
  CHECK(check(sign_jwt({{"alg", "RS256"}, {"kid", "k9"}}, claims, test_key("RSA"))) ==
        "unknown signing key");
  CHECK(check(sign_jwt({{"alg", "RS256"}, {"kid", "k8"}}, claims, test_key("RSA"))) ==
        "unknown signing key");
  CHECK(idp.fetches[jwks_url] == 2);
  // "none" is refused before any key lookup, so it never causes a fetch.
  clock.t += 60s;
  std::string none = scg::auth::base64url_encode(R"({"alg":"none","kid":"k7"})") + "." +
                     scg::auth::base64url_encode(claims.dump()) + ".";
  CHECK(check(none) == "algorithm not allowed");
  CHECK(idp.fetches[jwks_url] == 2);
  a->tick();  // not due: refreshed 120 s ago
  CHECK(idp.fetches[jwks_url] == 2);
}

#include "auth/jwt.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include "auth/authenticator.hpp"
#include "tests/jwt_keys.hpp"

using namespace scg::auth;
using nlohmann::json;

using namespace scg_auth_test;

namespace {

constexpr std::int64_t now = 1'700'000'000;
const std::string secret = "0123456789abcdef0123456789abcdef-hmac";

json claims(json extra = json::object()) {
  json c{{"sub", "alice"},
         {"iss", "https://idp.test"},
         {"aud", "scg"},
         {"exp", now + 600},
         {"nbf", now - 10}};
  c.update(extra);
  return c;
}

verify_options opts(std::vector<algorithm> algs) {
  verify_options o;
  o.algorithms = std::move(algs);
  o.issuer = "https://idp.test";
  o.audience = "scg";
  o.leeway_secs = 60;
  o.now = now;
  return o;
}

key pem_key(EVP_PKEY* k) {
  auto r = key::from_pem(public_pem(k));
  REQUIRE(std::holds_alternative<key>(r));
  return std::get<key>(r);
}

key hmac_key() { return std::get<key>(key::from_hmac_secret(secret)); }

/// The failure reason of verifying `token`, or "ok".
std::string outcome(const std::string& token, const key& k, const verify_options& o) {
  auto d = decode(token);
  if (auto* f = std::get_if<failure>(&d)) return f->reason;
  auto v = verify(std::get<decoded_token>(d), k, o);
  if (auto* f = std::get_if<failure>(&v)) return f->reason;
  return "ok";
}

}  // namespace

TEST_CASE("base64url round-trips every length and refuses foreign characters", "[auth][jwt]") {
  std::string bytes;
  for (int i = 0; i < 40; ++i) {
    auto enc = base64url_encode(bytes);
    CHECK(enc.find_first_of("+/=") == std::string::npos);
    auto dec = base64url_decode(enc);
    REQUIRE(dec);
    CHECK(*dec == bytes);
    bytes.push_back(static_cast<char>(0xf0 + i));
  }
  CHECK_FALSE(base64url_decode("ab+c"));
  CHECK_FALSE(base64url_decode("ab/c"));
  CHECK_FALSE(base64url_decode("ab c"));
  CHECK_FALSE(base64url_decode("abcde"));  // a length no encoder produces
}

TEST_CASE("tokens signed with RS256, ES256 and HS256 verify and yield their claims",
          "[auth][jwt]") {
  auto rs = sign_jwt({{"alg", "RS256"}, {"typ", "JWT"}}, claims(), test_key("RSA"));
  auto es = sign_jwt({{"alg", "ES256"}}, claims(), test_key("EC"));
  auto hs = sign_hs256({{"alg", "HS256"}}, claims(), secret);
  CHECK(outcome(rs, pem_key(test_key("RSA")), opts({algorithm::rs256})) == "ok");
  CHECK(outcome(es, pem_key(test_key("EC")), opts({algorithm::es256})) == "ok");
  CHECK(outcome(hs, hmac_key(), opts({algorithm::hs256})) == "ok");

  auto d = std::get<decoded_token>(decode(rs));
  auto c = verify(d, pem_key(test_key("RSA")), opts({algorithm::rs256}));
  REQUIRE(std::holds_alternative<json>(c));
  CHECK(std::get<json>(c)["sub"] == "alice");
}

TEST_CASE("alg none is refused even when the allow-list is empty of real algorithms",
          "[auth][jwt]") {
  std::string unsigned_token = signing_input({{"alg", "none"}}, claims()) + ".";
  auto all = opts({algorithm::rs256, algorithm::es256, algorithm::hs256});
  CHECK(outcome(unsigned_token, pem_key(test_key("RSA")), all) == "algorithm not allowed");
  CHECK(outcome(unsigned_token, hmac_key(), all) == "algorithm not allowed");
  auto none_caps = signing_input({{"alg", "None"}}, claims()) + ".";
  CHECK(outcome(none_caps, hmac_key(), all) == "algorithm not allowed");
}

TEST_CASE("an HS256 token keyed with the RSA public key PEM is refused (key confusion)",
          "[auth][jwt]") {
  std::string pem = public_pem(test_key("RSA"));
  auto forged = sign_hs256({{"alg", "HS256"}}, claims(), pem);
  // Even with HS256 allowed, an RSA key never verifies HMAC.
  auto both = opts({algorithm::rs256, algorithm::hs256});
  CHECK(outcome(forged, pem_key(test_key("RSA")), both) == "algorithm does not match key");
  // And the PEM can never become an HMAC key.
  auto as_secret = key::from_hmac_secret(pem);
  REQUIRE(std::holds_alternative<failure>(as_secret));
  CHECK(std::get<failure>(as_secret).reason == "HMAC secret must not be a PEM key");
}

TEST_CASE("an algorithm off the allow-list is refused", "[auth][jwt]") {
  auto es = sign_jwt({{"alg", "ES256"}}, claims(), test_key("EC"));
  CHECK(outcome(es, pem_key(test_key("EC")), opts({algorithm::rs256})) == "algorithm not allowed");
  auto rs = sign_jwt({{"alg", "RS256"}}, claims(), test_key("RSA"));
  CHECK(outcome(rs, pem_key(test_key("EC")), opts({algorithm::rs256})) ==
        "algorithm does not match key");
  auto ps = sign_jwt({{"alg", "PS256"}}, claims(), test_key("RSA"));
  CHECK(outcome(ps, pem_key(test_key("RSA")), opts({algorithm::rs256})) == "algorithm not allowed");
}

TEST_CASE("expired and not-yet-valid tokens are refused, within the leeway accepted",
          "[auth][jwt]") {
  const key k = pem_key(test_key("RSA"));
  const auto o = opts({algorithm::rs256});
  auto sign = [&](json extra) {
    return sign_jwt({{"alg", "RS256"}}, claims(extra), test_key("RSA"));
  };
  CHECK(outcome(sign({{"exp", now - 61}}), k, o) == "token expired");
  CHECK(outcome(sign({{"exp", now - 59}}), k, o) == "ok");
  CHECK(outcome(sign({{"nbf", now + 61}}), k, o) == "token not yet valid");
  CHECK(outcome(sign({{"nbf", now + 59}}), k, o) == "ok");
  json no_exp = claims();
  no_exp.erase("exp");
  CHECK(outcome(sign_jwt({{"alg", "RS256"}}, no_exp, test_key("RSA")), k, o) ==
        "token has no expiry");
  CHECK(outcome(sign({{"exp", "tomorrow"}}), k, o) == "malformed token");
}

TEST_CASE("a wrong issuer or audience is refused - aud may be a list", "[auth][jwt]") {
  const key k = pem_key(test_key("EC"));
  const auto o = opts({algorithm::es256});
  auto sign = [&](json extra) {
    return sign_jwt({{"alg", "ES256"}}, claims(extra), test_key("EC"));
  };
  CHECK(outcome(sign({{"iss", "https://evil.test"}}), k, o) == "issuer mismatch");
  CHECK(outcome(sign({{"aud", "other"}}), k, o) == "audience mismatch");
  CHECK(outcome(sign({{"aud", json::array({"other", "scg"})}}), k, o) == "ok");
  CHECK(outcome(sign({{"aud", json::array({"other"})}}), k, o) == "audience mismatch");
  json no_iss = claims();
  no_iss.erase("iss");
  CHECK(outcome(sign_jwt({{"alg", "ES256"}}, no_iss, test_key("EC")), k, o) == "issuer mismatch");
}

TEST_CASE("a bad signature is refused", "[auth][jwt]") {
  auto other = fresh_key("EC");
  auto token = sign_jwt({{"alg", "ES256"}}, claims(), other.get());
  CHECK(outcome(token, pem_key(test_key("EC")), opts({algorithm::es256})) == "signature invalid");

  // A valid signature over other claims, moved onto tampered claims.
  auto good = sign_jwt({{"alg", "RS256"}}, claims(), test_key("RSA"));
  auto tampered = signing_input({{"alg", "RS256"}}, claims({{"sub", "mallory"}})) +
                  good.substr(good.rfind('.'));
  CHECK(outcome(tampered, pem_key(test_key("RSA")), opts({algorithm::rs256})) ==
        "signature invalid");

  auto hs = sign_hs256({{"alg", "HS256"}}, claims(), secret + "x");
  CHECK(outcome(hs, hmac_key(), opts({algorithm::hs256})) == "signature invalid");
  // ES256 signatures must be exactly 64 bytes.
  auto es = sign_jwt({{"alg", "ES256"}}, claims(), test_key("EC"));
  CHECK(outcome(es + "AA", pem_key(test_key("EC")), opts({algorithm::es256})) ==
        "signature invalid");
}

TEST_CASE("malformed tokens are refused without echoing them", "[auth][jwt]") {
  const key k = pem_key(test_key("RSA"));
  const auto o = opts({algorithm::rs256});
  auto good = sign_jwt({{"alg", "RS256"}}, claims(), test_key("RSA"));
  for (std::string bad :
       {std::string(""), std::string("abc"), std::string("a.b"), std::string("a.b.c.d"),
        good + ".x", "!!!." + good.substr(good.find('.') + 1),
        base64url_encode("not json") + ".e30.sig", base64url_encode("[1,2]") + ".e30.sig",
        base64url_encode(R"({"alg":7})") + ".e30.sig",
        base64url_encode(R"({"alg":"RS256","kid":5})") + ".e30.sig"}) {
    INFO(bad);
    CHECK(outcome(bad, k, o) == "malformed token");
  }
  CHECK(outcome(std::string(4 * max_token_bytes, 'a'), k, o) == "token too large");
  // Correctly signed, but the payload is not a JSON object.
  for (std::string payload : {"[]", "not json", ""}) {
    std::string input = base64url_encode(R"({"alg":"HS256"})") + "." + base64url_encode(payload);
    CHECK(outcome(sign_hs256_raw(input, secret), hmac_key(), opts({algorithm::hs256})) ==
          "malformed token");
  }
}

TEST_CASE("a critical header scg does not understand is refused", "[auth][jwt]") {
  auto t = sign_jwt({{"alg", "RS256"}, {"crit", {"exp"}}}, claims(), test_key("RSA"));
  CHECK(outcome(t, pem_key(test_key("RSA")), opts({algorithm::rs256})) ==
        "unsupported critical header");
}

TEST_CASE("keys load from PEM, certificates and JWKs - weak or odd keys are refused",
          "[auth][jwt]") {
  CHECK(pem_key(test_key("RSA")).type() == key::kind::rsa);
  CHECK(pem_key(test_key("EC")).type() == key::kind::ec_p256);
  auto from_cert = key::from_pem(certificate_pem(test_key("RSA")));
  REQUIRE(std::holds_alternative<key>(from_cert));
  auto rs = sign_jwt({{"alg", "RS256"}}, claims(), test_key("RSA"));
  CHECK(outcome(rs, std::get<key>(from_cert), opts({algorithm::rs256})) == "ok");
  CHECK(std::holds_alternative<failure>(key::from_pem("-----BEGIN PUBLIC KEY-----\nAAAA\n")));
  CHECK(std::holds_alternative<failure>(key::from_hmac_secret("short")));

  std::shared_ptr<EVP_PKEY> small(EVP_RSA_gen(1024), EVP_PKEY_free);
  auto weak = key::from_pem(public_pem(small.get()));
  REQUIRE(std::holds_alternative<failure>(weak));
  CHECK(std::get<failure>(weak).reason == "RSA key shorter than 2048 bits");
  std::shared_ptr<EVP_PKEY> p384(EVP_EC_gen("P-384"), EVP_PKEY_free);
  CHECK(std::holds_alternative<failure>(key::from_pem(public_pem(p384.get()))));

  for (const char* type : {"RSA", "EC"}) {
    auto k = key::from_jwk(public_jwk(test_key(type), "k1"));
    REQUIRE(std::holds_alternative<key>(k));
    auto alg = std::string(type) == "RSA" ? algorithm::rs256 : algorithm::es256;
    auto token = sign_jwt({{"alg", algorithm_name(alg)}}, claims(), test_key(type));
    CHECK(outcome(token, std::get<key>(k), opts({alg})) == "ok");
  }
  json off_curve = public_jwk(test_key("EC"), "k");
  off_curve["y"] = base64url_encode(std::string(32, '\x01'));
  CHECK(std::holds_alternative<failure>(key::from_jwk(off_curve)));
  CHECK(std::holds_alternative<failure>(key::from_jwk({{"kty", "oct"}, {"k", "c2VjcmV0"}})));
}

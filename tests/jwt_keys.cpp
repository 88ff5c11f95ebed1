#include "tests/jwt_keys.hpp"

#include <catch2/catch.hpp>

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>

#include "auth/jwt.hpp"

using scg::auth::base64url_encode;
using nlohmann::json;

namespace scg_auth_test {

std::shared_ptr<EVP_PKEY> fresh_key(const std::string& type) {
  EVP_PKEY* k = type == "RSA" ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
  REQUIRE(k != nullptr);
  return std::shared_ptr<EVP_PKEY>(k, EVP_PKEY_free);
}

/// One key per type for the whole run: RSA generation is the slow part.
EVP_PKEY* test_key(const std::string& type) {
  static auto rsa = fresh_key("RSA");
  static auto ec = fresh_key("EC");
  return type == "RSA" ? rsa.get() : ec.get();
}

std::string public_pem(EVP_PKEY* k) {
  std::unique_ptr<BIO, int (*)(BIO*)> bio(BIO_new(BIO_s_mem()), BIO_free);
  REQUIRE(PEM_write_bio_PUBKEY(bio.get(), k) == 1);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

std::string signing_input(const json& header, const json& claims) {
  return base64url_encode(header.dump()) + "." + base64url_encode(claims.dump());
}

/// Signs with RS256 (RSA key) or ES256 (EC key, signature converted to JOSE r||s).
std::string sign_jwt(const json& header, const json& claims, EVP_PKEY* k) {
  std::string input = signing_input(header, claims);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  REQUIRE(EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, k) == 1);
  std::size_t len = 0;
  const auto* in = reinterpret_cast<const unsigned char*>(input.data());
  REQUIRE(EVP_DigestSign(ctx.get(), nullptr, &len, in, input.size()) == 1);
  std::string sig(len, '\0');
  REQUIRE(EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, in,
                         input.size()) == 1);
  sig.resize(len);
  if (EVP_PKEY_is_a(k, "EC")) {
    const auto* der = reinterpret_cast<const unsigned char*>(sig.data());
    ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &der, static_cast<long>(sig.size()));
    REQUIRE(es != nullptr);
    std::string raw(64, '\0');
    BN_bn2binpad(ECDSA_SIG_get0_r(es), reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(ECDSA_SIG_get0_s(es), reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(es);
    sig = raw;
  }
  return input + "." + base64url_encode(sig);
}

std::string sign_hs256_raw(const std::string& input, const std::string& secret) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  std::size_t len = 0;
  REQUIRE(EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret.data(), secret.size(),
                    reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac,
                    sizeof mac, &len) != nullptr);
  return input + "." + base64url_encode(std::string(reinterpret_cast<char*>(mac), len));
}

std::string sign_hs256(const json& header, const json& claims, const std::string& secret) {
  return sign_hs256_raw(signing_input(header, claims), secret);
}

/// A self-signed certificate for `k`, as PEM.
std::string certificate_pem(EVP_PKEY* k) {
  std::unique_ptr<X509, void (*)(X509*)> cert(X509_new(), X509_free);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
  X509_set_pubkey(cert.get(), k);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("idp.test"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get()));
  REQUIRE(X509_sign(cert.get(), k, EVP_sha256()) > 0);
  std::unique_ptr<BIO, int (*)(BIO*)> bio(BIO_new(BIO_s_mem()), BIO_free);
  REQUIRE(PEM_write_bio_X509(bio.get(), cert.get()) == 1);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<std::size_t>(n));
}

/// The public JWK of `k` (RSA n/e or EC P-256 x/y).
json public_jwk(EVP_PKEY* k, const std::string& kid) {
  json j{{"kid", kid}, {"use", "sig"}};
  if (EVP_PKEY_is_a(k, "RSA")) {
    BIGNUM *n = nullptr, *e = nullptr;
    REQUIRE(EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_N, &n) == 1);
    REQUIRE(EVP_PKEY_get_bn_param(k, OSSL_PKEY_PARAM_RSA_E, &e) == 1);
    auto bytes = [](BIGNUM* b) {
      std::string s(static_cast<std::size_t>(BN_num_bytes(b)), '\0');
      BN_bn2bin(b, reinterpret_cast<unsigned char*>(s.data()));
      BN_free(b);
      return base64url_encode(s);
    };
    j["kty"] = "RSA";
    j["n"] = bytes(n);
    j["e"] = bytes(e);
    return j;
  }
  unsigned char point[65];
  std::size_t len = 0;
  REQUIRE(EVP_PKEY_get_octet_string_param(k, OSSL_PKEY_PARAM_PUB_KEY, point, sizeof point, &len) ==
          1);
  REQUIRE(len == 65);
  j["kty"] = "EC";
  j["crv"] = "P-256";
  j["x"] = base64url_encode(std::string(reinterpret_cast<char*>(point) + 1, 32));
  j["y"] = base64url_encode(std::string(reinterpret_cast<char*>(point) + 33, 32));
  return j;
}

}  // namespace scg_auth_test

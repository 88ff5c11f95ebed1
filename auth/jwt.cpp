#include "auth/jwt.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/decoder.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

namespace scg::auth {
namespace {

// RAII for the OpenSSL objects used here: unique_ptr with the type's free function.
template <auto free_fn>
struct deleter {
  template <class T>
  void operator()(T* p) const {
    free_fn(p);
  }
};

using bio_ptr = std::unique_ptr<BIO, deleter<BIO_free>>;
using bn_ptr = std::unique_ptr<BIGNUM, deleter<BN_free>>;

/// A failure that also drops OpenSSL's per-thread error queue, so errors from
/// client input never linger on a thread that later does TLS.
failure fail(std::string reason) {
  ERR_clear_error();
  return failure{std::move(reason)};
}

const failure malformed{"malformed token"};

bool has_group(EVP_PKEY* p, std::string_view want) {
  char name[64];
  std::size_t len = 0;
  if (EVP_PKEY_get_group_name(p, name, sizeof name, &len) != 1) return false;
  return std::string_view(name, len) == want;
}

/// Builds a public key of `type` ("RSA", "EC") from OSSL_PARAMs; null on failure.
EVP_PKEY* pkey_from_params(const char* type, OSSL_PARAM_BLD* bld) {
  std::unique_ptr<OSSL_PARAM, deleter<OSSL_PARAM_free>> params(OSSL_PARAM_BLD_to_param(bld));
  std::unique_ptr<EVP_PKEY_CTX, deleter<EVP_PKEY_CTX_free>> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
  EVP_PKEY* p = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &p, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    EVP_PKEY_free(p);
    return nullptr;
  }
  return p;
}

bn_ptr jwk_bignum(const nlohmann::json& jwk, const char* name) {
  auto it = jwk.find(name);
  if (it == jwk.end() || !it->is_string()) return nullptr;
  auto bytes = base64url_decode(it->get_ref<const std::string&>());
  if (!bytes || bytes->empty()) return nullptr;
  return bn_ptr(BN_bin2bn(reinterpret_cast<const unsigned char*>(bytes->data()),
                          static_cast<int>(bytes->size()), nullptr));
}

bool verify_digest(EVP_PKEY* pkey, const std::string& input, const unsigned char* sig,
                   std::size_t sig_len) {
  std::unique_ptr<EVP_MD_CTX, deleter<EVP_MD_CTX_free>> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, pkey) != 1)
    return false;
  return EVP_DigestVerify(ctx.get(), sig, sig_len,
                          reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
}

bool verify_hs256(const std::string& secret, const std::string& input, const std::string& sig) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  std::size_t len = 0;
  if (!EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret.data(), secret.size(),
                 reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac,
                 sizeof mac, &len))
    return false;
  // Length first (it is public: always 32), then a constant-time compare.
  return sig.size() == len && CRYPTO_memcmp(mac, sig.data(), len) == 0;
}

/// JOSE ES256 signatures are r||s, 32 bytes each; EVP wants DER.
bool verify_es256(EVP_PKEY* pkey, const std::string& input, const std::string& sig) {
  if (sig.size() != 64) return false;
  std::unique_ptr<ECDSA_SIG, deleter<ECDSA_SIG_free>> es(ECDSA_SIG_new());
  const auto* raw = reinterpret_cast<const unsigned char*>(sig.data());
  BIGNUM* r = BN_bin2bn(raw, 32, nullptr);
  BIGNUM* s = BN_bin2bn(raw + 32, 32, nullptr);
  if (!es || !r || !s || ECDSA_SIG_set0(es.get(), r, s) != 1) {
    BN_free(r);
    BN_free(s);
    return false;
  }
  unsigned char* der = nullptr;
  int der_len = i2d_ECDSA_SIG(es.get(), &der);
  if (der_len <= 0) return false;
  bool ok = verify_digest(pkey, input, der, static_cast<std::size_t>(der_len));
  OPENSSL_free(der);
  return ok;
}

/// A NumericDate claim: absent, a number, or malformed.
enum class date_state { absent, ok, bad };
date_state numeric_date(const nlohmann::json& claims, const char* name, double& out) {
  auto it = claims.find(name);
  if (it == claims.end()) return date_state::absent;
  if (!it->is_number()) return date_state::bad;
  out = it->get<double>();
  return date_state::ok;
}

bool audience_matches(const nlohmann::json& claims, const std::string& want) {
  auto it = claims.find("aud");
  if (it == claims.end()) return false;
  if (it->is_string()) return it->get_ref<const std::string&>() == want;
  if (!it->is_array()) return false;
  return std::any_of(it->begin(), it->end(), [&](const nlohmann::json& a) {
    return a.is_string() && a.get_ref<const std::string&>() == want;
  });
}

}  // namespace

std::string base64url_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

std::optional<std::string> base64url_decode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;  // no encoder leaves one stray character
  // EVP_DecodeBlock wants standard base64 in whole quads; it also skips
  // whitespace, so refuse anything outside the url alphabet first.
  std::string std_b64(text);
  for (char& c : std_b64) {
    bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (c == '-')
      c = '+';
    else if (c == '_')
      c = '/';
    else if (!alnum)
      return std::nullopt;
  }
  std::size_t pad = (4 - std_b64.size() % 4) % 4;
  std_b64.append(pad, '=');
  std::string out(std_b64.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(std_b64.data()),
                          static_cast<int>(std_b64.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the zero bytes that padding stands for.
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

result<key> key::from_pkey(EVP_PKEY* owned) {
  std::shared_ptr<EVP_PKEY> p(owned, EVP_PKEY_free);
  if (EVP_PKEY_is_a(owned, "RSA")) {
    if (EVP_PKEY_get_bits(owned) < 2048) return fail("RSA key shorter than 2048 bits");
    return key(kind::rsa, std::move(p), {});
  }
  if (EVP_PKEY_is_a(owned, "EC")) {
    if (!has_group(owned, "prime256v1") && !has_group(owned, "P-256"))
      return fail("EC key is not on curve P-256");
    return key(kind::ec_p256, std::move(p), {});
  }
  return fail("unsupported key type (expected RSA or EC P-256)");
}

result<key> key::from_pem(std::string_view pem) {
  if (pem.find("-----BEGIN CERTIFICATE-----") != std::string_view::npos) {
    bio_ptr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    std::unique_ptr<X509, deleter<X509_free>> cert(
        bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
    EVP_PKEY* p = cert ? X509_get_pubkey(cert.get()) : nullptr;
    if (!p) return fail("not a readable PEM certificate");
    return from_pkey(p);
  }
  // The decoder reads SubjectPublicKeyInfo ("PUBLIC KEY") and PKCS#1 ("RSA PUBLIC KEY").
  EVP_PKEY* p = nullptr;
  std::unique_ptr<OSSL_DECODER_CTX, deleter<OSSL_DECODER_CTX_free>> dctx(
      OSSL_DECODER_CTX_new_for_pkey(&p, "PEM", nullptr, nullptr, EVP_PKEY_PUBLIC_KEY, nullptr,
                                    nullptr));
  const auto* data = reinterpret_cast<const unsigned char*>(pem.data());
  std::size_t len = pem.size();
  if (!dctx || OSSL_DECODER_from_data(dctx.get(), &data, &len) != 1 || !p) {
    EVP_PKEY_free(p);
    return fail("not a readable PEM public key or certificate");
  }
  return from_pkey(p);
}

result<key> key::from_hmac_secret(std::string secret) {
  if (secret.size() < 32) return fail("HMAC secret shorter than 32 bytes");
  // A PEM here means someone pasted a public key as the HMAC secret: that is
  // exactly the RS256/HS256 key confusion, so refuse it.
  if (secret.find("-----BEGIN") != std::string::npos)
    return fail("HMAC secret must not be a PEM key");
  return key(kind::hmac, nullptr, std::move(secret));
}

result<key> key::from_jwk(const nlohmann::json& jwk) {
  if (!jwk.is_object()) return fail("JWK is not an object");
  auto kty = jwk.find("kty");
  if (kty == jwk.end() || !kty->is_string()) return fail("JWK has no kty");
  std::unique_ptr<OSSL_PARAM_BLD, deleter<OSSL_PARAM_BLD_free>> bld(OSSL_PARAM_BLD_new());
  if (!bld) return fail("out of memory");
  if (*kty == "RSA") {
    bn_ptr n = jwk_bignum(jwk, "n");
    bn_ptr e = jwk_bignum(jwk, "e");
    if (!n || !e) return fail("RSA JWK needs base64url n and e");
    if (OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n.get()) != 1 ||
        OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e.get()) != 1)
      return fail("invalid RSA JWK");
    EVP_PKEY* p = pkey_from_params("RSA", bld.get());
    if (!p) return fail("invalid RSA JWK");
    return from_pkey(p);
  }
  if (*kty == "EC") {
    auto crv = jwk.find("crv");
    if (crv == jwk.end() || *crv != "P-256") return fail("EC JWK curve is not P-256");
    auto coord = [&](const char* name) -> std::optional<std::string> {
      auto it = jwk.find(name);
      if (it == jwk.end() || !it->is_string()) return std::nullopt;
      auto b = base64url_decode(it->get_ref<const std::string&>());
      if (!b || b->size() != 32) return std::nullopt;
      return b;
    };
    auto x = coord("x"), y = coord("y");
    if (!x || !y) return fail("EC JWK needs 32-byte base64url x and y");
    // An uncompressed point: 0x04 || x || y. OpenSSL checks it lies on the curve.
    std::string point = "\x04" + *x + *y;
    if (OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) !=
            1 ||
        OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                         point.size()) != 1)
      return fail("invalid EC JWK");
    EVP_PKEY* p = pkey_from_params("EC", bld.get());
    if (!p) return fail("invalid EC JWK");
    return from_pkey(p);
  }
  return fail("unsupported JWK kty");
}

bool key::fits(algorithm a) const {
  switch (a) {
    case algorithm::rs256:
      return kind_ == kind::rsa;
    case algorithm::es256:
      return kind_ == kind::ec_p256;
    case algorithm::hs256:
      return kind_ == kind::hmac;
  }
  return false;
}

result<decoded_token> decode(std::string_view token) {
  if (token.size() > max_token_bytes) return failure{"token too large"};
  auto dot1 = token.find('.');
  auto dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos)
    return malformed;
  auto header = base64url_decode(token.substr(0, dot1));
  auto payload = base64url_decode(token.substr(dot1 + 1, dot2 - dot1 - 1));
  auto signature = base64url_decode(token.substr(dot2 + 1));
  if (!header || !payload || !signature) return malformed;
  decoded_token t;
  t.header = nlohmann::json::parse(*header, nullptr, false);
  if (!t.header.is_object()) return malformed;
  auto alg = t.header.find("alg");
  if (alg == t.header.end() || !alg->is_string()) return malformed;
  t.alg = alg->get<std::string>();
  if (auto kid = t.header.find("kid"); kid != t.header.end()) {
    if (!kid->is_string()) return malformed;
    t.kid = kid->get<std::string>();
  }
  t.payload = std::move(*payload);
  t.signing_input = std::string(token.substr(0, dot2));
  t.signature = std::move(*signature);
  return t;
}

result<nlohmann::json> verify(const decoded_token& t, const key& k, const verify_options& o) {
  // "none", and every algorithm scg does not implement, end here.
  auto alg = algorithm_from_name(t.alg);
  if (!alg || std::find(o.algorithms.begin(), o.algorithms.end(), *alg) == o.algorithms.end())
    return failure{"algorithm not allowed"};
  if (!k.fits(*alg)) return failure{"algorithm does not match key"};
  // RFC 7515 §4.1.11: an extension we do not understand must not be ignored.
  if (t.header.contains("crit")) return failure{"unsupported critical header"};

  bool good = false;
  switch (*alg) {
    case algorithm::hs256:
      good = verify_hs256(k.secret(), t.signing_input, t.signature);
      break;
    case algorithm::rs256:
      good = verify_digest(k.pkey(), t.signing_input,
                           reinterpret_cast<const unsigned char*>(t.signature.data()),
                           t.signature.size());
      break;
    case algorithm::es256:
      good = verify_es256(k.pkey(), t.signing_input, t.signature);
      break;
  }
  if (!good) return fail("signature invalid");

  // Claims are parsed only once the signature proves who wrote them.
  nlohmann::json claims = nlohmann::json::parse(t.payload, nullptr, false);
  if (!claims.is_object()) return malformed;
  const double now = static_cast<double>(o.now), leeway = static_cast<double>(o.leeway_secs);
  double exp = 0, nbf = 0;
  switch (numeric_date(claims, "exp", exp)) {
    case date_state::absent:
      return failure{"token has no expiry"};
    case date_state::bad:
      return malformed;
    case date_state::ok:
      if (now > exp + leeway) return failure{"token expired"};
  }
  switch (numeric_date(claims, "nbf", nbf)) {
    case date_state::absent:
      break;
    case date_state::bad:
      return malformed;
    case date_state::ok:
      if (now + leeway < nbf) return failure{"token not yet valid"};
  }
  if (!o.issuer.empty()) {
    auto iss = claims.find("iss");
    if (iss == claims.end() || !iss->is_string() || *iss != o.issuer)
      return failure{"issuer mismatch"};
  }
  if (!o.audience.empty() && !audience_matches(claims, o.audience))
    return failure{"audience mismatch"};
  return claims;
}

std::int64_t unix_now() {
  using namespace std::chrono;
  return duration_cast<seconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace scg::auth

#pragma once
// JSON Web Tokens (compact JWS) verified against a local key: RS256, ES256 and
// HS256 through OpenSSL 3's EVP interface. Failure reasons are short, fixed
// phrases that never quote the token, its claims or the key.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>
#include <openssl/types.h>

#include "config/security.hpp"

namespace scg::auth {

/// Why a token (or a key, or a document) was refused; safe to show a client.
struct failure {
  std::string reason;
};

/// A value or the reason there is none.
template <class T>
using result = std::variant<T, failure>;

/// The signature algorithms scg accepts (config/security.hpp).
using algorithm = config::jwt_algorithm;
inline std::optional<algorithm> algorithm_from_name(std::string_view name) {
  return config::jwt_algorithm_from_name(name);
}
inline std::string_view algorithm_name(algorithm a) { return config::jwt_algorithm_name(a); }

/// Base64url without padding, as JWS uses it.
std::string base64url_encode(std::string_view bytes);

/// Decodes unpadded (or padded) base64url; nullopt on any other character or a
/// length no encoder produces.
std::optional<std::string> base64url_decode(std::string_view text);

/// A verification key: an RSA (at least 2048 bits) or P-256 public key, or an
/// HMAC secret. The kind decides which algorithm it can verify, so a public
/// key's bytes can never be used as an HMAC secret (key confusion).
class key {
 public:
  enum class kind { rsa, ec_p256, hmac };

  /// A PEM public key ("BEGIN PUBLIC KEY", "BEGIN RSA PUBLIC KEY") or certificate.
  static result<key> from_pem(std::string_view pem);
  /// An HMAC secret of at least 32 bytes (RFC 7518 §3.2); PEM text is refused.
  static result<key> from_hmac_secret(std::string secret);
  /// A JWK object: kty RSA (n, e) or kty EC (crv P-256, x, y).
  static result<key> from_jwk(const nlohmann::json& jwk);

  kind type() const { return kind_; }
  /// True when this key verifies `a` (RS256 ↔ rsa, ES256 ↔ ec_p256, HS256 ↔ hmac).
  bool fits(algorithm a) const;

  /// The public key (rsa, ec_p256); null for hmac.
  EVP_PKEY* pkey() const { return pkey_.get(); }
  /// The secret (hmac); empty otherwise.
  const std::string& secret() const { return secret_; }

 private:
  key(kind k, std::shared_ptr<EVP_PKEY> p, std::string s)
      : kind_(k), pkey_(std::move(p)), secret_(std::move(s)) {}
  static result<key> from_pkey(EVP_PKEY* owned);

  kind kind_;
  std::shared_ptr<EVP_PKEY> pkey_;  // immutable once built, so shared between copies
  std::string secret_;
};

/// A compact JWS split and decoded, not yet verified.
struct decoded_token {
  nlohmann::json header;      ///< a JSON object
  std::string payload;        ///< decoded payload bytes; parsed only after the signature checks
  std::string signing_input;  ///< "header.payload" as received
  std::string signature;      ///< decoded signature bytes
  std::string alg;            ///< header "alg" as written
  std::optional<std::string> kid;  ///< header "kid"
};

/// Longest token scg looks at; longer ones are refused before decoding.
inline constexpr std::size_t max_token_bytes = 16 * 1024;

/// Splits "h.p.s" and decodes header and signature. Fails with "malformed
/// token" on a wrong shape, bad base64url or a header that is not a JSON object.
result<decoded_token> decode(std::string_view token);

/// What a verified token must satisfy besides its signature.
struct verify_options {
  std::vector<algorithm> algorithms;  ///< the allow-list
  std::string issuer;                 ///< empty: iss not checked
  std::string audience;               ///< empty: aud not checked
  std::int64_t leeway_secs = 60;      ///< clock skew allowed on exp and nbf
  std::int64_t now = 0;               ///< unix seconds
};

/// Verifies `t` with `k`: alg on the allow-list and fitting the key, no
/// critical headers, signature, exp (required), nbf, iss, aud. Returns the claims.
result<nlohmann::json> verify(const decoded_token& t, const key& k, const verify_options& o);

/// The current time in unix seconds (system clock).
std::int64_t unix_now();

}  // namespace scg::auth

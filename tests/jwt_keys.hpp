#pragma once
// Keys and tokens for the auth tests, unit and integration alike: keys are
// generated per run with OpenSSL (never checked in) and tokens signed here.

#include <openssl/evp.h>

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace scg_auth_test {

/// A fresh RSA-2048 ("RSA") or P-256 ("EC") key pair.
std::shared_ptr<EVP_PKEY> fresh_key(const std::string& type);
/// One key per type for the whole run (RSA generation is the slow part).
EVP_PKEY* test_key(const std::string& type);
/// The public half of `k` as a "BEGIN PUBLIC KEY" PEM.
std::string public_pem(EVP_PKEY* k);
/// base64url(header) "." base64url(claims): what a JWS signs.
std::string signing_input(const nlohmann::json& header, const nlohmann::json& claims);
/// Signs with RS256 (RSA key) or ES256 (EC key, JOSE r||s signature).
std::string sign_jwt(const nlohmann::json& header, const nlohmann::json& claims, EVP_PKEY* k);
/// An HS256 signature over `input` keyed with `secret`, appended to it.
std::string sign_hs256_raw(const std::string& input, const std::string& secret);
std::string sign_hs256(const nlohmann::json& header, const nlohmann::json& claims, const std::string& secret);
/// A self-signed certificate for `k`, as PEM.
std::string certificate_pem(EVP_PKEY* k);
/// The public JWK of `k` (RSA n/e or EC P-256 x/y).
nlohmann::json public_jwk(EVP_PKEY* k, const std::string& kid);

}  // namespace scg_auth_test

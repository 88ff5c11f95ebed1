#include "auth/authenticator.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "auth/admin_auth.hpp"
#include "core/file.hpp"
#include "core/session_key.hpp"
#include "config/config.hpp"

namespace scg::auth {
namespace {

/// Longest user id scg takes from a credential (the wire scanner's id limit).
constexpr std::size_t max_user_id_bytes = 1024;

std::string sha256(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), len);
}

}  // namespace

authenticator::~authenticator() = default;

std::variant<std::unique_ptr<authenticator>, config::error> authenticator::create(
    const security_config& cfg, options opts) {
  std::unique_ptr<authenticator> a(new authenticator());
  a->cfg_ = cfg;
  a->opts_ = std::move(opts);
  const auth_config& auth = a->cfg_.auth;
  if (auth.type == auth_type::static_tokens) {
    // Digests have one length, so comparing them in constant time also hides the token's length.
    for (const auto& t : auth.tokens) a->token_digests_.push_back(sha256(t.token));
  }
  if (auth.type == auth_type::jwt) {
    const jwt_config& j = auth.jwt;
    result<key> k = failure{"no key"};
    std::string field;
    if (!j.key_pem.empty()) {
      field = "auth.jwt.key_pem";
      k = key::from_pem(j.key_pem);
    } else if (!j.key_file.empty()) {
      field = "auth.jwt.key_file";
      std::string why;
      auto pem = core::read_file(j.key_file, why, 1u << 20);
      if (!pem) return config::error{field, why};
      k = key::from_pem(*pem);
    } else if (j.hmac_secret) {
      field = j.hmac_secret->field;
      auto secret = resolve_secret(*j.hmac_secret);
      if (auto* e = std::get_if<config::error>(&secret)) return *e;
      k = key::from_hmac_secret(std::get<std::string>(std::move(secret)));
    }
    if (auto* f = std::get_if<failure>(&k)) return config::error{field, f->reason};
    a->jwt_key_ = std::get<key>(std::move(k));
  }
  if (auth.type == auth_type::oidc) {
    const oidc_config& o = auth.oidc;
    fetch_fn fetch = a->opts_.fetch ? a->opts_.fetch
                                    : http_fetcher(std::chrono::milliseconds(o.fetch_timeout_ms));
    jwks_cache::options co{o.discovery_url, o.issuer, std::chrono::seconds(o.refresh_secs),
                           std::chrono::seconds(o.min_refresh_interval_secs)};
    a->jwks_ = std::make_unique<jwks_cache>(std::move(co), std::move(fetch), a->opts_.steady_now);
  }
  return a;
}

std::variant<std::unique_ptr<authenticator>, config::error> authenticator::create(
    const security_config& cfg) {
  return create(cfg, options{});
}

const static_token* authenticator::find_static(std::string_view token) const {
  const std::string digest = sha256(token);
  const static_token* found = nullptr;
  // No early exit: every configured token is compared, whichever matches.
  for (std::size_t i = 0; i < token_digests_.size(); ++i) {
    bool equal = CRYPTO_memcmp(digest.data(), token_digests_[i].data(), digest.size()) == 0;
    if (equal) found = &cfg_.auth.tokens[i];
  }
  return found;
}

result<nlohmann::json> authenticator::check_jwt(std::string_view token) const {
  auto decoded = decode(token);
  if (auto* f = std::get_if<failure>(&decoded)) return *f;
  const decoded_token& t = std::get<decoded_token>(decoded);
  verify_options vo;
  vo.now = opts_.unix_now();
  if (cfg_.auth.type == auth_type::jwt) {
    const jwt_config& j = cfg_.auth.jwt;
    vo.algorithms = j.algorithms;
    vo.issuer = j.issuer;
    vo.audience = j.audience;
    vo.leeway_secs = j.leeway_secs;
    return verify(t, *jwt_key_, vo);
  }
  const oidc_config& o = cfg_.auth.oidc;
  vo.algorithms = o.algorithms;
  vo.issuer = o.issuer;
  vo.audience = o.audience;
  vo.leeway_secs = o.leeway_secs;
  // Check the algorithm before the kid, so "none" tokens never cause a fetch.
  auto alg = algorithm_from_name(t.alg);
  if (!alg || std::find(vo.algorithms.begin(), vo.algorithms.end(), *alg) == vo.algorithms.end())
    return failure{"algorithm not allowed"};
  auto k = jwks_->find(t.kid);
  if (!k) return failure{"unknown signing key"};
  return verify(t, *k, vo);
}

result<std::string> authenticator::resolve_tenant(std::string_view claimed,
                                                  const header_lookup& headers) const {
  const tenants_config& tc = cfg_.tenants;
  std::string tenant;
  switch (tc.from) {
    case tenant_source::claim:
      tenant = std::string(claimed);
      break;
    case tenant_source::header:
      if (headers)
        if (auto v = headers(tc.header)) tenant = std::string(*v);
      break;
    case tenant_source::fixed:
      tenant = tc.value;
      break;
  }
  if (tenant.empty()) {
    if (tc.reject_missing) return failure{"missing tenant"};
    return tc.default_tenant;
  }
  if (!valid_tenant_name(tenant)) return failure{"invalid tenant"};
  // With pools configured, a tenant is known when it has one (or is the default).
  if (!tc.pools.empty() && tc.pools.find(tenant) == tc.pools.end() && tenant != tc.default_tenant) {
    if (tc.reject_unknown) return failure{"unknown tenant"};
    return tc.default_tenant;
  }
  return tenant;
}

result<identity> authenticator::authenticate(std::optional<std::string_view> authorization,
                                             const header_lookup& headers) const {
  identity id;
  std::string claimed;
  switch (cfg_.auth.type) {
    case auth_type::anonymous:
      break;
    case auth_type::static_tokens: {
      auto token = bearer_token(authorization);
      if (!token) return failure{"missing bearer token"};
      const static_token* t = find_static(*token);
      if (!t) return failure{"unknown token"};
      id.user_id = t->user_id;
      claimed = t->tenant;
      id.verified = true;
      break;
    }
    case auth_type::jwt:
    case auth_type::oidc: {
      auto token = bearer_token(authorization);
      if (!token) return failure{"missing bearer token"};
      auto claims = check_jwt(*token);
      if (auto* f = std::get_if<failure>(&claims)) return *f;
      const auto& c = std::get<nlohmann::json>(claims);
      const std::string& user_claim =
          cfg_.auth.type == auth_type::jwt ? cfg_.auth.jwt.user_claim : cfg_.auth.oidc.user_claim;
      auto user = c.find(user_claim);
      if (user == c.end() || !user->is_string() || user->get_ref<const std::string&>().empty() ||
          user->get_ref<const std::string&>().size() > max_user_id_bytes)
        return failure{"token has no user claim"};
      id.user_id = user->get<std::string>();
      if (auto t = c.find(cfg_.tenants.claim); t != c.end() && t->is_string())
        claimed = t->get<std::string>();
      id.verified = true;
      break;
    }
  }
  auto tenant = resolve_tenant(claimed, headers);
  if (auto* f = std::get_if<failure>(&tenant)) return *f;
  id.tenant = std::get<std::string>(std::move(tenant));
  return id;
}

const std::vector<std::string>* authenticator::pool(std::string_view tenant) const {
  auto it = cfg_.tenants.pools.find(tenant);
  return it == cfg_.tenants.pools.end() ? nullptr : &it->second;
}

void authenticator::tick() {
  if (jwks_) jwks_->refresh_if_due();
}

std::string session_key(std::string_view tenant, std::string_view user_id,
                        std::string_view session_id) {
  return core::session_key{std::string(tenant), std::string(user_id), std::string(session_id)}
      .str();
}

}  // namespace scg::auth

#include "auth/jwks.hpp"

#include <httplib.h>

#include "core/address.hpp"

namespace scg::auth {
namespace {

/// Largest discovery or JWKS document scg reads; real ones are a few KiB.
constexpr std::size_t max_document_bytes = 1u << 20;

}  // namespace

result<key_set> parse_jwks(std::string_view json_text) {
  auto doc = nlohmann::json::parse(json_text, nullptr, false);
  if (!doc.is_object() || !doc.contains("keys") || !doc["keys"].is_array())
    return failure{"JWKS is not an object with a \"keys\" list"};
  key_set out;
  for (const auto& jwk : doc["keys"]) {
    if (!jwk.is_object()) continue;
    // Encryption keys share JWKS documents with signing keys; skip them.
    if (auto use = jwk.find("use"); use != jwk.end() && *use != "sig") continue;
    auto k = key::from_jwk(jwk);
    if (std::holds_alternative<failure>(k)) continue;
    std::string kid;
    if (auto it = jwk.find("kid"); it != jwk.end() && it->is_string()) kid = it->get<std::string>();
    out.keys.insert_or_assign(std::move(kid), std::get<key>(std::move(k)));
  }
  return out;
}

result<discovery> parse_discovery(std::string_view json_text) {
  auto doc = nlohmann::json::parse(json_text, nullptr, false);
  if (!doc.is_object()) return failure{"discovery document is not a JSON object"};
  discovery d;
  for (auto [name, out] : {std::pair{"issuer", &d.issuer}, std::pair{"jwks_uri", &d.jwks_uri}}) {
    auto it = doc.find(name);
    if (it == doc.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
      return failure{std::string("discovery document has no ") + name};
    *out = it->get<std::string>();
  }
  return d;
}

fetch_fn http_fetcher(std::chrono::milliseconds timeout) {
  return [timeout](const std::string& url) -> std::optional<std::string> {
    // The URL may come from the identity provider's discovery document.
    const auto parts = core::parse_url(url);
    if (!parts) return std::nullopt;
    httplib::Client cli(parts->origin());
    auto secs = static_cast<time_t>(timeout.count() / 1000);
    auto usecs = static_cast<time_t>(timeout.count() % 1000 * 1000);
    cli.set_connection_timeout(secs, usecs);
    cli.set_read_timeout(secs, usecs);
    cli.set_write_timeout(secs, usecs);
    cli.set_follow_location(false);  // a key source that redirects is a misconfiguration
    std::string body;
    // Reading through a receiver caps the body, so a hostile server cannot fill memory.
    auto res = cli.Get(parts->path, [&](const char* data, std::size_t len) {
      body.append(data, len);
      return body.size() <= max_document_bytes;
    });
    if (!res || res->status != 200 || body.size() > max_document_bytes) return std::nullopt;
    return body;
  };
}

jwks_cache::jwks_cache(options o, fetch_fn fetch, now_fn now)
    : opts_(std::move(o)),
      fetch_(std::move(fetch)),
      now_(std::move(now)),
      keys_(std::make_shared<const snapshot>()) {}

std::shared_ptr<const jwks_cache::snapshot> jwks_cache::current() const {
  std::lock_guard<std::mutex> lock(snapshot_mutex_);
  return keys_;
}

std::shared_ptr<const key> jwks_cache::lookup(const snapshot& s,
                                              const std::optional<std::string>& kid) const {
  if (kid) {
    auto it = s.keys.find(*kid);
    return it == s.keys.end() ? nullptr : it->second;
  }
  // No kid: only unambiguous when the provider publishes a single key.
  return s.keys.size() == 1 ? s.keys.begin()->second : nullptr;
}

std::shared_ptr<const key> jwks_cache::find(const std::optional<std::string>& kid) {
  if (auto k = lookup(*current(), kid)) return k;
  std::lock_guard<std::mutex> lock(refresh_mutex_);
  // Another thread may have refreshed while this one waited.
  if (auto k = lookup(*current(), kid)) return k;
  const auto now = now_();
  if (last_attempt_ && now - *last_attempt_ < opts_.min_refresh_interval) return nullptr;
  refresh_locked(now);
  return lookup(*current(), kid);
}

bool jwks_cache::refresh_if_due() {
  std::lock_guard<std::mutex> lock(refresh_mutex_);
  const auto now = now_();
  if (last_success_ && now - *last_success_ < opts_.refresh_interval) return false;
  if (last_attempt_ && now - *last_attempt_ < opts_.min_refresh_interval) return false;
  return refresh_locked(now);
}

std::uint64_t jwks_cache::refresh_attempts() const { return attempts_.load(); }

bool jwks_cache::refresh_locked(clock::time_point now) {
  ++attempts_;
  last_attempt_ = now;
  if (jwks_uri_.empty()) {
    auto doc = fetch_(opts_.discovery_url);
    if (!doc) return false;
    auto d = parse_discovery(*doc);
    if (std::holds_alternative<failure>(d)) return false;
    // OIDC Discovery §4.3: the document must name the issuer we trust.
    if (!opts_.issuer.empty() && std::get<discovery>(d).issuer != opts_.issuer) return false;
    jwks_uri_ = std::get<discovery>(d).jwks_uri;
  }
  auto body = fetch_(jwks_uri_);
  if (!body) {
    jwks_uri_.clear();  // the provider may have moved its keys: discover again next time
    return false;
  }
  auto set = parse_jwks(*body);
  // Keep the old keys rather than replace them with nothing usable.
  if (std::holds_alternative<failure>(set) || std::get<key_set>(set).keys.empty()) return false;
  auto next = std::make_shared<snapshot>();
  for (auto& [kid, k] : std::get<key_set>(set).keys)
    next->keys.emplace(kid, std::make_shared<const key>(k));
  {
    std::lock_guard<std::mutex> lock(snapshot_mutex_);
    keys_ = std::move(next);
  }
  last_success_ = now;
  return true;
}

}  // namespace scg::auth

#pragma once
// OIDC key discovery: the discovery document names the JWKS URL, the JWKS
// holds the signing keys by kid. jwks_cache keeps the current set, refreshes
// it periodically and when a token names a kid it has not seen, at a bounded
// rate so a stream of forged kids cannot turn into a stream of fetches.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "auth/jwt.hpp"

namespace scg::auth {

/// Signing keys by kid. Keys without a kid are kept under "".
struct key_set {
  std::map<std::string, key, std::less<>> keys;
};

/// Parses a JWKS document. Keys scg cannot use (kty oct, other curves,
/// use other than "sig", broken parameters) are skipped, not fatal; a
/// document that is not `{"keys": [...]}` is.
result<key_set> parse_jwks(std::string_view json_text);

/// The two fields of an OpenID Provider's discovery document scg needs.
struct discovery {
  std::string issuer;
  std::string jwks_uri;
};

/// Parses a discovery document; issuer and jwks_uri are required strings.
result<discovery> parse_discovery(std::string_view json_text);

/// Fetches a URL's body; nullopt on any failure (connect, status not 200, timeout).
using fetch_fn = std::function<std::optional<std::string>(const std::string& url)>;

/// An HTTP(S) GET through cpp-httplib with the given timeout per connect/read.
fetch_fn http_fetcher(std::chrono::milliseconds timeout);

/// The keys of one OpenID Provider, refreshed from its discovery document.
/// Thread-safe: lookups read an immutable snapshot; one refresh runs at a time.
class jwks_cache {
 public:
  using clock = std::chrono::steady_clock;
  using now_fn = std::function<clock::time_point()>;

  struct options {
    std::string discovery_url;
    std::string issuer;                          ///< the discovery document must name this issuer
    std::chrono::seconds refresh_interval{300};  ///< periodic refresh
    std::chrono::seconds min_refresh_interval{10};  ///< floor between fetches
  };

  jwks_cache(options o, fetch_fn fetch, now_fn now = clock::now);

  /// The key for `kid` (nullopt: the token named none). On a miss, refreshes
  /// once (blocking the caller for the fetch) unless the last attempt was less
  /// than min_refresh_interval ago. Null when no usable key is found.
  std::shared_ptr<const key> find(const std::optional<std::string>& kid);

  /// Refreshes when the periodic interval has passed since the last success
  /// (or nothing was ever fetched), respecting min_refresh_interval. Call it
  /// from a timer, off the request path. Returns true when a refresh ran and succeeded.
  bool refresh_if_due();

  /// Number of fetch rounds attempted so far (for tests and metrics).
  std::uint64_t refresh_attempts() const;

 private:
  struct snapshot {
    std::map<std::string, std::shared_ptr<const key>, std::less<>> keys;
  };
  std::shared_ptr<const key> lookup(const snapshot& s, const std::optional<std::string>& kid) const;
  std::shared_ptr<const snapshot> current() const;
  /// Fetches discovery (when needed) and the JWKS; requires refresh_mutex_.
  bool refresh_locked(clock::time_point now);

  options opts_;
  fetch_fn fetch_;
  now_fn now_;

  mutable std::mutex snapshot_mutex_;  // guards keys_ only; held for a pointer copy
  std::shared_ptr<const snapshot> keys_;

  std::mutex refresh_mutex_;  // one refresh at a time; guards the fields below
  std::string jwks_uri_;      // learned from discovery, kept across refreshes
  std::optional<clock::time_point> last_attempt_, last_success_;
  std::atomic<std::uint64_t> attempts_{0};
};

}  // namespace scg::auth

#pragma once
// Token buckets per tenant and per user, enforced cluster-wide without a
// shared store: each replica enforces its share of every limit (set_share
// with 1 / live members), so the cluster as a whole admits about the limit.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "config/security.hpp"

namespace scg::auth {

using config::rate;
using config::rate_limits_config;

using limit_clock = std::chrono::steady_clock;

/// The answer to one request for a token.
struct acquire_result {
  bool allowed = true;
  std::chrono::milliseconds retry_after{0};  ///< when refused: wait at least this long
};

/// A token bucket: `rate` tokens per second, at most `burst` held, starting full.
/// Not thread-safe; rate_limiter guards its buckets.
class token_bucket {
 public:
  token_bucket(double rate, double burst, limit_clock::time_point now);

  /// Takes one token at `now`, with rate and burst scaled by `share` (the
  /// scaled burst never drops below one token, or a small share would refuse everything).
  acquire_result try_take(limit_clock::time_point now, double share = 1.0);

  /// Returns a token taken by a request another limit then refused.
  void give_back(double share = 1.0);

 private:
  double rate_, burst_, tokens_;
  limit_clock::time_point last_;
};

/// The limits of `rate_limits:`, keyed by tenant and by tenant/user, with a
/// bounded number of keys (least recently used evicted). Thread-safe; keys are
/// sharded so concurrent requests rarely share a lock.
class rate_limiter {
 public:
  using now_fn = std::function<limit_clock::time_point()>;

  explicit rate_limiter(rate_limits_config cfg, now_fn now = limit_clock::now,
                        std::size_t max_keys = 100000);

  /// True when any limit is configured (otherwise try_acquire always allows).
  bool enabled() const;

  /// One request of `user` in `tenant`: the user's bucket first, then the
  /// tenant's; a refusal by the tenant returns the user's token.
  acquire_result try_acquire(std::string_view tenant, std::string_view user);

  /// This replica's share of every limit, (0, 1]: 1 / live members.
  void set_share(double share);
  double share() const { return share_.load(std::memory_order_relaxed); }

  /// Keys currently held (for tests and a gauge).
  std::size_t size() const;

 private:
  static constexpr std::size_t shard_count = 16;
  struct entry {
    token_bucket bucket;
    std::list<std::string>::iterator lru;
  };
  struct shard {
    mutable std::mutex mutex;
    std::unordered_map<std::string, entry> buckets;
    std::list<std::string> lru;  // most recent first
  };

  acquire_result take(const std::string& key, const rate& r, limit_clock::time_point now);
  void give_back(const std::string& key);
  shard& shard_for(const std::string& key);

  rate_limits_config cfg_;
  now_fn now_;
  std::size_t max_keys_per_shard_;
  std::atomic<double> share_{1.0};
  std::array<shard, shard_count> shards_;
};



}  // namespace scg::auth

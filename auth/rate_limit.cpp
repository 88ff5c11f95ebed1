#include "auth/rate_limit.hpp"

#include <algorithm>
#include <cmath>

namespace scg::auth {

token_bucket::token_bucket(double rate, double burst, limit_clock::time_point now)
    : rate_(rate), burst_(burst), tokens_(burst), last_(now) {}

acquire_result token_bucket::try_take(limit_clock::time_point now, double share) {
  const double rate = rate_ * share;
  const double burst = std::max(1.0, burst_ * share);
  if (now > last_) {
    double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst, tokens_ + elapsed * rate);
    last_ = now;
  }
  // A lowered share also lowers what a full bucket holds.
  tokens_ = std::min(tokens_, burst);
  if (tokens_ >= 1.0) {
    tokens_ -= 1.0;
    return {};
  }
  double wait_ms = std::ceil((1.0 - tokens_) / rate * 1000.0);
  return {false,
          std::chrono::milliseconds(std::max<long long>(1, static_cast<long long>(wait_ms)))};
}

void token_bucket::give_back(double share) {
  tokens_ = std::min(std::max(1.0, burst_ * share), tokens_ + 1.0);
}

rate_limiter::rate_limiter(rate_limits_config cfg, now_fn now, std::size_t max_keys)
    : cfg_(std::move(cfg)),
      now_(std::move(now)),
      max_keys_per_shard_(std::max<std::size_t>(1, max_keys / shard_count)) {}

bool rate_limiter::enabled() const {
  return cfg_.per_tenant || cfg_.per_user || !cfg_.tenants.empty();
}

void rate_limiter::set_share(double share) {
  if (!(share > 0)) share = 1.0;  // also catches NaN: never refuse everything by accident
  share_.store(std::min(share, 1.0), std::memory_order_relaxed);
}

rate_limiter::shard& rate_limiter::shard_for(const std::string& key) {
  return shards_[std::hash<std::string>{}(key) % shard_count];
}

acquire_result rate_limiter::take(const std::string& key, const rate& r,
                                  limit_clock::time_point now) {
  shard& s = shard_for(key);
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.buckets.find(key);
  if (it == s.buckets.end()) {
    if (s.buckets.size() >= max_keys_per_shard_) {
      s.buckets.erase(s.lru.back());
      s.lru.pop_back();
    }
    s.lru.push_front(key);
    it = s.buckets.emplace(key, entry{token_bucket(r.rps, r.burst, now), s.lru.begin()}).first;
  } else {
    s.lru.splice(s.lru.begin(), s.lru, it->second.lru);
  }
  return it->second.bucket.try_take(now, share());
}

void rate_limiter::give_back(const std::string& key) {
  shard& s = shard_for(key);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (auto it = s.buckets.find(key); it != s.buckets.end()) it->second.bucket.give_back(share());
}

acquire_result rate_limiter::try_acquire(std::string_view tenant, std::string_view user) {
  if (!enabled()) return {};
  const auto now = now_();
  // Key prefixes keep tenant and user buckets apart; tenant names hold no '\n'.
  std::string user_key;
  if (cfg_.per_user) {
    user_key.reserve(tenant.size() + user.size() + 2);
    user_key.append("u").append(tenant).append("\n").append(user);
    auto r = take(user_key, *cfg_.per_user, now);
    if (!r.allowed) return r;
  }
  const rate* tenant_rate = nullptr;
  if (auto it = cfg_.tenants.find(tenant); it != cfg_.tenants.end())
    tenant_rate = &it->second;
  else if (cfg_.per_tenant)
    tenant_rate = &*cfg_.per_tenant;
  if (tenant_rate) {
    auto r = take("t" + std::string(tenant), *tenant_rate, now);
    if (!r.allowed) {
      if (!user_key.empty()) give_back(user_key);
      return r;
    }
  }
  return {};
}

std::size_t rate_limiter::size() const {
  std::size_t n = 0;
  for (const auto& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mutex);
    n += s.buckets.size();
  }
  return n;
}


}  // namespace scg::auth
